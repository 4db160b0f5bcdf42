"""`capture=true` (matching.training.replay): the whole training step as ours, replayed as a CUDA graph per batch
shape on a GPU. What a CPU can check: the step itself (the same weights as Lightning's step for the same seed), the
batches it is given (indices and bucket widths), Lightning's bookkeeping around it, and the settings it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import compose_train

from matching.data.encoding import PackedSide
from matching.errors import ConfigError
from matching.training.batching import IndexCollator, PadCollator
from matching.training.build import build_datamodule
from matching.training.config_checks import check_config
from matching.training.losses import Distillation, DistilledLoss, ListwiseSoftmax, PointwiseCrossEntropy
from matching.training.run import train


def checkpoint_weights(run_dir) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return state["state_dict"] | {"optimizer": state["optimizer_states"][0]["state"], "step": state["global_step"]}


@pytest.mark.parametrize("aligner", ["softmax", "coda"])
def test_the_replayed_step_trains_the_same_weights_as_lightnings_step(tmp_path, aligner, caplog):
    """Same seed, same batches (widths rounded to 8 either way): the same weights, optimiser state and step count to
    the bit after an epoch of 6 steps with dropout on; and the same dev metrics."""
    runs = {}
    caplog.set_level("INFO", logger="matching.training.system")
    for capture in (False, True):
        cfg = compose_train(tmp_path / str(capture), f"aligner={aligner}", "trainer.max_epochs=1", "data.batch_size=2",
                            "data.pad_to=8", f"capture={str(capture).lower()}", "model.dropout=0.2")  # fmt: skip
        metrics = train(cfg)
        runs[capture] = (checkpoint_weights(tmp_path / str(capture) / "run"), metrics)
    (eager, eager_metrics), (replayed, replayed_metrics) = runs[False], runs[True]
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("capture=true: ")]
    assert steps == [
        f"capture=true: {replayed['step']} training steps run eagerly (no CUDA device: nothing to capture)"
    ]
    assert eager["step"] == replayed["step"] == 6
    for name, tensor in eager.items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(tensor, replayed[name]), name
    for pid, state in eager["optimizer"].items():
        for key, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(replayed["optimizer"][pid][key])), (pid, key)
    assert eager_metrics["val/acc"] == replayed_metrics["val/acc"]
    assert eager_metrics["val/loss"] == pytest.approx(replayed_metrics["val/loss"], abs=0)


def test_the_index_batches_carry_bucket_widths_and_gather_what_the_padded_batch_holds(tmp_path):
    cfg = compose_train(tmp_path, "capture=true", "data.pad_to=8")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    split = dm.splits["train"]
    indices = list(range(min(5, len(split))))
    batch = IndexCollator(split, pad_to=8)(indices)
    padded = PadCollator(split, pad_to=8)(indices)
    assert set(batch) == {"index", "widths"}
    assert batch["widths"] == (padded["a"].shape[1], padded["b"].shape[1])
    assert all(w % 8 == 0 for w in batch["widths"])
    gathered = split.packed("cpu").gather(batch["index"], batch["widths"])
    for key in ("a", "b", "label", "group", "index"):
        assert torch.equal(gathered[key], padded[key]), key
    assert isinstance(dm.loader("train", train=True).collate_fn, IndexCollator)
    assert isinstance(dm.loader("dev").collate_fn, PadCollator)  # evaluation batches are as without capture


def test_a_packed_side_gathers_any_width_at_least_the_longest():
    side = PackedSide.of([np.array([3, 4, 5]), np.array([6]), np.array([7, 8])])
    index = torch.tensor([2, 0])
    assert side.gather(index, 4).tolist() == [[7, 8, 0, 0], [3, 4, 5, 0]]
    assert side.width(np.array([2, 0]), pad_to=8) == 8
    assert side.width(np.array([1]), pad_to=1) == 1


def test_capture_defaults_to_widths_rounded_to_eight(tmp_path):
    dm = build_datamodule(compose_train(tmp_path, "capture=true"))
    assert dm.settings.pad_to == 8 and dm.training_batches.as_indices


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["trainer.gradient_clip_val=5.0"], "trainer.gradient_clip_val=5.0"),
        (["+trainer.accumulate_grad_batches=2"], "trainer.accumulate_grad_batches=2"),
        (["compile=true", "compile_mode=reduce-overhead"], "compile_mode=reduce-overhead"),
        (["trainer.precision=16-mixed"], "trainer.precision=16-mixed"),
        (["trainer.devices=2"], "trainer.devices=2"),
        (["trainer.devices=[0,1]"], "trainer.devices=[0, 1]"),
    ],
)
def test_settings_a_whole_step_graph_cannot_hold_are_refused_before_any_data_is_read(tmp_path, overrides, named):
    cfg = compose_train(tmp_path, "capture=true", *overrides)
    with pytest.raises(ConfigError, match="capture=true") as err:
        check_config(cfg)
    assert named in str(err.value) and "capture=false" in str(err.value)


def test_an_encoders_inputs_cannot_be_replayed_which_is_said_before_any_data_is_read(tmp_path):
    cfg = compose_train(tmp_path, "capture=true", "embeddings=minilm_contextual")
    with pytest.raises(ConfigError, match="capture=false") as err:
        check_config(cfg)  # the encoder's files are not needed to say so
    assert "embeddings=ContextualEncoder" in str(err.value)
    check_config(compose_train(tmp_path / "static", "capture=true"))  # a table of vectors is replayed


def test_only_losses_with_the_same_operations_for_every_batch_are_captured():
    """StepReplay captures a loss unless it compares a query's candidates (its operations follow each batch's
    queries): pointwise, and distillation's per-pair KL, are captured; the ranking losses and distillation's
    margin_mse and listwise_kl are not."""
    teacher = torch.zeros(4, 2)
    kl = DistilledLoss(PointwiseCrossEntropy(), teacher, Distillation(("teacher",), "kl"))
    mse = DistilledLoss(PointwiseCrossEntropy(), teacher, Distillation(("teacher",), "margin_mse"))
    listwise = DistilledLoss(ListwiseSoftmax(), teacher, Distillation(("teacher",), "kl"))
    assert not PointwiseCrossEntropy().compares_candidates and not kl.compares_candidates
    assert ListwiseSoftmax().compares_candidates and mse.compares_candidates and listwise.compares_candidates


def test_a_ranking_loss_trains_through_the_same_step(tmp_path):
    """The listwise loss runs eagerly through the replayed step's code (nothing of it is captured, even on a GPU):
    the same weights as Lightning's step."""
    weights = {}
    for capture in (False, True):
        cfg = compose_train(tmp_path / str(capture), "task=wikiqa", "loss=listwise", "trainer.max_epochs=1",
                            "data.pad_to=8", f"capture={str(capture).lower()}")  # fmt: skip
        train(cfg)
        weights[capture] = checkpoint_weights(tmp_path / str(capture) / "run")
    assert weights[False]["step"] == weights[True]["step"] > 0
    for name, tensor in weights[False].items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(tensor, weights[True][name]), name
