"""Facts that go stale with time are tied to their source: a page cannot say what its source no longer says.

The seeds the demo runs with (conf/demo.yaml) against the seeds its page and its timing record state; a study
called "running" or "training" by a hand-written page (a study's own page says where it stands, from its runs);
the test suite's duration against its record (docs/figures/measured_elsewhere.yaml). The lab-note archive is dated
records and is not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from matching.results.quotes import quoting_pages

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FIGURES = yaml.safe_load((DOCS / "figures" / "measured_elsewhere.yaml").read_text())
#: The current pages: those whose figures are quoted (the README and the site, less the study pages, written from
#: their runs), less the lab-note archive (dated records).
PAGES = [p for p in quoting_pages(ROOT) if DOCS / "archive" not in p.parents]
RENDERED = re.compile(r"<!-- results:([\w-]+) -->.*?<!-- /results:\1 -->", re.S)
FENCE = re.compile(r"^ *```.*?^ *```", re.S | re.M)
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def prose(page: Path) -> str:
    """A page's text without its code blocks (examples) and rendered blocks (checked against their data by
    tests/test_docs.py)."""
    return FENCE.sub("", RENDERED.sub("", page.read_text(encoding="utf-8")))


def demo_seeds() -> int:
    return len(yaml.safe_load((ROOT / "conf" / "demo.yaml").read_text())["seeds"])


def test_the_demo_timing_was_measured_with_the_demos_seeds():
    assert FIGURES["demo"]["seeds"] == demo_seeds(), (
        "conf/demo.yaml's seeds changed since the demo's timing (docs/figures/measured_elsewhere.yaml, demo): "
        "measure `make demo` again and record it with its seeds"
    )


def test_the_demo_page_says_the_demos_seeds():
    text = prose(DOCS / "getting-started" / "demo.md")
    said = re.findall(r"\b(two|three|four|five|six|seven|eight|nine|ten|\d+) seeds (?:each|a side)\b", text)
    assert said, "the demo page no longer says how many seeds each aligner trains"
    counts = {int(s) if s.isdigit() else {w: n for n, w in WORDS.items()}[s] for s in said}
    assert counts == {demo_seeds()}, f"the demo page says {sorted(counts)} seeds, conf/demo.yaml runs {demo_seeds()}"


#: A study said to be under way: only its own page (written from its runs) can say so and stay true.
UNDER_WAY = re.compile(
    r"\b(?:stud(?:y|ies)|looks?|runs?|seeds?)\b[^.\n]{0,80}?\b(?:is|are|still|now) (?:running|training|in progress)\b"
    r"|\b(?:running|training) (?:now|at the moment|as of)\b|\(running\)|\(training\)",
    re.I,
)


def test_the_under_way_pattern_finds_what_it_is_for():
    assert UNDER_WAY.search("The third look (7 seeds, 18 runs) is training.")
    assert UNDER_WAY.search("the study is still running")
    assert not UNDER_WAY.search("a run folder without metrics.json (failed or still running) is run again")


def newest_suite_minutes(record: dict) -> tuple[str, float]:
    """(date, minutes) of the test suite's newest sitting in its record: each sitting gives minutes, or seconds of
    several runs (their median)."""
    import statistics

    sittings = []
    for node in (record, *(v for v in record.values() if isinstance(v, dict))):
        date = str(node.get("date", ""))[:10]
        if "minutes" in node and date[:1].isdigit():
            sittings.append((date, float(node["minutes"])))
        elif isinstance(node.get("after"), dict) and date[:1].isdigit():
            seconds = node["after"].get("seconds")
            seconds = statistics.median(seconds) if isinstance(seconds, list) else seconds
            sittings.append((date, float(seconds) / 60))
    return max(sittings)


def test_the_newest_sitting_of_the_suite_is_found():
    record = {"date": "2026-11-27", "minutes": 6.5, "now": {"date": "2026-11-28", "minutes": 9},
              "later": {"date": "2026-12-01", "after": {"seconds": [486, 438, 492]}}}  # fmt: skip
    assert newest_suite_minutes(record) == ("2026-12-01", 8.1)


def test_a_stated_duration_of_the_test_suite_is_its_records():
    """`make test` said to take about N minutes: N is the suite's newest sitting, to the minute."""
    date, newest = newest_suite_minutes(FIGURES["test_suite"])
    for page in PAGES:
        for sentence in re.split(r"(?<=[.;\n])\s", prose(page)):
            if "make test" in sentence and (m := re.search(r"(\d+(?:\.\d+)?) minutes", sentence)):
                assert abs(float(m.group(1)) - newest) < 1, (
                    f"{page.name}: {sentence.strip()} (the newest sitting, {date}: {newest:.1f} minutes)"
                )


#: A comparison with the CrossEncoder trained 2 epochs (short of its dev-best epoch), retired by the selected study:
#: a current sentence, typed or rendered, that sets ours against it is stale.
RETIRED_BASELINE = re.compile(
    r"(?:CrossEncoder|cross-encoder)[^.\n]{0,40}?\b(?:trained|fine-tuned) (?:2|two) epochs|\b2-epoch CrossEncoder"
    r"|train it 2 epochs|passes the CrossEncoder's quality",
    re.I,
)


#: Sentences that go stale, each with what to do instead; the rendered blocks are read too (a stale sentence can be a
#: renderer's).
STALE = {
    "a study called under way": (UNDER_WAY, "say it on the study's page (written from its runs), or say it is done"),
    "the retired 2-epoch CrossEncoder": (
        RETIRED_BASELINE, "compare with the CrossEncoder at its dev-best epoch, or move it to the archive"),
}  # fmt: skip


@pytest.mark.parametrize("stale", STALE)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_current_page_says_what_went_stale(page, stale):
    pattern, instead = STALE[stale]
    found = [m.group(0) for m in pattern.finditer(FENCE.sub("", page.read_text(encoding="utf-8")))]
    assert not found, f"{page.name}: {found}: {instead}"


def test_the_retired_baseline_pattern_finds_what_it_is_for():
    assert RETIRED_BASELINE.search("a tie, where the dev figures above train it 2 epochs")
    assert RETIRED_BASELINE.search("against a MiniLM CrossEncoder fine-tuned 2 epochs (seed 1)")
    assert not RETIRED_BASELINE.search("the CrossEncoder kept at its dev-best epoch (6)")
