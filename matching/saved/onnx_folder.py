"""serving.json: what a client of an exported or shared model needs to know to feed it, without this package: the
model file, its inputs and outputs, the labels and every step of the text preparation."""

from __future__ import annotations

from matching.data.tasks import describe, keep_recent_turns
from matching.files import file_sha256
from matching.model.assembly import TrainedModel
from matching.saved.run_folder import option_name


def trim_arguments(trim) -> dict | None:
    """The keyword arguments of the task's trim of the first text when it is `keep_recent_turns` (a dialogue's most
    recent turns: the only trim of matching's tasks), else None."""
    if trim is None or getattr(trim, "func", None) is not keep_recent_turns:
        return None
    return dict(trim.keywords)


def serving_spec(run: TrainedModel, fmt: str, model_file: str, encoder: dict | None = None) -> dict:
    """serving.json: the model file, its inputs and outputs, the labels and every step of the text preparation;
    `encoder`: how a shared folder names what its embedding source loads from elsewhere (EmbeddingSource)."""
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
        # What matching.inference.load reads to run an exported model without torch (and a reader to know it)
        "trim_a_arguments": trim_arguments(run.task.trim_a),
        "columns": {k: None if v is None else str(v) for k, v in (cfg.task.get("columns") or {}).items()},
        "budget": {"cells": cfg.data.get("batch_cells"), "tokens": cfg.data.get("batch_tokens")},
        "dtype": str(cfg.get("dtype", "fp32")),
        "about": {
            "aligner": option_name(cfg, "aligner"),
            "intra": option_name(cfg, "intra") if cfg.get("intra") is not None else None,
            "embeddings": (cfg.get("choices") or {}).get("embeddings"),
            "null_token": bool(run.model.null_token),
        },
    }
    if fmt == "hub":  # weights for matching itself (Matcher.load), not a model a runtime runs
        spec["inputs"] = spec["outputs"] = None
        spec["loader"] = "from matching import Matcher; Matcher.load(<this folder>)"
    else:
        # what it was exported from, by name and content: no path of the machine it was exported on
        spec["checkpoint"] = run.weights_file.name
        spec["checkpoint_sha256"] = file_sha256(run.weights_file)
    spec |= run.source.serving_spec(fmt, encoder)  # what a model with the source's own inputs takes
    return spec
