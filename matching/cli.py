"""The one way into every command: a Hydra app over `conf/<command>.yaml`, and one way of reporting mistakes.

Every command (`train`, `evaluate`, `predict`, `visualize`, `export`, `report`) has the same override grammar,
`--help`, `--cfg job`, `+key=` and `-m`. The commands that use a trained model (`ckpt=<file>`) compose their
config on top of that run's saved `config.yaml`: the run's config is registered with Hydra as `trained_run`
before composition, and the command's YAML lists it first in its defaults. So every key of the run can be
overridden as in training (`paths.data_dir=/corpora`, `task.splits.test.path=...`), with the run's own task
and split names, and a typo is an error naming the key.

A user's mistake (a `UserError`, matching/errors.py: a missing file, a bad value, an unusable checkpoint) prints
one paragraph starting with `error:` on stderr and exits with status 2, without a traceback; `MATCHING_DEBUG=1`
shows the traceback. Anything else is a bug in matching: its traceback, a line saying so and where to report it,
and exit status 1.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue

from matching.errors import UsageError, UserError, environment_error, report_bug, report_error
from matching.files import config_dir
from matching.saved.earlier_versions import current_overrides

log = logging.getLogger(__name__)


#: Options of config groups that a plugin provides, from an extra: (module, extra). Checked before Hydra composes
#: anything, so that a missing plugin is named with the extra that installs it (Hydra would only say that the
#: option or the plugin class cannot be found).
PLUGIN_EXTRAS = {
    "hydra/launcher=slurm": ("hydra_plugins.hydra_submitit_launcher", "cluster"),
    "hydra/launcher=submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "cluster"),
    "hydra/launcher=submitit_local": ("hydra_plugins.hydra_submitit_launcher", "cluster"),
    "hydra/launcher=ray": ("ray", "ray"),
    "hydra/launcher=joblib": ("hydra_plugins.hydra_joblib_launcher", "sweep"),
    "sweep=optuna": ("hydra_plugins.hydra_optuna_sweeper", "sweep"),
    "sweep=optuna_coda": ("hydra_plugins.hydra_optuna_sweeper", "sweep"),
}


def _no_cloud_tip(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("💡 Tip: For seamless cloud logging")


def _no_empty_attribute_note(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Attribute type is ambiguous because it is an empty sequence")


def quiet_libraries() -> None:
    """Drop the libraries' messages that every run printed and no user can act on, each matched narrowly:
    Lightning's advertisement for its cloud logger; the deprecation of torch's `LeafSpec` inside Lightning's
    own code (lightning/pytorch/utilities/_pytree.py; nothing of ours uses it); and on ONNX export, onnxscript's
    log of every graph rewrite (INFO, which the commands' stderr logging shows), torch's warning that torchvision,
    which no matching model uses, is not installed, and its note that two dynamic axes share the name `batch`
    (an encoder model's inputs do, on purpose), and onnx_ir's note, twice per export of a contextual model, that an
    empty list of integers given by onnxscript's own translation of index_put (the encoder's word pooling) is taken
    as integers, which it is; Hydra's note that conf/hydra/launcher/submitit_local.yaml, which
    sets our defaults over the plugin's schema of the same name, is validated against that schema (a typo in a key
    is still an error; hydra-core is pinned); Lightning's warning that modules are in eval mode at the start of
    training (a fine-tuned encoder's frozen layers are, on purpose: matching.model.encoders.WordEncoder). Their
    other warnings and errors still show. (Lightning's own console handlers go when a run starts, once Lightning is
    imported: matching.console.lines_once.)

    Process-wide settings, so only a command's entry point calls this (its `main` and its Hydra task function,
    which a sweep runs in other processes): importing matching, or using it as a library, changes nothing."""
    submitit_local = r"\n'hydra/launcher/submitit_local' is validated against ConfigStore schema"
    warnings.filterwarnings("ignore", message=submitit_local)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used", category=UserWarning)
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if _no_cloud_tip not in logger.filters:
            logger.addFilter(_no_cloud_tip)
    for name in ("onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.WARNING)
    attributes = logging.getLogger("onnx_ir._convenience")  # a logger's filter sees only its own records
    if _no_empty_attribute_note not in attributes.filters:
        attributes.addFilter(_no_empty_attribute_note)
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)


#: Arguments that ask Hydra about the command instead of running it (no checkpoint needed).
_HYDRA_QUERIES = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "--shell-completion", "-sc")


def group_options(group: str) -> list[str]:
    """The options of the config group `group` (`aligner`, `task/reader`): the names of its files in conf/."""
    return sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))


def help_groups(choices: DictConfig) -> str:
    """The `== Configuration groups ==` section of a command's --help (`${help_groups:${hydra.runtime.choices}}` in
    its help template): the groups of the command's own defaults list, those its command line can set with
    `group=option`, each with its options; nothing for a command that has none (evaluate, report). Hydra's
    $APP_CONFIG_GROUPS would list every folder of conf/ under every command, groups that it refuses included
    (`study` under matching-train, `aligner` under matching-study); Hydra's own groups (hydra/launcher=...) are
    --hydra-help's."""
    groups = sorted(group for group in choices if group != "hydra" and not group.startswith("hydra/"))
    if not groups:
        return ""
    lines = [f"{group}: {', '.join(group_options(group))}" for group in groups]
    return (
        "== Configuration groups ==\nCompose your configuration from those groups (group=option)\n\n"
        + "\n".join(lines)
        + "\n\n"
    )


def help_keys(*, _root_: DictConfig) -> str:
    """What the `== Options ==` section of a command's --help lists (`${help_keys:}`): a command on a trained run
    (`ckpt=`) also takes every key of the run's saved config; the others take their own keys alone."""
    if "ckpt" in _root_.keys():  # `in _root_` is False while ckpt is ??? (not given)
        return (
            "The command's own keys, then (given ckpt=) the trained run's saved config; override any key with "
            "key=value."
        )
    return "The command's keys; override any key with key=value."


# Registered here, where every command starts (their help templates, conf/command.yaml and conf/train.yaml, use
# them; nothing else resolves those templates).
OmegaConf.register_new_resolver("help_groups", help_groups, replace=True)
OmegaConf.register_new_resolver("help_keys", help_keys, replace=True)


def _given(argv: Sequence[str], keys: Sequence[str]) -> list[Override]:
    """The overrides of `keys` on the command line, in its order (parsed with Hydra's own grammar, so quoting
    works)."""
    parser = OverridesParser.create()
    return [parser.parse_override(arg) for arg in argv if arg.split("=", 1)[0].lstrip("+") in keys]


def _checkpoint_argument(argv: Sequence[str]) -> str | None:
    """The value of the first `ckpt=` on the command line."""
    override = next(iter(_given(argv, ("ckpt",))), None)
    if override is None:
        return None
    if override.is_sweep_override():
        raise UsageError("ckpt= takes one checkpoint; run the command once per checkpoint")
    return str(override.value())


def check_plugins(argv: Sequence[str]) -> None:
    """A MissingExtraError naming the extra when an option on the command line needs a plugin that is not
    installed (`hydra/launcher=slurm` without the cluster extra)."""
    from matching.extras import check_installed

    for arg in argv:
        option = arg.lstrip("+").replace(" ", "")
        if option in PLUGIN_EXTRAS:
            module, extra = PLUGIN_EXTRAS[option]
            check_installed(module, extra, option)


def register_trained_run(argv: Sequence[str], required: bool) -> None:
    """Register the saved config of the run that `ckpt=` points at as the config `trained_run`, its folders moved to
    where `paths.data_dir=` / `paths.cache_dir=` on the command line say (matching.saved.run_folder.moved)."""
    checkpoint = _checkpoint_argument(argv)
    if checkpoint is None and required and not any(a.split("=")[0] in _HYDRA_QUERIES for a in argv):
        raise UsageError(
            "missing ckpt=<a trained model>, e.g. ckpt=outputs/runs/snli/coda/<time> (a run directory; also its "
            "checkpoints/ folder or a .ckpt file, a shared or exported folder, a hub id owner/name; --help lists the "
            "command's options)"
        )
    if checkpoint is None:
        node = OmegaConf.create()
    else:
        from matching.inference import saved_config  # here: commands that load no run (report) stay light to start
        from matching.saved.run_folder import MOVABLE_PATHS, moved

        places = {o.key_or_group: str(o.value()) for o in _given(argv, MOVABLE_PATHS)}  # the last, as Hydra's
        node = moved(saved_config(checkpoint), places)
    ConfigStore.instance().store(name="trained_run", node=node)


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The command's config as its command line would compose it: for use from Python and tests, e.g.
    `evaluate(compose_config("evaluate", ["ckpt=...", "split=test"]))`. A bad override raises OverrideError."""
    overrides = current_overrides(overrides)
    register_trained_run(overrides, required=False)
    try:
        return _compose(config_name, overrides)
    except HydraException as err:
        raise OverrideError(_override_message(config_name, overrides, err)) from err


def _compose(config_name: str, overrides: list[str], with_hydra: bool = False) -> DictConfig:
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name=config_name):
        return compose(config_name, overrides=overrides, return_hydra_config=with_hydra)


def check_arguments(config_name: str, argv: Sequence[str]) -> None:
    """An OverrideError or UsageError for a mistake in a plain command line (no `-m`, `--cfg`, `--help`: those are
    Hydra's to answer): an unknown key, an option of a group that does not exist, an unparsable override, or a
    required key (`???`) not given. Composed once here, before Hydra runs the command: on a mistake Hydra would
    compose it twice (once to find the mode, once to run) before failing, and the message a third time; answering
    here keeps a typo under a second (benchmarks/bench_cli_errors.py). A correct command line costs one composition
    more (~0.1 s)."""
    overrides = list(argv)
    try:
        cfg = _compose(config_name, overrides, with_hydra=True)
    except HydraException as err:
        raise OverrideError(_override_message(config_name, overrides, err)) from None
    except ValueError as err:
        if (message := _group_value_message(overrides)) is None:
            raise
        raise OverrideError(message) from err
    missing = [key for key in cfg if key != "hydra" and OmegaConf.is_missing(cfg, key)]
    if missing:
        raise UsageError(_missing_message(missing[0], str(cfg.hydra.help.header)))


def _group_value_message(overrides: Sequence[str]) -> str | None:
    """What to say when a config group is given a value that is not an option's name (`aligner=1`, `intra=true`:
    Hydra's parser reads a number or a boolean, and its defaults list refuses it with a ValueError): the group's
    options, as for a name that does not exist. None when no such override is on the command line."""
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parsed = parser.parse_override(override)
        except HydraException:
            continue
        group = config_dir() / parsed.key_or_group
        value = parsed.value()
        if group.is_dir() and not isinstance(value, (str, list)):
            options = sorted(f.stem for f in group.glob("*.yaml"))
            given = (
                "true or false"
                if isinstance(value, bool)
                else "a number"
                if isinstance(value, (int, float))
                else (type(value).__name__)
            )
            return (f"{override!r}: {parsed.key_or_group} is a config group, whose value is the name of one of its "
                    f"options, not {given}; the options of {parsed.key_or_group!r}: "
                    f"{' '.join(options)} (--help lists every group's options)")  # fmt: skip
    return None


def _missing_message(key: str, usage: str) -> str:
    usage = usage.strip()
    return f"missing {key}=<value>; {usage[0].lower()}{usage[1:]}"


def _override_message(config_name: str, overrides: list[str], err: HydraException) -> str:
    cause = err.__cause__
    key = getattr(cause, "full_key", None) if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) else None
    if key:  # an unknown key: list the keys that exist where it was meant to go
        parent = key.rpartition(".")[0]
        others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
        try:
            node = OmegaConf.select(_compose(config_name, others), parent) if parent else _compose(config_name, others)
        except HydraException:
            node = None
        if isinstance(node, DictConfig):
            having = _options_with(parent, key.rpartition(".")[2])
            belongs = f"; it is a key of {parent}={'|'.join(having)}" if having else ""
            return (f"unknown config key {key!r}; valid keys at {parent or 'the top level'}: {sorted(node.keys())}"
                    f"{belongs}. To add a key that is not in the config, write +{key}=...")  # fmt: skip
    bare = next((o for o in overrides if "=" not in o and not o.startswith("~")), None)
    if isinstance(err, OverrideParseException) and bare is not None:
        return _bare_argument_message(config_name, overrides, bare)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if isinstance(err, OverrideParseException) and not lines[0].startswith("Error parsing override"):
        bad = next((o for o in overrides if o == getattr(err, "override", None)), None) or _unparsable(overrides)
        lines.insert(0, f"cannot parse the override {bad!r}:")
    return f"{' '.join(lines)} (`--cfg job` prints every key of the composed config; --help lists the options)"


def _options_with(group: str, name: str) -> list[str]:
    """The options of the config group `group` (conf/<group>/*.yaml) whose file has the key `name` (`margin` is a key
    of loss=pairwise): what a key that the chosen option lacks belongs to. None for a node that is no group."""
    import yaml

    folder = config_dir() / group
    if not group or not folder.is_dir():
        return []
    return [path.stem for path in sorted(folder.glob("*.yaml")) if name in (yaml.safe_load(path.read_text()) or {})]


def _bare_argument_message(config_name: str, overrides: list[str], bare: str) -> str:
    """What to say about an argument without `key=` (`matching-report outputs/multirun/<time>`): every argument is
    an override, and a value is given to the key that the command requires (`runs=` for report), when it has one
    that the command line does not give yet."""
    given = {o.split("=", 1)[0].lstrip("+") for o in overrides if "=" in o}
    try:
        cfg = _compose(config_name, [o for o in overrides if o != bare and "=" in o])
        required = [k for k in cfg if k != "hydra" and OmegaConf.is_missing(cfg, k) and k not in given]
    except HydraException:
        required = []
    hint = f"; did you mean {required[0]}={bare}?" if len(required) == 1 else ""
    return (f"{bare!r} is not an override: every argument is key=value{hint} (--help lists the command's keys, "
            f"`--cfg job` prints every key of the composed config)")  # fmt: skip


def _unparsable(overrides: Sequence[str]) -> str | None:
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_override(override)
        except HydraException:
            return override
    return None


class OverrideError(UserError, ValueError):
    """A command-line override that Hydra cannot apply."""


class SweepJobError(UserError, ValueError):
    """A job of a sweep run by another process (submitit) failed; the message carries its error and its logs."""


def sweep_job_error(err: Exception) -> SweepJobError:
    """submitit's report of a failed job (its error stream, or why it has no result) as one paragraph: the job's
    own `error:` paragraph when it has one, and where its logs are."""
    text = str(err)
    first = text.splitlines()[0] if text else type(err).__name__
    job = re.search(r"with path (\S+)", first)
    logs = f" Its logs: {Path(job.group(1)).parent}/." if job else ""
    said = [line.removeprefix("error: ") for line in text.splitlines() if line.startswith("error: ")]
    why = said[-1] if said else first
    return SweepJobError(
        f"a sweep job failed: {why}.{logs} Fix it and relaunch the same command: complete runs are skipped, "
        "interrupted ones continue"
    )


def _raised_by_hydra(err: BaseException) -> bool:
    """Whether Hydra itself raised `err` (its checks of the command line's flags, e.g. `--cfg` with `-m`, are
    ValueErrors), not code of ours that it called."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and f"{os.sep}hydra{os.sep}" in tb.tb_frame.f_code.co_filename


def quote_verbatim(argv: Sequence[str], keys: Sequence[str]) -> list[str]:
    """`key=text` arguments for `keys` with the text quoted for Hydra, so that free text (commas, apostrophes,
    brackets) is taken as it is: `a=Yes, it's a dog` would otherwise be a sweep or a syntax error."""
    quoted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in keys and not (len(value) > 1 and value[0] == value[-1] and value[0] in "'\""):
            value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        quoted.append(f"{key}{sep}{value}")
    return quoted


def command(
    config_name: str, body: Callable[[DictConfig], Any], uses_run: bool = False, verbatim: Sequence[str] = ()
) -> Callable[..., int]:
    """`main(argv=None) -> exit status` of a command: `body(cfg)` under Hydra with `conf/<config_name>.yaml`.

    `uses_run`: the command works on a trained run named by `ckpt=` (required), whose saved config is merged
    under the command's own (see the module docstring). `verbatim`: keys whose values are free text, taken as
    typed (see quote_verbatim).
    """

    @hydra.main(version_base="1.3", config_path=str(config_dir()), config_name=config_name)
    def app(cfg: DictConfig) -> Any:
        quiet_libraries()  # again here: a sweep's launcher runs this function in processes of its own
        try:
            return body(cfg)
        except MissingMandatoryValue as err:  # a `???` key of the command's YAML that the user did not give
            missing = UsageError(_missing_message(err.full_key, HydraConfig.get().help.header))
            raise SystemExit(report_error(missing)) from None
        except UserError as err:
            raise SystemExit(report_error(err)) from None
        except OSError as err:  # the user's paths or machine (a missing folder, permissions, a full disk)
            if (mistake := environment_error(err)) is None:
                raise
            raise SystemExit(report_error(mistake)) from None

    def main(argv: Sequence[str] | None = None) -> int:
        argv = quote_verbatim(sys.argv[1:] if argv is None else argv, verbatim)
        quiet_libraries()
        try:
            argv = current_overrides(argv)
            check_plugins(argv)
            register_trained_run(argv, required=uses_run)
            if not any(arg.startswith("-") for arg in argv):
                check_arguments(config_name, argv)
        except UserError as err:
            return report_error(err)
        except Exception as err:
            return report_bug(err)
        saved, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
        sys.argv = [f"matching-{config_name}", *argv]
        # Hydra then raises its errors (a bad override, a missing option) instead of printing them with a
        # traceback hint and exiting 1, so that they are reported like every other mistake.
        os.environ["HYDRA_FULL_ERROR"] = "1"
        try:
            app()
        except HydraException as err:
            overrides = [a for a in argv if not a.startswith("-")]
            return report_error(OverrideError(_override_message(config_name, overrides, err)))
        except UserError as err:
            return report_error(err)
        except OSError as err:  # e.g. Hydra creating a run directory under a file
            if (mistake := environment_error(err)) is not None:
                return report_error(mistake)
            return report_bug(err)
        except Exception as err:
            if type(err).__module__.startswith("submitit"):  # a job of hydra/launcher=slurm or submitit_local
                return report_error(sweep_job_error(err))
            if isinstance(err, ValueError) and _raised_by_hydra(err):  # Hydra's own argument checks
                message = _group_value_message([a for a in argv if not a.startswith("-")])
                return report_error(OverrideError(message) if message else err)
            if 'Could not detect "srun"' in str(err):  # submitit's check: hydra/launcher=slurm off a SLURM cluster
                return report_error(
                    UsageError("hydra/launcher=slurm needs a SLURM cluster (no srun here): run this on the cluster's "
                               "login node, or use hydra/launcher=submitit_local or joblib on this machine")
                )  # fmt: skip
            return report_bug(err)
        except SystemExit as done:  # --help, a Hydra error (status 1) or a user error (status 2)
            return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        finally:
            sys.argv = saved
            if full_error is None:
                os.environ.pop("HYDRA_FULL_ERROR", None)
        return 0

    main.__doc__ = f"Run `{config_name}` with Hydra overrides `argv` (default: the command line); the exit status."
    return main
