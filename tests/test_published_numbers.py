"""Every published figure comes from a file: a figure of README.md or docs/*.md that no data file holds fails.

What counts as a figure (`figures_in`): in the page's prose and tables (fenced code blocks, inline code, HTML
comments, link targets and the `<!-- results:... -->` blocks removed first: a block is rendered from its files and
tests/test_docs.py checks it), a number written with a decimal point (76.96, 0.78, 1.6e-06), or followed by `%`, `x`
(a ratio: 5.2x) or a unit of time (s, ms, µs, min, minutes, hours; `53–86 s` gives both ends). Not figures: whole
numbers without such a unit (counts such as 122 questions, 9,824 pairs, 3 seeds; years; section, table and equation
numbers), dates (2026-11-26) and clock times (05:57), version numbers (torch 2.13, Python ≥ 3.10, SciTail 1.1, any
a.b.c) and arXiv ids (1606.01933).

Where a figure is found: the data of the studies the page links to (`studies/<name>/...`: that study's study.csv,
seeds.json, selection.json and other JSON, an outside baseline's comparison.json and its seeds' metrics.json), the
file of figures measured elsewhere (docs/figures/measured_elsewhere.yaml) and the task configs' `paper:` numbers, at
the precision printed (a data file's 80.29822 backs 80.30 and 80.3); the reranking frontier's data files
(bench_rerank.py --json) back a figure only as their table prints it (20.1 s backs "20.1 s", not "20 s"). A figure
with a unit (x, %, a time) is a measurement of speed, time or share: only the figures file (or a frontier file) backs
it, so that it cannot match a study's accuracy by chance. A study the page does not link backs none of its figures:
every study's numbers together (tens of thousands) backed a typed figure by chance, and each new run of any study
moved every page's count (three pins re-measured at each publish).

The scope, and why: README.md is checked whole. docs/*.md hold about 5,000 such figures, most of them typed lab
records of runs made before the studies existed (docs/results/index.md says so of its tables); each page's count of
figures no data file holds is pinned in `TYPED` and may only fall, so a new typed figure fails until it is put in a
data file (or an old one is moved there), while the records already there stay readable. A pinned count cannot tell
one typed figure swapped for another: the README is where a figure must be backed one by one.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIGURES_FILE = ROOT / "docs" / "figures" / "measured_elsewhere.yaml"

#: Figures a page may carry that no data file holds, each with its reason. Short on purpose.
EXCEPTIONS = {
    "95 %": "the confidence level of every interval, a choice, not a measurement",
    "80 %": "the power at which a detectable difference is stated, a choice",
    "0.05": "the significance level α, a choice",
}

#: The site's pages (docs/, the study pages and the lab-note archive left out: the archive is dated records, marked
#: as such and never quoted as results): how many figures neither their linked studies nor the shared files hold,
#: as of this test's commit (a ratchet: it may only fall).
TYPED = {
    "concepts/aligners.md": 37, "concepts/architecture.md": 0, "concepts/comparing.md": 235, "concepts/studies.md": 0,
    "getting-started/demo.md": 2, "getting-started/install.md": 0, "getting-started/tutorial.md": 0,
    "how-to/cluster.md": 3, "how-to/cookbook.md": 0, "how-to/data.md": 54, "how-to/extending.md": 0,
    "how-to/ranking.md": 81, "how-to/serving.md": 23, "index.md": 0, "reference/errors.md": 1,
    "reference/python-api.md": 1, "results/index.md": 18, "results/performance.md": 107,
    "results/signed-aligners.md": 1, "results/training-speed.md": 551,
}  # fmt: skip
#: Folders of docs/ whose pages are not counted: the study pages (rendered from their runs), the archive, the hooks.
UNCOUNTED = ("studies", "archive", "hooks")

_REMOVED = [
    re.compile(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", re.S),  # rendered, checked by test_docs
    re.compile(r"^ *```.*?^ *```", re.S | re.M),  # code blocks
    re.compile(r"<!--.*?-->", re.S),  # comments
    re.compile(r"`[^`\n]*`"),  # inline code: commands and keys
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b"),  # dates, clock times
    re.compile(r"(?i)(?:torch|python|cuda|cu|version|v|scitail|onnxruntime|≥|>=)\s?\d+(?:\.\d+)+|\b\d+\.\d+\.\d+\S*"),
    re.compile(r"\b\d{4}\.\d{4,5}\b"),  # arXiv ids
]
_UNIT = r"%|x\b|s\b|ms\b|µs\b|min\b|minutes\b|hours?\b"
_NUMBER = re.compile(rf"(?<![\w.\-])([-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+−]?\d+)?)((?:–[-+−]?[\d.,]+)?\s?(?:{_UNIT}))?")


def figures_in(text: str) -> list[tuple[str, bool]]:
    """The figures of a page's text, each as (as printed, whether it carries a unit)."""
    for name in EXCEPTIONS:
        text = text.replace(name, " ")
    for pattern in _REMOVED:
        text = pattern.sub(" ", text)
    found = []
    for m in _NUMBER.finditer(text):
        number, unit = m.group(1), m.group(2)
        if "." in number or "e" in number or unit:
            found.append((number, bool(unit)))
        if unit and "–" in unit:  # a range: its other end carries the unit too
            found.append((re.match(r"[-+−]?[\d.,]*\d", unit.split("–")[1]).group(0), True))
    return found


def _numbers(text: str) -> set[float]:
    return {float(n) for n in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)}


def _walk(node: object) -> set[float]:
    if isinstance(node, bool):
        return set()
    if isinstance(node, (int, float)):
        return {float(node)}
    if isinstance(node, dict):
        return {x for key, value in node.items() for x in _walk(key) | _walk(value)}
    if isinstance(node, list):
        return {x for value in node for x in _walk(value)}
    return set()


#: A link to a study's page or files: `studies/<name>/` (docs/studies/<name>/study.md from the README).
_STUDY_LINK = re.compile(r"studies/([\w.-]+)/")


def linked_studies(text: str) -> tuple[str, ...]:
    """The studies a page links to (docs/studies/<name>/), whose data back its figures (a name that is no study's
    folder has no data: `study_numbers` finds none)."""
    return tuple(sorted(set(_STUDY_LINK.findall(text))))


@cache
def study_numbers(name: str) -> frozenset[float]:
    """Every number of one study's data files."""
    found = set()
    for pattern in ("study.csv", "*.json", "cross_encoder/*/*.json", "cross_encoder/*/seed*/metrics.json"):
        for path in (ROOT / "docs" / "studies" / name).glob(pattern):
            found |= _numbers(path.read_text(encoding="utf-8"))
    return frozenset(found)


@cache
def shared_numbers() -> tuple[frozenset[float], frozenset[float]]:
    """(what backs a figure of any page: the figures file and the task configs' `paper:` numbers, the figures
    file's alone)."""
    paper = set()
    for path in (ROOT / "conf" / "task").glob("*.yaml"):
        paper |= _walk((yaml.safe_load(path.read_text()) or {}).get("paper") or {})
    measured = _walk(yaml.safe_load(FIGURES_FILE.read_text(encoding="utf-8")))
    return frozenset(paper | measured), frozenset(measured)


#: How docs/results/performance.md's frontier table prints the figures of a bench_rerank.py data file (their decimals):
#: MAP and MRR plain, the speed ratios and the index's seconds with their units (pairs/s are whole numbers).
_FRONTIER_PLAIN = {"map": 2, "mrr": 2, "index_mb_per_1000": 2}
_FRONTIER_UNITS = {"x_new": 1, "x_indexed": 1, "index_seconds": 1}


@cache
def frontier_printed() -> frozenset[tuple[str, bool]]:
    """The frontier data files' figures (bench_rerank.py --json) exactly as they are printed, each with whether it
    carries a unit: they back a figure printed the same way only. Their raw floats would back unrelated figures by
    chance, and so would their printed values read at fewer decimals (20.1 s backing every "20 s" of the docs)."""
    printed = set()
    for path in FIGURES_FILE.parent.glob("rerank_frontier_*.json"):
        for row in json.loads(path.read_text(encoding="utf-8"))["results"]:
            for precision, unit in ((_FRONTIER_PLAIN, False), (_FRONTIER_UNITS, True)):
                printed |= {(f"{float(row[k]):.{d}f}", unit) for k, d in precision.items() if row.get(k) is not None}
    return frozenset(printed)


def backed(figure: str, unit: bool, studies: tuple[str, ...] = ()) -> bool:
    """Whether a data file holds the figure at the precision printed: the figures file, the configs' `paper:` numbers
    or one of `studies` (a unit's figure: the figures file alone)."""
    shared, measured = shared_numbers()
    pool = measured if unit else shared.union(*(study_numbers(name) for name in studies))
    text = figure.replace(",", "").replace("−", "-").lstrip("+-")
    if not text or (text, unit) in frontier_printed():
        return True
    value = float(text)
    if "e" in text:
        return any(x and f"{abs(x):.2g}" == f"{value:.2g}" for x in pool)
    if "." not in text:  # a whole number is backed by itself: every float that rounds to it (59.96 to "60") would
        return value in pool  # back most of the docs' round figures by chance as the studies grow
    digits = len(text.split(".")[1])
    return any(round(abs(x), digits) == value for x in pool)


def unbacked(text: str) -> list[str]:
    """The page's figures that neither the studies it links to nor the shared files hold."""
    studies = linked_studies(text)
    return [figure for figure, unit in figures_in(text) if not backed(figure, unit, studies)]


def test_what_counts_as_a_figure():
    text = ("CoDA 76.96 ± 2.01 at 5.2x, 53–86 s, p = 1.6e-06, 95 % CI; 122 questions, 3 seeds, torch 2.13.0, "
            "Python ≥ 3.10, 2026-11-26, arXiv 1606.01933, `study.test=true seed=1.5`, [a](docs/x1.5.md)\n"
            "```bash\nrun --lr 3.5\n```\n<!-- results:b -->\n7.25\n<!-- /results:b -->")  # fmt: skip
    assert figures_in(text) == [("76.96", False), ("2.01", False), ("5.2", True), ("53", True), ("86", True),
                                ("1.6e-06", False)]  # fmt: skip


def test_a_figure_is_backed_at_the_precision_printed_and_a_units_figure_only_by_the_figures_file():
    assert backed("76.96", False) and backed("5.2", True)  # the figures file
    assert backed("83.6", False)  # the CoDA paper's SciTail figure (conf/task/scitail.yaml)
    assert not backed("76.97", False)
    assert unbacked("CoDA reaches 91.37 ± 0.42 at 27.3x the speed") == ["91.37", "0.42", "27.3"]


def _two_studies(monkeypatch):
    import sys

    module = sys.modules[__name__]
    numbers = {"a": frozenset({80.2983, 5.0, 63.09}), "b": frozenset({91.37})}
    monkeypatch.setattr(module, "study_numbers", lambda name: numbers.get(name, frozenset()))
    monkeypatch.setattr(module, "shared_numbers", lambda: (frozenset(), frozenset()))


def test_a_figure_is_backed_by_the_studies_its_page_links_to_only(monkeypatch):
    _two_studies(monkeypatch)
    assert unbacked("CoDA reaches 80.30 ([the study](studies/a/study.md))") == []
    assert unbacked("CoDA reaches 80.30") == ["80.30"]  # a number of study a, which the page does not link
    assert unbacked("CoDA reaches 80.30 ([the study](docs/studies/b/study.md))") == ["80.30"]
    assert unbacked("63.09 at 63.09x, [a](studies/a/)") == ["63.09"]  # a study's accuracy backs no speed-up


def test_a_whole_number_is_backed_by_itself_not_by_a_float_rounded_to_it(monkeypatch):
    _two_studies(monkeypatch)
    assert backed("80.3", False, ("a",)) and backed("5", False, ("a",))
    assert not backed("80", False, ("a",))  # 80.2983 backs 80.3 at the precision printed, not a round 80


def test_every_figure_of_the_readme_is_in_a_data_file():
    found = unbacked((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not found, f"README.md figures in no data file (docs/figures/measured_elsewhere.yaml takes them): {found}"


def test_no_docs_page_types_more_figures_than_it_did():
    docs = ROOT / "docs"
    pages = {
        p.relative_to(docs).as_posix(): p for p in docs.rglob("*.md") if p.relative_to(docs).parts[0] not in UNCOUNTED
    }
    assert set(pages) == set(TYPED), "a page added or gone: give it its count in TYPED"
    counts = {name: len(unbacked(page.read_text(encoding="utf-8"))) for name, page in pages.items()}
    grown = {name: (counts[name], TYPED[name]) for name in counts if counts[name] > TYPED[name]}
    assert not grown, (
        f"figures in no data file (now, pinned): {grown}; put them in docs/figures/measured_elsewhere.yaml"
    )
    fallen = {name: (counts[name], TYPED[name]) for name in counts if counts[name] < TYPED[name]}
    assert not fallen, f"fewer typed figures (now, pinned): {fallen}: lower TYPED to the new counts"


def test_the_frontier_sentence_quotes_each_task_from_its_own_data_file(tmp_path):
    from matching.studies.published.measured_elsewhere import frontier_sentence, wikiqa_frontier_table

    (tmp_path / FIGURES_FILE.name).write_text(FIGURES_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    trecqa = json.loads((FIGURES_FILE.parent / "rerank_frontier_trecqa.json").read_text(encoding="utf-8"))
    (tmp_path / "rerank_frontier_trecqa.json").write_text(json.dumps(trecqa), encoding="utf-8")
    assert "has not run yet" in wikiqa_frontier_table(tmp_path)
    assert "an earlier sitting" in frontier_sentence(tmp_path)  # WikiQA's file not there yet: said to be older

    wikiqa = {**trecqa, "date": "2030-01-02 03:04 UTC", "questions": 122, "pairs": 2733, "results": [
        {**trecqa["results"][0], "model": "cross-encoder", "map": 78.91, "rank": 50.0, "rank_new": 50.0},
        {**trecqa["results"][4], "model": "fine-tuned+index+ort", "map": 79.5, "x_indexed": 12.3, "x_new": 1.1,
         "index_seconds": 33.3, "index_candidates": 2733},
    ]}  # fmt: skip
    (tmp_path / "rerank_frontier_wikiqa.json").write_text(json.dumps(wikiqa), encoding="utf-8")
    said = frontier_sentence(tmp_path)
    assert "an earlier sitting" not in said
    assert "WikiQA dev **12.3x**" in said and "**1.1x** on texts seen once" in said
    assert "33.3 s for 2,733 candidates" in said and "79.50 against 78.91 dev MAP (2030-01-02 03:04 UTC)" in said
    assert "| fine-tuned+index+ort | 1 |" in wikiqa_frontier_table(tmp_path)


def test_the_denormals_table_is_rendered_from_its_sitting_file(tmp_path):
    """docs/results/performance.md's denormals block: each case's training seconds kept and flushed, their ratio, the
    first and last epoch both ways and whether the dev scores agree, from benchmarks/denormals.py's file; without the
    file it says the sitting has not run."""
    from matching.studies.published.measured_elsewhere import denormals_table

    assert "has not run yet" in denormals_table(tmp_path)
    run = {"train_seconds": 132.3, "first_epoch": 10.2, "last_epoch": 21.1}
    data = {"command": "python benchmarks/denormals.py --case frozen", "date": "2030-01-02 03:04 UTC",
            "processor": "a CPU", "cores": 2, "torch": "2.13.0", "results": [
                {"case": "frozen", "what": "CoDA over the frozen MiniLM encoder", "kept": run, "same_scores": True,
                 "flushed": {**run, "train_seconds": 107.8, "last_epoch": 13.4}, "speedup": 1.23},
                {"case": "static", "what": "CoDA over static MiniLM vectors", "kept": run, "flushed": run,
                 "speedup": 1.0, "same_scores": False}]}  # fmt: skip
    (tmp_path / "denormals.json").write_text(json.dumps(data), encoding="utf-8")
    table = denormals_table(tmp_path)
    assert (
        "| CoDA over the frozen MiniLM encoder | 132.3 | 107.8 | 1.23x | 10.2 → 21.1 | 10.2 → 13.4 | the same" in table
    )
    assert table.splitlines()[-1].endswith("| 1.00x | 10.2 → 21.1 | 10.2 → 21.1 | differ |")
    assert "(2030-01-02 03:04 UTC, a CPU, 2 cores, torch 2.13.0;" in table
