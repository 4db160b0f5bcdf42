"""The rows of a study's report: one `Row` per task × aligner × variant × split × metric, and with a baseline its
`Comparison`. A value that is not there is None (no variant, no paper number, not compared); a statistic of too
few values to define it is NaN (the mean of no seed, the detectable difference over one unit)."""

from __future__ import annotations

from dataclasses import dataclass

#: The note of the baseline's own rows.
BASELINE = "baseline"


@dataclass(frozen=True)
class Comparison:
    """A row against its baseline's row: the paired test of `matching.results.significance` over the units
    (questions or examples) both were scored on, each unit's score averaged over its seeds, in points and rounded
    as the table shows them. A row that was not tested has only a `note`: why, or that it is the baseline."""

    baseline: str | None = None  # the label (aligner and variant) of the row compared with
    diff: float | None = None  # the mean difference
    ci_low: float | None = None  # its 95 % interval (paired bootstrap)
    ci_high: float | None = None
    p_value: float | None = None  # two-sided paired randomization test, three significant digits
    units: int | None = None  # the questions (or examples) both rows were scored on
    detectable: float | None = None  # the difference found with 80 % power (NaN with fewer than two units)
    verdict: str | None = None  # "resolved" or "not resolved at this size"
    note: str | None = None  # "baseline", why there is no test, or that only some seeds had scores

    @property
    def tested(self) -> bool:
        return self.diff is not None

    @property
    def is_baseline(self) -> bool:
        return self.note == BASELINE


@dataclass(frozen=True)
class Row:
    """One line of the report: a metric on a split, over the seeds of one task × aligner × variant."""

    task: str
    aligner: str
    variant: str | None  # the settings that set the row apart (`F=none aligner.gate=center`); None: no variant
    split: str  # "dev" or "test"
    metric: str  # as the task's report_metrics name it (`map`, `raw/map_raw`, `acc`)
    mean: float  # over the seeds that have the metric, in %, two decimals; NaN when none has it
    std: float  # their sample standard deviation (0 for one seed)
    n: int  # the runs averaged
    seeds: tuple[int, ...]  # their seeds
    paper_test: float | None  # the paper's test number for the aligner (its default settings only)
    planned: int  # the seeds of the row, finished or not
    missing: dict[int, str]  # each planned seed without the metric, and why
    comparison: Comparison | None = None  # with a baseline, this row against it

    @property
    def label(self) -> str:
        """The aligner and its variant, as the rows name each other (`softmax F=parikh`)."""
        return " ".join(filter(None, [self.aligner, self.variant]))

    @property
    def tested(self) -> bool:
        """Whether the row has a paired test against its baseline."""
        return self.comparison is not None and self.comparison.tested

    def missing_text(self) -> str:
        """`seed 2 (not started); seed 3 (...)`, "" when no seed is missing."""
        return "; ".join(f"seed {seed} ({reason})" for seed, reason in sorted(self.missing.items()))
