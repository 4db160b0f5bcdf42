"""The published study pages' verdicts again, seed-aware, from what each page recorded (docs/concepts/comparing.md).

    python benchmarks/published_verdicts.py docs/studies [--write]

The run folders behind the pages in docs/studies/ were not kept, so the method-level test is rebuilt from each
page's study.csv: every family's per-seed values (the seeds' spread) and the recorded 95 % interval of the test over
units alone (the units' spread: its half-width / 1.96 is the units' standard error of Δ). Then

    V = s²_A / R_A + s²_B / R_B + se_units²,

Student's t on Satterthwaite's degrees of freedom (the units' part counted with 60, fewer than any page's units),
and Holm over the page's comparisons of one metric and split, as `matching.results.significance` does. Without the
per-unit tables the interaction term is not subtracted, so V is a little larger than the runs would give: these
verdicts err towards "not resolved". Prints, per page, every comparison before → after; `--write` also puts the
table into each page (a section "Seed-aware verdicts", replaced when run again).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from matching.results.significance import ALPHA, holm

UNIT_DF = 60
MARK = "## Seed-aware verdicts"


def _values(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip() not in ("", "–")]


def page_verdicts(csv_path: Path) -> list[dict]:
    from scipy import stats

    rows = list(csv.DictReader(csv_path.open(encoding="utf-8")))
    baselines = sorted({k[: -len("_verdict")] for k in rows[0] if k.endswith("_verdict")}) if rows else []
    found = []
    for row in rows:
        for b in baselines:
            verdict, ci = row.get(f"{b}_verdict") or "", row.get(f"{b}_ci") or ""
            if not verdict or not ci:
                continue
            base = next(r for r in rows if r["family"] == b and (r["task"], r["split"], r["metric"]) ==
                        (row["task"], row["split"], row["metric"]))  # fmt: skip
            a, c = _values(row["per_seed"]), _values(base["per_seed"])
            low, high = (float(x) for x in ci.split())
            diff = float(row[f"{b}_diff"])
            units = ((high - low) / (2 * 1.959964)) ** 2
            if len(a) < 2 or len(c) < 2:
                p, df, variance = math.nan, math.nan, math.nan
            else:
                sa, sc = statistics.variance(a) / len(a), statistics.variance(c) / len(c)
                variance = sa + sc + units
                df = variance**2 / (sa**2 / (len(a) - 1) + sc**2 / (len(c) - 1) + units**2 / UNIT_DF)
                p = float(2 * stats.t.sf(abs(diff) / math.sqrt(variance), df)) if variance > 0 else 1.0
            half = float(stats.t.ppf(0.975, df) * math.sqrt(variance)) if not math.isnan(variance) else math.nan
            found.append({"task": row["task"], "family": row["label"], "baseline": base["label"],
                          "split": row["split"], "metric": row["metric"], "diff": diff, "before": verdict,
                          "before_p": row[f"{b}_p"], "low": diff - half, "high": diff + half, "p": p,
                          "seeds": f"{len(a)} vs {len(c)}"})  # fmt: skip
    for split_metric in {(f["split"], f["metric"]) for f in found}:
        pairs: dict[tuple, list[dict]] = {}  # A against B and B against A: one comparison
        for f in found:
            if (f["split"], f["metric"]) == split_metric and not math.isnan(f["p"]):
                pairs.setdefault((f["task"], frozenset((f["family"], f["baseline"]))), []).append(f)
        members = list(pairs.values())
        for same, adjusted in zip(members, holm([m[0]["p"] for m in members]), strict=True):
            for f in same:
                f["p_holm"], f["m"] = adjusted, len(members)
                f["after"] = "resolved" if adjusted < ALPHA else "not resolved"
    return found


def table(found: list[dict]) -> list[str]:
    lines = ["| task | comparison | split, metric | Δ | before: units alone | after: seeds and units [95 % CI] | "
             "p (Holm) | changed |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for f in found:
        before = f"{f['before'].replace(' at this size', '')}, p = {f['before_p']}"
        after = f"{f.get('after', 'too few seeds')} [{f['low']:+.2f}, {f['high']:+.2f}]"
        changed = "**yes**" if f["before"].startswith("resolved") != (f.get("after") == "resolved") else ""
        lines.append(f"| {f['task']} | {f['family']} − {f['baseline']} | {f['split']} {f['metric']} | "
                     f"{f['diff']:+.2f} | {before} | {after} | {f.get('p_holm', math.nan):.3g} (m = {f.get('m', 0)}) "
                     f"| {changed} |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", type=Path, help="docs/studies: a folder of study pages (study.csv, study.md)")
    parser.add_argument("--write", action="store_true", help="also put each page's table into its study.md")
    args = parser.parse_args()
    total = changed = 0
    for csv_path in sorted(args.pages.glob("*/study.csv")):
        if "_p_holm" in csv_path.read_text(encoding="utf-8").splitlines()[0]:
            continue  # a page written with the seed-aware test already
        found = page_verdicts(csv_path)
        lines = table(found)
        flips = sum(f["before"].startswith("resolved") != (f.get("after") == "resolved") for f in found)
        total, changed = total + len(found), changed + flips
        print(f"\n### {csv_path.parent.name}: {flips} of {len(found)} verdicts changed\n")
        print("\n".join(lines))
        if args.write:
            page = csv_path.parent / "study.md"
            text = page.read_text(encoding="utf-8")
            text = text.split(f"\n{MARK}")[0].rstrip() + "\n"
            text += (
                f"\n{MARK}\n\nThis page's verdicts came from the test over units alone (each unit's score "
                "averaged over the seeds), which says nothing about the methods. Recomputed with the seed-aware "
                "test from this page's own per-seed values and units intervals (`python "
                "benchmarks/published_verdicts.py docs/studies`; the run folders were not kept, so the "
                "interaction term is not subtracted and these verdicts err towards 'not resolved'; "
                f"docs/concepts/comparing.md). {flips} of {len(found)} verdicts changed.\n\n" + "\n".join(lines) + "\n"
            )
            if "aligner=coda" in csv_path.read_text(encoding="utf-8"):
                text += (
                    "\nThe CoDA rows of this page were trained before CoDA scored its tokens relative to the pair's "
                    "mean (`aligner.center_tokens`, the default since 2026-11-26, which removes an offset the "
                    "projection's bias put into E: docs/concepts/aligners.md); `aligner.center_tokens=false` in the "
                    "command reproduces them.\n"
                )
            page.write_text(text, encoding="utf-8")
    print(f"\n{changed} of {total} published verdicts changed")


if __name__ == "__main__":
    main()
