"""Hyper-parameter search with the Optuna sweeper (only when the sweep extra is installed)."""

import pytest
import yaml
from conftest import cli_overrides
from omegaconf import OmegaConf


def test_optuna_sweep_runs_two_trials(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from matching.train import main as train_main

    argv = ["-m", "sweep=optuna_coda", "hydra.sweeper.n_trials=2", "trainer.max_epochs=1",
            f"hydra.sweep.dir={tmp_path / 'sweep'}", *cli_overrides(tmp_path)]  # fmt: skip
    assert train_main(argv) == 0
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert set(results["best_params"]) >= {"optim.lr", "model.dropout", "aligner.gate", "aligner.alpha"}
    assert 0 <= results["best_value"] <= 1
    assert len(list((tmp_path / "sweep").glob("*/metrics.json"))) == 2


def test_the_grid_of_a_sweep_is_the_one_hydras_basic_sweeper_expands():
    """matching.training.sweeps.grid (which tells the report and the sweep log which runs a sweep was meant to hold) on
    the public Override API, against BasicSweeper.split_arguments (hydra._internal: a test may compare with it)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from matching.training.sweeps import grid

    for arguments in (["aligner=softmax,coda", "seed=1,2,3", "task=wikiqa"], ["seed=1,2", "seed=3,4", "optim.lr=1e-3"],
                      ["aligner=choice(coda,conflict)", "+x=range(2)", "model.hidden=8"]):  # fmt: skip
        overrides = OverridesParser.create().parse_overrides(arguments)
        (want,) = BasicSweeper.split_arguments(overrides, None)
        assert grid(overrides) == [tuple(job) for job in want]


def test_a_run_saved_before_a_key_existed_is_the_same_run_and_a_changed_value_is_not(tmp_path, caplog):
    """A sweep or a study relaunched after an upgrade that added a key (at the default that keeps the earlier
    behaviour) finds its finished runs; a key whose value differs is still another run."""
    import json

    from matching.errors import RunError
    from matching.files import package_node
    from matching.training.sweeps import prior_run

    # today's config has the data module's node, which a run saved before it is given (earlier_versions)
    cfg = OmegaConf.create({"seed": 1, "data": {"cache": True, "on_bad_example": "error"}, "optim": {"lr": 3e-4},
                            "datamodule": package_node("train", "datamodule")})  # fmt: skip
    earlier = {"seed": 1, "data": {"cache": True}, "optim": {"lr": 3e-4}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(earlier))
    (tmp_path / "metrics.json").write_text(json.dumps({"val/acc": 0.5}))
    assert prior_run(cfg, tmp_path).state == "complete"
    assert "without data.on_bad_example" in caplog.text
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(earlier | {"optim": {"lr": 1e-3}}))
    with pytest.raises(RunError, match=r"optim.lr: 0.001 -> 0.0003"):
        prior_run(cfg, tmp_path)


def test_a_config_groups_choice_does_not_set_the_keys_a_newer_version_added_to_its_file(make_cfg, tmp_path):
    """study=scitail's runs named `aligner=softmax` before `aligner.output_gate` existed: relaunched, they are the
    same runs. Naming the new key on the command line is another run."""
    import json

    from matching.errors import RunError
    from matching.saved.run_folder import saved_form
    from matching.training.sweeps import prior_run

    def saved_without_the_gate(cfg, folder):
        saved = saved_form(cfg)
        del saved["aligner"]["output_gate"]
        folder.mkdir()
        (folder / "config.yaml").write_text(yaml.safe_dump(saved))
        (folder / "metrics.json").write_text(json.dumps({"val/acc": 0.5}))
        return folder

    chosen = make_cfg("aligner=softmax")
    assert prior_run(chosen, saved_without_the_gate(chosen, tmp_path / "chosen")).state == "complete"
    named = make_cfg("aligner=softmax", "aligner.output_gate=true")
    with pytest.raises(RunError, match=r"aligner.output_gate: '\(absent\)' -> True"):
        prior_run(named, saved_without_the_gate(chosen, tmp_path / "named"))
