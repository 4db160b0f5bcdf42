"""Every figure of the README and the site is bound to the record that made it, not found somewhere.

A figure (`figures_in`: a number with a decimal point, or with a unit: %, x, s, ms, minutes, ...) appears only
- in a rendered block (`<!-- results:... -->`: written by `make results-render` from a study's files or the figures
  file; tests/test_docs.py compares each block with what its renderer writes), or
- as a quote, `<!--q SOURCE|FORMAT-->TEXT<!--/q-->` (matching.results.quotes): TEXT is what the record gives, so a
  value, sign or unit typed over it fails here, and so does an interval that does not contain its estimate or a quote
  of a retired sitting.
A figure typed anywhere else fails, naming the page and the figure. The lab-note archive (docs/archive/: dated
records, marked as such, never quoted as results) and the study pages (written by the study command from their
runs) are not read. Figures measured outside this repository's runs (held-out tests quoted from issues, benchmark
sittings) are typed in one file only, docs/figures/measured_elsewhere.yaml, each with its source and date.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from matching.errors import ConfigError
from matching.results.quotes import QUOTE, printed, quoting_pages, record, render

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "docs" / "archive"

#: Figures a page may carry unquoted, each with its reason. Short on purpose.
EXCEPTIONS = {
    "95 %": "the confidence level of every interval, a choice, not a measurement",
    "80 %": "the power at which a detectable difference is stated, a choice",
    "0.05": "the significance level α, a choice",
}
_REMOVED = [
    re.compile(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", re.S),  # rendered, checked by test_docs
    QUOTE,  # quoted, checked here
    re.compile(r"^ *```.*?^ *```", re.S | re.M),  # code blocks: commands and their options
    re.compile(r"<!--.*?-->", re.S),  # comments
    re.compile(r"`[^`\n]*`"),  # inline code: commands and keys
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b"),  # dates, clock times
    re.compile(r"(?i)(?:torch|python|cuda|cu|version|v|scitail|onnxruntime|≥|>=)\s?\d+(?:\.\d+)+|\b\d+\.\d+\.\d+\S*"),
    re.compile(r"\b\d{4}\.\d{4,5}\b"),  # arXiv ids
    re.compile(r"\beq\. ?\d+(?:\.\d+)?|\bTable \d+(?:\.\d+)?|§ ?\d+(?:\.\d+)*", re.I),  # the papers' numbering
]
#: A unit makes a whole number a figure (a measurement or a claim, not a count); a word may stand between a number and
#: a unit of time or of score ("646 training minutes", "5 MAP points").
_UNIT = r"%|x\b|s\b|ms\b|µs\b|min\b|MB\b|GB\b|pairs/s\b|(?:[a-zA-Z]+\s)?(?:minutes|hours?|points?)\b"
_NUMBER = re.compile(
    rf"(?<![\w.\-])([-+−]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:e[-+−]?\d+)?)((?:–[-+−]?[\d.,]*\d)?\s?(?:{_UNIT}))?"
)


#: A fenced code block: its commands' options are settings, its comments are prose (a duration typed in a comment is
#: a figure like any other), an example answer in a comment (JSON) is a shape, not a measurement.
_FENCED = re.compile(r"^ *```\w*\n(.*?)^ *```", re.S | re.M)


def _comments(block: re.Match) -> str:
    said = re.findall(r"(?:^|\s)#\s?(.*)$", block.group(1), re.M)
    return (
        "\n" + "\n".join(line for line in said if '": ' not in line and not line.lstrip().startswith(("{", "["))) + "\n"
    )


def figures_in(text: str) -> list[str]:
    """The figures of a page's text outside its rendered blocks and quotes, code blocks' comments included: numbers
    with a decimal point, an exponent or a unit. Whole numbers without a unit are counts (122 questions, 3 seeds)."""
    text = _FENCED.sub(_comments, text)
    for name in EXCEPTIONS:
        text = text.replace(name, " ")
    for pattern in _REMOVED:
        text = pattern.sub(" ", text)
    return [m.group(0).strip() for m in _NUMBER.finditer(text)
            if "." in m.group(1) or "e" in m.group(1) or m.group(2)]  # fmt: skip


PAGES = [p for p in quoting_pages(ROOT) if ARCHIVE not in p.parents]


def test_what_counts_as_a_figure():
    text = ("CoDA 76.96 ± 2.01 at 5.2x, 53–86 s, p = 1.6e-06, 95 % CI; 122 questions, 3 seeds, torch 2.13.0, "
            "Python ≥ 3.10, 2026-11-26, arXiv 1606.01933, eq. 7, `seed=1.5`, [a](docs/x1.5.md), 39 MB\n"
            "```bash\nrun --lr 3.5\n```\n<!-- results:b -->\n7.25\n<!-- /results:b -->\n"
            "<!--q figures:demo.install_seconds|.0f s-->101 s<!--/q-->")  # fmt: skip
    assert figures_in(text) == ["76.96", "2.01", "5.2x", "53–86 s", "1.6e-06", "39 MB"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_types_a_figure(page):
    found = figures_in(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{page.relative_to(ROOT)}: figures typed by hand: {found}. Quote each from its record "
        "(<!--q SOURCE|FORMAT-->TEXT<!--/q-->, matching/results/quotes.py; a figure measured elsewhere goes into "
        "docs/figures/measured_elsewhere.yaml first), render it into a block, or move the sentence to the lab-note "
        "archive (docs/archive/)"
    )


@pytest.mark.parametrize("page", quoting_pages(ROOT), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_quote_prints_its_record(page):
    text = page.read_text(encoding="utf-8")
    name = page.relative_to(ROOT).as_posix()
    expected = render(text, ROOT, name, archive=ARCHIVE in page.parents)
    wrong = [(a.group(0), b.group("text")) for a, b in zip(QUOTE.finditer(text), QUOTE.finditer(expected), strict=True)
             if a.group("text") != b.group("text")]  # fmt: skip
    assert not wrong, f"{name}: quotes that differ from their records (as typed, as recorded): {wrong}"


# ---------------------------------------------------------------------------------------------------------------
# The mechanism, on records made here


@pytest.fixture
def clone(tmp_path):
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "docs" / "figures" / "measured_elsewhere.yaml").write_text(
        "sitting:\n  date: 2030-01-01\n  seconds: 94.4\n  gain: [4.5, 2.25, 6.75]\n  spread: [81.2, 0.43]\n"
        "  odd: [4.5, 5.0, 6.75]\n  repeats: [74, 68, 59, 60, 64]\n"
        "old:\n  retired: the CrossEncoder trained 2 epochs, short of its best\n  ratio: 14.3\n"
    )
    study = tmp_path / "docs" / "studies" / "s"
    study.mkdir(parents=True)
    (study / "study.csv").write_text(
        "task,family,split,metric,mean,std,n,base_diff,base_ci\n"
        "wikiqa,coda,dev,map,77.17,0.43,9,2.52,-1.18 6.23\n"
        "wikiqa,coda,test,map,70.0,1.0,3,,\n"
    )
    return tmp_path


def test_a_quote_prints_value_sign_and_unit_from_its_record(clone):
    text = ("<!--q figures:sitting.seconds|.0f s-->1 s<!--/q--> <!--q figures:sitting.gain|interval:+.2f-->x<!--/q--> "
            "<!--q figures:sitting.spread|meanstd:.2f-->x<!--/q--> <!--q study:s/wikiqa/coda/mean-->x<!--/q--> "
            "<!--q study:s/wikiqa/coda/base_interval|interval:+.2f-->x<!--/q--> "
            "<!--q figures:sitting.repeats|median:.0f %-->x<!--/q-->")  # fmt: skip
    texts = [m.group("text") for m in QUOTE.finditer(render(text, clone))]
    assert texts == ["94 s", "+4.50 [+2.25, +6.75]", "81.20 ± 0.43", "77.17", "+2.52 [-1.18, +6.23]", "64 (59–74) %"]
    assert record(ROOT, "paper:scitail.coda.acc") == (83.6, None)  # the CoDA paper's Table 3, as conf/task keeps it


@pytest.mark.parametrize(
    "typed",
    ["−4.50 [−6.75, −2.25]", "-4.50 [-6.75, -2.25]", "+4.50 [+2.25, +6.76]", "+4.5 [+2.25, +6.75]", "+4.50"],
)
def test_a_figure_typed_over_its_quote_is_caught(clone, typed):
    text = f"<!--q figures:sitting.gain|interval:+.2f-->{typed}<!--/q-->"
    assert render(text, clone) != text


def test_a_unit_typed_over_its_quote_is_caught(clone):
    text = "<!--q figures:sitting.seconds|.0f s-->94 ms<!--/q-->"
    assert render(text, clone) != text


def test_an_interval_without_its_estimate_is_refused(clone):
    with pytest.raises(ConfigError, match="does not contain its estimate"):
        render("<!--q figures:sitting.odd|interval:+.2f-->x<!--/q-->", clone)


def test_a_retired_sitting_backs_no_current_sentence(clone):
    with pytest.raises(ConfigError, match="retired sitting .*trained 2 epochs"):
        render("<!--q figures:old.ratio|.1fx-->14.3x<!--/q-->", clone, "docs/results/performance.md")
    assert "14.3x" in render("<!--q figures:old.ratio|.1fx-->14.3x<!--/q-->", clone, archive=True)


def test_a_quote_of_no_record_is_refused(clone):
    for source in ("figures:sitting.minutes", "study:s/trecqa/coda/mean", "study:s/wikiqa/coda/nope", "cli:x"):
        with pytest.raises(ConfigError):
            record(clone, source)


def test_a_figure_without_a_quote_is_found_where_it_hides():
    """The kinds of plant a reviewer makes in prose and in a docs results table: each is a typed figure."""
    assert figures_in("softpick reaches CoDA (+0.49, p = 0.83) over the encoder") == ["+0.49", "0.83"]
    assert figures_in("| SciTail dev acc | 89.37 ± 0.38 | resolved |") == ["89.37", "0.38"]
    assert figures_in("the speed-up is 11.0x on one thread, 14.6 s to build") == ["11.0x", "14.6 s"]
    assert figures_in("a whole-number claim of 42 minutes") == ["42 minutes"]
    assert figures_in("ahead by 5 points, 646 training minutes, 3 seeds, 1,304 pairs") == [
        "5 points",
        "646 training minutes",
    ]
    assert figures_in("```bash\nmake test    # about 8 minutes on 2 cores\nrun --lr 3.5\n```\n") == ["8 minutes"]
    assert figures_in('```bash\ncurl x\n# {"label": "a", "probs": {"a": 0.91}}\n```\n') == []
    assert printed(0.000123, ".2g", "x") == "0.00012"
