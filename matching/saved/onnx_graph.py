"""A trained model as an ONNX graph: token ids in (and an encoder's word pieces, for a contextual run), class
probabilities and logits out, every size dynamic. What `matching-export format=onnx` writes and what `backend=onnx`
runs (matching.inference.onnx_backend)."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from matching.errors import RunError
from matching.model.embeddings import EmbeddingSource, ServingInputs
from matching.model.pipeline import TextPipeline


class ServingModel(nn.Module):
    """Token ids in; class probabilities and logits out; the alignment matrices and masks are dropped.

    It wraps the model that MatchingSystem.predict_step calls (the inference path of every other command), not
    the LightningModule itself, which TorchScript and ONNX cannot trace outside a Trainer."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.eval()

    def forward(self, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        logits = self.model(a, b).logits
        return torch.softmax(logits, dim=-1), logits


def _onnx_cdist(x1, x2, p: float = 2.0, compute_mode: int | None = None):
    """ONNX has no cdist: ‖x1_i − x2_j‖_p from broadcast differences (CoDA uses p = 1)."""
    from onnxscript import opset18 as op

    diff = op.Sub(op.Unsqueeze(x1, op.Constant(value_ints=[-2])), op.Unsqueeze(x2, op.Constant(value_ints=[-3])))
    axis = op.Constant(value_ints=[-1])
    if p == 1.0:
        return op.ReduceSum(op.Abs(diff), axis, keepdims=0)
    return op.Pow(op.ReduceSum(op.Pow(op.Abs(diff), op.Constant(value_float=p)), axis, keepdims=0),
                  op.Constant(value_float=1.0 / p))  # fmt: skip


def example_inputs(vocab_size: int, batch: int = 3, len_a: int = 7, len_b: int = 5, seed: int = 0):
    """Random ids with ragged padding, for tracing and parity checks."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(2, vocab_size, (batch, len_a), generator=g)
    b = torch.randint(2, vocab_size, (batch, len_b), generator=g)
    for i in range(1, batch):  # every example but the first is shorter than the batch maximum
        a[i, len_a - i :] = 0
        b[i, max(1, len_b - i) :] = 0
    return a, b


def write_onnx(model: nn.Module, source: EmbeddingSource, text: TextPipeline, path: Path) -> None:
    """The model as an ONNX graph at `path`: token ids in (and an encoder's word pieces, for a source with inputs
    of its own), probabilities and logits out."""
    _require_onnx()
    own = source.export.serving_model(model, text)  # a model that takes more than token ids
    batch, len_a, len_b = torch.export.Dim("batch"), torch.export.Dim("len_a"), torch.export.Dim("len_b")
    ids = ServingInputs(ServingModel(model), example_inputs(len(text.vocab)), ["a", "b"],
                        ({0: batch, 1: len_a}, {0: batch, 1: len_b}))  # fmt: skip
    _write_onnx(own or ids, path)


def _write_onnx(serving: ServingInputs, path: Path) -> None:
    """torch.onnx's dynamo exporter, every size dynamic, with our translation of cdist (its deprecation and
    dynamic-shape notes about its own internals are not the user's to read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*axis name.*will not be used.*")
        _export(serving, path)


def _export(serving: ServingInputs, path: Path) -> None:
    program = torch.onnx.export(
        serving.module,
        serving.args,
        custom_translation_table={torch.ops.aten._cdist_forward.default: _onnx_cdist},
        input_names=serving.names,
        output_names=["probs", "logits"],
        dynamo=True,
        dynamic_shapes=serving.shapes,
        external_data=False,
        verbose=False,  # no step-by-step report of the exporter's passes
    )
    program.save(str(path))


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError as err:
        raise RunError('ONNX export needs the export extra: pip install -e ".[export]"') from err
