"""What a study is (conf/study/<name>.yaml, read into a `StudySpec`) and the runs it plans.

A study compares *families*, each a set of training overrides (`aligner=attention aligner.distribution=sparsemax`),
on one or more *tasks* (each a set of overrides too: `task=wikiqa`, `experiment=snli_dev_split`). A family may have
a selection *grid* (`aligner.score: [dot, general]`): its settings are the grid's product in the order written, the
first values first, so the first setting is the family at the values written first (by convention its defaults);
the *budget* is how many of those settings are tried, the first ones. Every run is named by its task, family,
setting and seed, and lives at `<study>/runs/<task>/<family>/<setting>/seed<N>`, so that a setting trained for one
stage (the selection seed) is the same run in the next (confirmation) and a relaunched study finds what is done.

A study may declare its *primary* comparison, before it runs: the one question its headline answers (`primary:
{family: coda_centred, against: softmax_centred}`, or one such mapping per task). `against` is a family or an outside
baseline the study names (`outside: [cross_encoder]`, trained by its own script and compared with the study's seeds).
A declaration written after the published runs were measured says so (`declared: after the runs, <why>`), and the
headline says it: a comparison picked once its figures are seen is a selection, not a declaration.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from matching.configs import CONF
from matching.errors import ConfigError

#: What a name in a study (a task, a family) may be made of: it is a folder name and part of a Hydra override.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Setting:
    """One point of a family's grid: its overrides (`aligner.score=dot`), none for a family without a grid."""

    values: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """The setting's folder name: `score-dot` for aligner.score=dot, `default` for no grid."""
        if not self.values:
            return "default"
        parts = []
        for value in self.values:
            key, _, chosen = value.partition("=")
            parts.append(f"{key.rsplit('.', 1)[-1]}-{chosen}")
        return re.sub(r"[^A-Za-z0-9_.+-]", "-", "_".join(parts))

    @property
    def text(self) -> str:
        return " ".join(self.values) or "–"


@dataclass(frozen=True)
class Family:
    """A set of overrides compared as one row of the study, with the grid its selection chooses from."""

    name: str
    overrides: tuple[str, ...]
    label: str
    grid: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def settings(self, budget: int | None = None) -> list[Setting]:
        """The grid's settings in order (the first values first), the first `budget` of them."""
        keys = [key for key, _ in self.grid]
        combos = itertools.product(*(values for _, values in self.grid))
        settings = [Setting(tuple(f"{k}={v}" for k, v in zip(keys, combo, strict=True))) for combo in combos]
        return settings[:budget] if budget else settings

    @property
    def parts(self) -> str:
        """The family's overrides as the page names it by its parts."""
        return " ".join(self.overrides)


@dataclass(frozen=True)
class Primary:
    """The comparison a study's headline reports, declared in its spec: `family` against `against` (a family or an
    outside baseline); `declared`: empty when declared before the runs, else when and why it was named."""

    family: str
    against: str
    declared: str = ""

    @property
    def when(self) -> str:
        """When it was named, as pages and headlines say it: before its runs, or the declaration's own when and why."""
        return f"declared {self.declared}" if self.declared else "declared before its runs"


@dataclass(frozen=True)
class StudySpec:
    name: str
    about: str
    tasks: dict[str, tuple[str, ...]]
    families: dict[str, Family]
    train: tuple[str, ...]  # overrides of every run
    seeds: tuple[int, ...]
    selection_seeds: tuple[int, ...]
    baselines: tuple[str, ...]
    budget: int | None
    test: bool
    heatmaps: dict[str, dict[str, str]] = field(default_factory=dict)  # task -> {a, b}: the pair drawn
    max_seeds: int | None = None  # `seeds: {min, max, step}`: the study adds seeds up to this many a family
    seed_step: int = 2  # seeds added at each look
    twins: dict[str, str] = field(default_factory=dict)  # family -> the family it is compared with alone
    outside: tuple[str, ...] = ()  # baselines trained outside the study (benchmarks/cross_encoder.py), by name
    weights: bool = False  # the page says what each family's weights do on dev: negative, and tokens given nothing
    primary: dict[str, Primary] = field(default_factory=dict)  # task -> its declared primary comparison

    @property
    def adaptive(self) -> bool:
        """Whether the study decides how many seeds it needs (`matching.studies.seeds`)."""
        return self.max_seeds is not None and self.max_seeds > len(self.seeds)


@dataclass(frozen=True)
class PlannedRun:
    """One training run of the study."""

    task: str
    family: str
    setting: Setting
    seed: int

    @property
    def relative(self) -> str:
        return f"{self.task}/{self.family}/{self.setting.slug}/seed{self.seed}"

    @property
    def key(self) -> tuple[str, str, str, int]:
        """How a study's results are keyed: (task, family, setting slug, seed)."""
        return self.task, self.family, self.setting.slug, self.seed

    def folder(self, runs_dir: Path) -> Path:
        return runs_dir / self.relative

    def overrides(self, spec: StudySpec) -> list[str]:
        """The run's training overrides: the task's, every run's, the family's, the setting's, its seed, no test
        split (a study tests once, after selection), and its folder."""
        family = spec.families[self.family]
        return [
            *spec.tasks[self.task], *spec.train, *family.overrides, *self.setting.values,
            f"seed={self.seed}", "test=false", f"hydra.sweep.subdir={self.relative}",
        ]  # fmt: skip


def _strings(node: object, where: str) -> tuple[str, ...]:
    if node is None:
        return ()
    if isinstance(node, str):
        return (node,)
    if not isinstance(node, (list, tuple, ListConfig)) or not all(isinstance(v, (str, int, float)) for v in node):
        raise ConfigError(f"{where} is a list of overrides (key=value), got {node!r}")
    return tuple(str(v) for v in node)


def _name(name: object, where: str) -> str:
    text = str(name)
    if not _NAME.match(text):
        raise ConfigError(f"{where} {text!r}: a name of letters, digits, '_', '.' and '-' (it names a folder)")
    return text


def _family(name: str, node: Mapping) -> Family:
    where = f"study.families.{name}"
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where} is a mapping with overrides (and optionally label, grid), got {node!r}")
    unknown = set(node) - {"overrides", "label", "grid"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; a family has overrides, label and grid")
    grid = []
    for key, values in (node.get("grid") or {}).items():
        values = _strings(values, f"{where}.grid.{key}")
        if not values:
            raise ConfigError(f"{where}.grid.{key} has no values")
        grid.append((str(key), values))
    overrides = _strings(node.get("overrides"), f"{where}.overrides")
    return Family(name, overrides, str(node.get("label") or name), tuple(grid))


def _seeds(node: object, where: str) -> tuple[int, ...]:
    values = _strings(node, where)
    try:
        seeds = tuple(int(v) for v in values)
    except ValueError:
        raise ConfigError(f"{where}: seeds are whole numbers, got {list(values)}") from None
    if not seeds:
        raise ConfigError(f"{where} names no seed")
    return seeds


def _seed_plan(node: object) -> tuple[tuple[int, ...], int | None, int]:
    """`study.seeds`: a list (those seeds, every family) or {min, max, step} (seeds 1..min first; the study adds
    `step` at a time, up to max, to the families whose comparisons are undecided). Returns (first seeds, max, step)."""
    if not isinstance(node, Mapping):
        return _seeds(node or [1, 2, 3], "study.seeds"), None, 2
    unknown = set(node) - {"min", "max", "step"}
    if unknown or "min" not in node or "max" not in node:
        raise ConfigError(
            f"study.seeds is a list of seeds or {{min: 3, max: 10, step: 2}} (the study adds seeds while its "
            f"comparisons are undecided); got {dict(node)}"
        )
    values = {k: node[k] for k in ("min", "max", "step") if k in node}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values.values()):
        raise ConfigError(f"study.seeds: min, max and step are whole numbers; got {values}")
    low, high, step = int(node["min"]), int(node["max"]), int(node.get("step", 2))
    if not 2 <= low <= high or step < 1:
        raise ConfigError(
            f"study.seeds: need 2 <= min <= max and step >= 1 (a verdict about a method needs at least 2 seeds a "
            f"side); got min={low}, max={high}, step={step}"
        )
    return tuple(range(1, low + 1)), high, step


def _primary(node: object, tasks: Mapping, families: Mapping, outside: Sequence[str],
             written: Mapping) -> dict[str, Primary]:  # fmt: skip
    """`study.primary`: {family, against[, declared]} for every task, or {task: {family, against[, declared]}};
    `tasks` those run, `written` all the study's (a task not run now keeps its declaration unread)."""
    if node is None:
        return {}
    shape = "{family: <family>, against: <family or outside baseline>} (or one such mapping per task)"
    if not isinstance(node, Mapping):
        raise ConfigError(f"study.primary is {shape}; got {node!r}")
    per_task = node if not {"family", "against"} & set(node) else dict.fromkeys(tasks, node)
    primary = {}
    for task, one in per_task.items():
        where = f"study.primary.{task}" if per_task is node else "study.primary"
        if task not in written:
            raise ConfigError(f"{where}: {task!r} is not one of the study's tasks ({', '.join(written)})")
        if task not in tasks:
            continue
        if not isinstance(one, Mapping) or not {"family", "against"} <= set(one) or set(one) - {
                "family", "against", "declared"}:  # fmt: skip
            raise ConfigError(f"{where} is {shape}; got {one!r}")
        if one["family"] not in families:
            raise ConfigError(f"{where}.family: {one['family']!r} is not one of the families ({', '.join(families)})")
        if one["against"] not in families and one["against"] not in outside:
            raise ConfigError(f"{where}.against: {one['against']!r} is neither a family ({', '.join(families)}) nor "
                              f"an outside baseline (study.outside: {', '.join(outside) or 'none'})")  # fmt: skip
        if one["family"] == one["against"]:
            raise ConfigError(f"{where}: {one['family']!r} is compared with itself")
        primary[str(task)] = Primary(str(one["family"]), str(one["against"]), str(one.get("declared") or ""))
    return primary


def read_spec(node: DictConfig | Mapping, tasks: Sequence[str] | None = None, train: Sequence[str] = ()) -> StudySpec:
    """The study of a composed `study` node (conf/study/<name>.yaml), on the `tasks` named (names of its tasks,
    or of a task config, `trecqa`, run as `task=trecqa`); all its tasks when None; `train`: overrides for every run
    after the study's own (the command line's `train=[...]`). Every mistake is a ConfigError naming the key."""
    study = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    if not study or not study.get("families"):
        raise ConfigError("no study chosen: give study=<name> (a file of conf/study/, e.g. study=design_space)")
    name = _name(study.get("name") or "study", "study.name")
    declared = written = {
        _name(k, "study.tasks:"): _strings(v, f"study.tasks.{k}") for k, v in (study.get("tasks") or {}).items()
    }
    if tasks:
        chosen = {}
        for task in tasks:
            task = _name(task, "tasks=")
            if task in declared:
                chosen[task] = declared[task]
            elif (CONF / "task" / f"{task}.yaml").is_file():
                chosen[task] = (f"task={task}",)
            else:
                options = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
                raise ConfigError(
                    f"tasks=[{task}]: neither a task of study {name} ({', '.join(declared) or 'none'}) nor a task "
                    f"config ({', '.join(options)})"
                )
        declared = chosen
    if not declared:
        raise ConfigError(f"study {name} names no task: give tasks=[<task>,...], e.g. tasks=[wikiqa]")
    families = {_name(k, "study.families:"): _family(str(k), v) for k, v in study["families"].items()}
    baselines = _strings(study.get("baselines"), "study.baselines")
    for baseline in baselines:
        if baseline not in families:
            raise ConfigError(f"study.baselines: {baseline!r} is not one of the families ({', '.join(families)})")
    twins = {}
    for family, twin in (study.get("twins") or {}).items():
        for member in (family, twin):
            if member not in families:
                raise ConfigError(f"study.twins: {member!r} is not one of the families ({', '.join(families)})")
        if family == twin:
            raise ConfigError(f"study.twins: {family!r} is compared with itself")
        twins[str(family)] = str(twin)
    outside = tuple(_name(v, "study.outside:") for v in _strings(study.get("outside"), "study.outside"))
    primary = _primary(study.get("primary"), declared, families, outside, written)
    seeds, max_seeds, step = _seed_plan(study.get("seeds"))
    selection = _seeds(study.get("selection_seeds") or seeds[:1], "study.selection_seeds")
    if not set(selection) <= set(seeds):
        raise ConfigError(f"study.selection_seeds {list(selection)} must be among study.seeds {list(seeds)}")
    budget = study.get("budget")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise ConfigError(f"study.budget: the grid settings tried per family (1 or more), or null; got {budget}")
    heatmaps = {}
    for task, pair in (study.get("heatmaps") or {}).items():
        if not isinstance(pair, Mapping) or not {"a", "b"} <= set(pair):
            raise ConfigError(f"study.heatmaps.{task} is a pair: {{a: <first text>, b: <second text>}}")
        heatmaps[str(task)] = {"a": str(pair["a"]), "b": str(pair["b"])}
    return StudySpec(
        name=name, about=str(study.get("about") or "").strip(), tasks=declared, families=families,
        train=(*_strings(study.get("train"), "study.train"), *train), seeds=seeds, selection_seeds=selection,
        baselines=baselines, budget=budget, test=bool(study.get("test")), heatmaps=heatmaps, max_seeds=max_seeds,
        seed_step=step, twins=twins, outside=outside, primary=primary, weights=bool(study.get("weights")),
    )  # fmt: skip


def selection_runs(spec: StudySpec) -> list[PlannedRun]:
    """The first stage: every setting of a family with a grid at the selection seeds, and every seed of a family
    with one setting (nothing to select: it is confirmed at once)."""
    planned = []
    for task in spec.tasks:
        for family in spec.families.values():
            settings = family.settings(spec.budget)
            seeds = spec.selection_seeds if len(settings) > 1 else spec.seeds
            planned += [PlannedRun(task, family.name, s, seed) for s in settings for seed in seeds]
    return planned


def confirmation_runs(
    spec: StudySpec, chosen: Mapping[tuple[str, str], Setting], seeds: Mapping[tuple[str, str], int] | None = None
) -> list[PlannedRun]:
    """The second stage: the chosen setting of each (task, family) over every seed; in an adaptive study, over the
    seeds 1..n its comparisons have asked for so far (`seeds`: (task, family) -> n; the first seeds otherwise)."""
    return [
        PlannedRun(task, family, setting, seed)
        for (task, family), setting in chosen.items()
        for seed in (range(1, (seeds or {}).get((task, family), 0) + 1) if (seeds or {}).get((task, family))
                     else spec.seeds)
    ]  # fmt: skip
