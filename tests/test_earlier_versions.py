"""A run saved before the package's rooms (its config.yaml names `matching.aligners.CoDAAligner`, `matching.model.
DecomposableAttention`, ...) still loads with the same answers, and a relaunched sweep still finds it complete."""

import json
import shutil

import numpy as np
import yaml
from omegaconf import OmegaConf

from matching.configs import build
from matching.saved.earlier_versions import MOVED_MODULES, RENAMED_TARGETS, current_target, current_targets, upgraded

EARLIER = {new: old for old, new in MOVED_MODULES.items()}
RENAMED = {new: old for old, new in RENAMED_TARGETS.items()}


def as_saved_before_the_rooms(node):
    """`node` (plain YAML) with every moved `_target_` named as it was before the rooms (the data node: the data
    module, which it built then)."""
    if isinstance(node, dict):
        for key, value in node.items():
            value = RENAMED.get(value, value) if key == "_target_" and isinstance(value, str) else value
            module, _, name = value.rpartition(".") if key == "_target_" and isinstance(value, str) else ("", "", "")
            if module in EARLIER:
                node[key] = f"{EARLIER[module]}.{name}"
            else:
                as_saved_before_the_rooms(value)
    elif isinstance(node, list):
        for item in node:
            as_saved_before_the_rooms(item)
    return node


def test_each_moved_target_is_read_with_todays_name_and_the_rest_are_left_as_they_are():
    assert current_target("matching.aligners.CoDAAligner") == "matching.model.aligners.CoDAAligner"
    assert current_target("matching.model.DecomposableAttention") == "matching.model.decomposable.DecomposableAttention"
    assert current_target("matching.data.contextual.ContextualEncoder") == "matching.model.contextual.ContextualEncoder"
    for before in ("matching.data.datamodule.PairDataModule", "matching.training.datamodule.PairDataModule"):
        assert current_target(before) == "matching.training.datamodule.DataSettings"  # the data node's settings
    for today in ("matching.model.aligners.CoDAAligner", "matching.data.tasks.Task", "torch.optim.Adam"):
        assert current_target(today) == today
    node = {"model": {"_target_": "matching.model.DecomposableAttention",
                      "aligner": {"_target_": "matching.aligners.X"}},
            "callbacks": [{"_target_": "matching.callbacks.EpochProgressBar"}], "seed": 1}  # fmt: skip
    assert len(current_targets(node)) == 3
    assert node["model"]["aligner"]["_target_"] == "matching.model.aligners.X"
    assert node["callbacks"][0]["_target_"] == "matching.training.callbacks.EpochProgressBar"


def test_a_run_saved_before_the_rooms_loads_with_the_same_answers_and_a_sweep_finds_it(snli_run, tmp_path, caplog):
    from matching import Matcher
    from matching.training.sweeps import prior_run

    run_dir, _ = snli_run
    earlier = tmp_path / "earlier"
    shutil.copytree(run_dir, earlier)
    saved = yaml.safe_load((earlier / "config.yaml").read_text())
    as_saved_before_the_rooms(saved)
    text = yaml.safe_dump(saved)
    assert "matching.model.DecomposableAttention" in text and "matching.model.aligners" not in text
    assert "matching.data.datamodule.PairDataModule" in text
    (earlier / "config.yaml").write_text(text)

    pairs = [("A man plays a guitar.", "A person makes music."), ("A dog runs.", "A cat sleeps on a sofa.")]
    np.testing.assert_array_equal(Matcher.load(earlier).logits(pairs), Matcher.load(run_dir).logits(pairs))

    today = OmegaConf.load(run_dir / "config.yaml")
    prior = prior_run(today, earlier)
    assert prior.state == "complete" and prior.metrics == json.loads((run_dir / "metrics.json").read_text())
    # its data node builds today's data settings, the same as the run's own
    assert build(upgraded(OmegaConf.load(earlier / "config.yaml")).data) == build(today.data)


def test_the_old_import_paths_of_the_extension_points_give_todays_modules_with_a_warning():
    """docs/how-to/extending.md told users `from matching.aligners import Aligner` (and matching.layers,
    matching.data.embeddings) before the rooms: their code still imports, the same classes, and is told where
    they live now."""
    import subprocess
    import sys

    script = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as seen:
    from matching.aligners import Aligner
    from matching.layers import pair_mask
    from matching.data.embeddings import EmbeddingSource
import matching.model.aligners, matching.model.layers, matching.model.embeddings
assert Aligner is matching.model.aligners.Aligner and pair_mask is matching.model.layers.pair_mask
assert EmbeddingSource is matching.model.embeddings.EmbeddingSource
print(sorted(str(w.message).split(":")[0] for w in seen if w.category is DeprecationWarning))
try:
    import matching.attention
except ModuleNotFoundError:
    print("no other name")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "['matching.aligners is now matching.model.aligners', 'matching.data.embeddings is now "
        "matching.model.embeddings', 'matching.layers is now matching.model.layers']",
        "no other name",
    ]


def as_saved_before_the_loss_group(node: dict, kind: str = "pointwise") -> dict:
    """A saved config (plain YAML) as a version before the `loss` config group and the `system` node wrote it:
    `loss: {kind, margin, class_weights}`, no `system`."""
    node["loss"] = {"kind": kind, "margin": 1.0, "class_weights": node["loss"].get("class_weights")}
    del node["system"]
    return node


def test_each_old_loss_kind_is_read_as_the_loss_groups_node_that_builds_the_same_loss():
    from hydra.utils import instantiate

    from matching.saved.earlier_versions import current_form
    from matching.training.losses import ListwiseSoftmax, PairwiseHinge, PointwiseCrossEntropy

    built = {}
    for kind, settings in [("pointwise", {"class_weights": [1.0, 3.0]}), ("pairwise", {"margin": 2.5}),
                           ("listwise", {})]:  # fmt: skip
        saved = {"seed": 1, "loss": {"kind": kind, "margin": 1.0, "class_weights": None} | settings}
        assert current_form(saved) == [f"loss -> {saved['loss']['_target_']}"]
        assert current_form(saved) == []  # today's form is left as it is
        built[kind] = instantiate(saved["loss"])
    assert isinstance(built["pointwise"], PointwiseCrossEntropy) and built["pointwise"].class_weights.tolist() == [1, 3]
    assert isinstance(built["pairwise"], PairwiseHinge) and built["pairwise"].margin == 2.5
    assert isinstance(built["listwise"], ListwiseSoftmax)
    saved = OmegaConf.create({"seed": 1, "optim": {}, "task": {"kind": "classify"}})  # before the ranking losses
    assert upgraded(saved).loss == {"_target_": "matching.training.losses.pointwise.PointwiseCrossEntropy",
                                    "class_weights": None}  # fmt: skip


def test_a_run_saved_before_the_loss_group_loads_resumes_and_a_sweep_finds_it(snli_run, tmp_path, caplog):
    from matching import Matcher
    from matching.training.sweeps import prior_run

    run_dir, _ = snli_run
    earlier = tmp_path / "earlier"
    shutil.copytree(run_dir, earlier)
    saved = as_saved_before_the_loss_group(yaml.safe_load((earlier / "config.yaml").read_text()))
    (earlier / "config.yaml").write_text(yaml.safe_dump(saved))
    assert "_target_" not in saved["loss"] and "system" not in saved

    pairs = [("A man plays a guitar.", "A person makes music."), ("A dog runs.", "A cat sleeps on a sofa.")]
    np.testing.assert_array_equal(Matcher.load(earlier).logits(pairs), Matcher.load(run_dir).logits(pairs))

    today = OmegaConf.load(run_dir / "config.yaml")
    prior = prior_run(today, earlier)
    assert prior.state == "complete" and prior.metrics == json.loads((run_dir / "metrics.json").read_text())
    # The resumed run builds today's loss and system from the old form: the same config as a run saved today.
    resumed = upgraded(OmegaConf.load(earlier / "config.yaml"))
    assert resumed.loss == today.loss and resumed.system == today.system


def test_runs_saved_before_and_after_the_loss_group_share_their_rows_in_a_report(tmp_path):
    """A sweep over `loss.kind=pairwise,listwise` finished by a later version (`loss=...`): each loss is one row,
    named as today's command line names it, whichever spelling its runs were trained with."""
    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    old = {"pairwise": "matching.training.losses.pairwise.PairwiseHinge",
           "listwise": "matching.training.losses.listwise.ListwiseSoftmax"}  # fmt: skip
    for seed, (form, kind, value) in enumerate(
        [("old", "pairwise", 0.70), ("new", "pairwise", 0.72), ("old", "listwise", 0.60), ("new", "listwise", 0.62)], 1
    ):
        run = tmp_path / f"{form}_{kind}"
        (run / ".hydra").mkdir(parents=True)
        choices = {"task": "wikiqa", "aligner": "coda"}
        if form == "old":
            loss, override = {"kind": kind, "margin": 1.0, "class_weights": None}, f"loss.kind={kind}"
        else:
            loss, override = {"_target_": old[kind]} | ({"margin": 1.0} if kind == "pairwise" else {}), f"loss={kind}"
            choices["loss"] = kind
        config = {"task": {"name": "wikiqa", "report_metrics": ["map"]}, "seed": seed, "loss": loss,
                  "aligner": {"_target_": "matching.model.aligners.CoDAAligner"}, "choices": choices}  # fmt: skip
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.json").write_text(json.dumps({"val/map": value}))
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["task=wikiqa", override, f"seed={seed}"]))
    rows = [r for r in summarise(find_runs([tmp_path])) if r.metric == "map"]
    assert {r.variant: r.n for r in rows} == {"loss=pairwise": 2, "loss=listwise": 2}
