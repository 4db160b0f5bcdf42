"""The sweep report over a real (tiny) multirun, launched through `matching.train -m` as a user would."""

import csv
import json
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import cli_overrides

from matching.report import main as report_main


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    from matching.train import main as train_main

    sweep = tmp_path_factory.mktemp("sweep")
    argv = ["-m", "aligner=softmax,coda", "seed=1,2,3", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep / 'multirun'}",
            *cli_overrides(sweep)]  # fmt: skip
    assert train_main(argv) == 0
    return sweep / "multirun"


def test_report_table_matches_values_recomputed_from_the_runs(multirun, tmp_path, capsys):
    assert report_main([f"runs={multirun}", f"out={tmp_path}"]) == 0
    printed = capsys.readouterr().out
    runs = [json.loads(p.read_text()) | {"dir": p.parent.name} for p in multirun.rglob("metrics.json")]
    assert len(runs) == 6
    rows = list(csv.DictReader(open(tmp_path / "report.csv")))
    assert {(r["aligner"], r["split"], r["metric"]) for r in rows} == {
        ("softmax", "dev", "acc"),
        ("coda", "dev", "acc"),
    }
    for row in rows:
        values = [100 * r["val/acc"] for r in runs if f"_{row['aligner']}_" in r["dir"]]
        assert int(row["n"]) == len(values) == 3
        assert float(row["mean"]) == pytest.approx(statistics.fmean(values), abs=0.006)
        assert float(row["std"]) == pytest.approx(statistics.stdev(values), abs=0.006)
        assert row["paper_test"] == {"softmax": "84.61", "coda": "85.71"}[row["aligner"]]
        f = {"softmax": "F=parikh", "coda": "F=none"}[row["aligner"]]  # each aligner's default score function
        assert row["variant"] == f
        assert (
            f"| snli | {row['aligner']} | {f} | dev | acc | {float(row['mean']):.2f} ± {float(row['std']):.2f} | 3 |"
            in printed
        )
    png = (tmp_path / "report.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert (tmp_path / "report.md").read_text().startswith("| task | aligner |")


def test_report_accepts_single_run_directories(multirun, tmp_path):
    dirs = sorted(str(p.parent) for p in multirun.rglob("metrics.json"))[:2]
    assert report_main([f"runs=[{','.join(dirs)}]", f"out={tmp_path}"]) == 0


def test_report_on_a_folder_without_runs_is_a_clear_error(tmp_path, capsys):
    assert report_main([f"runs={tmp_path}"]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert report_main([f"runs={tmp_path / 'missing'}"]) == 2
    assert "no such run" in capsys.readouterr().err


def test_report_help_runs():
    done = subprocess.run([sys.executable, "-m", "matching.report", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "multirun" in done.stdout


def test_ablation_runs_get_one_row_per_setting_and_seeds_are_averaged(tmp_path):
    """Runs that differ in an override other than the seed (an ablation sweep) are reported as separate rows."""
    import yaml

    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    values = {("false", "none"): [0.70, 0.72], ("true", "none"): [0.66, 0.68], ("true", "center"): [0.69, 0.69]}
    for n, ((center_e, gate), maps) in enumerate(values.items()):
        for seed, value in enumerate(maps, 1):
            run = tmp_path / f"{n}_{seed}"
            (run / ".hydra").mkdir(parents=True)
            config = {
                "task": {"name": "wikiqa", "report_metrics": ["map", "mrr"]},
                "aligner": {
                    "_target_": "matching.model.aligners.CoDAAligner",
                    "center_e": center_e == "true",
                    "gate": gate,
                    "projection": "none",
                },
                "seed": seed,
                "loss": {"class_weights": None},
            }
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            (run / "metrics.json").write_text(json.dumps({"val/map": value, "val/mrr": value}))
            overrides = ["task=wikiqa", "paths.data_dir=/corpora", f"aligner.center_e={center_e}",
                         f"aligner.gate={gate}", f"seed={seed}"]  # fmt: skip
            overrides += ["loss.class_weights=null"] if n == 0 else []
            (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    rows = [r for r in summarise(find_runs([tmp_path])) if r.metric == "map"]
    got = {r.variant: (r.mean, r.n) for r in rows}
    assert got == {  # loss.class_weights=null, spelled out by some runs only, is the same value everywhere
        "F=none aligner.center_e=false aligner.gate=none": (71.0, 2),
        "F=none aligner.center_e=true aligner.gate=none": (67.0, 2),
        "F=none aligner.center_e=true aligner.gate=center": (69.0, 2),
    }
    assert all(r.paper_test is None for r in rows)  # the paper's test numbers belong to the default settings


def test_an_option_of_one_aligner_is_no_part_of_another_aligners_variant(tmp_path):
    """A study that crosses attention's parts with softmax and CoDA: `aligner.score` varies among the attention runs
    and names their rows; softmax and CoDA, which have no such option, keep their plain F (no `aligner.score=null`)."""
    import yaml

    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    settings = [("softmax", {"projection": "none"}, []), ("coda", {"projection": "none"}, []),
                ("attention", {"score": "dot", "heads": 1}, ["aligner.score=dot"]),
                ("attention", {"score": "scaled_dot", "heads": 1}, ["aligner.score=scaled_dot"]),
                ("attention", {"score": "dot", "heads": 4}, ["aligner.score=dot", "aligner.heads=4"])]  # fmt: skip
    for n, (aligner, options, overrides) in enumerate(settings):
        run = tmp_path / f"{n}"
        (run / ".hydra").mkdir(parents=True)
        config = {"task": {"name": "snli"}, "aligner": options, "seed": 1, "choices": {"aligner": aligner}}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.json").write_text(json.dumps({"val/acc": 0.6 + n / 100}))
        overrides = ["task=snli", f"aligner={aligner}", *overrides, "seed=1"]
        overrides += ["aligner.projection=none"] if "projection" in options else []
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    rows = summarise(find_runs([tmp_path]))
    assert sorted((r.aligner, r.variant) for r in rows) == [
        ("attention", "aligner.heads=1 aligner.score=dot"),
        ("attention", "aligner.heads=1 aligner.score=scaled_dot"),
        ("attention", "aligner.heads=4 aligner.score=dot"),
        ("coda", "F=none"),
        ("softmax", "F=none"),
    ]


def test_report_against_a_baseline_on_the_trained_sweep(multirun, tmp_path, capsys):
    """Every run wrote its per-example scores; the difference is the difference of the seed-averaged accuracies."""
    assert report_main([f"runs={multirun}", f"out={tmp_path}", "baseline=softmax"]) == 0
    for scores in multirun.glob("*/scores/val.csv"):
        lines = scores.read_text().splitlines()
        assert lines[0] == "unit,a,b,label,predicted,p_predicted,correct" and len(lines) > 2
    rows = {r["aligner"]: r for r in csv.DictReader(open(tmp_path / "report.csv"))}
    assert rows["softmax"]["note"] == "baseline" and rows["coda"]["baseline"] == "softmax F=parikh"
    coda = rows["coda"]
    assert float(coda["diff"]) == pytest.approx(float(coda["mean"]) - float(rows["softmax"]["mean"]), abs=0.02)
    assert float(coda["ci_low"]) <= float(coda["diff"]) <= float(coda["ci_high"]) and 0 < float(coda["p_value"]) <= 1
    assert "| Δ [95 % CI, seeds and units] | p (Holm) | verdict (the method)" in capsys.readouterr().out
    assert (tmp_path / "disagreements.md").read_text().startswith("# Where the aligners disagree")


def fake_run(root, name, task, aligner, seed, metrics, overrides=(), projection=None, units=None, pairs=None, **config):
    """A finished run directory as train writes it, with per-unit scores (scores/val.csv) when `units` is given."""
    import yaml

    run = root / name
    (run / ".hydra").mkdir(parents=True)
    aligner_node = {"_target_": "matching.model.aligners.X"} | ({"projection": projection} if projection else {})
    report_metrics = {"wikiqa": ["map", "mrr"], "snli": ["acc"]}[task]
    paper = {"wikiqa": {"softmax": {"map": 66.4, "mrr": 68.0}, "coda": {"map": 70.5, "mrr": 72.4}},
             "snli": {"softmax": {"acc": 84.61}, "coda": {"acc": 85.71}}}[task]  # fmt: skip
    cfg = {"task": {"name": task, "kind": "rank" if task == "wikiqa" else "classify", "report_metrics": report_metrics,
                    "paper": paper}, "aligner": aligner_node, "seed": seed,
           "choices": {"task": task, "aligner": aligner, "debug": config.pop("debug", None),
                       "embeddings": "minilm" if "embeddings" in config else "glove"}} | config  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"cwd": str(root / "project")}}}))
    if units is not None:
        (run / "scores").mkdir()
        header = "unit,question,candidates,positives,ap,rr,top1,top2,top5"
        lines = [f"{u},what is {u},3,1,{v},{v},0,0,1" for u, v in units.items()]
        (run / "scores" / "val.csv").write_text("\n".join([header, *lines]) + "\n")
    if pairs is not None:
        lines = ["unit,index,answer,label,score,rank"]
        lines += [f"{u},{i},answer {i} of {u},{label},{score},0" for u, i, label, score in pairs]
        (run / "scores" / "val_pairs.csv").write_text("\n".join(lines) + "\n")
    return run


def test_controlled_rows_are_compared_with_the_baseline_of_the_same_score_function(tmp_path, capsys):
    questions = [f"Q{i}" for i in range(40)]
    low = {q: 0.5 for q in questions}
    high = {q: 0.5 + 0.01 * (i + 1) for i, q in enumerate(questions)}  # better on every question
    for seed in (1, 2, 3):
        for aligner, f, units in (("softmax", "none", low), ("softmax", "parikh", low), ("coda", "none", high),
                                  ("coda", "parikh", low)):  # fmt: skip
            mean = sum(units.values()) / len(units)
            fake_run(tmp_path, f"{aligner}_{f}_{seed}", "wikiqa", aligner, seed, {"val/map": mean, "val/mrr": mean},
                     [f"aligner={aligner}", f"aligner.projection={f}", f"seed={seed}"], f, units)  # fmt: skip
        fake_run(tmp_path, f"conflict_{seed}", "wikiqa", "conflict", seed, {"val/map": 0.5, "val/mrr": 0.5},
                 ["aligner=conflict", f"seed={seed}"], None, low)  # fmt: skip
    rows = {(r.aligner, r.variant, r.metric): r.comparison for r in report(tmp_path, "softmax")}
    coda = rows[("coda", "F=none", "map")]
    assert coda.baseline == "softmax F=none" and coda.p_value < 0.01 and coda.units == 40
    assert coda.diff == pytest.approx(100 * sum(high[q] - low[q] for q in questions) / 40, abs=0.01)
    assert coda.ci_low > 0
    same = rows[("coda", "F=parikh", "map")]  # identical scores to its baseline's
    assert same.baseline == "softmax F=parikh" and same.diff == 0 and same.p_value == 1
    assert "several softmax rows" in rows[("conflict", None, "map")].note  # no F: which softmax is ambiguous
    rows = {(r.aligner, r.variant, r.metric): r.comparison for r in report(tmp_path, "softmax F=parikh")}
    assert rows[("conflict", None, "map")].baseline == "softmax F=parikh"
    assert rows[("softmax", "F=none", "map")].baseline == "softmax F=parikh"  # F's own effect, not itself
    assert rows[("coda", "F=none", "map")].baseline == "softmax F=none"  # the same F first
    assert coda.verdict == "resolved" and 0 < coda.detectable < coda.diff
    printed = capsys.readouterr().out
    assert "| wikiqa | coda | F=none | dev | map | 70.50 ± 0.00 | 3 | 70.5 | +20.50 [" in printed
    assert "| resolved; detectable: " in printed


def test_a_difference_in_noise_is_reported_as_not_resolved_with_what_would_be(tmp_path, capsys):
    """CoDA +1 MAP point over softmax on 122 questions whose differences spread ±15 points, every seed alike: p is
    large, and the report says 'not resolved' with the difference these seeds and questions could detect (here the
    units' alone: Student's t on 121 degrees of freedom), that more seeds would not help, and never 'equal'."""
    questions = [f"Q{i}" for i in range(122)]
    base = {q: 0.6 for q in questions}
    coda = {q: 0.6 + 0.01 + 0.15 * (-1) ** i for i, q in enumerate(questions)}
    for seed in (1, 2, 3):
        for aligner, units in (("softmax", base), ("coda", coda)):
            mean = sum(units.values()) / len(units)
            fake_run(tmp_path, f"{aligner}_{seed}", "wikiqa", aligner, seed, {"val/map": mean, "val/mrr": mean},
                     [f"aligner={aligner}", "aligner.projection=none", f"seed={seed}"], "none", units)  # fmt: skip
    rows = {(r.aligner, r.metric): r.comparison for r in report(tmp_path, "softmax")}
    row = rows[("coda", "map")]
    from scipy import stats

    assert row.verdict == "not resolved" and row.p_value > 0.05 and row.units_limit
    t = stats.t.ppf(0.975, 121) + stats.t.ppf(0.8, 121)
    assert row.detectable == pytest.approx(100 * t * 0.15 * (122 / 121) ** 0.5 / 122**0.5, abs=0.02)
    printed = capsys.readouterr().out
    assert (
        f"| not resolved; detectable: {row.detectable:.2f}; more seeds would not detect it (the units limit it) |"
        in printed
    )


def test_a_row_whose_same_f_baseline_has_not_finished_says_so(tmp_path):
    """softmax F=none still training (config, no metrics): CoDA F=none is not compared with another F instead."""
    scores = {f"Q{i}": 0.5 for i in range(10)}
    for aligner, f in (("softmax", "parikh"), ("coda", "none"), ("softmax", "none")):
        run = fake_run(tmp_path, f"{aligner}_{f}", "wikiqa", aligner, 1, {"val/map": 0.5, "val/mrr": 0.5},
                       [f"aligner={aligner}", f"aligner.projection={f}", "seed=1"], f, scores)  # fmt: skip
    (run / "metrics.json").unlink()
    (run / "scores" / "val.csv").unlink()
    rows = {(r.aligner, r.variant, r.metric): r for r in report(tmp_path, "softmax F=parikh")}
    coda = rows[("coda", "F=none", "map")].comparison
    assert coda.diff is None and coda.note == "no finished softmax F=none run yet to compare with"


def report(root, baseline):
    from matching.results.study import report as make_report

    return make_report([root], root / "out", baseline)


def test_disagreements_show_each_models_top_answers(tmp_path):
    pairs_good = [("Q1", 0, 1, 2.0), ("Q1", 1, 0, -1.0), ("Q2", 2, 1, 1.0), ("Q2", 3, 0, 0.0)]
    pairs_bad = [("Q1", 0, 1, -2.0), ("Q1", 1, 0, 1.0), ("Q2", 2, 1, 1.0), ("Q2", 3, 0, 0.0)]
    fake_run(tmp_path, "coda", "wikiqa", "coda", 1, {"val/map": 1.0, "val/mrr": 1.0}, ["aligner=coda"], "none",
             {"Q1": 1.0, "Q2": 1.0}, pairs_good)  # fmt: skip
    fake_run(tmp_path, "softmax", "wikiqa", "softmax", 1, {"val/map": 0.75, "val/mrr": 0.75}, ["aligner=softmax"],
             "parikh", {"Q1": 0.5, "Q2": 1.0}, pairs_bad)  # fmt: skip
    report(tmp_path, "softmax")
    text = (tmp_path / "out" / "disagreements.md").read_text()
    assert "## wikiqa, dev map: coda F=none against softmax F=parikh" in text
    q1 = text.split("### Q1: what is Q1", 1)[1]
    assert "| 1 | ✓ answer 0 of Q1 (+2.00) | ✗ answer 1 of Q1 (+1.00) |" in q1
    assert text.index("### Q1") < text.index("### Q2")  # the largest difference first


def test_the_report_of_a_newcomers_four_runs_is_readable(tmp_path, capsys):
    """A debug wiring run, one run with a relative data path and one with an absolute one to the same files, and one
    SNLI run: the debug run is left out, the variants stay short, the paper shows, one seed says n = 1."""
    project = tmp_path / "project"
    relative = {"embeddings": {"path": "data/embeddings/minilm.txt.gz", "dim": 300}}
    absolute = {"embeddings": {"path": str(project / "data/embeddings/minilm.txt.gz"), "dim": 300}}
    fake_run(tmp_path, "debug", "wikiqa", "softmax", 1, {"val/map": 0.6667, "val/mrr": 0.6667},
             ["task=wikiqa", "debug=fast"], "parikh", debug="fast")  # fmt: skip
    fake_run(tmp_path, "soft", "wikiqa", "softmax", 1, {"val/map": 0.66, "val/mrr": 0.67},
             ["task=wikiqa", "embeddings=minilm", "embeddings.path=data/embeddings/minilm.txt.gz"], "parikh",
             **relative)  # fmt: skip
    given = ["task=wikiqa", "aligner=coda", "embeddings=minilm", f"embeddings.path={absolute['embeddings']['path']}"]
    fake_run(tmp_path, "coda", "wikiqa", "coda", 1, {"val/map": 0.70, "val/mrr": 0.71}, given, "none", **absolute)
    fake_run(tmp_path, "snli", "snli", "softmax", 1, {"val/acc": 0.62}, ["task=snli"], "parikh")
    from matching.results.charts import write_chart
    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    rows = summarise(find_runs([tmp_path]))
    assert {(r.task, r.aligner, r.variant, r.metric): r.paper_test for r in rows} == {
        ("wikiqa", "softmax", "F=parikh", "map"): 66.4, ("wikiqa", "softmax", "F=parikh", "mrr"): 68.0,
        ("wikiqa", "coda", "F=none", "map"): 70.5, ("wikiqa", "coda", "F=none", "mrr"): 72.4,
        ("snli", "softmax", "F=parikh", "acc"): 84.61,
    }  # fmt: skip
    assert write_chart(rows, tmp_path / "chart.png") == ["snli: dev acc", "wikiqa: dev map", "wikiqa: dev mrr"]
    assert report_main([f"runs={tmp_path}", f"out={tmp_path / 'out'}"]) == 0
    printed = capsys.readouterr().out
    assert "| wikiqa | softmax | F=parikh | dev | map | 66.00 (n = 1) | 1 | 66.4 |" in printed
    assert "66.67" not in printed and "± 0.00" not in printed
    assert "3 runs; left out 1 wiring/debug run (debug=fast)" in printed


def test_a_difference_that_rounds_to_zero_prints_without_a_sign():
    from matching.results.tables import points

    assert [points(x) for x in (-0.001, 0.004, 0.5, -1.234)] == ["0.00", "0.00", "+0.50", "-1.23"]


def test_a_value_that_is_not_there_is_none_in_a_row_and_an_empty_cell_or_a_dash_in_the_tables():
    """A row without a variant, a paper number or a test against the baseline holds None, not "": report.csv
    writes an empty cell for it, the Markdown table a dash; the missing seeds are named in both."""
    from matching.results.rows import Comparison, Row
    from matching.results.tables import to_csv, to_markdown

    row = Row("snli", "conflict", None, "dev", "acc", 61.5, 0.5, 2, (1, 2), None, 3, {3: "not started"},
              Comparison(note="no softmax row for this task"))  # fmt: skip
    header, line = to_csv([row]).splitlines()
    assert header.split(",") == ["task", "aligner", "variant", "split", "metric", "mean", "std", "n", "seeds",
                                 "paper_test", "planned", "missing", "baseline", "diff", "ci_low", "ci_high",
                                 "p_value", "p_adjusted", "compared_with", "df", "seed_counts", "units", "detectable",
                                 "verdict", "seeds_needed", "units_limit", "units_ci_low", "units_ci_high", "units_p",
                                 "note"]  # fmt: skip
    assert line == ("snli,conflict,,dev,acc,61.5,0.5,2,1 2,,3,seed 3 (not started),,,,,,,,,,,,,,False,,,,"
                    "no softmax row for this task")  # fmt: skip
    assert (
        "| snli | conflict | – | dev | acc | 61.50 ± 0.50 | 2 of 3 | – | no softmax row for this task | – | – | – "
        "| seed 3 (not started) |" in to_markdown([row])
    )
    assert to_csv([replace(row, comparison=None)]).splitlines()[0].endswith(",planned,missing")


def test_the_ranking_puts_the_largest_difference_first_and_marks_what_each_comparison_resolves(tmp_path):
    from matching.results.charts import ranked, write_ranking
    from matching.results.rows import Comparison, Row

    def row(aligner, variant, mean, comparison):
        return Row("wikiqa", aligner, variant, "dev", "map", mean, 1.0, 3, (1, 2, 3), None, 3, {}, comparison)

    def tested(diff, p, detectable):
        verdict = "resolved" if p < 0.05 else "not resolved"
        return Comparison("softmax F=none", diff, diff - 2, diff + 2, p, 122, detectable, verdict)

    rows = [
        row("softmax", "F=none", 69.4, Comparison(note="baseline")),
        row("coda", "F=none", 70.8, tested(1.44, 0.457, 5.29)),
        row("attention", "aligner.distribution=sparsemax", 72.9, tested(3.5, 0.01, 2.9)),
        row("attention", "aligner.distribution=sigmoid", 65.0, tested(-4.4, 0.002, 3.1)),
        row("conflict", None, 68.0, None),  # not compared: left out of the ranking
    ]
    assert [r.label for r in ranked(rows)[("wikiqa", "map", "dev")]] == [
        "attention aligner.distribution=sparsemax", "coda F=none", "attention aligner.distribution=sigmoid",
    ]  # fmt: skip
    assert write_ranking(rows, tmp_path / "ranking.png") == ["wikiqa: dev map"]
    assert (tmp_path / "ranking.png").read_bytes().startswith(b"\x89PNG")
    assert write_ranking(rows[:1], tmp_path / "none.png") == [] and not (tmp_path / "none.png").exists()


def test_report_shows_the_metrics_asked_for(tmp_path, capsys):
    """metrics=[f1,ap] shows those logged metrics instead of the task's report_metrics; a name no run logged is a
    clear error listing the ones they did."""
    from matching.errors import ConfigError
    from matching.results.study import report as make_report

    for seed, (f1, ap) in enumerate([(0.70, 0.80), (0.74, 0.84)], start=1):
        fake_run(tmp_path, f"s{seed}", "snli", "softmax", seed, {"val/acc": 0.8, "val/f1": f1, "val/ap": ap})
    rows = make_report([tmp_path], tmp_path / "out", metrics=["f1", "ap"])
    assert [(r.metric, r.mean, r.n) for r in rows] == [("f1", 72.0, 2), ("ap", 82.0, 2)]
    assert "| f1 |" in (tmp_path / "out" / "report.md").read_text()
    with pytest.raises(ConfigError, match=r"metrics=\['ndcg10'\]: no run's metrics.json has it; the runs logged acc"):
        make_report([tmp_path], tmp_path / "out", metrics=["ndcg10"])


def test_one_attention_family_beside_softmax_is_named_by_its_parts(tmp_path):
    """`report` over softmax and one attention family: the attention row's options do not vary (there is one such
    row), yet they are what the row is, so its variant names them instead of leaving it blank."""
    import yaml

    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    for n, (aligner, options, overrides) in enumerate(
        [("softmax", {"projection": "none"}, ["aligner.projection=none"]),
         ("attention", {"distribution": "sparsemax", "score": "dot"}, ["aligner.distribution=sparsemax"])]
    ):  # fmt: skip
        run = tmp_path / f"{n}"
        (run / ".hydra").mkdir(parents=True)
        config = {"task": {"name": "snli"}, "aligner": options, "seed": 1, "choices": {"aligner": aligner}}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.json").write_text(json.dumps({"val/acc": 0.6}))
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["task=snli", f"aligner={aligner}", *overrides]))
    rows = summarise(find_runs([tmp_path]))
    assert sorted((r.aligner, r.variant) for r in rows) == [
        ("attention", "aligner.distribution=sparsemax"),
        ("softmax", "F=none"),
    ]


def test_many_comparisons_are_holm_adjusted_and_a_pair_counts_once():
    """Three tested rows of one metric and split, one of them the same pair seen from both baselines: m = 2, the
    smaller p doubled, the larger kept (step-down), each verdict from its adjusted p; another metric is its own
    family."""
    from matching.results.rows import Comparison, Row
    from matching.results.tables import adjust_for_many

    def row(aligner, metric, baseline, p):
        c = Comparison(baseline, 3.0, 1.0, 5.0, p, 122, 2.0, "resolved" if p < 0.05 else "not resolved")
        return Row("wikiqa", aligner, None, "dev", metric, 70.0, 1.0, 3, (1, 2, 3), None, 3, {}, c)

    against_softmax = [row("coda", "map", "softmax", 0.03), row("conflict", "map", "softmax", 0.04),
                       row("coda", "mrr", "softmax", 0.03)]  # fmt: skip
    against_coda = [row("softmax", "map", "coda", 0.03)]  # the coda/softmax pair again
    first, second = adjust_for_many([against_softmax, against_coda])
    coda, conflict, mrr = (r.comparison for r in first)
    assert (coda.p_adjusted, coda.compared_with, coda.verdict) == (0.06, 2, "not resolved")
    assert (conflict.p_adjusted, conflict.verdict) == (0.06, "not resolved")
    assert second[0].comparison.p_adjusted == 0.06
    assert (mrr.p_adjusted, mrr.compared_with, mrr.verdict) == (0.03, 1, "resolved")


def test_report_does_not_call_two_groups_of_seeds_of_one_configuration_different(tmp_path, capsys):
    """The issue's A/A case through `report`: 8 seeds of one configuration on 122 questions, whose seeds differ by
    several MAP points, labelled as two aligners (seeds 1-4 and 5-8). The test over questions alone calls them
    different; the verdict, which counts the seeds, does not."""
    import numpy as np

    rng = np.random.default_rng(12)
    quality = rng.random(122)
    shifts = rng.normal(0, 0.04, 8)  # each seed's luck: ±4 MAP points, as CoDA's at the demo's settings
    for seed, shift in enumerate(shifts, start=1):
        units = {f"Q{i}": float(np.clip(q + shift + rng.normal(0, 0.05), 0, 1)) for i, q in enumerate(quality)}
        aligner = "coda" if seed <= 4 else "softmax"
        mean = sum(units.values()) / len(units)
        fake_run(tmp_path, f"{aligner}_{seed}", "wikiqa", aligner, seed, {"val/map": mean, "val/mrr": mean},
                 [f"aligner={aligner}", "aligner.projection=none", f"seed={seed}"], "none", units)  # fmt: skip
    rows = {(r.aligner, r.metric): r.comparison for r in report(tmp_path, "softmax")}
    row = rows[("coda", "map")]
    assert row.units_p < 0.01 and row.units_ci_high < 0  # these trained models do differ on these questions
    assert row.verdict == "not resolved" and row.ci_low < 0 < row.ci_high and row.seed_counts == "4 vs 4"
    assert "| not resolved; detectable: " in capsys.readouterr().out


def test_one_seed_a_side_gets_no_verdict_about_the_method_and_the_charts_still_draw(tmp_path, capsys):
    """One seed per aligner: the difference is shown, with no interval and no p, and 'too few seeds'; the test over
    questions alone is still there, and the ranking chart draws the row without an interval."""
    base = {f"Q{i}": 0.5 for i in range(40)}
    better = {q: 0.5 + 0.01 * (i % 7) for i, q in enumerate(base)}
    for aligner, units in (("softmax", base), ("coda", better)):
        mean = sum(units.values()) / len(units)
        fake_run(tmp_path, aligner, "wikiqa", aligner, 1, {"val/map": mean, "val/mrr": mean},
                 [f"aligner={aligner}", "aligner.projection=none", "seed=1"], "none", units)  # fmt: skip
    rows = report(tmp_path, "softmax")
    coda = next(r.comparison for r in rows if r.aligner == "coda" and r.metric == "map")
    assert coda.verdict == "too few seeds" and coda.seed_counts == "1 vs 1" and coda.units_p < 0.05
    printed = capsys.readouterr().out
    assert "too few seeds (1 vs 1): a verdict about the method needs 3 a side" in printed
    assert (tmp_path / "out" / "ranking.png").read_bytes().startswith(b"\x89PNG")
