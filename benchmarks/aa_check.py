"""The A/A check on real runs: several seeds of ONE configuration, split into two groups every way, each split
compared as if the groups were two methods. A calibrated verdict calls about 5 % of the splits "resolved".

    python benchmarks/aa_check.py <sweep folder with the runs> [--metric acc] [--prefix val] [--sizes 3 4]

Reads each run's per-unit scores (`scores/<prefix>.csv`), and for every split of the seeds into two disjoint groups
of the given sizes (3 vs 3 and 4 vs 4 by default; each unordered split once) prints the share called "resolved" at
α = 0.05 by the method-level test (the verdicts, seeds and units counted), by the test over units alone (the
framework's verdict before: a paired randomization test on the seed-averaged scores) and by Welch's t over the seeds'
metrics; and `matching-report`'s first split, seeds 1..k against the next k, with both tests.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

from matching.results.discovery import find_runs
from matching.results.significance import method_test, paired_test, seed_mean
from matching.training.scores import unit_scores


def splits(seeds: list[int], size: int):
    """Every unordered pair of disjoint groups of `size` seeds."""
    seen = set()
    for first in itertools.combinations(seeds, size):
        rest = [s for s in seeds if s not in first]
        for second in itertools.combinations(rest, size):
            key = frozenset((first, second))
            if key not in seen:
                seen.add(key)
                yield first, second


def welch_p(a: list[float], b: list[float]) -> float:
    from scipy import stats

    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--metric", default="acc")
    parser.add_argument("--prefix", default="val")
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 4])
    args = parser.parse_args()
    runs = [r for r in find_runs([args.runs]) if not r.missing]
    scores = {r.seed: unit_scores(r.path, args.prefix, args.metric) for r in runs}
    scores = {seed: s for seed, s in sorted(scores.items()) if s}
    seeds = list(scores)
    metric = {seed: 100 * statistics.fmean(s.values()) for seed, s in scores.items()}
    shown = ", ".join(f"{metric[s]:.2f}" for s in seeds)
    print(f"{args.runs}: {len(seeds)} seeds of one configuration, {args.prefix} {args.metric} per seed: {shown} "
          f"(std {statistics.stdev(metric.values()):.2f})")  # fmt: skip
    print("\n| split | splits | method test (the verdict) | units alone (the old verdict) | seeds alone (Welch) |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        if 2 * size > len(seeds):
            continue
        counted = {"method": 0, "units": 0, "welch": 0}
        total = 0
        for first, second in splits(seeds, size):
            a, b = [scores[s] for s in first], [scores[s] for s in second]
            counted["method"] += method_test(a, b).verdict() == "resolved"
            counted["units"] += paired_test(seed_mean(a), seed_mean(b)).p_value < 0.05
            counted["welch"] += welch_p([metric[s] for s in first], [metric[s] for s in second]) < 0.05
            total += 1
        print(f"| {size} vs {size} | {total} | " + " | ".join(f"{100 * counted[k] / total:.0f} %" for k in counted)
              + " |")  # fmt: skip
    half = len(seeds) // 2
    first, second = seeds[:half], seeds[half : 2 * half]
    a, b = [scores[s] for s in first], [scores[s] for s in second]
    m, u = method_test(a, b), paired_test(seed_mean(a), seed_mean(b))
    print(f"\nseeds {first} against {second}: Δ {100 * m.difference:+.2f}; method test [{100 * m.low:+.2f}, "
          f"{100 * m.high:+.2f}], p = {m.p_value:.3g}, {m.verdict()}; units alone [{100 * u.low:+.2f}, "
          f"{100 * u.high:+.2f}], p = {u.p_value:.3g}")  # fmt: skip


if __name__ == "__main__":
    main()
