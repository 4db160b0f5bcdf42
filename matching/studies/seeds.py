"""A study that decides how many seeds it needs (`study.seeds: {min: 3, max: 10, step: 2}`).

Every family starts with seeds 1..min. At each look (min, min + step, ..., max seeds a side: `looks`), every
comparison still undecided (a family against a baseline, on the task's monitored dev metric) is tested with the
method-level test of `matching.results.significance` over the first r seeds of both sides, its p adjusted by Holm
over the task's comparisons looked at together (each task looks on its own, whichever tasks the command names), and
compared with the look's nominal level from the alpha-spending rule of `matching.results.sequential`:

- below it: **resolved** at r seeds a side; the comparison takes no more seeds;
- else, before the last look, when even the maximum seeds could not find its Δ (futility): **stopped**, not
  resolved; stopping for futility never adds a false "resolved";
- else it asks for the next look's seeds, for both of its families; at the last look it ends **not resolved**.

A family trains as many seeds as its most demanding comparison asks for. The decisions are a function of the runs'
own files alone (the first r seeds' `scores/` of each look), so a stopped study replays them and goes on where it
was; `seeds.json` records them for the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from matching.files import write_json
from matching.results.sequential import futile, looks, nominal_levels
from matching.results.significance import common_units, holm, t_p_value, unit_table, variance_parts
from matching.studies.results import RunResult
from matching.studies.spec import StudySpec
from matching.training.scores import unit_scores

SEEDS_FILE = "seeds.json"
RESOLVED, STOPPED, AT_MAX, WAITING = "resolved", "stopped: futile", "not resolved at the maximum", "undecided"


@dataclass(frozen=True)
class Look:
    seeds: int  # a side
    difference: float  # points
    p_value: float  # the method test's, raw
    p_adjusted: float  # Holm over the comparisons of this look
    level: float  # the look's nominal level


@dataclass(frozen=True)
class Decision:
    task: str
    family: str
    baseline: str
    metric: str  # the monitored dev metric's name (`acc`, `map`)
    looks: tuple[Look, ...]
    status: str  # RESOLVED, STOPPED, AT_MAX or WAITING

    @property
    def pair(self) -> tuple[str, frozenset[str]]:
        """The hypothesis this decision is about, the same for its two directions (B vs A is A vs B's test)."""
        return _pair((self.task, self.family, self.baseline))

    @property
    def verdict(self) -> str:
        """The decision in a few words, as study.csv's verdict column gives it (`text` says it in full)."""
        return {RESOLVED: "resolved", WAITING: "undecided: more seeds asked for"}.get(self.status, "not resolved")

    def text(self, maximum: int) -> str:
        """The decision as the page states it."""
        if not self.looks:
            return "undecided: no look yet"
        last = self.looks[-1]
        p = f"Holm-adjusted p = {last.p_adjusted:.3g}"
        if self.status == RESOLVED:
            return f"resolved at {last.seeds} seeds a side ({p} < {last.level:.3g}, look {len(self.looks)})"
        if self.status == STOPPED:
            return (f"not resolved; stopped at {last.seeds} seeds a side: {maximum} seeds could not find its Δ "
                    f"({points_text(last.difference)}; {p})")  # fmt: skip
        if self.status == AT_MAX:
            return f"not resolved at the maximum, {last.seeds} seeds a side ({p} ≥ {last.level:.3g})"
        return f"undecided after {last.seeds} seeds a side ({p} ≥ {last.level:.3g}): more seeds asked for"


def points_text(x: float) -> str:
    return f"{x:+.2f}"


@dataclass
class SeedPlan:
    """Where an adaptive study stands: every comparison's decision so far and the seeds each family needs now."""

    schedule: list[int]
    levels: tuple[float, ...]
    decisions: list[Decision]
    wanted: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def decided(self) -> bool:
        return all(d.status != WAITING for d in self.decisions)

    def record(self) -> dict:
        return {
            "rule": RULE,
            "looks": self.schedule,
            "nominal_levels": list(self.levels),
            "seeds": {f"{task}/{family}": n for (task, family), n in sorted(self.wanted.items())},
            "decisions": [asdict(d) for d in self.decisions],
        }


RULE = (
    "Every family starts with the minimum seeds; at each look every undecided comparison (a family against a baseline"
    " or its twin, on the task's monitored dev metric) is tested over the first seeds of both sides with the seed-"
    "aware test, Holm-adjusted over the task's comparisons of the look (each task looks on its own), against the "
    "look's level from an O'Brien-Fleming-type alpha-spending function (Lan & DeMets) over the seeds (information "
    "fraction: seeds / maximum); a comparison below it is resolved, one whose Δ even the maximum seeds could not find "
    "stops (futility), the others ask for the next look's seeds for both of their families"
)


Comparison = tuple[str, str, str]  # (task, family, baseline)


def comparisons(spec: StudySpec) -> list[Comparison]:
    """(task, family, baseline) of every comparison the seeds are added for: each family against each baseline,
    and each family against its twin (`study.twins`) unless that pair is already there. Two baselines are listed
    against each other both ways, so that each one's column shows the pair; the looks count it once (Holm)."""
    against_baselines = [(t, f, b) for t in spec.tasks for b in spec.baselines for f in spec.families if f != b]
    seen = {_pair(c) for c in against_baselines}
    twins = [(t, f, b) for t in spec.tasks for f, b in spec.twins.items() if _pair((t, f, b)) not in seen]
    return against_baselines + twins


def _pair(comparison: Comparison) -> tuple[str, frozenset[str]]:
    """A comparison as the hypothesis it tests: its task and its two families, in either order."""
    task, family, baseline = comparison
    return task, frozenset((family, baseline))


def _scores(
    results: Mapping, kept: Mapping, task: str, family: str, seeds: int
) -> tuple[list[dict[str, float]], str] | None:
    """The first `seeds` seeds' per-unit scores of a family's kept setting on its monitored dev metric, and that
    metric's name; None while a run among them has not finished."""
    slug = kept.get((task, family))
    out, name = [], ""
    for seed in range(1, seeds + 1):
        result: RunResult | None = results.get((task, family, slug, seed))
        if result is None or not result.finished:
            return None
        prefix, name = result.monitor.split("/", 1)
        scores = unit_scores(result.folder, prefix, name)
        if scores is None:
            return None
        out.append(scores)
    return out, name


def plan_seeds(spec: StudySpec, results: Mapping[tuple[str, str, str, int], RunResult],
               kept: Mapping[tuple[str, str], str]) -> SeedPlan:  # fmt: skip
    """Replays the looks on the runs there are; returns the decisions and the seeds each family needs now. Each task
    looks on its own (`_task_looks`), so a task's seeds do not depend on which other tasks the command named."""
    schedule = looks(len(spec.seeds), int(spec.max_seeds or len(spec.seeds)), spec.seed_step)
    levels = nominal_levels(tuple(schedule))
    every = comparisons(spec)
    wanted = {(t, f): schedule[0] for t in spec.tasks for f in spec.families}
    decided: dict[tuple[str, str, str], Decision] = {}
    for task in spec.tasks:
        decisions, needs = _task_looks([c for c in every if c[0] == task], results, kept, schedule, levels)
        decided |= decisions
        wanted |= needs
    return SeedPlan(schedule, levels, [decided[c] for c in every], wanted)


def _task_looks(
    mine: list[Comparison], results: Mapping, kept: Mapping, schedule: list[int], levels: tuple[float, ...]
) -> tuple[dict[Comparison, Decision], dict[tuple[str, str], int]]:
    """One task's looks: its comparisons are Holm-adjusted together at each look (one family of comparisons per
    task's dev split, as a page with fixed seeds adjusts them), and a look waits only for that task's runs. Looks
    pooled over the tasks made a study run with `tasks=[x]` take other seeds than its page replayed over every task,
    and one task's missing runs held back the others' decisions. Returns each comparison's decision and the seeds
    its families need (those of the last look an undecided comparison reached)."""
    made: dict[Comparison, list[Look]] = {c: [] for c in mine}
    status = dict.fromkeys(mine, WAITING)
    metric: dict[Comparison, str] = {}
    needs: dict[tuple[str, str], int] = {}
    for k, r in enumerate(schedule):
        open_ = [c for c in mine if status[c] == WAITING]
        if not open_:
            break
        for task, family, baseline in open_:
            needs[(task, family)] = needs[(task, baseline)] = r  # the looks' seeds only grow
        tables = _look_tables(open_, results, kept, r, metric)
        if tables is None:
            break  # runs of this look are missing: `needs` says which
        parts = {c: variance_parts(*tables[c]) for c in open_}
        raw = {c: float(t_p_value(p.difference, p.variance, p.df)) for c, p in parts.items()}
        adjusted = _holm_each_pair_once(open_, raw)
        for c in open_:
            made[c].append(Look(r, 100 * float(parts[c].difference), raw[c], adjusted[c], levels[k]))
            if adjusted[c] < levels[k]:
                status[c] = RESOLVED
            elif k == len(schedule) - 1:
                status[c] = AT_MAX
            elif bool(futile(parts[c], schedule[-1])):
                status[c] = STOPPED
    return {c: Decision(*c, metric.get(c, ""), tuple(made[c]), status[c]) for c in mine}, needs


def _holm_each_pair_once(open_: list[Comparison], raw: Mapping[Comparison, float]) -> dict[Comparison, float]:
    """Holm over a look's open comparisons, each pair of families counted once: with two baselines, A against B and
    B against A are one hypothesis (one p), listed both ways so that each baseline's column shows it. Counted twice,
    the pair made every other comparison of the look pay for one hypothesis more than the page's own Holm does."""
    pairs = {_pair(c): raw[c] for c in open_}  # the pair's p from either direction: the two are one test
    adjusted = dict(zip(pairs, holm(list(pairs.values())), strict=True))
    return {c: adjusted[_pair(c)] for c in open_}


def _look_tables(open_: list[Comparison], results: Mapping, kept: Mapping, seeds: int, metric: dict) -> dict | None:
    """Each open comparison's two unit tables over the first `seeds` seeds and their common units (its metric's
    name put in `metric`); None while a run of the look is missing or fewer than 2 units are shared."""
    tables = {}
    for c in open_:
        task, family, baseline = c
        ours, theirs = _scores(results, kept, task, family, seeds), _scores(results, kept, task, baseline, seeds)
        if ours is None or theirs is None:
            return None
        (a, metric[c]), (b, _) = ours, theirs
        units = common_units(a, b)
        if len(units) < 2:
            return None
        tables[c] = (unit_table(a, units), unit_table(b, units))
    return tables


def write_record(study_dir: Path, plan: SeedPlan) -> Path:
    return write_json(study_dir / SEEDS_FILE, plan.record())
