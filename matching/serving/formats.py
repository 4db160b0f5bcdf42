"""The files a trained run is served from by other runtimes (`format=onnx|torchscript`) or shared as (`format=hub`,
see matching.serving.sharing): the export behind the `export` command (matching/export.py says what is written).

`format=onnx|torchscript` writes the model (`model.onnx` or `model.pt`), a copy of `vocab.txt`, `tokenizer.json`
and `serving.json` (matching.serving.spec), so that a client needs nothing of this package. The exported model takes
two int64 tensors of token ids, a (batch, len_a) and b (batch, len_b), 0-padded on the right, with batch and both
lengths dynamic, and returns class probabilities `probs` and `logits` (batch, classes).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from matching.data.embeddings import EmbeddingSource, ServingInputs
from matching.data.pipeline import TextPipeline
from matching.data.vocab import hf_tokenizer
from matching.files import write_json, write_text_atomic
from matching.runs import RunError, TrainedRun
from matching.serving.sharing import shared_config, write_folder
from matching.serving.spec import serving_spec

log = logging.getLogger(__name__)

FORMATS = {"onnx": "model.onnx", "torchscript": "model.pt", "hub": "model.safetensors"}


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


def check_format(fmt: str, source: type[EmbeddingSource], checkpoint: str) -> None:
    """RunError unless a run with an embedding source of this class can be exported in `fmt` (asked before the
    source is built, which may load an encoder)."""
    if fmt not in FORMATS:
        raise RunError(f"format must be one of {sorted(FORMATS)}, got {fmt!r}")
    refusal = source.export_refusal(fmt, checkpoint)
    if refusal:
        raise RunError(refusal)


def write_onnx(model: nn.Module, source: EmbeddingSource, text: TextPipeline, path: Path) -> None:
    """The model as an ONNX graph at `path`: token ids in (and an encoder's word pieces, for a source with inputs
    of its own), probabilities and logits out."""
    _require_onnx()
    own = source.serving_model(model, text)  # a model that takes more than token ids
    batch, len_a, len_b = torch.export.Dim("batch"), torch.export.Dim("len_a"), torch.export.Dim("len_b")
    ids = ServingInputs(ServingModel(model), example_inputs(len(text.vocab)), ["a", "b"],
                        ({0: batch, 1: len_a}, {0: batch, 1: len_b}))  # fmt: skip
    _write_onnx(own or ids, path)


def _write_onnx(serving: ServingInputs, path: Path) -> None:
    """torch.onnx's dynamo exporter, every size dynamic, with our translation of cdist."""
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


def export(
    run: TrainedRun, fmt: str, out_dir: Path, encoder: str | None = None, encoder_revision: str | None = None
) -> Path:
    """Write the run in `fmt` into `out_dir`; returns the model file's path."""
    check_format(fmt, type(run.source), str(run.checkpoint))
    if fmt == "hub":
        return write_folder(run, out_dir, encoder, encoder_revision) / FORMATS[fmt]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FORMATS[fmt]
    if fmt == "onnx":
        write_onnx(run.model, run.source, run.text, path)
    else:  # torchscript: the token-id model (check_format refused the sources that need more)
        serving, args = ServingModel(run.model), example_inputs(len(run.vocab))
        with torch.no_grad():
            traced = torch.jit.trace(serving, args, check_inputs=[example_inputs(len(run.vocab), 5, 11, 3, seed=1)])
        traced.save(str(path))
    run.source.write_serving_files(out_dir)
    shutil.copyfile(run.run_dir / "vocab.txt", out_dir / "vocab.txt")  # the mode of a new file (umask)
    hf_tokenizer(run.text.tokenizer, run.vocab).save(str(out_dir / "tokenizer.json"))
    write_json(out_dir / "serving.json", serving_spec(run, fmt, path.name))
    if not run.source.reads_every_word:  # the run's config, reduced and path-free as a shared folder's (the
        write_text_atomic(out_dir / "config.yaml", OmegaConf.to_yaml(shared_config(run)))  # commands compose theirs
        # over it); a contextual model's names its encoder by hub id only in a shared folder (format=hub)
    return path


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError as err:
        raise RunError('ONNX export needs the export extra: pip install -e ".[export]"') from err
