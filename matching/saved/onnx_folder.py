"""serving.json: what a client of an exported or shared model needs to know to feed it, without this package: the
model file, its inputs and outputs, the labels and every step of the text preparation. `serving_spec` writes it
(`matching-export`); `read_exported` reads an exported folder back into its text preparation, without torch."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from matching.data.preparation import BATCH_CELLS, BATCH_TOKENS, Budget, TextPreparation
from matching.data.tasks import Task, callable_identity, keep_recent_turns
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import RunError
from matching.files import file_sha256
from matching.saved.run_folder import option_name

if TYPE_CHECKING:
    from matching.model.assembly import TrainedModel


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
        "trim_a": callable_identity(run.task.trim_a),
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
    spec |= run.source.export.serving_spec(fmt, encoder)  # what a model with the source's own inputs takes
    return spec


def read_exported(graph: Path, overrides: dict) -> tuple[dict, TextPreparation]:
    """An exported folder's serving.json and the text preparation it describes (`overrides`: the memory budget,
    `data.batch_tokens`, `data.batch_cells`; nothing else of an exported model can change)."""
    folder = graph.parent
    spec_file = folder / "serving.json"
    try:
        spec = json.loads(spec_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunError(f"cannot read {spec_file} ({err}); export the model again (matching-export "
                             "format=onnx)") from None  # fmt: skip
    unknown = set(overrides) - {"data.batch_tokens", "data.batch_cells"}
    if unknown:
        raise RunError(f"an exported ONNX model takes no {', '.join(sorted(unknown))}: its text preparation "
                             "is fixed in serving.json")  # fmt: skip
    tokenizer = spec["tokenizer"]
    trim = spec.get("trim_a_arguments")
    if spec.get("trim_a") and trim is None:
        raise RunError(f"{spec_file}: the first text's trim ({spec['trim_a']}) is not described in a form this "
                             "version reads; export the model again")  # fmt: skip
    task = Task(name=spec["task"], kind=spec["kind"], reader=None, labels=list(spec["labels"]), splits={},
                eval_splits=[], keep_tokens=list(tokenizer.get("keep_tokens") or []),
                trim_a=functools.partial(keep_recent_turns, **trim) if trim else None)  # fmt: skip
    budget = spec.get("budget") or {}
    budget = Budget(overrides.get("data.batch_cells", budget.get("cells", BATCH_CELLS)),
                    overrides.get("data.batch_tokens", budget.get("tokens", BATCH_TOKENS)))  # fmt: skip
    vocab = Vocabulary.load(folder / "vocab.txt")
    text = TextPreparation(task, Tokenizer(bool(tokenizer["lowercase"]), keep_tokens=task.keep_tokens),
                           spec.get("max_length"), budget, vocab)  # fmt: skip
    return spec, text
