"""`matching-study study=<name> [tasks=[...]] [overrides]` (conf/study.yaml, conf/study/<name>.yaml): a study of
alignment mechanisms as one command — select on dev, confirm over seeds, test once, publish the page. The protocol
is `matching.studies.protocol`; what a study is, `matching.studies.spec`; the page, `matching.studies.page`;
docs/concepts/studies.md says how to use it.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from matching.cli import check_plugins, command
from matching.errors import ConfigError, MissingFileError


def _list(node: object, key: str) -> tuple[str, ...]:
    if node is None:
        return ()
    if isinstance(node, str):
        return (node,)
    if not isinstance(node, (list, ListConfig)):
        raise ConfigError(f"{key}= is a list, e.g. {key}=[a,b]; got {node!r}")
    return tuple(str(v) for v in node)


#: Options of the command that change nothing in a study's results: the page's command leaves them out.
_NOT_REPRODUCING = ("train_runs", "figures")


def study_node(cfg: DictConfig, chosen: str | None = None) -> DictConfig:
    """The study to run: `study=<name>` (conf/study/<name>.yaml, `chosen`) or `study_file=<file.yaml>`, one of the
    two; with a file, keys given on the command line as `+study.<key>=<value>` override the file's."""
    if not cfg.get("study_file"):
        return cfg.get("study") or OmegaConf.create()
    if chosen:
        raise ConfigError(f"give study={chosen} or study_file={cfg.study_file}, not both")
    path = Path(str(cfg.study_file)).expanduser()
    if not path.is_file():
        raise MissingFileError(f"study_file={cfg.study_file}: no such file ({path.absolute()})")
    try:
        node = OmegaConf.load(path)
    except Exception as err:  # a YAML error of the user's file, whatever the parser raises
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"study_file={cfg.study_file} is not a readable YAML mapping: {why}") from None
    if not isinstance(node, DictConfig):
        raise ConfigError(f"study_file={cfg.study_file} holds no mapping (a study's keys: name, tasks, families, ...)")
    return OmegaConf.merge(node, cfg.get("study") or {})


def study_command(cfg: DictConfig) -> Path:
    """The `study` command on its composed config; returns the page."""
    # Imported here, not at the top: the study's modules load torch; a typo is answered before that, in under a
    # second (benchmarks/bench_cli_errors.py).
    from matching.studies.page import write_page
    from matching.studies.protocol import Launch, StudyIncomplete, run_study
    from matching.studies.running import only_process
    from matching.studies.spec import read_spec

    chosen = HydraConfig.get().runtime.choices.get("study")
    spec = read_spec(study_node(cfg, chosen), _list(cfg.tasks, "tasks") or None, _list(cfg.train, "train"))
    out = Path(str(cfg.out)) if cfg.out else Path(str(cfg.paths.output_root)) / "studies" / spec.name
    how = Launch(
        launcher=str(cfg.launcher), jobs=int(cfg.jobs) if cfg.jobs else None,
        launcher_overrides=_list(cfg.launcher_overrides, "launcher_overrides"),
        paths=(f"paths.data_dir={cfg.paths.data_dir}", f"paths.cache_dir={cfg.paths.cache_dir}"),
        threads=int(cfg.threads) if cfg.threads else None,
    )  # fmt: skip
    check_plugins(how.hydra_overrides())  # a wrong launcher= or jobs=, or its missing extra, before anything runs
    with only_process(out):  # a second study process in the folder would train the same runs at the same time
        outcome = run_study(spec, out, how, train=bool(cfg.train_runs))
        results = outcome.results
        tested_file = out / "test.json"
        tested = json.loads(tested_file.read_text()) if tested_file.is_file() else None
        # the page's command: what reproduces the study, without this machine's folders (the page says where the
        # corpora go: paths.data_dir=/path/to/corpora)
        given = [o for o in HydraConfig.get().overrides.task
                 if o.split("=", 1)[0] not in _NOT_REPRODUCING and not o.startswith("paths.")]  # fmt: skip
        typed = "python -m matching.study " + shlex.join(given)
        page = write_page(spec, out, outcome.choices, list(results.values()), typed, tested, figures=bool(cfg.figures),
                          seeds=outcome.seeds, path_settings=how.path_settings())  # fmt: skip
    print(f"wrote {page} (and study.csv{', the figures' if cfg.figures else ''}) in {out}")
    if not outcome.complete:
        missing = [r.planned.relative for r in results.values() if not r.finished]
        raise StudyIncomplete(
            f"the study is not complete: {len(missing)} run{'s' if len(missing) != 1 else ''} without results "
            f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}; "
            + ("not trained" if outcome.launched_ok else "some failed: their errors are above and in their train.log")
            + "). The page shows what finished. Run the same command again to go on: finished runs are skipped, "
            "interrupted ones continue from their last checkpoint"
        )
    return page


main = command("study", study_command)

if __name__ == "__main__":
    sys.exit(main())
