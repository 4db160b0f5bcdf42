"""A figure quoted in prose, bound to the record it comes from: `<!--q SOURCE|FORMAT-->TEXT<!--/q-->`.

The marker names the record (SOURCE) and how it is printed (FORMAT); `python -m matching.results.publish render`
writes TEXT from the record, and tests/test_published_numbers.py fails when a TEXT differs from what its record gives
(a value, sign or unit typed over it) or when a page carries a figure that is neither quoted nor in a rendered block.

SOURCE, one of:
- `figures:<dotted path>`: docs/figures/measured_elsewhere.yaml, the figures measured outside this repository's runs
  (held-out tests quoted from issues, benchmark sittings), e.g. `figures:demo.install_seconds`; a list item by its
  index, `figures:gpu_2026_11_26.epoch_seconds.eager.coda`.
- `study:<study>/<task>/<family>/<column>[@<metric>]`: a cell of docs/studies/<study>/study.csv, its dev row of that
  task and family (the first metric listed, or `@<metric>`), e.g. `study:centring/trecqa/coda_centred/mean`; a
  column pair `<prefix>_diff` with `<prefix>_ci` reads as the interval [diff, low, high] under `<prefix>_interval`.
- `file:<path under docs/>#<dotted path>`: a value of a JSON or YAML data file, e.g.
  `file:figures/denormals.json#cases.0.ratio`.
- `paper:<task>.<dotted path>`: a published paper's figure as the task's config keeps it (conf/task/<task>.yaml,
  `paper:`), e.g. `paper:scitail.coda.acc`.

FORMAT: a format spec for the value followed by literal text (`.2f`, `+.2f`, `.0f s`, `.1fx`), or a kind and its
spec: `interval:+.2f` for [difference, low, high] ("+1.23 [+0.45, +2.01]"; a record whose interval does not contain
its estimate is refused), `meanstd:.2f` for [mean, std] ("81.20 ± 0.43"), `range:.1f` for [low, high] ("1.3–1.6"),
`median:.0f` for the values of a sitting's repeats, their median and range ("64 (59–74)").

A record (or any record above it in its file) with `retired: <why>` is a sitting no current sentence may quote: a
quote of it outside the lab-note archive is refused, naming why.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from matching.errors import ConfigError
from matching.results.study_table import study_rows

#: A quoted figure: its source, its format, and the text rendered from them.
QUOTE = re.compile(r"<!--q (?P<source>[^|>]+?)(?:\|(?P<format>[^>]*?))?-->(?P<text>.*?)<!--/q-->", re.S)
#: The folder of the figures measured elsewhere, under the clone's root.
FIGURES_FILE = Path("docs") / "figures" / "measured_elsewhere.yaml"


def _data(path: Path) -> object:
    """A record file's content (YAML, JSON, or a study page's rows), read once while the file stays as it is: a page
    quotes the same few files hundreds of times."""
    stat = path.stat()
    return _parsed(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int, size: int) -> object:
    if path.name == "study.csv":
        return study_rows(path.parent)
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _dotted(node: object, path: str, where: str) -> tuple[object, str | None]:
    """The value at a dotted path, and the `retired` reason of it or of any node above it."""
    retired = None
    for part in path.split(".") if path else []:
        if isinstance(node, dict) and node.get("retired"):
            retired = str(node["retired"])
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, dict) and part.isdigit() and int(part) in node:
            node = node[int(part)]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(f"{where}: no {part!r} at {path!r}")
    if isinstance(node, dict) and node.get("retired"):
        retired = str(node["retired"])
    return node, retired


def _study_cell(root: Path, spec: str, where: str) -> object:
    path, _, metric = spec.partition("@")
    parts = path.split("/")
    if len(parts) != 4:
        raise ConfigError(f"{where}: a study source is study:<study>/<task>/<family>/<column>[@<metric>]")
    study, task, family, column = parts
    table = root / "docs" / "studies" / study / "study.csv"
    if not table.is_file():
        raise ConfigError(f"{where}: no study page data {table.relative_to(root)}")
    rows = [r for r in _data(table) if r["task"] == task and r["family"] == family and r["split"] == "dev"
            and (not metric or r["metric"] == metric)]  # fmt: skip
    if not rows:
        raise ConfigError(f"{where}: {table.relative_to(root)} has no dev row for {task}/{family}"
                          + (f" with metric {metric}" if metric else ""))  # fmt: skip
    row = rows[0]
    if column.endswith("_interval"):
        prefix = column.removesuffix("_interval")
        low, _, high = (row.get(f"{prefix}_ci") or "").partition(" ")
        if not row.get(f"{prefix}_diff") or not high:
            raise ConfigError(f"{where}: {task}/{family} has no interval against {prefix}")
        return [float(row[f"{prefix}_diff"]), float(low), float(high)]
    if column not in row:
        raise ConfigError(f"{where}: {table.relative_to(root)} has no column {column!r}")
    value = row[column]
    try:
        return float(value)
    except ValueError:
        return value


def record(root: Path, source: str, where: str = "a quote") -> tuple[object, str | None]:
    """The value a quote's source names, and why its sitting is retired (None when it is current)."""
    kind, _, rest = source.strip().partition(":")
    if kind == "figures":
        return _dotted(_data(root / FIGURES_FILE), rest, where)
    if kind == "study":
        return _study_cell(root, rest, where), None
    if kind == "file":
        name, _, path = rest.partition("#")
        data_file = root / "docs" / name
        if not data_file.is_file():
            raise ConfigError(f"{where}: no data file docs/{name}")
        return _dotted(_data(data_file), path, where)
    if kind == "paper":
        task, _, path = rest.partition(".")
        config = root / "conf" / "task" / f"{task}.yaml"
        if not config.is_file():
            raise ConfigError(f"{where}: no task config conf/task/{task}.yaml")
        return _dotted((_data(config) or {}).get("paper") or {}, path, where)
    raise ConfigError(f"{where}: a quote's source is figures:, study:, file: or paper:, got {source!r}")


def _number(value: object, spec: str, where: str) -> str:
    try:
        return format(float(value), spec) if spec else str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {value!r} is not a number to print with {spec!r}") from None


def _interval(value: object, spec: str, where: str) -> str:
    if not (isinstance(value, list) and len(value) == 3):
        raise ConfigError(f"{where}: an interval is [difference, low, high], got {value!r}")
    diff, low, high = (float(v) for v in value)
    if not low <= diff <= high:
        raise ConfigError(f"{where}: the interval [{low}, {high}] does not contain its estimate {diff}")
    return f"{_number(diff, spec, where)} [{_number(low, spec, where)}, {_number(high, spec, where)}]"


def _meanstd(value: object, spec: str, where: str) -> str:
    if not (isinstance(value, list) and len(value) == 2):
        raise ConfigError(f"{where}: a mean and spread is [mean, std], got {value!r}")
    return f"{_number(value[0], spec, where)} ± {_number(value[1], spec, where)}"


def _range(value: object, spec: str, where: str) -> str:
    if not (isinstance(value, list) and len(value) == 2):
        raise ConfigError(f"{where}: a range is [low, high], got {value!r}")
    return f"{_number(value[0], spec, where)}–{_number(value[1], spec, where)}"


def _median(value: object, spec: str, where: str) -> str:
    if not (isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value)):
        raise ConfigError(f"{where}: a median is taken of a list of numbers (each repeat's), got {value!r}")
    middle, low, high = (_number(v, spec, where) for v in (statistics.median(value), min(value), max(value)))
    return f"{middle} ({low}–{high})"


KINDS: dict[str, Callable[[object, str, str], str]] = {"interval": _interval, "meanstd": _meanstd, "range": _range,
                                                         "median": _median}  # fmt: skip
#: A plain format: the spec, then the literal text after it (a unit).
_PLAIN = re.compile(r"(?P<spec>[-+ ]?[#0]?\d*[,_]?(?:\.\d+)?[eEfFgG%]?)(?P<suffix>.*)", re.S)


def printed(value: object, fmt: str, where: str) -> str:
    """A record's value as FORMAT prints it."""
    kind, colon, spec = fmt.partition(":")
    if colon and kind in KINDS:
        spec, _, suffix = spec.partition(" ")
        return KINDS[kind](value, spec, where) + (f" {suffix}" if suffix else "")
    m = _PLAIN.fullmatch(fmt)
    return _number(value, m.group("spec"), where) + m.group("suffix")


def render(text: str, root: Path, page: str = "", archive: bool = False) -> str:
    """The page with every quote's text written from its record. A retired record is refused outside the archive."""

    def one(m: re.Match) -> str:
        marker = m.group(0)[: m.start("text") - m.start()]
        where = f"{page}: {marker}"
        value, retired = record(root, m.group("source"), where)
        if retired and not archive:
            raise ConfigError(f"{where} quotes a retired sitting ({retired}); quote a current record or move the "
                              "sentence to the lab-note archive")  # fmt: skip
        return f"{marker}{printed(value, m.group('format') or '', where)}<!--/q-->"

    return QUOTE.sub(one, text)


#: The folder of the lab notes: dated records, whose quotes may name a retired sitting.
ARCHIVE = Path("docs") / "archive"


def quoting_pages(root: Path) -> list[Path]:
    """The pages whose figures are quoted: the README and the site's pages, less the study pages (written by the
    study command from its runs)."""
    docs = root / "docs"
    return [root / "README.md", *sorted(p for p in docs.rglob("*.md") if p.relative_to(docs).parts[0] != "studies")]


def render_pages(root: Path) -> list[Path]:
    """Rewrite every page's quotes from their records; returns the pages changed."""
    changed = []
    for path in quoting_pages(root):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        new = render(text, root, name, archive=(root / ARCHIVE) in path.parents)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed
