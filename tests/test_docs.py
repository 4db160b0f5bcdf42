"""The README and docs/ cannot rot: every relative link and #anchor resolves, and every command they show is
composed against the real configs (what `--cfg job` does, through Hydra's compose API, so in-process and fast),
so that a renamed key, option, make target, make variable, extra or benchmark flag fails here, not for a user.

Commands are taken from ```bash blocks (with `\\` continuations, pipes, `VAR=value` prefixes and `# comments`)
and from inline code that starts like a command. Placeholders are filled in: `<time>`, `<you>`, ... become a
plain word, `ckpt=` (or `$CKPT`) becomes a checkpoint of a run directory made here (its saved config.yaml is a
real WikiQA/CoDA training config: the commands that load a run compose the run's config under their own, as on the
command line), and `/path/to/my_conf` becomes a folder holding the YAML files that docs/how-to/extending.md shows.
Sweeps compose with the first value of each swept key, and every other option of a swept config group must exist.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import compose_train, reference_hook
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from matching.cli import check_plugins, compose_config, quote_verbatim
from matching.configs import CONF
from matching.extras import MissingExtraError

ROOT = CONF.parent
README = ROOT / "README.md"
#: The pages written by hand: the README and the site's sources (docs/), the study pages (written by `matching.study`,
#: checked by the site's strict build) and the site's hooks left out.
HAND_WRITTEN = [
    p for p in (ROOT / "docs").rglob("*.md") if p.relative_to(ROOT / "docs").parts[0] not in ("studies", "hooks")
]
PAGES = [README, *sorted(HAND_WRITTEN)]


def generated_pages() -> dict[Path, set[str]]:
    """The pages the site's hook generates at build time (docs/hooks/reference.py: the command reference), each with
    its anchors: a link to them resolves in the site, though no such file is in the clone."""
    found = {}
    for path, text in reference_hook().pages(ROOT).items():
        ids = set(re.findall(r"\{: *#([\w-]+) *\}", text)) | set(re.findall(r'id="([\w-]+)"', text))
        ids |= {slug(m) for m in re.findall(r"^#{1,6} (.+?)(?: \{:.*\})?$", text, re.M)}
        found[(ROOT / "docs" / path).resolve()] = ids
    return found


#: The lab notes: a dated archive, kept as records (no length limit; never quoted as results).
ARCHIVE = ROOT / "docs" / "archive"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.M | re.S)
PLACEHOLDER = re.compile(r"<[^<>\n]*>")  # <time>, <you>, <an existing vectors file>
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: Hydra's flags that take no value / one value; anything else starting with "-" is a mistake in a doc.
HYDRA_FLAGS = {"-m", "--multirun", "--help", "-h", "--hydra-help", "--resolve"}
HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c", "--info", "-i", "--package", "-p", "--config-name", "-cn"}


# ---------------------------------------------------------------------------------------------------------------
# Reading the pages


def prose(text: str) -> str:
    """The page with its fenced code blocks blanked out, lines kept (links and inline code live in the prose)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def code_blocks(text: str, languages=("bash", "sh", "shell")) -> list[tuple[int, str]]:
    """(line number of the block's first line, body) of each fenced block in one of `languages`."""
    return [(text[: m.start(2)].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) in languages]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: the rendered text lower-cased, punctuation but `-` and `_` dropped,
    spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading renders as its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    """The targets of the page's Markdown links and images, inline code left out."""
    text = re.sub(r"`[^`]*`", "", prose(page.read_text()))
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


@dataclass(frozen=True)
class Command:
    where: str  # page:line
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.argv)}"


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at |, ;, &&, ||), leading VAR=value assignments dropped."""
    lexer = shlex.shlex(PLACEHOLDER.sub("X", line), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, current = [], []
    for token in lexer:
        if set(token) <= set(";&|"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    out = []
    for words in commands:
        while words and ENV_ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


def is_project_command(words: list[str]) -> bool:
    head = words[0]
    if head in ("python", "python3") and len(words) > 1:
        module = words[2] if len(words) > 2 and words[1] == "-m" else ""
        return words[1].startswith("benchmarks/") or module.startswith("matching.")
    return head.startswith("matching-") or head == "make" or (head == "pip" and "install" in words)


def page_commands(page: Path) -> list[Command]:
    """Every project command of a page: from its bash blocks, and from inline code such as `make install` or
    `python -m matching.train -m experiment=...` (an inline fragment with `...` in it is an abbreviation, skipped)."""
    text = page.read_text()
    name = page.relative_to(ROOT).as_posix()
    found = []
    for first, body in code_blocks(text):
        lines = body.split("\n")
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while True:
                if line.rstrip().endswith("\\") and i + 1 < len(lines):  # continued on the next line
                    i += 1
                    line = line.rstrip()[:-1] + " " + lines[i].strip()
                    continue
                try:
                    commands = simple_commands(line)
                    break
                except ValueError:  # a quoted text that goes on over the next line
                    i += 1
                    line += "\n" + lines[i]
            for words in commands:
                if is_project_command(words):
                    found.append(Command(f"{name}:{first + start}", tuple(words)))
            i += 1
    body = prose(text)
    for m in re.finditer(r"`([^`]+)`", body):
        span = " ".join(m.group(1).split())
        if re.match(r"(python3? (-m matching\.|benchmarks/)|matching-[a-z-]+( |$)|make [a-z]|pip install )", span):
            if "..." in span:
                continue
            line = body[: m.start()].count("\n") + 1
            for words in simple_commands(span):
                if is_project_command(words):
                    found.append(Command(f"{name}:{line} (inline)", tuple(words)))
    return found


ALL_COMMANDS = [command for page in PAGES for command in page_commands(page)]
GENERATED = generated_pages()


# ---------------------------------------------------------------------------------------------------------------
# What the project offers, read from its own files (nothing is imported: the command modules import torch)


def command_modules() -> dict[str, dict]:
    """module name -> {config, verbatim} from each `main = command(...)` line of matching/*.py."""
    modules = {}
    for path in sorted((ROOT / "matching").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.value if isinstance(node, ast.Assign) else None
            if ([getattr(t, "id", None) for t in getattr(node, "targets", [])] == ["main"]
                    and isinstance(call, ast.Call) and getattr(call.func, "id", None) == "command"):  # fmt: skip
                keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
                modules[path.stem] = {
                    "config": ast.literal_eval(call.args[0]),
                    "verbatim": tuple(keywords.get("verbatim", ())),
                }
    return modules


COMMANDS = command_modules()


def plain_commands() -> dict[str, tuple[str, ...]]:
    """module name -> the keys it takes, for the commands that parse `key=value` without Hydra (a module that
    defines EXPORTED_KEYS and `main`: matching-serve-onnx, which runs where Hydra is not installed)."""
    found = {}
    for path in sorted((ROOT / "matching").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["EXPORTED_KEYS"]:
                found[path.stem] = tuple(ast.literal_eval(node.value))
    return found


PLAIN_COMMANDS = plain_commands()
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def pyproject_table(name: str) -> dict[str, str]:
    """`key = value` lines of one table of pyproject.toml (tomllib is Python 3.11+; we support 3.10)."""
    table = PYPROJECT.split(f"\n[{name}]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r"^([\w-]+) = (.+)$", table, re.M))


SCRIPTS = {name: value.strip('"').split(":")[0] for name, value in pyproject_table("project.scripts").items()}
SCRIPTS = {name: module.removeprefix("matching.") for name, module in SCRIPTS.items()}
EXTRAS = set(pyproject_table("project.optional-dependencies"))
#: The distribution's name, what `pip install` takes (the import package stays `matching`).
DISTRIBUTION = pyproject_table("project")["name"].strip('"')
MAKEFILE = (ROOT / "Makefile").read_text()
MAKE_TARGETS = set(re.findall(r"^([A-Za-z0-9_.-]+):", MAKEFILE, re.M))
#: Targets a page may name before the branch that adds them is merged: target -> why.


class DocError(AssertionError):
    """A page's command that would not work as written."""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    """A checkpoint inside a run directory whose config.yaml is a real (WikiQA, CoDA) training config: what the
    commands that load a run compose their own config on. The checkpoint is never read by composition."""
    from matching.saved.run_folder import saved_form

    folder = tmp_path_factory.mktemp("docs_run")
    cfg = compose_train(folder, "task=wikiqa", "aligner=coda", small=False)
    run = Path(cfg.paths.output_dir)
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved_form(cfg))))  # as train saves it
    (run / "checkpoints" / "best.ckpt").touch()
    return run / "checkpoints" / "best.ckpt"


@pytest.fixture(scope="module")
def my_conf(tmp_path_factory) -> Path:
    """The config folder of docs/how-to/extending.md: each ```yaml block headed `# my_conf/<path>` written to <path>."""
    folder = tmp_path_factory.mktemp("my_conf")
    for page in PAGES:
        for _, body in code_blocks(page.read_text(), languages=("yaml",)):
            if m := re.match(r"# my_conf/(\S+)\n", body):
                (folder / m.group(1)).parent.mkdir(parents=True, exist_ok=True)
                (folder / m.group(1)).write_text(body)
    return folder


# ---------------------------------------------------------------------------------------------------------------
# Checking commands


def hydra_overrides(args: list[str]) -> list[str]:
    """The overrides of a Hydra command line, its flags dropped; an argument that is neither is a DocError."""
    overrides, rest = [], iter(args)
    for arg in rest:
        if arg in HYDRA_FLAGS:
            continue
        if arg in HYDRA_FLAGS_WITH_VALUE:
            next(rest, None)
            continue
        if arg.startswith("[") and arg.endswith("]") and "=" in arg:  # [private=true]: an optional argument
            arg = arg[1:-1]
        if arg.startswith("-") or "=" not in arg:
            raise DocError(f"{arg!r} is neither a key=value override nor a flag Hydra takes")
        overrides.append(arg)
    return overrides


@dataclass(frozen=True)
class Composition:
    """A config as a command line composes it: `compose_config(config, overrides)`."""

    config: str
    overrides: tuple[str, ...]


def first_of_sweeps(config: str, overrides: list[str]) -> list[Composition]:
    """The command line with each sweep override (`aligner=softmax,coda`) at its first value, and then one more
    composition for each other option of a swept config group that has no YAML file under conf/ (a plugin's)."""
    parser, single, others = OverridesParser.create(), [], []
    for text in overrides:
        override = parser.parse_override(text)
        if not override.is_sweep_override():
            single.append(text)
            continue
        key = text.split("=", 1)[0]
        values = list(override.sweep_string_iterator())
        single.append(f"{key}={values[0]}")
        group = key.lstrip("+~")
        if (CONF / group).is_dir() or group.startswith("hydra/"):
            others += [(key, v) for v in values[1:] if not (CONF / group / f"{v}.yaml").exists()]
    return [Composition(config, tuple(single))] + [
        Composition(config, tuple(o for o in single if not o.startswith(f"{key}=")) + (f"{key}={value}",))
        for key, value in others
    ]


def plan_hydra(config: str, module: dict, args: list[str], checkpoint: Path, my_conf: Path) -> list[Composition]:
    overrides = []
    for arg in hydra_overrides(args):
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "ckpt" or value in ("$CKPT", "${CKPT}"):
            arg = f"{key}={checkpoint}"
        overrides.append(re.sub(r"\$\{?[A-Za-z_]+\}?", "X", arg.replace("/path/to/my_conf", str(my_conf))))
    return first_of_sweeps(config, quote_verbatim(overrides, module["verbatim"]))


def plan_make(words: list[str], checkpoint: Path, my_conf: Path) -> list[Composition]:
    targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
    variables = dict(w.split("=", 1) for w in words[1:] if "=" in w)
    for target in targets:
        if target not in MAKE_TARGETS:
            raise DocError(f"the Makefile has no target {target!r}; its targets: {sorted(MAKE_TARGETS)}")
    for variable in variables:
        if not re.search(rf"\$\({variable}\)", MAKEFILE):
            raise DocError(f"the Makefile does not use the variable {variable}")
    if not set(targets) & {"train", "sweep"}:
        return []
    # `make train TASK=x ARGS="..."` runs `matching.train task=x ...`
    args = [f"task={variables['TASK']}"] if "TASK" in variables else []
    return plan_hydra("train", COMMANDS["train"], args + shlex.split(variables.get("ARGS", "")), checkpoint, my_conf)


def check_benchmark(words: list[str]) -> None:
    script = ROOT / words[1]
    if not script.is_file():
        raise DocError(f"no benchmark script {words[1]}")
    source = script.read_text()
    for flag in (w for w in words[2:] if w.startswith("--")):
        if f'"{flag.split("=")[0]}"' not in source:
            raise DocError(f"{words[1]} takes no flag {flag}")


def check_pip(words: list[str], inline: bool = False) -> None:
    """Extras that pyproject.toml has, asked for by the distribution's name. `matching` names another project on
    PyPI: with extras, or in a code block, that is an instruction that installs the wrong thing; a bare `pip install
    matching` in prose may be the page saying not to."""
    for spec in words:
        if re.fullmatch(r"matching\[[\w,-]+\]", spec, re.I) or (spec.lower() == "matching" and not inline):
            raise DocError(
                f"pip install {spec} installs another project (`matching` on PyPI solves matching games); this one is "
                f"{DISTRIBUTION}: pip install {spec.replace('matching', DISTRIBUTION, 1)}"
            )
        if m := re.fullmatch(rf"(?:\.|{re.escape(DISTRIBUTION)})\[([\w,-]+)\]", spec):
            unknown = set(m.group(1).split(",")) - EXTRAS
            if unknown:
                raise DocError(f"pyproject.toml has no extra {sorted(unknown)}; its extras: {sorted(EXTRAS)}")


def plan(command: Command, checkpoint: Path, my_conf: Path) -> list[Composition]:
    """What must compose for `command` to work; raises DocError for what is wrong without composing anything (an
    unknown command, script, target, variable, extra, benchmark flag, or an argument that is not an override)."""
    words = list(command.argv)
    if words[0] == "make":
        return plan_make(words, checkpoint, my_conf)
    if words[0] == "pip":
        check_pip(words, inline=command.where.endswith("(inline)"))
        return []
    if words[0] in ("python", "python3") and words[1].startswith("benchmarks/"):
        check_benchmark(words)
        return []
    if words[0].startswith("matching-"):
        module, args = SCRIPTS.get(words[0]), words[1:]
        if module is None:
            raise DocError(f"no console script {words[0]}; pyproject.toml has {sorted(SCRIPTS)}")
    else:
        module, args = words[2].removeprefix("matching."), words[3:]
    if module in PLAIN_COMMANDS:
        unknown = [a for a in args if "=" not in a or a.split("=", 1)[0].split(".")[0] not in PLAIN_COMMANDS[module]]
        if unknown:
            raise DocError(f"matching.{module} takes key=value among {PLAIN_COMMANDS[module]}; got {unknown}")
        return []
    if module not in COMMANDS:
        raise DocError(f"matching.{module} is not a command; the commands: {sorted(COMMANDS)}")
    return plan_hydra(COMMANDS[module]["config"], COMMANDS[module], args, checkpoint, my_conf)


def compose(composition: Composition) -> None:
    """Raises the command line's own error (an OverrideError) for an unknown key or option, or a bad value."""
    compose_config(composition.config, list(composition.overrides))


def structural(override: str) -> bool:
    """An override that changes which keys exist (a config group's option, an added or deleted key, the search
    path, the run a command loads), as opposed to one that sets the value of an existing key."""
    key = override.split("=", 1)[0]
    bare = key.lstrip("+~")
    return (key != bare or "/" in bare or bare in ("ckpt", "hydra.searchpath")
            or ("." not in bare and (CONF / bare).is_dir()))  # fmt: skip


def problems(commands: list[Command], checkpoint: Path, my_conf: Path) -> dict[Command, str]:
    """What is wrong with each command that would not work. Compositions that choose the same config groups are
    composed together, their value overrides merged (a key valid in one is valid in all), which takes the ~160
    commands of the pages down to ~60 compositions; a batch that fails is composed command by command."""
    wrong, batches = {}, defaultdict(list)
    for command in commands:
        try:
            for composition in plan(command, checkpoint, my_conf):
                fixed = tuple(o for o in composition.overrides if structural(o))
                batches[(composition.config, fixed)].append((command, composition))
        except (DocError, ValueError) as err:
            wrong[command] = str(err)
    for (config, fixed), members in batches.items():
        values = dict.fromkeys(o for _, c in members for o in c.overrides if not structural(o))
        try:
            compose(Composition(config, fixed + tuple(values)))
            continue
        except ValueError:
            pass
        for command, composition in members:
            try:
                compose(composition)
            except ValueError as err:
                wrong.setdefault(command, str(err))
    return wrong


# ---------------------------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() and file in GENERATED:
            if anchor and anchor not in GENERATED[file]:
                broken.append(f"{target}: no heading with that anchor in the generated {file.name}")
        elif not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.name} ({sorted(anchors(file))})")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_commands_are_found():
    """The extraction sees the commands it is meant to check (a change of the pages' format must not silently
    leave nothing to check)."""
    sources = {c.where.split(":")[0] for c in ALL_COMMANDS}
    assert {
        "README.md",
        "docs/how-to/cookbook.md",
        "docs/results/index.md",
        "docs/how-to/serving.md",
        "docs/how-to/cluster.md",
    } <= sources
    heads = {c.argv[0] if c.argv[0] != "python" else c.argv[2] for c in ALL_COMMANDS if c.argv[0] != "pip"}
    assert {"make", "matching.train", "matching.evaluate", "matching.predict", "matching.visualize",
            "matching.export", "matching.serve", "matching.report"} <= heads  # fmt: skip
    continued = [
        c for c in ALL_COMMANDS if {"hydra.launcher.n_jobs=2", "paths.data_dir=/path/to/corpora"} <= set(c.argv)
    ]
    assert continued, "a command continued over lines with \\ is read as one"


@pytest.fixture(scope="module")
def wrong(trained_run, my_conf) -> dict[Command, str]:
    return problems(ALL_COMMANDS, trained_run, my_conf)


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_every_command_of_the_docs_composes(command, wrong):
    if command in wrong:
        try:
            check_plugins(list(command.argv))
        except MissingExtraError as missing:
            pytest.skip(f"needs an extra that is not installed here: {missing}")
        raise DocError(f"{command}\n  -> {wrong[command]}")


@pytest.mark.parametrize(
    "line",
    [
        "python -m matching.train aligner=codaa",  # an option the group does not have
        "python -m matching.train task=wikiqa model.hiden=100",  # an unknown key
        "python -m matching.train -m aligner=softmax,codaa seed=1,2",  # a swept option that does not exist
        "python -m matching.evaluate ckpt=$CKPT splitt=test",  # a key of neither the command nor the run
        "python -m matching.train hydra/launcher=joblib hydra.launcher.n_job=2",  # a key of a launcher
        "python -m matching.train --cfgg job",  # a flag Hydra does not take
        "python -m matching.trian task=snli",  # no such command
        "matching-evalute ckpt=x",  # no such console script
        "make trian TASK=snli",  # no such target
        'make train TASK=snli ARG="aligner=coda"',  # no such variable
        'make train TASK=snli ARGS="aligner=cod"',  # an unknown option through make
        'pip install -e ".[servee]"',  # no such extra
        "pip install 'sentence-matching[servee]'",  # no such extra, by the distribution's name
        "pip install 'matching[serve]'",  # the distribution of another project
        "pip install matching",  # the same, in a code block: an instruction
        "python benchmarks/bench_step.py --trainerr cpu",  # a flag the benchmark does not take
    ],
)
def test_a_broken_command_fails(line, trained_run, my_conf):
    """What the test above would say if a page named an unknown key, option, target, extra or flag."""
    (words,) = simple_commands(line)
    broken = Command("example", tuple(words))
    assert set(problems([broken], trained_run, my_conf)) == {broken}


def unquoted(line: str) -> str:
    """The characters of a shell line that no quote protects, comments dropped (what zsh and bash expand); a quote
    left open at the end of the line leaves a `'` or `"` at the end."""
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
            out.append(" ")
        elif ch in "'\"":
            quote = ch
            out.append(" ")
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        else:
            out.append(ch)
    return "".join(out) + (quote or "")


def shell_lines(page: Path) -> list[tuple[str, str]]:
    """(where, logical line) of each project command of a page's bash blocks and inline code: a line continued with
    `\\` or inside an open quote is one line."""
    text = page.read_text()
    name = page.relative_to(ROOT).as_posix()
    found = []
    for first, body in code_blocks(text):
        lines, i = body.split("\n"), 0
        while i < len(lines):
            start, line = i, lines[i]
            while i + 1 < len(lines) and (line.rstrip().endswith("\\") or unquoted(line)[-1:] in ("'", '"')):
                i += 1
                line = line.rstrip().removesuffix("\\") + " " + lines[i].strip()
            found.append((f"{name}:{first + start}", line))
            i += 1
    for m in re.finditer(r"`([^`]+)`", prose(text)):
        span = " ".join(m.group(1).split())
        if re.match(r"(python3? (-m matching\.|benchmarks/)|matching-[a-z-]+( |$)|make [a-z])", span):
            found.append((f"{name} (inline)", span))
    project = r"(^|\s)(python3? (-m matching|benchmarks/)|matching-|make )"
    return [(where, line) for where, line in found if re.search(project, line)]


def test_every_command_shown_is_safe_to_paste_into_bash_or_zsh():
    """A Hydra list (`logger=[csv,wandb]`, `compare=[...]`) unquoted is a glob to zsh ('no matches found'), and an
    optional part shown in brackets (`[backend=onnx]`) is typed as it is: every `[` or `]` of a command is quoted."""
    unsafe = [
        f"{where}: {line}"
        for page in PAGES
        for where, line in shell_lines(page)
        if re.search(r"[\[\]]", unquoted(line))
    ]
    assert not unsafe, "\n".join(unsafe)


def test_the_paste_check_sees_a_bracket_outside_quotes():
    assert re.search(r"[\[\]]", unquoted("python -m matching.train logger=[csv,wandb]"))
    assert not re.search(r"[\[\]]", unquoted("python -m matching.train 'logger=[csv,wandb]'  # [a comment]"))
    assert not re.search(r"[\[\]]", unquoted('matching-visualize a="[x]" b=y'))


def test_prose_may_name_the_other_projects_pip_install_to_say_not_to():
    """A page saying "`pip install matching` does not install this one" shows inline code that reads like a command;
    with extras it is an instruction, and wrong."""
    check_pip(["pip", "install", "matching"], inline=True)
    with pytest.raises(DocError, match="pip install sentence-matching\\[serve\\]"):
        check_pip(["pip", "install", "matching[serve]"], inline=True)


def test_a_broken_command_is_found_among_the_commands_composed_with_it(trained_run, my_conf):
    lines = [
        "python -m matching.train task=wikiqa aligner=coda seed=1",
        "python -m matching.train task=wikiqa aligner=coda model.hiden=100",
        "python -m matching.train task=wikiqa aligner=coda seed=7 optim.lr=1e-3",
    ]
    commands = [Command(f"example:{n}", tuple(simple_commands(line)[0])) for n, line in enumerate(lines)]
    assert list(problems(commands, trained_run, my_conf)) == [commands[1]]


def site_nav() -> list[str]:
    """The pages of mkdocs.yml's nav, as paths under docs/."""
    import yaml

    def walk(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [page for item in node for page in walk(item)]
        return [page for value in node.values() for page in walk(value)]

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # no tags to construct
    return walk(config["nav"])


def test_every_page_says_what_it_is_for_and_is_in_the_sites_nav():
    """A page nobody can reach is a page nobody reads: each page of docs/ (the study pages too) is in mkdocs.yml's
    nav, and each nav entry is a page of docs/ or one the reference hook generates."""
    nav = site_nav()
    for page in PAGES[1:]:
        paragraphs = page.read_text().split("\n\n")
        text = "\n\n".join(paragraphs[1:4])
        assert paragraphs[0].startswith("# ") and "What this page is for:" in text, page.name
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in PAGES[1:]}
    studies = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs" / "studies").glob("*/study.md")}
    assert not (pages | studies) - set(nav), (
        f"pages missing from mkdocs.yml's nav: {sorted((pages | studies) - set(nav))}"
    )
    generated = {p.relative_to((ROOT / "docs").resolve()).as_posix() for p in GENERATED}
    assert generated <= set(nav), f"generated pages missing from the nav: {sorted(generated - set(nav))}"
    assert not set(nav) - pages - studies - generated, "nav entries with no page"


#: What counts as a figure in prose: a number, with its sign, decimals, thousands and unit (%, x).
FIGURE = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:\s?%|x\b)?")


def figures_in(text: str) -> list[str]:
    """The figures of prose: code blocks, inline code and link targets are not read as figures."""
    text = re.sub(r"`[^`]*`", "", prose(text))
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return FIGURE.findall(text)


def test_what_counts_as_a_figure():
    assert figures_in("acc 81.2 ± 0.4, +4.5 [+2.3, +6.7], 3,000 pairs, 11.0x, 52 %") == [
        "81.2", "0.4", "+4.5", "+2.3", "+6.7", "3,000", "11.0x", "52 %"]  # fmt: skip
    assert figures_in("`seed=2` [page](docs/studies/x2/study.md)\n```bash\nmake train ARGS=1\n```\n") == []


def test_the_readme_reads_as_a_front_door():
    """What a newcomer meets first: what it is, install and the first command within 60 lines with at most 10
    figures there (the results live in docs/ and one table); about 1,500 words in all, no line over 120 characters,
    a word budget rather than a line cap (long lines are not short text)."""
    readme = README.read_text()
    first = "\n".join(readme.splitlines()[:60])
    assert "make demo" in first and "pip install" in first
    assert len(figures_in(first)) <= 10, figures_in(first)
    words = len(re.findall(r"\S+", prose(readme)))
    assert words <= 1600, f"README.md has {words} words of prose (budget about 1,500)"
    long = [n for n, line in enumerate(readme.splitlines(), 1) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters: {long}"
    sentences = re.split(r"(?<=[.:])\s", prose(readme))
    for term in ("verdict", "Holm", "futile", "clean-dev", "looks", "centr", "F ="):  # defined on the pages
        first = next((s for s in sentences if term in s), "")
        assert not first or "](" in first, f"README.md uses {term!r} first in a sentence that links nowhere: {first}"


def test_no_page_is_longer_than_about_600_lines_but_the_archive():
    """A page is read, not searched: the lab notes are a dated archive; the study pages are written by the study
    command from its runs (one page a study, its figures its records)."""
    long = {p.relative_to(ROOT).as_posix(): n for p in PAGES[1:] if ARCHIVE not in p.parents
            and (n := len(p.read_text().splitlines())) > 620}  # fmt: skip
    assert not long, long


def test_the_archive_is_marked_as_such():
    for page in ARCHIVE.glob("*.md"):
        text = page.read_text()
        assert re.match(r"# Archive: .*\((\w+ )?\d{4}\)", text) and "A dated archive, not results" in text, page.name


def test_the_published_tables_are_rendered_from_the_study_pages():
    """The README's and docs' result blocks are what `make results-render` writes from the committed study pages
    (docs/studies/<study>/study.csv, and an outside baseline's comparison.json): a number typed by hand, or left
    stale when a page changed, fails."""
    from matching.results.publish import block_pattern, page_data, published_blocks, rendered

    blocks = published_blocks(ROOT)
    for (name, block), content in rendered(ROOT).items():
        found = block_pattern(block).search((ROOT / name).read_text(encoding="utf-8"))
        assert found, f"{name} has no block {block}"
        assert found.group(2).rstrip("\n") == content, f"{name}'s block {block} differs from make results-render's"
        # 1 or 2 decimals (p = 0.098 is its own), each found in the block's files at the precision printed
        numbers = {(float(n), len(n.split(".")[1])) for n in re.findall(r"[-+]?\d+\.\d\d?(?!\d)", content)}
        numbers |= {(float(n), 0) for n in re.findall(r"(?<![\d.])(\d+) (?:s|ms|minutes)\b", content)}  # durations
        # its study's files, and those of any study page the block links to (a summary over several studies)
        folders = {ROOT / blocks[(name, block)][0], *(ROOT / "docs" / "studies" / s for s in
                                                       re.findall(r"studies/(\w+)/study\.md", content))}  # fmt: skip
        page = " ".join(path.read_text() for folder in folders for path in page_data(folder))
        recorded = {(round(float(n), d), d) for n in re.findall(r"[-+]?\d+\.\d+", page) for d in (0, 1, 2)}
        recorded |= {(float(n), 0) for n in re.findall(r"(?<![\d.])\d+(?![\d.])", page)}
        assert numbers or "not run yet" in content, f"{name} {block}: neither a number nor 'not run yet'"
        assert numbers <= recorded, f"{name} {block}: {sorted(numbers - recorded)} not in its page"


def test_each_published_block_is_declared_beside_its_data_and_the_clone_is_found_from_any_folder_in_it(tmp_path):
    """The blocks come from the studies' specs and the figures file (`published`), never from a list in the package;
    a declaration naming no function, or a second declaration of a block, is one ConfigError naming its key; the
    commands find the clone's root from a folder inside it and refuse a folder outside any clone."""
    from matching.errors import ConfigError
    from matching.results.publish import clone_root, published_blocks

    blocks = published_blocks(ROOT)
    assert blocks[("README.md", "results-summary")][0] == "docs/studies/centring"
    assert blocks[("docs/results/performance.md", "speed")][0] == "docs/figures"
    assert clone_root(ROOT / "docs" / "studies") == ROOT
    with pytest.raises(ConfigError, match="not inside a clone of matching"):
        clone_root(tmp_path)

    (tmp_path / "conf" / "study").mkdir(parents=True)
    (tmp_path / "docs" / "studies").mkdir(parents=True)
    (tmp_path / "README.md").write_text("")
    spec = tmp_path / "conf" / "study" / "mine.yaml"
    spec.write_text("name: mine\npublished:\n  README.md#mine: matching.studies.published.centring.no_such\n")
    with pytest.raises(ConfigError, match=r"conf/study/mine.yaml: published.README.md#mine: .* is no function"):
        published_blocks(tmp_path)
    spec.write_text("name: mine\npublished:\n  README.md#mine: matching.studies.published.centring.headline\n")
    (tmp_path / "conf" / "study" / "other.yaml").write_text(spec.read_text().replace("mine\n", "other\n", 1))
    with pytest.raises(ConfigError, match="already rendered from docs/studies/mine"):
        published_blocks(tmp_path)


def test_the_centring_tables_note_names_every_cell_whose_seeds_differ(tmp_path):
    """A study that adds seeds until decided gives some families more seeds: the note under the table says which."""
    import csv

    from matching.studies.published.centring import table as centring_table

    fields = ["task", "family", "label", "split", "metric", "mean", "std", "n", "twin_diff", "twin_ci", "twin_verdict"]
    rows = [("snli_check", "softmax", "softmax", "5"), ("snli_check", "softmax_centred", "softmax, centred", "5"),
            ("snli_check", "coda", "CoDA", "3"), ("trecqa", "softmax", "softmax", "3"),
            ("trecqa", "coda", "CoDA", "3")]  # fmt: skip
    with (tmp_path / "study.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for task, family, label, n in rows:
            twin = (
                {"twin_diff": "0.5", "twin_ci": "-1 2", "twin_verdict": "not resolved"} if "centred" in family else {}
            )
            writer.writerow({"task": task, "family": family, "label": label, "split": "dev",
                             "metric": "acc" if task == "snli_check" else "map", "mean": "60", "std": "1", "n": n,
                             **twin})  # fmt: skip
    table = centring_table(tmp_path)
    assert ("Seeds per cell: 3, except SNLI check acc (842 dev pairs): softmax (centred and not) 5 (as the study's "
            "rule took them).") in table  # fmt: skip


def test_seed_counts_group_a_task_whose_cells_all_took_more():
    from matching.studies.published.centring import seed_counts

    labels = {
        "softmax": "softmax",
        "softmax_centred": "softmax, centred",
        "coda": "CoDA",
        "coda_centred": "CoDA, centred",
    }
    rows = [{"task": "wikiqa", "family": f, "n": "3"} for f in labels]
    rows += [{"task": "trecqa", "family": f, "n": "5"} for f in labels]
    rows += [{"task": "snli_check", "family": f, "n": n} for f, n in zip(labels, "3373", strict=True)]
    said = seed_counts(rows, labels)
    assert said == ("Seeds per cell: 3, except TrecQA clean-dev MAP (65 questions): 5 in every cell; SNLI check acc "
                    "(842 dev pairs): CoDA 7 (as the study's rule took them).")  # fmt: skip


def test_a_run_copied_in_from_another_study_is_published_naming_no_folder_of_its_machine(tmp_path):
    """A study may reuse another study's runs (copied in: the same overrides and seeds); their logs name where they
    first ran, another clone's folder. The published copy names that study, not the folder."""
    from matching.results.publish import push

    study = tmp_path / "outputs" / "studies" / "mine"
    run = study / "runs" / "t" / "f" / "default" / "seed1"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text("{}")
    (run / "config.yaml").write_text("paths:\n  data_dir: /corpora\n")
    (run / "train.log").write_text(
        "sweep run /elsewhere/clone2/outputs/studies/signed_aligners/runs/t/f/default/seed1: skipped, complete\n"
        f"sweep run {study}/runs/t/f/default/seed1: skipped, complete\n"
    )
    assert push("mine", root=tmp_path) == 1
    log = (tmp_path / "docs" / "studies" / "mine" / "runs" / "t" / "f" / "default" / "seed1" / "train.log").read_text()
    assert "sweep run <study signed_aligners>/runs/t/f/default/seed1" in log
    assert "sweep run <study>/runs/t/f/default/seed1" in log
    assert "/elsewhere" not in log and str(tmp_path) not in log


def test_no_published_run_names_a_folder_of_the_machine_it_ran_on():
    from matching.results.publish import OTHER_STUDY

    named = []
    for path in (ROOT / "docs" / "studies").glob("*/runs/**/*"):
        if path.name in ("train.log", "config.yaml", "provenance.json"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if OTHER_STUDY.search(text) or str(ROOT) in text:
                named.append(str(path.relative_to(ROOT)))
    assert not named, f"published runs naming a machine's folder (publish push scrubs them): {named[:5]}"


def test_every_shipped_study_is_described_and_every_study_page_listed():
    """docs/concepts/studies.md's table names each study of conf/study/; docs/results/index.md links each study page."""
    shipped = {p.stem for p in (CONF / "study").glob("*.yaml")}
    described = set(re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "concepts" / "studies.md").read_text(), re.M))
    assert described == shipped, (
        f"not described: {sorted(shipped - described)}; no such study: {sorted(described - shipped)}"
    )
    results = (ROOT / "docs" / "results" / "index.md").read_text()
    pages = {p.parent.name for p in (ROOT / "docs" / "studies").glob("*/study.md")}
    assert {name for name in pages if f"../studies/{name}/study.md" not in results} == set()


def test_a_study_page_carries_its_outside_baselines_rows():
    """A study compared with a baseline trained outside it (the CrossEncoder) shows that baseline's rows on its own
    page, as the page writer renders them from the comparison files beside it: the page and the files cannot part."""
    from matching.studies.page import outside_section
    from matching.studies.spec import read_spec

    for spec_file in sorted((CONF / "study").glob("*.yaml")):
        spec = read_spec(OmegaConf.load(spec_file))
        page = ROOT / "docs" / "studies" / spec.name / "study.md"
        if not spec.outside or not page.is_file():
            continue
        section = "\n".join(outside_section(spec, page.parent))
        assert section, f"{spec.name}: no comparison file of {spec.outside} beside its page"
        assert section in page.read_text(), (
            f"{page.relative_to(ROOT)} lacks (or differs from) its outside baselines' rows"
        )
