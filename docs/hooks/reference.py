"""The command reference, generated from the configs themselves, so that it cannot go stale.

`pages()` returns `{path: markdown}`: `reference/commands/index.md` (every console script of pyproject.toml, its
`python -m` form, what it does, a link to its page) and `reference/commands/<name>.md` for each (`matching-train` ->
`train.md`): what it does (its config's `hydra.help.header`, else the module's usage text or docstring), its usage,
every key it takes (nested keys flattened, `data.max_length`) with its default and the comment written beside it in
the YAML, and every config group it takes with each option, the option file's leading comment and the option's own
keys. Nothing here imports `matching`, Hydra or MkDocs: the YAML source text is read (with PyYAML's node positions, so
that a value is shown as written and each comment lands on its key), and the command modules are parsed, not run.

How a comment is read, per key: the comment after its value on the same line (`key: value  # comment`), continued by
the comment-only lines below it whose `#` is indented deeper than the key; else the comment-only lines directly above
it. A block of comment lines at the top of a file (after `# @package`) describes the file (the option). A comment block
that opens a mapping whose first key has a comment of its own describes the mapping. Inside a comment, lines indented
by two spaces or more after the `#` are code (example commands).

`on_files(files, config)` is the MkDocs hook (mkdocs.yml: `hooks: [docs/hooks/reference.py]`): it adds the pages as
generated files, so that they are in the nav and in strict link checking. tests/test_reference.py checks every page
against the configs as Hydra composes them.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: Where the pages go, under the docs folder.
PREFIX = "reference/commands"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def repository_root(start: Path | None = None) -> Path:
    """The checkout that holds pyproject.toml and conf/: above this file (docs/hooks/), else beside the installed
    `matching` package (found, not imported), for a copy of this file elsewhere."""
    for folder in (start or Path(__file__).resolve()).parents:
        if (folder / "pyproject.toml").is_file() and (folder / "conf" / "train.yaml").is_file():
            return folder
    spec = importlib.util.find_spec("matching")
    if spec is not None and spec.origin is not None:
        folder = Path(spec.origin).resolve().parent.parent
        if (folder / "conf" / "train.yaml").is_file():
            return folder
    raise RuntimeError("cannot find the repository (pyproject.toml and conf/train.yaml) above this file")


# -- reading a YAML file: keys, values as written, comments ------------------------------------------------------------
@dataclass
class Setting:
    """One key of a config file: `key` dotted from the config's root (its package included), `value` as written
    (None for a mapping, listed only for its comment), `text`: the value is a block of prose (`>-`, `|`)."""

    key: str
    value: str | None
    comment: str
    text: bool = False


@dataclass
class Default:
    """One entry of a defaults list: `group: option` (`override` when written `override group: option`), or a plain
    config name (`option` alone, group None)."""

    group: str | None
    option: str | None
    override: bool = False
    comment: str = ""


@dataclass
class ConfigFile:
    """A YAML config: its leading comment (`about`, lines as written after `#`), defaults list and keys."""

    path: Path
    package: str
    about: list[str] = field(default_factory=list)
    defaults: list[Default] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)


def _comment_start(line: str, start: int) -> int | None:
    """The column of the `#` that opens a comment at or after `start` (preceded by a space, or the line's start)."""
    for j in range(start, len(line)):
        if line[j] == "#" and (j == 0 or line[j - 1] in " \t"):
            return j
    return None


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _comment_text(line: str) -> str:
    """The text of a comment-only line, after `#` and one space (further indentation kept: it marks code)."""
    text = line.lstrip()[1:]
    return text[1:] if text.startswith(" ") else text


class _Comments:
    """The comments of one file's lines, each line claimed by one key at most."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.claimed: set[int] = set()

    def header(self) -> list[str]:
        """The comment block at the top of the file (after `# @package ...`): what the file is."""
        out = []
        for i, line in enumerate(self.lines):
            if not _is_comment(line):
                break
            self.claimed.add(i)
            if not line.lstrip().startswith("# @package"):
                out.append(_comment_text(line))
        return out

    def inline(self, line: int, start: int, column: int) -> str:
        """The comment after a value (from column `start` of `line`) and its continuation lines, indented deeper than
        the key's `column`."""
        if line in self.claimed or line >= len(self.lines):  # a flow mapping's keys share their parent's comment
            return ""
        text = self.lines[line]
        j = _comment_start(text, start)
        if j is None:
            return ""
        parts = [text[j + 1 :].strip()]
        self.claimed.add(line)
        i = line + 1
        while i < len(self.lines) and _is_comment(self.lines[i]):
            indent = len(self.lines[i]) - len(self.lines[i].lstrip())
            if indent <= column:
                break
            parts.append(self.lines[i].strip()[1:].strip())
            self.claimed.add(i)
            i += 1
        return " ".join(p for p in parts if p)

    def above(self, line: int) -> tuple[str, int]:
        """The unclaimed comment-only lines directly above `line` (no blank line between), and the first one's line."""
        i = line - 1
        while i >= 0 and i not in self.claimed and _is_comment(self.lines[i]):
            i -= 1
        block = range(i + 1, line)
        self.claimed.update(block)
        return " ".join(self.lines[k].strip()[1:].strip() for k in block), i + 1


def _as_written(node: yaml.Node, lines: list[str]) -> tuple[str, bool]:
    """A value as its file writes it (a scalar's text, a one-line collection's source) and whether it is prose."""
    if isinstance(node, yaml.ScalarNode):
        if node.style in ("|", ">"):
            return node.value.strip(), True
        if node.style in ('"', "'"):
            return f"{node.style}{node.value}{node.style}", False
        return node.value, False
    start, end = node.start_mark, node.end_mark
    if start.line == end.line:
        return lines[start.line][start.column : end.column], False
    value = yaml.load(yaml.serialize(node), Loader=_Loader)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip(), False


def _one_line(node: yaml.Node) -> bool:
    """Whether a value sits on its key's line (a scalar other than a text block, or a flow collection)."""
    if isinstance(node, yaml.ScalarNode):
        return node.style not in ("|", ">")
    return bool(node.flow_style)


def read_config(path: Path, package: str = "", skip: tuple[str, ...] = ()) -> ConfigFile:
    """The keys, defaults list and comments of a config file. `package`: where its keys go (`aligner` for an option of
    the aligner group), unless the file says otherwise (`# @package _global_`); `skip`: top-level keys left out."""
    text = path.read_text(encoding="utf-8")
    comments = _Comments(text)
    declared = re.match(r"\s*#\s*@package\s+(\S+)", text)
    if declared:
        package = "" if declared.group(1) == "_global_" else declared.group(1)
    config = ConfigFile(path=path, package=package, about=comments.header())
    root = yaml.compose(text, Loader=_Loader)
    if not isinstance(root, yaml.MappingNode):
        return config

    def walk(mapping: yaml.MappingNode, prefix: str, parent: Setting | None, parent_line: int) -> None:
        for position, (key_node, value) in enumerate(mapping.value):
            key = f"{prefix}{key_node.value}"
            line, column = key_node.start_mark.line, key_node.start_mark.column
            above, first = comments.above(line)
            if _one_line(value):
                inline = comments.inline(value.end_mark.line, value.end_mark.column, column)
            else:
                inline = comments.inline(line, key_node.end_mark.column + 1, column)
            if above and inline and position == 0 and parent is not None and not parent.comment:
                if first == parent_line + 1:  # the block opens the mapping: it says what the mapping is
                    parent.comment, above = above, ""
            comment = " ".join(c for c in (above, inline) if c)
            if not prefix and key_node.value == "defaults" and isinstance(value, yaml.SequenceNode):
                config.defaults = [_default(item, comments) for item in value.value]
            elif not prefix and key_node.value in skip:
                continue
            elif isinstance(value, yaml.MappingNode) and value.value:
                setting = Setting(_dotted(package, key), None, comment)
                config.settings.append(setting)
                walk(value, f"{key}.", setting, line)
            else:
                shown, prose = _as_written(value, comments.lines)
                config.settings.append(Setting(_dotted(package, key), shown, comment, prose))

    walk(root, "", None, -1)
    config.settings = [s for s in config.settings if s.value is not None or s.comment]
    return config


def _dotted(package: str, key: str) -> str:
    return f"{package}.{key}" if package else key


def _default(node: yaml.Node, comments: _Comments) -> Default:
    above, _ = comments.above(node.start_mark.line)
    end = node.value[0][1] if isinstance(node, yaml.MappingNode) else node  # a block mapping ends on the next line
    inline = comments.inline(end.end_mark.line, end.end_mark.column, node.start_mark.column)
    comment = " ".join(c for c in (above, inline) if c)
    if isinstance(node, yaml.ScalarNode):
        return Default(None, node.value, comment=comment)
    ((key, value),) = node.value
    group, override = key.value, False
    if group.startswith("override "):
        group, override = group.removeprefix("override ").strip(), True
    option = None if value.value in (None, "null") else value.value
    return Default(group, option, override, comment)


# -- the commands ------------------------------------------------------------------------------------------------------
@dataclass
class Command:
    """A console script: `script` (matching-train), `module` (matching.train), `config` (the Hydra app's config name,
    None for a plain script), `usage` and `about` (its help text), and for a plain script over another command's
    config, `reads` (conf/<reads>.yaml) and `keys` (the top-level keys of it that it takes)."""

    script: str
    module: str
    config: str | None
    usage: str = ""
    about: str = ""
    reads: str | None = None
    keys: tuple[str, ...] = ()

    @property
    def page(self) -> str:
        return f"{self.script.removeprefix('matching-')}.md"


def scripts(root: Path) -> dict[str, str]:
    """pyproject.toml's console scripts, `{script: module}`: the `name = "module:function"` lines of its
    `[project.scripts]` table (read by line: tomllib is Python 3.11+, and we support 3.10)."""
    out, inside = {}, False
    for line in (root / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            inside = line.strip() == "[project.scripts]"
        elif inside and (found := re.match(r'\s*"?([\w.-]+)"?\s*=\s*"([\w.]+):\w+"', line)):
            out[found.group(1)] = found.group(2)
    return out


def _module_facts(path: Path) -> tuple[str | None, str, str | None, tuple[str, ...], str]:
    """From a command module's source: the config name of its `command("<name>", ...)` call, its `USAGE` text, the
    conf/*.yaml file it reads, its `EXPORTED_KEYS` and its docstring."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    config = usage = reads = None
    keys: tuple[str, ...] = ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "command" and node.args:
            if isinstance(node.args[0], ast.Constant):
                config = node.args[0].value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name == "USAGE" and isinstance(node.value, ast.Constant):
                usage = node.value.value
            elif name == "EXPORTED_KEYS":
                keys = tuple(ast.literal_eval(node.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"\w+\.yaml", node.value):
            reads = node.value.removesuffix(".yaml")
    return config, usage or "", reads, keys, ast.get_docstring(tree) or ""


def _split_help(text: str) -> tuple[str, str]:
    """A help text's usage lines (its first paragraph, `Usage: ...`) and the rest (what the command does)."""
    text = text.strip("\n")
    if not text.lstrip().startswith("Usage:"):
        return "", text
    usage, _, rest = text.partition("\n\n")
    return usage.rstrip(), rest.strip()


def commands(root: Path) -> list[Command]:
    """Every console script, read from pyproject.toml, its module and its config."""
    out = []
    for script, module in scripts(root).items():
        config, usage_text, reads, keys, docstring = _module_facts(root / (module.replace(".", "/") + ".py"))
        if config is not None:
            data = yaml.safe_load((root / "conf" / f"{config}.yaml").read_text(encoding="utf-8")) or {}
            header = ((data.get("hydra") or {}).get("help") or {}).get("header") or ""
            usage, about = _split_help(header or docstring)
        else:
            usage, about = _split_help(usage_text or docstring)
        if not about:
            about = docstring.split("\n\n")[0]
        out.append(Command(script, module, config, usage, about, None if config else reads, keys))
    return out


# -- markdown ----------------------------------------------------------------------------------------------------------
_CODE = re.compile(r"(`+)(.+?)\1")
_DOC = re.compile(r"docs/((?:[\w.-]+/)*[\w.-]+\.md)")
_ESCAPE = {"\\": "\\\\", "<": "&lt;", ">": "&gt;", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "|": "\\|"}


def prose(text: str, link: Callable[[str], str | None] = lambda path: None) -> str:
    """Comment text as Markdown: code spans kept, `docs/<page>.md` linked where `link` gives a URL, the rest escaped
    (so that `<run dir>` shows as typed and `*`, `_`, `|` are not Markdown)."""
    out, last = [], 0
    for match in _CODE.finditer(text):
        out.append(_plain(text[last : match.start()], link))
        out.append(match.group(0))
        last = match.end()
    out.append(_plain(text[last:], link))
    return "".join(out)


def _plain(text: str, link: Callable[[str], str | None]) -> str:
    out, last = [], 0
    for match in _DOC.finditer(text):
        url = link(match.group(1))
        if url is None:
            continue
        out.append(_escape(text[last : match.start()]))
        out.append(f"[{_escape(match.group(0))}]({url})")
        last = match.end()
    out.append(_escape(text[last:]))
    return "".join(out)


def _escape(text: str) -> str:
    return "".join(_ESCAPE.get(c, c) for c in text)


def _code(value: str) -> str:
    """A value as inline code (with a fence of backticks longer than any run inside it)."""
    if value == "":
        return "(empty)"
    fence = "`" * (max((len(r) for r in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


_COMMAND = r"(?:python |matching-\w|make |pip )"
_LABELLED = re.compile(rf"^(\w+:)\s+({_COMMAND}.*)$")


def paragraphs(lines: list[str], link: Callable[[str], str | None]) -> str:
    """Comment lines as Markdown: prose joined into paragraphs, lines indented two spaces or more as a code block."""
    blocks: list[tuple[str, list[str]]] = []
    split = []
    for line in lines:  # `Run:  python -m ...`: the label, then the command
        labelled = _LABELLED.match(line)
        split += [labelled.group(1), "  " + labelled.group(2)] if labelled else [line]
    for line in split:
        preformatted = line.startswith("  ") or re.search(r"\S {3,}\S", line)  # indented, or aligned in columns
        kind = "code" if preformatted else ("gap" if not line.strip() else "prose")
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    out = []
    for kind, block in blocks:
        if kind == "prose":
            out.append(prose(" ".join(b.strip() for b in block), link))
        elif kind == "code":
            indent = min(len(b) - len(b.lstrip()) for b in block)
            code = [b[indent:] for b in block]
            language = "bash" if re.match(rf"{_COMMAND}|\.\.\. ", code[0]) else "text"
            out.append(f"```{language}\n" + "\n".join(code) + "\n```")
    return "\n\n".join(out)


def summary(lines: list[str]) -> str:
    """The first paragraph of prose of comment lines (up to a blank or preformatted line)."""
    out = []
    for line in lines:
        if not line.strip() or line.startswith("  ") or re.search(r"\S {3,}\S", line):
            break
        out.append(line.strip())
    return " ".join(out)


def first_sentence(text: str) -> str:
    """The first sentence of a text (up to a full stop followed by a capital, a bracket or code)."""
    text = " ".join(text.split())
    match = re.search(r"(?<=\.)\s(?=[A-Z(`])", text)
    return text[: match.start()] if match else text


def settings_table(settings: list[Setting], link: Callable[[str], str | None]) -> str:
    """A table of keys: the key, its default as written, and its comment."""
    if not settings:
        return ""
    rows = ["| Key | Default | Description |", "|---|---|---|"]
    for s in settings:
        if s.value is None:
            value = ""
        elif s.text:
            value = prose(" ".join(s.value.split()), link)
        else:
            value = _code(s.value)
        rows.append(f"| {_code(s.key)} | {value} | {prose(s.comment, link)} |")
    return "\n".join(rows)


def anchor(*parts: str) -> str:
    """A heading's id: the parts joined by `-`, each `/` a `-` (`task/reader`, `snli_jsonl`: task-reader-snli_jsonl)."""
    return "-".join(p.replace("/", "-") for p in parts)


# -- the groups of a command -------------------------------------------------------------------------------------------
@dataclass
class Group:
    """A config group a command takes: its name (`aligner`, `task/reader`), its default option (None: none chosen;
    `choice`: what chooses it instead, for a nested group), the comment beside it in the defaults list, and its
    options' files."""

    name: str
    default: str | None
    comment: str
    options: list[ConfigFile]
    choice: str = ""


def group_options(conf: Path, group: str) -> list[ConfigFile]:
    folder = conf / group
    return [read_config(path, group.replace("/", ".")) for path in sorted(folder.glob("*.yaml"))]


def command_groups(conf: Path, own: ConfigFile) -> list[Group]:
    """The config groups of a command's defaults list (Hydra's own, `hydra/...`, left out), each followed by the
    groups nested in it (`task/reader`, chosen by each task option)."""
    groups = []
    for entry in own.defaults:
        if entry.group is None or entry.group.startswith("hydra/") or not (conf / entry.group).is_dir():
            continue
        groups.append(Group(entry.group, entry.option, entry.comment, group_options(conf, entry.group)))
        for nested in sorted(p for p in (conf / entry.group).iterdir() if p.is_dir()):
            name = f"{entry.group}/{nested.name}"
            groups.append(Group(name, None, "", group_options(conf, name), choice=entry.group))
    return groups


def hydra_groups(conf: Path) -> list[Group]:
    """The options of Hydra's own groups that conf/hydra/ ships (`hydra/launcher=slurm`, ...)."""
    folder = conf / "hydra"
    return [Group(f"hydra/{p.name}", None, "", group_options(conf, f"hydra/{p.name}"))
            for p in sorted(folder.iterdir()) if p.is_dir()]  # fmt: skip


def _selections(option: ConfigFile, group: str, link: Callable[[str], str | None], known: set[str]) -> list[str]:
    """What an option's defaults list chooses, as Markdown sentences: the nested group option it picks, the option of
    its own group it extends, other groups it overrides; each linked to its section when the page has one (`known`:
    the page's ids)."""

    def choice(name: str, option: str) -> str:
        target = anchor(name, option)
        return f"[{_code(f'{name}={option}')}](#{target})" if target in known else _code(f"{name}={option}")

    out, plain = [], []
    for entry in option.defaults:
        if entry.group is None and entry.option not in (None, "_self_"):
            out.append(f"Extends {choice(group, entry.option)}: its keys, then these.")
        elif entry.group is not None and entry.option is not None:
            name = entry.group.split("@")[0]
            name = name[1:] if name.startswith("/") else f"{group}/{name}"
            if entry.comment:
                out.append(f"Chooses {choice(name, entry.option)}: {prose(entry.comment, link)}")
            else:
                plain.append(choice(name, entry.option))
    if plain:
        out.insert(0, f"Chooses {', '.join(plain)}.")
    return out


def section_ids(groups: list[Group]) -> set[str]:
    """The ids of the groups' sections and of their options' sections."""
    return {anchor(g.name) for g in groups} | {anchor(g.name, o.path.stem) for g in groups for o in g.options}


def group_section(group: Group, link: Callable[[str], str | None], known: set[str], level: int = 2) -> str:
    """A group's heading, how it is chosen, a table of its options and, per option, its comment and its keys."""
    h = "#" * level
    lines = [f"{h} `{group.name}` {{ #{anchor(group.name)} }}", ""]
    if group.name.startswith("hydra/"):
        lines.append(f"Choose one with `{group.name}=<option>`.")
    elif group.choice:
        lines.append(f"Chosen by each `{group.choice}` option (its defaults list), or with `{group.name}=<option>`.")
    else:
        said = f" ({prose(group.comment, link)})" if group.comment else ""
        chosen = f"Default: `{group.name}={group.default}`{said}." if group.default else f"None by default{said}."
        lines.append(f"{chosen} Choose one with `{group.name}=<option>`.")
    lines += ["", "| Option | What it is |", "|---|---|"]
    for option in group.options:
        about = first_sentence(summary(option.about))
        lines.append(f"| [`{option.path.stem}`](#{anchor(group.name, option.path.stem)}) | {prose(about, link)} |")
    for option in group.options:
        stem = option.path.stem
        lines += ["", f"{h}# `{group.name}={stem}` {{ #{anchor(group.name, stem)} }}", ""]
        if option.about:
            lines += [paragraphs(option.about, link), ""]
        if option.package != group.name.replace("/", "."):
            where = f"`{option.package}`" if option.package else "the top level (`@package _global_`)"
            lines += [f"Its keys go to {where}.", ""]
        lines += [*(f"{s}\n" for s in _selections(option, group.name, link, known))]
        settings = option.settings
        if not settings and option.package:  # an empty option (intra=none): its node is there, empty
            settings = [Setting(option.package, "{}", "empty: this option sets no key")]
        lines.append(settings_table(settings, link) or "No keys of its own.")
    return "\n".join(lines)


# -- the pages ---------------------------------------------------------------------------------------------------------
def command_page(command: Command, root: Path, link: Callable[[str], str | None]) -> str:
    """The page of one command: what it does, usage, its keys, its groups."""
    conf = root / "conf"
    python_m = f"python -m {command.module}"
    lines = [f"# `{command.script}`", "", prose(command.about, link), ""]
    usage = command.usage or f"Usage: {command.script} [key=value ...]"
    lines += ["## Usage { #usage }", "", "```text", usage, "```", ""]
    same = f"The same as `{python_m} ...`."
    if command.config is None:
        lines += [
            f"{same} It is not a Hydra app: its arguments are `key=value` pairs among the keys below, read without"
            " Hydra (no config groups, `--cfg` or `-m`); `--help` prints the usage.",
            "",
        ]
        if command.reads:
            own = read_config(conf / f"{command.reads}.yaml", skip=("hydra",))
            keys = [s for s in own.settings if s.key.split(".")[0] in command.keys]
            lines += [
                "## Keys { #keys }",
                "",
                f"These keys of `conf/{command.reads}.yaml` ([`matching-{command.reads}`]({command.reads}.md#keys)), "
                "with the same defaults:",
                "",
                settings_table(keys, link),
            ]
        return "\n".join(lines) + "\n"
    own = read_config(conf / f"{command.config}.yaml", skip=("hydra",))
    lines += [
        f"{same} Its config is `conf/{command.config}.yaml`. Every argument is a Hydra override: `key=value` for a"
        " key below, `group=option` for a config group; `--help` lists them, `--cfg job` prints the composed config,"
        " `-m` runs one job per value of a comma-separated list.",
        "",
    ]
    trained_run = any(d.group is None and d.option == "trained_run" for d in own.defaults)
    lines += ["## Keys { #keys }", ""]
    if trained_run:
        lines += [
            "The command's own keys, below. Given `ckpt=`, its config is composed over the trained run's saved"
            " `config.yaml`: every key of that run can be overridden too, as in training (`paths.data_dir=...`,"
            " `task.splits.test.path=...`, `data.max_length=...`): see [`matching-train`](train.md#keys) and its"
            " [config groups](train.md#groups).",
            "",
        ]
    merged = [d.option for d in own.defaults if d.group is None and d.option not in ("_self_", "trained_run")]
    settings = list(own.settings)
    for name in merged:  # plain configs in the defaults list (`command`): their keys, but Hydra's
        if (conf / f"{name}.yaml").is_file():
            settings += read_config(conf / f"{name}.yaml", skip=("hydra",)).settings
    lines += [settings_table(settings, link) or "No keys of its own.", ""]
    groups = command_groups(conf, own)
    extra = hydra_groups(conf) if command.config == "train" else []
    known = section_ids(groups + extra)
    if groups:
        lines += ["## Config groups { #groups }", "", "| Group | Default | Options |", "|---|---|---|"]
        for group in groups:
            default = (
                f"`{group.default}`" if group.default else (f"chosen by `{group.choice}`" if group.choice else "none")
            )
            options = ", ".join(f"[`{o.path.stem}`](#{anchor(group.name, o.path.stem)})" for o in group.options)
            lines.append(f"| [`{group.name}`](#{anchor(group.name)}) | {default} | {options} |")
        lines.append("")
        for group in groups:
            lines += [group_section(group, link, known), ""]
    if command.config == "train":
        lines += [
            "## Hydra's groups { #hydra-groups }",
            "",
            "Options of Hydra's own config groups that `conf/hydra/` adds (Hydra and its plugins bring others:"
            " `hydra/launcher=joblib`, ...; `--hydra-help` lists them all). A sweep (`-m`) picks its launcher with"
            " `hydra/launcher=<option>` and sets its keys with `hydra.launcher.<key>=<value>`.",
            "",
        ]
        for group in extra:
            lines += [group_section(group, link, known, level=3), ""]
    return "\n".join(lines).rstrip() + "\n"


def index_page(cmds: list[Command], link: Callable[[str], str | None]) -> str:
    lines = [
        "# Commands",
        "",
        "Every command, generated from its config (`conf/<command>.yaml` and the config groups it takes), so that"
        " this reference says what the code does. Each is also `python -m <module>`; every argument is a Hydra"
        " override (`key=value`, `group=option`), and `--help` prints the same keys.",
        "",
        "| Command | Also | What it does |",
        "|---|---|---|",
    ]
    for command in cmds:
        about = first_sentence(command.about)
        lines.append(f"| [`{command.script}`]({command.page}) | `python -m {command.module}` | {prose(about, link)} |")
    return "\n".join(lines) + "\n"


def pages(root: Path | None = None, exists: Callable[[str], bool] | None = None) -> dict[str, str]:
    """Every generated page, `{path under the docs folder: markdown}`. `exists(path)`: whether a docs page exists
    (default: a file under root/docs), so that a comment's `docs/<page>.md` is linked only when it does."""
    root = root or repository_root()
    exists = exists or (lambda path: (root / "docs" / path).is_file())

    def link(path: str) -> str | None:
        return f"../../{path}" if exists(path) else None

    cmds = commands(root)
    out = {f"{PREFIX}/index.md": index_page(cmds, link)}
    for command in cmds:
        out[f"{PREFIX}/{command.page}"] = command_page(command, root, link)
    return out


def stale_doc_references(root: Path | None = None) -> Iterator[tuple[str, str]]:
    """`(config file, docs/<page>.md)` for each page that a config comment names and that does not exist."""
    root = root or repository_root()
    for path in sorted((root / "conf").rglob("*.yaml")):
        for page in _DOC.findall(path.read_text(encoding="utf-8")):
            if not (root / "docs" / page).is_file():
                yield str(path.relative_to(root)), page


def on_files(files, config):
    """MkDocs hook: the generated pages, as generated files (replacing any file of the same path)."""
    from mkdocs.structure.files import File

    def exists(path: str) -> bool:
        return files.get_file_from_path(path) is not None

    for path, text in pages(exists=exists).items():
        old = files.get_file_from_path(path)
        if old is not None:
            files.remove(old)
        files.append(File.generated(config, path, content=text))
    return files
