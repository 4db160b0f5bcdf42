"""`matching-export ckpt=<path> format=onnx|torchscript|hub [out=<dir>]` (conf/export.yaml): a model to serve or share.

`format=onnx|torchscript` writes into `out` (default `<run dir>/export/`) the model (`model.onnx` or `model.pt`), a
copy of `vocab.txt`, `tokenizer.json` (the tokenisation as a Hugging Face `tokenizers` file, usable from Python,
Rust or JavaScript) and `serving.json` (labels, task kind, and every step of the text preparation: tokenizer, OOV
hashing, maximum length, trimming), so that a client needs nothing of this package. The exported model takes two
int64 tensors of token ids, a (batch, len_a) and b (batch, len_b), 0-padded on the right, with batch and both
lengths dynamic, and returns class probabilities `probs` and `logits` (batch, classes); a ranking model ranks
candidates by logits[:, 1] − logits[:, 0].
Export needs the `export` extra for ONNX: `pip install -e ".[export]"`.

`format=hub` writes a shared model folder (default `<run dir>/hub/`; see matching.hub): config, vocabulary,
weights as safetensors, tokenizer.json, serving.json and a model card, which `Matcher.load(folder)` loads without
unpickling anything; `push_to_hub=true repo_id=<owner/name>` uploads it to the Hugging Face hub. A contextual run's
folder names its encoder by hub id (`encoder=`, `encoder_revision=` when the run used a local folder).
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from matching.cli import command
from matching.data.datamodule import pad_batch
from matching.data.tasks import describe
from matching.data.vocab import hf_tokenizer
from matching.files import write_json
from matching.hub import push, write_folder
from matching.matcher import REPO_ID
from matching.runs import RunError, TrainedRun, is_contextual, load_trained

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


def serving_spec(run: TrainedRun, fmt: str, model_file: str, encoder: tuple[str, str | None] | None = None) -> dict:
    """serving.json: the model file, its inputs and outputs, the labels and every step of the text preparation."""
    cfg = run.cfg
    spec = {
        "format": fmt,
        "model": model_file,
        "inputs": {"a": "int64 (batch, len_a) token ids, 0 = padding", "b": "int64 (batch, len_b)"},
        "outputs": {"probs": "float32 (batch, classes) probabilities", "logits": "float32 (batch, classes)"},
        "ranking_score": "logits[:, 1] - logits[:, 0] (rank candidates by it; probabilities saturate at 1.0)"
        if run.kind == "rank"
        else None,
        "labels": run.labels,
        "kind": run.kind,
        "task": run.task.name,
        "tokenizer": {
            "file": "tokenizer.json",
            "steps": "Hugging Face tokenizers: NFKC"
            + (", lower-case" if cfg.data.lowercase else "")
            + ", split on whitespace, every punctuation character its own token; keep_tokens whole",
            "lowercase": bool(cfg.data.lowercase),
            "keep_tokens": run.task.keep_tokens,
            "unknown_words": "tokenizer.json maps a word outside the vocabulary to '<oov0>'; give it id "
            "2 + crc32(word as UTF-8) % oov_buckets instead, where word = the tokenizer's normalizer applied to "
            "the input text at the token's offsets",
        },
        "oov_buckets": run.vocab.oov_buckets,
        "oov_hash": "2 + crc32(utf-8 word) % oov_buckets",
        "max_length": cfg.data.max_length,
        "max_length_rule": "each text's ids are cut to the first max_length (null: no cut)",
        "trim_a": describe(run.task.trim_a),
        "trim_a_rule": "applied to the first text's tokens before ids (see matching.data.tasks); null: none",
    }
    if fmt == "hub":  # weights for matching itself (Matcher.load), not a model a runtime runs
        spec["inputs"] = spec["outputs"] = None
        spec["loader"] = "from matching import Matcher; Matcher.load(<this folder>)"
    else:
        spec["checkpoint"] = str(run.checkpoint)
    contextual = run.data.contextual
    if contextual is not None and fmt == "onnx":
        pieces = contextual.pieces
        spec["inputs"] = {
            "a": "int64 (batch, len_a): one nonzero id per word (tokenizer.json's ids will do), 0 = padding",
            "b": "int64 (batch, len_b)",
            "a_pieces": "int64 (windows_a, pieces_a): the encoder's piece ids of each window, [CLS] ... [SEP], padded",
            "a_piece_mask": "int64 (windows_a, pieces_a): 1 for [CLS], the pieces and [SEP], 0 for padding",
            "a_piece_word": "int64 (windows_a, pieces_a): the word (0-based, in its text) of each piece; -1 for "
            "[CLS], [SEP] and padding",
            "a_piece_row": "int64 (windows_a,): the text (0-based row of a) of each window",
            "b_pieces, b_piece_mask, b_piece_word, b_piece_row": "the same for b",
        }
        spec["contextual"] = {
            "encoder": Path(contextual.name).name if Path(contextual.name).expanduser().exists() else contextual.name,
            "weights_sha256": contextual.weights,
            "words": "each text's words: tokenizer.json's normalizer, then its pre_tokenizer (the token strings, "
            "not ids), cut to max_length",
            "piece_tokenizer": "encoder_tokenizer.json",
            "pieces": "encode each text's words with encoder_tokenizer.json as pre-tokenized input, without special "
            "tokens; its word_ids give each piece's word",
            "window": pieces.width,
            "step": pieces.step,
            "cls_id": pieces.cls,
            "sep_id": pieces.sep,
            "pad_id": pieces.pad,
            "windows_rule": "a text of n pieces is one window when n <= window, else windows starting at every "
            "multiple of step below n - window, and at n - window; each window is [cls_id] + its pieces + [sep_id]",
        }
    if encoder is not None:
        spec["encoder"] = {"hub_id": encoder[0], "revision": encoder[1], "weights_sha256": contextual.weights}
    return spec


def export_command(cfg: DictConfig) -> Path:
    """The `export` command on a composed config (conf/export.yaml over the run's saved config)."""
    fmt = cfg.format
    if fmt not in FORMATS:
        raise RunError(f"format must be one of {sorted(FORMATS)}, got {fmt!r}")
    if cfg.push_to_hub and (fmt != "hub" or not cfg.repo_id or not REPO_ID.match(str(cfg.repo_id))):
        raise RunError(
            "push_to_hub=true uploads a shared folder: give format=hub and repo_id=<owner/name> (your user or "
            f"organisation on huggingface.co, then the model's name); got format={fmt} repo_id={cfg.repo_id}"
        )
    if fmt == "torchscript" and is_contextual(cfg):  # before the encoder is loaded
        raise contextual_refusal(str(cfg.ckpt))
    run = load_trained(cfg.ckpt, cfg)
    out = Path(cfg.out or run.run_dir / ("hub" if fmt == "hub" else "export"))
    path = export(run, str(fmt), out, cfg.encoder, cfg.encoder_revision)
    if fmt == "hub":
        print(f"wrote the shared model folder {out} (config.yaml, vocab.txt, {path.name}, README.md, ...)")
        if cfg.push_to_hub:
            url = push(out, str(cfg.repo_id), bool(cfg.private))
            print(f"uploaded to https://huggingface.co/{cfg.repo_id} ({url})")
    else:
        print(f"wrote {path} (with vocab.txt, tokenizer.json and serving.json beside it)")
    return path


main = command("export", export_command, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
