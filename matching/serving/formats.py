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
from torch import Tensor, nn

from matching.data.datamodule import pad_batch
from matching.data.vocab import hf_tokenizer
from matching.files import write_json
from matching.runs import RunError, TrainedRun
from matching.serving.sharing import write_folder
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


class ContextualServingModel(nn.Module):
    """A contextual run's whole inference: the encoder's word pieces in, class probabilities and logits out.

    Each side's words come as ids (any nonzero id per word, 0 = padding: they only mark the real words) and as the
    encoder's inputs of their texts in windows (see matching.data.contextual.WordPieces): `pieces` (R, P) piece ids
    framed by [CLS] and [SEP], `piece_mask` (R, P) 1 for real pieces, `piece_word` (R, P) the word of each piece
    (−1 for [CLS], [SEP] and padding) and `piece_row` (R,) the text of each window. The encoder's states are pooled
    per word as in training; a frozen encoder's states are rounded to float16 there, as `predict` rounds them."""

    def __init__(self, model: nn.Module, encoder: nn.Module, frozen: bool):
        super().__init__()
        self.model, self.encoder, self.frozen = model, encoder, frozen
        self.eval()

    def _states(self, ids: Tensor, pieces: Tensor, mask: Tensor, word: Tensor, row: Tensor) -> Tensor:
        states = self.encoder(pieces, mask, word, row, texts=ids.shape[0], words=ids.shape[1])  # (B, L, D)
        return states.half() if self.frozen else states

    def forward(self, a: Tensor, b: Tensor, a_pieces: Tensor, a_piece_mask: Tensor, a_piece_word: Tensor,
                a_piece_row: Tensor, b_pieces: Tensor, b_piece_mask: Tensor, b_piece_word: Tensor,
                b_piece_row: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
        a_states = self._states(a, a_pieces, a_piece_mask, a_piece_word, a_piece_row)
        b_states = self._states(b, b_pieces, b_piece_mask, b_piece_word, b_piece_row)
        logits = self.model(a, b, a_states=a_states, b_states=b_states).logits  # a fine-tuned encoder: its own
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


def contextual_refusal(ckpt: str) -> RunError:
    return RunError(
        f"{ckpt} is a contextual run (embeddings=minilm_contextual): format=torchscript writes only the token-id "
        "model, without the encoder and its word pooling. Export it with format=onnx (the encoder and the model in "
        "one file, fed with the encoder's word pieces; see serving.json) or format=hub (a shared folder for "
        "Matcher.load)."
    )


#: The inputs of a contextual run's ONNX model, besides the word ids a and b (see ContextualServingModel).
PIECE_INPUTS = ("pieces", "piece_mask", "piece_word", "piece_row")
#: Pairs to trace the contextual model with (every size is dynamic in the exported file).
EXAMPLE_TEXTS = [("what is a cat", "a cat is a small animal that people keep"), ("dogs bark", "the dog barks"),
                 ("how are glacier caves formed ?", "caves form")]  # fmt: skip


def contextual_inputs(run: TrainedRun, pairs: list[tuple[str, str]]) -> dict[str, Tensor]:
    """The ONNX model's inputs for `pairs`, prepared as `predict` prepares them."""
    from matching.data.readers import Pair

    a, b, _, (words_a, words_b) = run.data.prepare_pairs([Pair(x, y, "") for x, y in pairs])
    batch = {"a": pad_batch(a), "b": pad_batch(b)}
    pieces = run.data.contextual.pieces
    for side, words in (("a", words_a), ("b", words_b)):
        inputs = pieces(words)
        for name, key in zip(PIECE_INPUTS, ("ids", "mask", "word", "row"), strict=True):
            batch[f"{side}_{name}"] = inputs[key]
    return batch


def _export_contextual_onnx(run: TrainedRun, path: Path) -> None:
    """The encoder, word pooling and model as one ONNX file with every size dynamic."""
    encoder = run.data.contextual
    serving = ContextualServingModel(
        run.model, run.model.encoder or encoder.word_encoder(0), not encoder.trainable_layers
    )
    args = contextual_inputs(run, EXAMPLE_TEXTS)
    names = ["a", "b", *(f"{side}_{n}" for side in "ab" for n in PIECE_INPUTS)]
    dims = {"batch": torch.export.Dim("batch")}
    shapes = {
        "a": {0: dims["batch"], 1: torch.export.Dim("len_a")},
        "b": {0: dims["batch"], 1: torch.export.Dim("len_b")},
    }
    for side in "ab":
        rows = torch.export.Dim(f"{side}_windows")
        width = torch.export.Dim(f"{side}_pieces", max=encoder.max_positions)  # a window: the encoder's positions
        shapes |= {f"{side}_{n}": ({0: rows} if n == "piece_row" else {0: rows, 1: width}) for n in PIECE_INPUTS}
    program = torch.onnx.export(
        serving,
        tuple(args[n] for n in names),
        custom_translation_table={torch.ops.aten._cdist_forward.default: _onnx_cdist},
        input_names=names,
        output_names=["probs", "logits"],
        dynamo=True,
        dynamic_shapes=tuple(shapes[n] for n in names),
        external_data=False,
        verbose=False,  # no step-by-step report of the exporter's passes
    )
    program.save(str(path))
    encoder.tokenizer.backend_tokenizer.save(str(path.parent / "encoder_tokenizer.json"))


def export(
    run: TrainedRun, fmt: str, out_dir: Path, encoder: str | None = None, encoder_revision: str | None = None
) -> Path:
    """Write the run in `fmt` into `out_dir`; returns the model file's path."""
    if fmt not in FORMATS:
        raise RunError(f"format must be one of {sorted(FORMATS)}, got {fmt!r}")
    if fmt == "hub":
        return write_folder(run, out_dir, encoder, encoder_revision) / FORMATS[fmt]
    contextual = run.data.contextual is not None
    if contextual and fmt == "torchscript":
        raise contextual_refusal(str(run.checkpoint))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FORMATS[fmt]
    serving, args = ServingModel(run.model), example_inputs(len(run.vocab))  # the token-id model (static vectors)
    if contextual:
        _require_onnx()
        _export_contextual_onnx(run, path)
    elif fmt == "torchscript":
        with torch.no_grad():
            traced = torch.jit.trace(serving, args, check_inputs=[example_inputs(len(run.vocab), 5, 11, 3, seed=1)])
        traced.save(str(path))
    else:
        _require_onnx()
        batch, len_a, len_b = torch.export.Dim("batch"), torch.export.Dim("len_a"), torch.export.Dim("len_b")
        program = torch.onnx.export(
            serving,
            args,
            custom_translation_table={torch.ops.aten._cdist_forward.default: _onnx_cdist},
            input_names=["a", "b"],
            output_names=["probs", "logits"],
            dynamo=True,
            dynamic_shapes={"a": {0: batch, 1: len_a}, "b": {0: batch, 1: len_b}},
            external_data=False,
            verbose=False,  # no step-by-step report of the exporter's passes
        )
        program.save(str(path))
    shutil.copyfile(run.run_dir / "vocab.txt", out_dir / "vocab.txt")  # the mode of a new file (umask)
    hf_tokenizer(run.data.tokenizer, run.vocab).save(str(out_dir / "tokenizer.json"))
    write_json(out_dir / "serving.json", serving_spec(run, fmt, path.name))
    return path


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401  (the exporter needs it)
    except ImportError as err:
        raise RunError('ONNX export needs the export extra: pip install -e ".[export]"') from err
