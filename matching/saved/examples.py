"""The example inputs the server's page offers: a few dev pairs kept with each run, or a benchmark's curated ones.

At training time a run keeps a few pairs of its first evaluation split in `examples.json` (its run directory; a
shared folder of `export format=hub` copies it): unique, readable (no text over `MAX_CHARS` characters, none
empty), the shortest first, `PER_LABEL` per label taken in turn (a ranking task: `GROUPS` questions, each with a
correct and an incorrect candidate). The page shows them; a benchmark (`task=snli`, `wikiqa`, ...) shows its
curated pairs (page/examples.json) instead, written for the page.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from omegaconf import DictConfig

from matching.data.pairs import Pair
from matching.files import write_json

log = logging.getLogger(__name__)

EXAMPLES = "examples.json"
CURATED = resources.files("matching.serving") / "page" / "examples.json"
PER_LABEL = 2  # classification: pairs per label
MAX_PAIRS = 8  # classification: pairs in all
GROUPS = 3  # ranking: questions
MAX_CANDIDATES = 5  # ranking: candidates per question
MAX_CHARS = 160  # the longest text an example may have


def _readable(text: str) -> bool:
    return bool(text.strip()) and len(text) <= MAX_CHARS and text.isprintable()


def choose_pairs(pairs: Sequence[Pair], labels: Sequence[str]) -> list[list[str]]:
    """`[a, b, label]` for up to PER_LABEL readable pairs of each label, shortest first, labels in turn; no two with
    the same a and b, nor the same b (two pairs that differ by a only look alike on the page)."""
    by_label: dict[str, list[Pair]] = defaultdict(list)
    for pair in sorted(pairs, key=lambda p: (len(p.a) + len(p.b), p.a, p.b)):
        if _readable(pair.a) and _readable(pair.b):
            by_label[pair.label].append(pair)
    chosen, seen = [], set()
    for _ in range(PER_LABEL):
        for label in labels:
            for pair in by_label.get(label, []):
                if (pair.a, pair.b) not in seen and pair.b not in {b for _, b in seen}:
                    seen.add((pair.a, pair.b))
                    chosen.append([pair.a, pair.b, label])
                    by_label[label].remove(pair)
                    break
    return chosen[:MAX_PAIRS]


def choose_groups(pairs: Sequence[Pair], match: str) -> list[dict]:
    """`{query, candidates, labels}` for up to GROUPS questions with a correct (`match`) and an incorrect readable
    candidate, the shortest questions first; at most MAX_CANDIDATES candidates each, the correct ones kept."""
    groups: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        groups[pair.group if pair.group is not None else pair.a].append(pair)
    chosen = []
    for members in sorted(groups.values(), key=lambda m: (len(m[0].a), m[0].a)):
        unique = list({p.b: p for p in members if _readable(p.b)}.values())
        right = [p for p in unique if p.label == match]
        wrong = [p for p in unique if p.label != match]
        if not _readable(members[0].a) or not right or not wrong:
            continue
        keep = sorted(right[:2] + wrong[: MAX_CANDIDATES - len(right[:2])], key=lambda p: len(p.b))
        chosen.append({"query": members[0].a, "candidates": [p.b for p in keep],
                       "labels": [p.label for p in keep]})  # fmt: skip
        if len(chosen) == GROUPS:
            break
    return chosen


def write_run_examples(run_dir: Path, pairs: Sequence[Pair], kind: str, labels: Sequence[str], split: str) -> list:
    """Choose the run's examples from `pairs` (of `split`) and keep them in `run_dir/examples.json`."""
    chosen = choose_groups(pairs, labels[1]) if kind == "rank" else choose_pairs(pairs, labels)
    write_json(run_dir / EXAMPLES, {"split": split, "kind": kind, "examples": chosen})
    log.info("kept %d %s examples of the %s split for the server's page (%s)", len(chosen),
             "questions" if kind == "rank" else "pairs", split, run_dir / EXAMPLES)  # fmt: skip
    return chosen


def run_examples(folder: Path) -> list | None:
    """The examples kept with a run (or in a shared folder); None when it has none."""
    file = folder / EXAMPLES
    try:
        return json.loads(file.read_text(encoding="utf-8"))["examples"] if file.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("ignoring unreadable %s", file)
        return None


def curated(task: str) -> list | None:
    """A benchmark's examples written for the page (page/examples.json), None for another task."""
    return json.loads(CURATED.read_text(encoding="utf-8")).get(task)


def page_examples(cfg: DictConfig | None, folder: Path, task: str, kind: str) -> tuple[list, str]:
    """What the page offers for a run, and where it comes from (the page says): its benchmark's curated examples
    (by the config option it was trained with, not the name a generic task takes from its file), else the run's
    own dev pairs, else those written for a task of the same kind."""
    option = ((cfg.get("choices") or {}) if cfg is not None else {}).get("task") or task
    if (chosen := curated(option)) is not None:
        return chosen, f"written for {option}"
    if (own := run_examples(folder)) is not None:
        return own, "the run's dev data"
    other = "wikiqa" if kind == "rank" else "snli"
    return curated(other) or [], f"written for {other} (this run kept none of its own)"
