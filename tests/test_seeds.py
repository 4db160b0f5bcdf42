"""A study that decides how many seeds it needs: the seeds plan read from a study, the looks and their levels, and
the loop that adds seeds to the undecided families only, on runs whose scores are known (no training)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from matching.errors import ConfigError
from matching.results.sequential import looks, nominal_levels, spent
from matching.studies import protocol
from matching.studies.protocol import Launch, run_study
from matching.studies.seeds import AT_MAX, RESOLVED, STOPPED, WAITING
from matching.studies.spec import read_spec

FAMILIES = {
    "softmax": {"overrides": ["aligner=softmax"]},
    "better": {"overrides": ["aligner=coda"]},  # 6 points better, stable over seeds
    "unstable": {"overrides": ["aligner=conflict"]},  # the same on average, seeds spread widely
    "close": {"overrides": ["aligner=attention"]},  # 1.5 points better, stable: needs seeds to resolve
}


def _spec(seeds=None, families=FAMILIES):
    return read_spec({"name": "s", "tasks": {"snli": ["task=snli"]}, "families": families, "baselines": ["softmax"],
                      "seeds": seeds or {"min": 3, "max": 9, "step": 2}})  # fmt: skip


def test_the_seeds_plan_is_read_from_the_study():
    spec = _spec()
    assert spec.seeds == (1, 2, 3) and spec.max_seeds == 9 and spec.seed_step == 2 and spec.adaptive
    assert not _spec([1, 2, 3]).adaptive
    mistakes = (({"min": 1, "max": 5}, "at least 2 seeds"), ({"max": 5}, "min: 3, max: 10"),
                ({"min": 3, "max": 5, "every": 2}, "min: 3, max: 10"), ({"min": "a", "max": 5}, "whole"))  # fmt: skip
    for bad, says in mistakes:
        with pytest.raises(ConfigError, match=says):
            _spec(bad)


def test_the_looks_spend_alpha_and_the_last_keeps_most_of_it():
    assert looks(3, 10, 2) == [3, 5, 7, 9, 10] and looks(3, 9, 2) == [3, 5, 7, 9] and looks(3, 3, 2) == [3]
    levels = nominal_levels((3, 5, 7, 9, 10))
    assert list(levels) == sorted(levels) and levels[0] < 0.001 and 0.03 < levels[-1] < 0.05
    assert spent(1.0) == pytest.approx(0.05) and spent(0.3) < 0.002
    assert nominal_levels((3,)) == (0.05,)


UNITS = 400


def _scores(family: str, seed: int) -> np.ndarray:
    """Per-example correctness: one shared difficulty, a family's shift and its seed's, and seed × unit noise."""
    rng = np.random.default_rng(1000 * seed + sum(map(ord, family)))
    difficulty = np.random.default_rng(0).normal(0, 1.5, UNITS)
    shift = {"softmax": 0.0, "better": 0.35, "unstable": 0.0, "close": 0.09}[family]
    seed_spread = {"softmax": 0.02, "better": 0.02, "unstable": 0.4, "close": 0.02}[family]
    seed_effect = np.random.default_rng(seed * 7 + len(family)).normal(0, seed_spread)
    logit = difficulty + shift + seed_effect + rng.normal(0, 0.3, UNITS)
    return (1 / (1 + np.exp(-logit)) > 0.5).astype(int)


def _fake_launch(trained: list):
    """`protocol.launch` as the sweep machinery does it (a finished run is skipped), writing known scores."""

    def launch(runs, spec, study_dir, how, stage):
        for run in runs:
            folder = run.folder(study_dir / "runs")
            if (folder / "metrics.json").is_file():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            correct = _scores(run.family, run.seed)
            (folder / "scores").mkdir(exist_ok=True)
            rows = ["unit,a,b,label,predicted,p_predicted,correct"] + [f"{i},a,b,x,x,0.9,{c}" for i, c in
                                                                         enumerate(correct)]  # fmt: skip
            (folder / "scores" / "val.csv").write_text("\n".join(rows) + "\n")
            (folder / "config.yaml").write_text(yaml.safe_dump({"task": {"monitor": "val/acc"}}))
            (folder / "metrics.json").write_text(json.dumps({"val/acc": float(correct.mean())}))
            trained.append((stage, run.relative))
        return True

    return launch


def test_seeds_are_added_to_the_undecided_families_only_and_a_stopped_study_replays(tmp_path: Path, monkeypatch):
    trained: list = []
    monkeypatch.setattr(protocol, "launch", _fake_launch(trained))
    spec = _spec()
    outcome = run_study(spec, tmp_path, Launch())
    plan = outcome.seeds
    decided = {d.family: d for d in plan.decisions}
    assert decided["better"].status == RESOLVED and decided["better"].looks[-1].seeds == 3
    assert decided["unstable"].status in (STOPPED, AT_MAX) and decided["close"].status != WAITING
    seeds = {family: n for (_, family), n in plan.wanted.items()}
    assert seeds["better"] == 3 and seeds["softmax"] == max(seeds.values()) > 3
    assert all(d.status != WAITING for d in plan.decisions) and outcome.complete
    record = json.loads((tmp_path / "seeds.json").read_text())
    assert record["looks"] == [3, 5, 7, 9] and record["seeds"]["snli/better"] == 3
    # nothing of `better` beyond seed 3 was trained; the seeds of each look came in one sweep each
    assert not [r for _, r in trained if r.startswith("snli/better/") and not r.endswith(("seed1", "seed2", "seed3"))]
    assert {stage for stage, _ in trained} >= {"select", "seeds5"}
    # run again: the decisions replay from the runs' files, nothing is trained
    before = len(trained)
    again = run_study(spec, tmp_path, Launch())
    assert len(trained) == before
    assert [d.status for d in again.seeds.decisions] == [d.status for d in plan.decisions]


def test_the_page_of_an_adaptive_study_shows_each_familys_seeds_and_why_it_stopped(tmp_path: Path, monkeypatch):
    from matching.studies.page import write_page

    monkeypatch.setattr(protocol, "launch", _fake_launch([]))
    spec = _spec()
    outcome = run_study(spec, tmp_path, Launch())
    page = write_page(spec, tmp_path, outcome.choices, list(outcome.results.values()), "python -m matching.study",
                      None, figures=False, seeds=outcome.seeds).read_text()  # fmt: skip
    assert "### Seeds: how many each family needed" in page and "| better | 3 | vs softmax: resolved |" in page
    assert "resolved at 3 seeds a side" in page and "3 to 9 a family" in page
    assert "Holm" in page and "alpha-spending" in page
    # One adjusted p a comparison: the p cell of a sequentially decided row is the p its verdict was decided with
    decided = next(line for line in page.splitlines() if "resolved at 3 seeds a side (Holm-adjusted p = " in line)
    used = decided.split("Holm-adjusted p = ")[1].split(" ")[0]
    assert f"| {used} (raw " in decided and "Holm over look 1's comparisons" in decided and "m = " not in decided


def test_each_task_looks_on_its_own_whichever_tasks_the_command_names(tmp_path: Path, monkeypatch):
    """A study run task by task (`tasks=[x]`) takes the seeds, and reaches the decisions, that its page replays over
    every task; a task whose runs are missing holds back no other task's looks."""
    from matching.studies.protocol import results_of
    from matching.studies.seeds import plan_seeds

    monkeypatch.setattr(protocol, "launch", _fake_launch([]))
    tasks = {"snli": ["task=snli"], "other": ["task=snli", "trainer.max_epochs=2"]}
    spec = read_spec({"name": "s", "tasks": tasks, "families": FAMILIES, "baselines": ["softmax"],
                      "seeds": {"min": 3, "max": 9, "step": 2}})  # fmt: skip
    alone = {}
    for task in tasks:
        alone[task] = run_study(read_spec({"name": "s", "tasks": {task: tasks[task]}, "families": FAMILIES,
                                           "baselines": ["softmax"], "seeds": {"min": 3, "max": 9, "step": 2}}),
                                tmp_path, Launch()).seeds  # fmt: skip
    together = run_study(spec, tmp_path, Launch(), train=False).seeds
    for task, plan in alone.items():
        mine = [d for d in together.decisions if d.task == task]
        assert mine == plan.decisions and len(mine) == 3
        assert {k: n for k, n in together.wanted.items() if k[0] == task} == plan.wanted
    # one task's later runs gone: its looks stop where its runs end; the other task's decisions are untouched
    for seed in range(4, 10):
        for family in FAMILIES:
            for folder in (tmp_path / "runs" / "other" / family).glob(f"*/seed{seed}"):
                (folder / "metrics.json").unlink()
    choices = run_study(spec, tmp_path, Launch(), train=False).choices
    kept = {(c.task, c.family): c.chosen.slug for c in choices}
    every = protocol.planned_runs(spec, choices)
    every += protocol.confirmation_runs(spec, {(c.task, c.family): c.chosen for c in choices}, together.wanted)
    replayed = plan_seeds(spec, results_of(every, tmp_path / "runs"), kept)
    assert [d for d in replayed.decisions if d.task == "snli"] == alone["snli"].decisions
    # and the study replayed without training (the page's command) goes through the looks of the task that has runs
    again = run_study(spec, tmp_path, Launch(), train=False).seeds
    assert [d for d in again.decisions if d.task == "snli"] == alone["snli"].decisions
    waiting = [d for d in replayed.decisions if d.task == "other" and d.status == WAITING]
    assert waiting == [d for d in replayed.decisions if d.task == "other" and d.looks[-1].seeds == 3 and
                       d.status == WAITING]  # fmt: skip


def test_two_baselines_against_each_other_are_one_hypothesis_of_a_looks_holm(tmp_path: Path, monkeypatch):
    """With two baselines, A against B and B against A are listed both ways (each baseline's column shows the pair)
    but tested once: each look's Holm counts every pair of families once, as the page's own Holm does. Counted
    twice, every other comparison of the look paid for one hypothesis more."""
    from matching.results.significance import holm

    monkeypatch.setattr(protocol, "launch", _fake_launch([]))
    spec = read_spec({"name": "s", "tasks": {"snli": ["task=snli"]}, "families": FAMILIES,
                      "baselines": ["softmax", "better"], "seeds": {"min": 3, "max": 9, "step": 2}})  # fmt: skip
    plan = run_study(spec, tmp_path, Launch()).seeds
    both_ways = [d for d in plan.decisions if {d.family, d.baseline} == {"softmax", "better"}]
    assert len(both_ways) == 2 and both_ways[0].status == both_ways[1].status == RESOLVED
    first = [(d, d.looks[0]) for d in plan.decisions]
    pairs = {frozenset((d.family, d.baseline)): look.p_value for d, look in first}
    assert len(pairs) == len(first) - 1
    expected = dict(zip(pairs, holm(list(pairs.values())), strict=True))
    for d, look in first:
        assert look.p_adjusted == pytest.approx(expected[frozenset((d.family, d.baseline))]), (d.family, d.baseline)


def test_the_page_says_a_pair_of_baselines_once(tmp_path: Path, monkeypatch):
    """Two baselines that need every seed to tell apart: each one's "why it stopped" names the other once, and the
    looks' table gives the pair one row (its two directions are one test, with one decision)."""
    from matching.studies.page import write_page

    monkeypatch.setattr(protocol, "launch", _fake_launch([]))
    spec = read_spec({"name": "s", "tasks": {"snli": ["task=snli"]}, "families": FAMILIES,
                      "baselines": ["softmax", "close"], "seeds": {"min": 3, "max": 9, "step": 2}})  # fmt: skip
    outcome = run_study(spec, tmp_path, Launch())
    page = write_page(spec, tmp_path, outcome.choices, list(outcome.results.values()), "python -m matching.study",
                      None, figures=False, seeds=outcome.seeds).read_text()  # fmt: skip
    lines = page.splitlines()
    for baseline, other in (("softmax", "close"), ("close", "softmax")):
        why = next(line for line in lines if re.match(rf"\| {baseline} \| \d+ \| ", line))
        assert why.count(f"vs {other}:") == 1, why
    looked = [line for line in lines if line.startswith(("| close vs softmax |", "| softmax vs close |"))]
    assert len(looked) == 1, looked
