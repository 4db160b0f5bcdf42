"""A study's report: the runs below the folders given, their table (Markdown, CSV) with a baseline's comparison and
disagreements, and the chart, written beside them and printed (what `matching-report` does)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from matching.errors import ConfigError, MissingFileError
from matching.extras import MissingExtraError
from matching.files import write_text_atomic
from matching.results.charts import write_chart, write_ranking
from matching.results.discovery import Run, find_runs, wiring_reason
from matching.results.rows import Row
from matching.results.tables import (
    adjust_for_many,
    compare,
    disagreements,
    metric_key,
    summarise,
    to_csv,
    to_markdown,
)

log = logging.getLogger(__name__)


def report(
    paths: list[Path],
    out: Path | None = None,
    baseline: str | None = None,
    top: int = 10,
    metrics: list[str] | None = None,
) -> list[Row]:
    """Reports the runs below `paths` (run or sweep folders): report.md, report.csv and report.png in `out` (by
    default the first folder), with a `baseline` (an aligner, optionally with a variant) each row's comparison with
    it, the rows ranked by that difference (ranking.png) and the `top` questions on which they disagree most
    (disagreements.md); prints the table. `metrics`: the logged names to show (e.g. ["f1", "ap"]) instead of each
    task's `report_metrics`. Returns its rows."""
    wiring: list[Run] = []
    superseded: list[Run] = []
    runs = find_runs(paths, wiring, superseded)
    if not runs:
        raise MissingFileError(
            f"only wiring or debug runs under {', '.join(map(str, paths))} ({len(wiring)}: "
            f"{wiring_reason(wiring[0].config or {})}, ...); they are not results. Train without debug= to report"
        )
    if metrics:
        check_metrics_logged(metrics, runs)
        runs = [replace(r, report_metrics=tuple(metrics)) for r in runs]
    rows = summarise(runs)
    for r in rows:
        if r.missing:
            log.warning(
                "%s/%s%s %s %s: %d of %d seeds; missing %s. Relaunch the sweep's command (same hydra.sweep.dir) "
                "to finish it: finished runs are skipped", r.task, r.aligner, f" {r.variant}" if r.variant else "",
                r.split, r.metric, r.n, r.planned, r.missing_text(),
            )  # fmt: skip
    if baseline:
        aligner = baseline.split()[0]
        if not any(r.aligner == aligner for r in rows):
            raise ConfigError(
                f"baseline={baseline!r}: no run has the aligner {aligner!r}; the runs have "
                f"{sorted({r.aligner for r in rows})}"
            )
        (rows,) = adjust_for_many([compare(rows, runs, baseline)])
    out = out or (paths[0] if paths[0].is_dir() else paths[0].parent)
    markdown = to_markdown(rows)
    write_text_atomic(out / "report.md", markdown)
    written = [out / "report.md", write_text_atomic(out / "report.csv", to_csv(rows))]
    if baseline:
        written.append(write_text_atomic(out / "disagreements.md", disagreements(rows, runs, top)))
    if any(r.n for r in rows):
        try:
            write_chart(rows, out / "report.png")
            written.append(out / "report.png")
            if write_ranking(rows, out / "ranking.png"):
                written.append(out / "ranking.png")
        except MissingExtraError as err:  # the tables are written; only the chart needs matplotlib
            log.warning("no chart: %s", err)
    print(markdown)
    finished = sum(not r.missing for r in runs)
    counted = f"{finished} run{'s' if finished != 1 else ''}"
    if finished < len(runs):
        counted += f" ({len(runs) - finished} missing)"
    if superseded:
        counted += (
            f"; {len(superseded)} unfinished job{'s' if len(superseded) != 1 else ''} of a sweep run again "
            "elsewhere (the same settings and seed), counted once"
        )
        for r in superseded:
            log.info("%s seed %d (%s in %s): run again elsewhere", r.aligner, r.seed, r.missing, r.path)
    if wiring:
        reasons = sorted({wiring_reason(r.config or {}) for r in wiring})
        counted += f"; left out {len(wiring)} wiring/debug run{'s' if len(wiring) != 1 else ''} ({', '.join(reasons)})"
        for r in wiring:
            log.info("left out (a wiring or debug run, not a result): %s", r.path)
    print(f"{counted}; wrote {', '.join(map(str, written))}")
    return rows


def check_metrics_logged(metrics: list[str], runs: list[Run]) -> None:
    """A ConfigError naming the metrics (`report metrics=`) that no finished run logged, and those they did."""
    logged = {key for r in runs for key in r.metrics if "/" in key}
    unknown = [m for m in metrics if not any(metric_key(split, m) in logged for split in ("val", "test"))]
    if unknown:
        names = sorted({key.split("/", 1)[1] for key in logged if key.startswith(("val/", "test/"))})
        raise ConfigError(
            f"metrics={unknown}: no run's metrics.json has {'it' if len(unknown) == 1 else 'them'}; the runs logged "
            f"{', '.join(names) or 'nothing'} (a dev split other than the first as <split>/<name>, e.g. "
            "mismatched/acc)"
        )
