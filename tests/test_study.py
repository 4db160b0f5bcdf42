"""`matching-study`: the protocol (select on dev, confirm over seeds, test once), resuming, and the page, on a
fixture task built so that its test split would choose the other setting."""

import contextlib
import dataclasses
import io
import json
import os
import random
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml
from conftest import FIXTURE_VECTORS, ROOT, SUBPROCESS_ENV

from matching.errors import ConfigError
from matching.studies.selection import choose
from matching.studies.spec import PlannedRun, Primary, Setting, read_spec, selection_runs

#: A learnable rule: "yes" when the second text repeats the first text's first word. Dev follows it; test is its
#: opposite, so a model that learned it is the best on dev and the worst on test.
WORDS = [line.split(" ", 1)[0] for line in FIXTURE_VECTORS.read_text().splitlines()[40:140]]


def _pairs(n: int, seed: int, invert: bool = False) -> str:
    rng = random.Random(seed)
    lines = ["sentence1\tsentence2\tlabel"]
    for i in range(n):
        a = rng.sample(WORDS, 3)
        yes = i % 2 == 0
        b = [a[0], *rng.sample(WORDS, 2)] if yes else rng.sample([w for w in WORDS if w not in a], 3)
        rng.shuffle(b)
        label = "yes" if yes != invert else "no"
        lines.append(f"{' '.join(a)}\t{' '.join(b)}\t{label}")
    return "\n".join(lines) + "\n"


def write_data(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.tsv").write_text(_pairs(320, 1))
    (folder / "dev.tsv").write_text(_pairs(40, 2))
    (folder / "test.tsv").write_text(_pairs(40, 3, invert=True))
    return folder


def study_file(tmp: Path, data: Path) -> Path:
    """Two families: a baseline with one setting, and one whose grid holds a setting that cannot learn (a learning
    rate of 1e-9) and one that can."""
    study = {
        "name": "fixture",
        "tasks": {"overlap": ["task=pairs", f"task.splits.train.path={data}/train.tsv",
                              f"task.splits.dev.path={data}/dev.tsv", f"task.splits.test.path={data}/test.tsv"]},
        "train": ["embeddings=glove", f"embeddings.path={FIXTURE_VECTORS}", "embeddings.dim=20", "model.hidden=16",
                  "data.batch_size=8", "trainer.max_epochs=6", "trainer.enable_progress_bar=false", "dtype=fp32"],
        "seeds": [1, 2, 3],
        "selection_seeds": [1],
        "baselines": ["softmax"],
        "test": True,
        "families": {
            "softmax": {"label": "softmax, F=none", "overrides": ["aligner=softmax", "aligner.projection=none"]},
            "coda": {"overrides": ["aligner=coda"], "grid": {"optim.lr": ["1e-09", "0.01"]}},
        },
    }  # fmt: skip
    path = tmp / "fixture_study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


@dataclasses.dataclass(frozen=True)
class StudyDone:
    """What a `matching.study` command ended with: its exit status and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def run_study(tmp: Path, *extra: str, check: bool = True) -> StudyDone:
    """`matching.study` in this process (its runs' sweeps are processes of their own, one thread each, offline): the
    study's own imports are paid once by the test process, not per call."""
    from matching.study import main

    argv = [f"study_file={tmp / 'fixture_study.yaml'}", f"out={tmp / 'study'}", f"paths.data_dir={tmp}",
            f"paths.cache_dir={tmp / 'cache'}", "figures=false", "threads=1", *extra]  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    offline = {k: v for k, v in SUBPROCESS_ENV.items() if k.startswith("HF_")}
    with mock.patch.dict(os.environ, offline), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        done = StudyDone(main(argv), out.getvalue(), err.getvalue())
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("study")
    study_file(tmp, write_data(tmp / "data"))
    run_study(tmp)
    return tmp


def _rows(path: Path) -> list[dict]:
    import csv

    with path.open() as f:
        return list(csv.DictReader(f))


def _metrics(folder: Path, name: str = "metrics.json") -> dict:
    data = json.loads((folder / name).read_text())
    return data.get("metrics", data)


def test_the_grid_setting_that_learns_is_kept_by_dev(study):
    selection = json.loads((study / "study" / "selection.json").read_text())
    coda = next(c for c in selection["choices"] if c["family"] == "coda")
    assert coda["chosen"] == ["optim.lr=0.01"]
    values = {tuple(s["setting"]): s["values"][0] for s in coda["settings"]}
    assert values[("optim.lr=0.01",)] > values[("optim.lr=1e-09",)]
    runs = study / "study" / "runs" / "overlap"
    # the kept setting over every seed; the other one at the selection seed only
    assert sorted(p.name for p in (runs / "coda" / "lr-0.01").iterdir()) == ["seed1", "seed2", "seed3"]
    assert sorted(p.name for p in (runs / "coda" / "lr-1e-09").iterdir()) == ["seed1"]
    assert all(r.parent.name in ("seed1", "seed2", "seed3") for r in runs.rglob("metrics.json"))


def test_the_test_split_would_pick_the_other_setting_and_is_never_used_to_choose(study):
    runs = study / "study" / "runs" / "overlap" / "coda"
    tested = json.loads((study / "study" / "test.json").read_text())
    # only the kept settings were tested, after selection, and the record says which selection it followed
    kept = ("coda/lr-0.01", "softmax/default")
    assert sorted(tested["runs"]) == [f"overlap/{f}/seed{s}" for f in kept for s in (1, 2, 3)]
    assert not (runs / "lr-1e-09" / "seed1" / "eval_test.json").exists()
    assert all("test/acc" not in _metrics(p.parent) for p in runs.rglob("metrics.json"))  # trained with test=false
    # the fixture is built so that test prefers the setting that did not learn: evaluate the loser here, by hand
    loser = runs / "lr-1e-09" / "seed1"
    from matching.evaluate import main as evaluate_main

    assert evaluate_main([f"ckpt={loser / 'checkpoints' / 'best.ckpt'}", "split=test", f"paths.data_dir={study}",
                          f"out={study / 'loser_test.json'}"]) == 0  # fmt: skip
    kept_test = _metrics(runs / "lr-0.01" / "seed1", "eval_test.json")["test/acc"]
    assert _metrics(study, "loser_test.json")["test/acc"] > kept_test
    assert json.loads((study / "study" / "selection.json").read_text())["choices"][1]["chosen"] == ["optim.lr=0.01"]


def test_every_number_on_the_page_is_the_runs_own(study):
    page = (study / "study" / "study.md").read_text()
    runs = study / "study" / "runs" / "overlap"
    for family, slug, split, name in [("softmax", "default", "dev", "metrics.json"), ("coda", "lr-0.01", "dev",
                                      "metrics.json"), ("softmax", "default", "test", "eval_test.json"),
                                      ("coda", "lr-0.01", "test", "eval_test.json")]:  # fmt: skip
        key = "val/acc" if split == "dev" else "test/acc"
        values = [100 * _metrics(runs / family / slug / f"seed{s}", name)[key] for s in (1, 2, 3)]
        per_seed = ", ".join(f"{v:.2f}" for v in values)
        mean = sum(values) / 3
        assert re.search(rf"{mean:.2f} ± \d+\.\d\d \({re.escape(per_seed)}\)", page), (family, split, per_seed)
    # the selection table: both settings at seed 1, from their own metrics.json
    for slug in ("lr-1e-09", "lr-0.01"):
        value = 100 * _metrics(runs / "coda" / slug / "seed1")["val/acc"]
        setting = "optim.lr=" + slug.removeprefix("lr-")
        assert re.search(rf"`{re.escape(setting)}` \| {value:.2f} \| {value:.2f} \|", page)
    epochs = [_metrics(runs / "coda" / "lr-0.01" / f"seed{s}")["best_epoch"] for s in (1, 2, 3)]
    assert f"| {epochs[0]}, {epochs[1]}, {epochs[2]} |" in page

    # the Δ of a family from the baseline: the mean over the dev examples of its seeds' mean correctness, less the
    # baseline's, from the runs' scores/val.csv
    def correct(family: str, slug: str) -> list[float]:
        seeds = [_rows(runs / family / slug / f"seed{s}" / "scores" / "val.csv") for s in (1, 2, 3)]
        return [sum(float(rows[i]["correct"]) for rows in seeds) / 3 for i in range(len(seeds[0]))]

    mine, theirs = correct("coda", "lr-0.01"), correct("softmax", "default")
    delta = 100 * sum(m - b for m, b in zip(mine, theirs, strict=True)) / len(mine)
    delta_text = "0.00" if abs(delta) < 0.005 else f"{delta:+.2f}"
    assert re.search(rf"\| {re.escape(delta_text)} \[[-+]?\d+\.\d\d, [-+]?\d+\.\d\d\] \|", page), delta_text
    # the held-out test is stated, and the command that reproduces the page is on it
    assert "evaluated once" in page and "python -m matching.study study_file=" in page
    csv_lines = (study / "study" / "study.csv").read_text().splitlines()
    assert csv_lines[0].startswith("task,family,label,parts,setting,split,metric,mean")
    assert len(csv_lines) == 1 + 4 * 3  # two families × dev and test × the two-label task's acc, f1 and ap
    assert {row["metric"] for row in _rows(study / "study" / "study.csv")} == {"acc", "f1", "ap"}


def copy_of_study(study: Path, tmp: Path) -> Path:
    """The fixture study, its data and its runs copied into `tmp`, every file naming the copy's own files (as a
    relaunch from the copy would read them)."""
    shutil.copytree(study / "study", tmp / "study")
    shutil.copytree(study / "data", tmp / "data")
    text = (study / "fixture_study.yaml").read_text().replace(str(study / "data"), str(tmp / "data"))
    (tmp / "fixture_study.yaml").write_text(text)
    for config in (tmp / "study" / "runs").rglob("config.yaml"):
        config.write_text(config.read_text().replace(str(study), str(tmp)))
    return tmp


@pytest.mark.slow  # two sweeps and the test again (~25 s); a relaunched sweep's skipping and resuming, in test_cluster
def test_a_stopped_study_trains_only_what_is_missing(study, tmp_path):
    tmp = copy_of_study(study, tmp_path)
    runs = tmp / "study" / "runs" / "overlap"
    shutil.rmtree(runs / "coda" / "lr-0.01" / "seed2")  # never started
    (runs / "softmax" / "default" / "seed2" / "metrics.json").unlink()  # stopped after its last checkpoint
    (tmp / "study" / "test.json").unlink()
    done_before = {p: p.stat().st_mtime_ns for p in runs.rglob("best.ckpt")}
    run_study(tmp)
    retrained = {p for p, mtime in done_before.items() if p.stat().st_mtime_ns != mtime}
    assert retrained <= {runs / "softmax" / "default" / "seed2" / "checkpoints" / "best.ckpt"}
    assert (runs / "coda" / "lr-0.01" / "seed2" / "metrics.json").is_file()
    assert (runs / "softmax" / "default" / "seed2" / "metrics.json").is_file()
    logs = {p.parent.name: p.read_text() for p in runs.rglob("train.log")}
    assert "skipped, complete" in (runs / "coda" / "lr-1e-09" / "seed1" / "train.log").read_text()
    assert "resumed from" in (runs / "softmax" / "default" / "seed2" / "train.log").read_text()
    assert logs


def test_a_test_split_that_cannot_be_read_is_one_paragraph_and_the_study_goes_on_after_it(study, tmp_path):
    """The test evaluation runs in the study's process: a user's error there (the test file moved away) fails that
    run's test alone, says so in a paragraph without a traceback, and a relaunch with the file back tests it."""
    copy_of_study(study, tmp_path)
    (tmp_path / "study" / "test.json").unlink()
    (tmp_path / "data" / "test.tsv").rename(tmp_path / "test.tsv.away")
    done = run_study(tmp_path, "train_runs=false", check=False)
    assert done.returncode != 0
    assert "the test evaluation of 6 runs failed" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("test split not found") == 1 and done.stderr.count("the same error as above") == 5
    assert json.loads((tmp_path / "study" / "test.json").read_text())["runs"] == {}
    (tmp_path / "test.tsv.away").rename(tmp_path / "data" / "test.tsv")
    run_study(tmp_path, "train_runs=false")
    tested = json.loads((tmp_path / "study" / "test.json").read_text())["runs"]
    assert len(tested) == 6
    kept = study / "study" / "runs" / "overlap" / "coda" / "lr-0.01" / "seed1" / "eval_test.json"
    again = tmp_path / "study" / "runs" / "overlap" / "coda" / "lr-0.01" / "seed1" / "eval_test.json"
    assert _metrics(again.parent, again.name) == _metrics(kept.parent, kept.name)  # as the first study's process


def test_a_changed_study_is_not_tested_again_in_the_same_folder(study, tmp_path):
    shutil.copytree(study / "study", tmp_path / "study")
    record = json.loads((tmp_path / "study" / "test.json").read_text())
    record["selection_sha256"] = "0" * 64
    (tmp_path / "study" / "test.json").write_text(json.dumps(record))
    shutil.copy(study / "fixture_study.yaml", tmp_path / "fixture_study.yaml")
    done = run_study(tmp_path, "train_runs=false", check=False)
    assert done.returncode == 2
    assert "a study tests once" in done.stderr and "Traceback" not in done.stderr


def test_selection_ties_go_to_the_setting_listed_first():
    spec = read_spec({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {
        "f": {"overrides": ["aligner=attention"], "grid": {"aligner.score": ["dot", "general"]}}}})  # fmt: skip
    results = {}
    for slug, value in (("score-dot", 0.5), ("score-general", 0.5 + 1e-9)):
        from matching.studies.results import RunResult

        planned = PlannedRun("x", "f", Setting((f"aligner.score={slug.split('-')[1]}",)), 1)
        config = {"task": {"monitor": "val/acc", "monitor_mode": "max"}}
        results[("x", "f", slug, 1)] = RunResult(planned, Path("."), config, {"val/acc": value})
    assert choose(spec, results)[0].chosen == Setting(("aligner.score=dot",))
    results[("x", "f", "score-general", 1)] = RunResult(
        results[("x", "f", "score-general", 1)].planned, Path("."), {"task": {"monitor": "val/acc"}}, {"val/acc": 0.6}
    )
    assert choose(spec, results)[0].chosen == Setting(("aligner.score=general",))


def test_the_plan_and_the_budget():
    spec = read_spec({"name": "t", "tasks": {"x": ["task=pairs"]}, "seeds": [1, 2, 3], "budget": 1, "families": {
        "a": {"overrides": ["aligner=softmax"]},
        "b": {"overrides": ["aligner=attention"], "grid": {"aligner.score": ["dot", "general"]}}}})  # fmt: skip
    planned = selection_runs(spec)
    # budget 1: the grid's first setting only, so nothing to select: every seed at once
    assert [r.relative for r in planned] == [f"x/a/default/seed{s}" for s in (1, 2, 3)] + [
        f"x/b/score-dot/seed{s}" for s in (1, 2, 3)
    ]
    assert planned[3].overrides(spec)[-3:] == ["seed=1", "test=false", "hydra.sweep.subdir=x/b/score-dot/seed1"]


@pytest.mark.parametrize(
    ("node", "tasks", "message"),
    [
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {"overrides": ["aligner=coda"]}},
          "baselines": ["softmax"]}, None, "not one of the families"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {"overrides": ["aligner=coda"]}}},
         ["nosuch"], "neither a task of study t"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {"overrides": ["aligner=coda"],
          "grids": {}}}}, None, "unknown keys ['grids']"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "seeds": [1], "selection_seeds": [2],
          "families": {"a": {"overrides": ["aligner=coda"]}}}, None, "must be among study.seeds"),
        ({"name": "bad name", "families": {"a": {}}}, None, "a name of letters"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {}, "b": {}},
          "primary": {"family": "a", "against": "cross_encoder"}}, None, "neither a family (a, b) nor an outside"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {}, "b": {}},
          "primary": {"y": {"family": "a", "against": "b"}}}, None, "study.primary.y: 'y' is not one of the study's"),
        ({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {}, "b": {}},
          "primary": {"family": "a"}}, None, "study.primary is {family: <family>"),
    ],
)  # fmt: skip
def test_a_mistaken_study_is_named(node, tasks, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_spec(node, tasks)


def test_a_study_declares_its_primary_comparison_for_every_task_or_per_task():
    families = {"a": {}, "b": {}, "c": {}}
    tasks = {"x": ["task=pairs"], "y": ["task=pairs"]}
    spec = read_spec({"name": "t", "tasks": tasks, "families": families, "outside": ["cross_encoder"],
                      "primary": {"family": "a", "against": "cross_encoder"}})  # fmt: skip
    assert spec.primary == {"x": Primary("a", "cross_encoder"), "y": Primary("a", "cross_encoder")}
    per_task = {"x": {"family": "a", "against": "b"}, "y": {"family": "c", "against": "b", "declared": "after"}}
    spec = read_spec({"name": "t", "tasks": tasks, "families": families, "primary": per_task}, ["y"])
    assert spec.primary == {"y": Primary("c", "b", "after")}  # x is not run: its declaration is not read
    assert read_spec({"name": "t", "tasks": tasks, "families": families}).primary == {}


def test_the_page_says_the_declared_primary_comparison_and_when_it_was_declared():
    from matching.studies.page import primary_text

    families = {"a": {"label": "CoDA, centred"}, "b": {"label": "softmax, 40 epochs"}, "c": {}}
    tasks = {"x": ["task=pairs"], "y": ["task=pairs"], "z": ["task=pairs"]}
    spec = read_spec({"name": "t", "tasks": tasks, "families": families, "primary": {
        "x": {"family": "a", "against": "b"}, "y": {"family": "a", "against": "b"},
        "z": {"family": "c", "against": "b", "declared": "after the runs, once TrecQA was seen"}}})  # fmt: skip
    said = primary_text(spec)
    assert said == ("CoDA, centred against softmax, 40 epochs (x, y; declared before its runs); c against softmax, "
                    "40 epochs (z; declared after the runs, once TrecQA was seen)")  # fmt: skip


def test_a_task_config_can_stand_for_a_study_task():
    spec = read_spec({"name": "t", "tasks": {"x": ["task=pairs"]}, "families": {"a": {"overrides": []}}}, ["trecqa"])
    assert spec.tasks == {"trecqa": ("task=trecqa",)}


def test_the_shipped_studies_read():
    from omegaconf import OmegaConf

    for path in sorted((ROOT / "conf" / "study").glob("*.yaml")):
        spec = read_spec(OmegaConf.load(path))
        assert spec.baselines and spec.families, path.name


@pytest.mark.slow
def test_a_study_through_submitit_local_processes_equals_the_basic_launchers(study, tmp_path):
    """The job-list sweeper hands a stage's runs to another launcher as they are: submitit's local processes, side
    by side, give each run the numbers of the basic launcher's in-process runs."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    shutil.copy(study / "fixture_study.yaml", tmp_path / "fixture_study.yaml")
    run_study(tmp_path, "launcher=submitit_local", "+study.test=false")
    for metrics in (study / "study" / "runs").rglob("metrics.json"):
        twin = tmp_path / "study" / metrics.relative_to(study / "study")
        assert _metrics(twin.parent)["val/acc"] == _metrics(metrics.parent)["val/acc"], metrics.parent
    assert (tmp_path / "study" / "runs" / ".submitit").is_dir()
    assert not (tmp_path / "study" / "test.json").exists()  # +study.test=false overrode the study file's key


def test_the_reproduce_hint_names_where_the_data_must_be():
    from matching.studies.page import data_hint

    own = {"claims": ["task=pairs", "task.splits.train.path=claims_train.tsv", "task.splits.dev.path=claims_dev.tsv"]}
    said = " ".join(data_hint(own, "python -m matching.study study_file=mine.yaml"))
    assert "paths.data_dir" not in said and "from the folder that holds the files of claims" in said
    bench = {"snli_check": ["experiment=snli_dev_split"]}
    assert "paths.data_dir=/path/to/corpora" in " ".join(data_hint(bench, "python -m matching.study study=x"))
    assert data_hint(bench, "python -m matching.study study=x paths.data_dir=/corpora") == []


def test_a_family_against_its_twin_on_the_page_and_in_the_seed_rule(study, tmp_path):
    """`study.twins` compares a family with one other family alone (centred against uncentred, say): the page gets a
    table of those comparisons, counted once in Holm's family with the baselines' (A against B and B against A are
    one comparison), and the sequential rule adds seeds for them too."""
    import shutil

    from matching.studies.seeds import comparisons

    spec_file = study / "fixture_study.yaml"
    node = yaml.safe_load(spec_file.read_text())
    node["twins"] = {"coda": "softmax"}
    copy = tmp_path / "twins"
    shutil.copytree(study / "study", copy / "study")
    (copy / "fixture_study.yaml").write_text(yaml.safe_dump(node, sort_keys=False))
    run_study(copy, "train_runs=false", f"paths.data_dir={study}")
    page = (copy / "study" / "study.md").read_text()
    table = page.split("### Each family against its twin", 1)[1]
    dev = next(line for line in table.splitlines() if line.startswith("| CoDA") or line.startswith("| coda"))
    cells = [c.strip() for c in dev.strip("|").split("|")]
    assert cells[1:4] == ["softmax, F=none", "dev", "acc"]
    baseline_row = next(line for line in page.split("### Confirmed on dev", 1)[1].splitlines()
                        if line.startswith("| coda") and "| acc |" in line)  # fmt: skip
    assert cells[4] in baseline_row  # the same Δ and interval as against the baseline
    assert "m = 3" not in dev  # deduplicated: softmax vs coda once per metric (acc, f1, ap are separate families)
    spec = read_spec(node)
    assert spec.name == "fixture" and page.startswith("# Study `fixture`")  # the study keeps its own name
    assert comparisons(spec) == [("overlap", "coda", "softmax")]
    node["twins"] = {"coda": "nosuch"}
    with pytest.raises(ConfigError, match="study.twins: 'nosuch' is not one of the families"):
        read_spec(node)


def test_two_families_that_would_train_the_same_config_are_refused_before_any_run(tmp_path):
    """study=scitail once compared `aligner=coda` with `aligner=coda aligner.center_tokens=true`: CoDA centres by
    default, so both trained the same model. A study says so before it trains, naming both families."""
    from matching.errors import ConfigError
    from matching.studies.protocol import check_families_differ
    from matching.studies.spec import read_spec

    spec = read_spec(yaml.safe_load((ROOT / "conf" / "study" / "scitail.yaml").read_text()))
    check_families_differ(spec)
    same = dataclasses.replace(spec.families["coda"], overrides=("aligner=coda",))
    with pytest.raises(ConfigError, match="the families coda and coda_centred train the same config"):
        check_families_differ(dataclasses.replace(spec, families={**spec.families, "coda": same}))


@pytest.mark.slow  # about 70 compositions (10 s); every study also checks its own before it trains
def test_every_shipped_studys_families_differ():
    from matching.studies.protocol import check_families_differ

    for path in sorted((ROOT / "conf" / "study").glob("*.yaml")):
        check_families_differ(read_spec(yaml.safe_load(path.read_text())))


def test_the_weights_table_says_what_each_familys_weights_do_and_keeps_it_for_runs_without_weights(study, tmp_path):
    from types import SimpleNamespace

    from matching.studies.page import weight_table

    runs = study / "study" / "runs" / "overlap"
    spec = SimpleNamespace(seeds=(1, 2, 3), families={"softmax": SimpleNamespace(label="softmax, F=none"),
                                                        "coda": SimpleNamespace(label="coda")})  # fmt: skip
    firsts = [SimpleNamespace(planned=SimpleNamespace(family=f), folder=runs / f / slug / "seed1")
              for f, slug in (("softmax", "default"), ("coda", "lr-0.01"))]  # fmt: skip
    out = tmp_path / "weights_overlap.json"
    lines = weight_table(spec, "overlap", firsts, out)
    table = "\n".join(lines)
    # a softmax's weights are never below 0 and never all 0 for a token; CoDA's M takes both signs
    assert "| softmax, F=none | `softmax_a` |" in table and "| 0.0 % | 0.0 % |" in table
    shares = json.loads(out.read_text())
    assert set(shares["softmax"]) == {"softmax_a", "softmax_b"} and set(shares["coda"]) == {"M"}
    assert shares["softmax"]["softmax_a"]["negative"] == 0 and 0 < shares["coda"]["M"]["negative"] < 1
    # runs pulled with their small files alone (no checkpoint): the table is the one kept
    pulled = [SimpleNamespace(planned=r.planned, folder=tmp_path / "pulled" / r.planned.family) for r in firsts]
    assert weight_table(spec, "overlap", pulled, out) == lines


def test_the_weights_table_records_and_prints_each_aligners_learned_scalars(tmp_path, monkeypatch):
    """A differential run's λ goes into the table's JSON beside its matrices' shares and is printed under the table;
    a run pulled without its checkpoint keeps it; an aligner without learned scalars has no entry."""
    from types import SimpleNamespace

    import matching.results.split_matrices as split_module
    import matching.saved.run_folder as run_folder
    from matching.model.aligners import DifferentialAligner, SoftmaxAligner
    from matching.studies.page import LEARNED, weight_table

    differential = DifferentialAligner(4, hidden=3)
    aligners = {"differential": differential, "softmax": SoftmaxAligner(4)}
    shares = {"cells": 10, "negative": 0.0, "attends_to_nothing": 0.0, "min": 0.0}
    monkeypatch.setattr(run_folder, "load_run", lambda checkpoint, settings: SimpleNamespace(
        model=SimpleNamespace(aligner=aligners[Path(checkpoint).parts[-4]])))  # fmt: skip
    monkeypatch.setattr(split_module, "split_matrices", lambda run, split: SimpleNamespace(
        summary=lambda: {"w_a": dict(shares), "e": {"cells": 10, "negative": 0.5}}))  # fmt: skip
    spec = SimpleNamespace(seeds=(1,), families={f: SimpleNamespace(label=f"{f} label") for f in aligners})
    firsts = []
    for family in aligners:
        (tmp_path / family / "seed1" / "checkpoints").mkdir(parents=True)
        (tmp_path / family / "seed1" / "checkpoints" / "best.ckpt").write_bytes(b"")
        firsts.append(SimpleNamespace(planned=SimpleNamespace(family=family), folder=tmp_path / family / "seed1"))
    out = tmp_path / "weights_task.json"
    lines = weight_table(spec, "task", firsts, out)
    saved = json.loads(out.read_text())
    lam = differential.weight_lambda().item()
    assert saved["differential"] == {"w_a": {k: shares[k] for k in ("cells", "negative", "attends_to_nothing")},
                                     LEARNED: {"λ": pytest.approx(lam)}}  # fmt: skip
    assert LEARNED not in saved["softmax"]
    table = "\n".join(lines)
    assert f"| differential label | λ | {lam:.4g} |" in table and "| softmax label | λ" not in table
    assert table.count("| `w_a` |") == 2 and "`learned`" not in table  # the scalars are no matrix row
    pulled = [SimpleNamespace(planned=r.planned, folder=tmp_path / "pulled" / r.planned.family) for r in firsts]
    assert weight_table(spec, "task", pulled, out) == lines


def test_a_runs_minutes_are_left_out_where_they_cover_only_its_last_sitting(tmp_path):
    """A run resumed by a version that timed only its last sitting (no `sittings` in metrics.json, the resume in its
    train.log) has no whole minutes; one that counts its sittings, or was never resumed, has its train_seconds."""
    from matching.studies.results import training_minutes

    log = tmp_path / "train.log"
    log.write_text("[2026-11-28 22:10:01,101][matching.training.run][INFO] - sweep run /x/seed5: resumed from "
                   "/x/seed5/checkpoints/last.ckpt\n")  # fmt: skip
    assert training_minutes(tmp_path, {"train_seconds": 263.0}) is None
    assert training_minutes(tmp_path, {"train_seconds": 600.0, "sittings": 2}) == 10.0
    log.write_text("[2026-11-28 22:10:01,101][matching.training.run][INFO] - sweep run /x/seed5: started\n")
    assert training_minutes(tmp_path, {"train_seconds": 120.0}) == 2.0
    log.unlink()
    assert training_minutes(tmp_path, {"train_seconds": 120.0}) == 2.0 and training_minutes(tmp_path, {}) is None


def test_one_study_process_at_a_time_in_a_folder_and_a_gone_ones_file_taken_over(tmp_path, caplog):
    """A second `matching.study` in a folder whose study runs stops before anything, naming the process that holds it
    (two would train the same runs into the same files); a holder on another machine cannot be asked, so the message
    says how to free the folder; the file of a process that is gone is taken over; the holder's file goes with it."""
    import json
    import os
    import socket
    import subprocess
    import sys

    from matching.errors import RunError
    from matching.studies.running import RUNNING, only_process

    held = tmp_path / RUNNING
    with only_process(tmp_path):
        mine = json.loads(held.read_text())
        assert mine["pid"] == os.getpid() and mine["host"] == socket.gethostname()
    assert not held.exists()

    held.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "since": "2030-01-02 03:04:05"}))
    with pytest.raises(RunError, match=rf"another matching.study \(process {os.getppid()} on .*since 2030-01-02"):
        with only_process(tmp_path):
            pass
    assert json.loads(held.read_text())["pid"] == os.getppid()  # not ours to remove

    held.write_text(json.dumps({"pid": 1, "host": "another-machine", "since": "2030-01-02 03:04:05"}))
    with pytest.raises(RunError, match=f"if that process is gone, delete {held}"):
        with only_process(tmp_path):
            pass

    import threading

    held.write_text("")  # created, not yet written: a holder between its create and its write is not taken over
    writer = threading.Timer(0.3, lambda: held.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(),
                                                                      "since": "now"})))  # fmt: skip
    writer.start()
    with pytest.raises(RunError, match=rf"another matching.study \(process {os.getppid()} "):
        with only_process(tmp_path):
            pass
    writer.join()

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    held.write_text(json.dumps({"pid": int(gone.stdout), "host": socket.gethostname(), "since": "earlier"}))
    with caplog.at_level("WARNING", logger="matching.studies.running"), only_process(tmp_path):
        assert json.loads(held.read_text())["pid"] == os.getpid()
    assert "no longer running" in caplog.text and not held.exists()
