"""The rows of a study's report: one `Row` per task × aligner × variant × split × metric, and with a baseline its
`Comparison`. A value that is not there is None (no variant, no paper number, not compared); a statistic of too
few values to define it is NaN (the mean of no seed, the detectable difference over one unit)."""

from __future__ import annotations

from dataclasses import dataclass

from matching.results.significance import NOT_RESOLVED

#: The note of the baseline's own rows.
BASELINE = "baseline"


@dataclass(frozen=True)
class Comparison:
    """A row against its baseline's row, in points and rounded as the table shows them. The verdict is about the
    method: the test of `matching.results.significance.method_test`, whose unit of chance is the training run as
    well as the question (or example), with its p adjusted for the page's many comparisons (Holm). The conditional
    test over units ("these trained models", seeds averaged) is kept beside it (`units_*`). A row that was not tested
    has only a `note`: why, or that it is the baseline."""

    baseline: str | None = None  # the label (aligner and variant) of the row compared with
    diff: float | None = None  # the mean difference
    ci_low: float | None = None  # its 95 % interval, seeds and units counted (NaN with one seed on a side)
    ci_high: float | None = None
    p_value: float | None = None  # the method test's two-sided p, three significant digits (NaN: too few seeds)
    units: int | None = None  # the questions (or examples) every seed of both rows was scored on
    detectable: float | None = None  # the difference these seeds and units find with 80 % power (NaN: too few)
    verdict: str | None = None  # "resolved", "not resolved" or "too few seeds", from the adjusted p
    note: str | None = None  # "baseline", why there is no test, or that only some seeds had scores
    p_adjusted: float | None = None  # p after Holm's adjustment over the comparisons of its metric and split
    compared_with: int | None = None  # m: how many comparisons that adjustment counted
    seed_counts: str | None = None  # "3 vs 3": the seeds a side the test had
    seeds_needed: int | None = None  # seeds a side that would find the observed Δ with 80 % power (unresolved only)
    units_limit: bool = False  # no number of seeds would: the units' own spread is too large for this Δ
    df: float | None = None  # Satterthwaite's degrees of freedom
    units_ci_low: float | None = None  # the conditional test over units: 95 % paired-bootstrap interval
    units_ci_high: float | None = None
    units_p: float | None = None  # its paired randomization p

    @property
    def tested(self) -> bool:
        return self.diff is not None

    @property
    def is_baseline(self) -> bool:
        return self.note == BASELINE

    def seeds_text(self) -> str:
        """What more seeds would do for an unresolved comparison: "n seeds a side would detect it", "more seeds
        would not: more units would", or ""."""
        if self.verdict != NOT_RESOLVED:
            return ""
        if self.units_limit:
            return "more seeds would not detect it (the units limit it)"
        return f"{self.seeds_needed} seeds a side would detect it" if self.seeds_needed else ""


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
