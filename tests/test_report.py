"""The sweep report over a real (tiny) multirun, launched as a user would, in a subprocess."""

import csv
import json
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT, SUBPROCESS_ENV, cli_overrides

from matching.report import main as report_main


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("sweep")
    cmd = [sys.executable, "-m", "matching.train", "-m", "aligner=softmax,coda", "seed=1,2", "trainer.max_epochs=2",
           f"hydra.sweep.dir={sweep / 'multirun'}", *cli_overrides(sweep)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return sweep / "multirun"


def test_report_table_matches_values_recomputed_from_the_runs(multirun, tmp_path, capsys):
    assert report_main([f"runs={multirun}", f"out={tmp_path}"]) == 0
    printed = capsys.readouterr().out
    runs = [json.loads(p.read_text()) | {"dir": p.parent.name} for p in multirun.rglob("metrics.json")]
    assert len(runs) == 4
    rows = list(csv.DictReader(open(tmp_path / "report.csv")))
    assert {(r["aligner"], r["split"], r["metric"]) for r in rows} == {
        ("softmax", "dev", "acc"),
        ("coda", "dev", "acc"),
    }
    for row in rows:
        values = [100 * r["val/acc"] for r in runs if f"_{row['aligner']}_" in r["dir"]]
        assert int(row["n"]) == len(values) == 2
        assert float(row["mean"]) == pytest.approx(statistics.fmean(values), abs=0.006)
        assert float(row["std"]) == pytest.approx(statistics.stdev(values), abs=0.006)
        assert row["paper_test"] == {"softmax": "84.61", "coda": "85.71"}[row["aligner"]]
        assert (
            f"| snli | {row['aligner']} | – | dev | acc | {float(row['mean']):.2f} ± {float(row['std']):.2f} | 2 |"
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

    from matching.report import find_runs, summarise

    values = {("false", "none"): [0.70, 0.72], ("true", "none"): [0.66, 0.68], ("true", "center"): [0.69, 0.69]}
    for n, ((center_e, gate), maps) in enumerate(values.items()):
        for seed, value in enumerate(maps, 1):
            run = tmp_path / f"{n}_{seed}"
            (run / ".hydra").mkdir(parents=True)
            config = {
                "task": {"name": "wikiqa", "report_metrics": ["map", "mrr"]},
                "aligner": {"_target_": "matching.aligners.CoDAAligner", "center_e": center_e == "true", "gate": gate},
                "seed": seed,
                "loss": {"class_weights": None},
            }
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            (run / "metrics.json").write_text(json.dumps({"val/map": value, "val/mrr": value}))
            overrides = ["task=wikiqa", "paths.data_dir=/corpora", f"aligner.center_e={center_e}",
                         f"aligner.gate={gate}", f"seed={seed}"]  # fmt: skip
            overrides += ["loss.class_weights=null"] if n == 0 else []
            (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    rows = [r for r in summarise(find_runs([tmp_path])) if r["metric"] == "map"]
    got = {r["variant"]: (r["mean"], r["n"]) for r in rows}
    assert got == {  # loss.class_weights=null, spelled out by some runs only, is the same value everywhere
        "aligner.center_e=false aligner.gate=none": (71.0, 2),
        "aligner.center_e=true aligner.gate=none": (67.0, 2),
        "aligner.center_e=true aligner.gate=center": (69.0, 2),
    }
    assert all(r["paper_test"] == "" for r in rows)  # the paper's test numbers belong to the default settings
