"""The selection rule of a study, written down once: each family's grid settings at the selection seeds, on dev,
by the task's monitored metric; the best mean wins, a tie goes to the setting listed first. Only `metrics.json`
(the best checkpoint's dev metrics) is read: a test figure cannot reach a choice."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from matching.studies.results import RunResult
from matching.studies.spec import Setting, StudySpec

#: Two means closer than this are a tie (the setting listed first in the grid wins).
TIE = 1e-6


def rule(spec: StudySpec) -> str:
    """The rule, as the page and selection.json state it."""
    seeds = ", ".join(map(str, spec.selection_seeds))
    budget = f"the first {spec.budget} settings of its grid" if spec.budget else "every setting of its grid"
    if spec.budget == 1:
        budget = "the first setting of its grid alone (budget 1: nothing is selected)"
    return (
        f"Each family with a grid is trained at {budget} (in the order written, the first values first) with "
        f"seed{'s' if len(spec.selection_seeds) > 1 else ''} {seeds}. The setting with the best mean of the task's "
        "monitored dev metric (task.monitor, in the direction of task.monitor_mode) over those seeds is kept; means "
        f"within {TIE:g} of each other are a tie, which goes to the setting listed first. Only the best checkpoint's "
        "dev metrics (metrics.json) are read; every run is trained with test=false. A family with one setting has "
        "nothing to select. The kept setting is then trained with every seed (its selection runs are reused)."
    )


@dataclass(frozen=True)
class Choice:
    """One family's selection on one task: every setting's monitored dev values, and the one kept (None while a
    selection run is missing)."""

    task: str
    family: str
    monitor: str
    settings: tuple[tuple[Setting, tuple[float | None, ...]], ...]  # each setting's value per selection seed
    chosen: Setting | None
    missing: tuple[str, ...] = ()  # the runs without a value, by their folder

    def mean(self, setting: Setting) -> float | None:
        values = dict(self.settings)[setting]
        return None if not values or any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]


def choose(spec: StudySpec, results: dict[tuple[str, str, str, int], RunResult]) -> list[Choice]:
    """Every (task, family)'s choice from the selection runs' results (keyed by task, family, setting slug, seed)."""
    choices = []
    for task in spec.tasks:
        for family in spec.families.values():
            settings = family.settings(spec.budget)
            seeds = spec.selection_seeds
            table, missing, monitor, higher = [], [], "", True
            for setting in settings:
                values = []
                for seed in seeds:
                    result = results.get((task, family.name, setting.slug, seed))
                    value = result.monitored if result is not None else None
                    if result is not None and result.config is not None:
                        monitor, higher = result.monitor, result.higher_is_better
                    if value is None:
                        missing.append(f"{task}/{family.name}/{setting.slug}/seed{seed}")
                    values.append(value)
                table.append((setting, tuple(values)))
            chosen = None
            if len(settings) == 1:
                chosen = settings[0]
            elif not missing:
                best = None
                for setting, values in table:
                    mean = statistics.fmean(values)
                    if best is None or (mean > best[1] + TIE if higher else mean < best[1] - TIE):
                        best = (setting, mean)
                chosen = best[0] if best else None
            choices.append(Choice(task, family.name, monitor, tuple(table), chosen, tuple(missing)))
    return choices


def as_record(spec: StudySpec, choices: list[Choice]) -> dict:
    """selection.json: the rule and every choice with the values it was made from."""
    return {
        "rule": rule(spec),
        "selection_seeds": list(spec.selection_seeds),
        "budget": spec.budget,
        "choices": [
            {
                "task": c.task, "family": c.family, "monitor": c.monitor,
                "chosen": None if c.chosen is None else list(c.chosen.values),
                "settings": [{"setting": list(s.values), "values": list(v)} for s, v in c.settings],
                "missing": list(c.missing),
            }
            for c in choices
        ],
    }  # fmt: skip
