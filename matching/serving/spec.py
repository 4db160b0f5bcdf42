"""serving.json: what a client of an exported or shared model needs to know to feed it, without this package: the
model file, its inputs and outputs, the labels and every step of the text preparation."""

from __future__ import annotations

from pathlib import Path

from matching.data.tasks import describe
from matching.runs import TrainedRun


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
