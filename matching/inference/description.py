"""What a loaded model is, for people: its description (the server's GET /info and its page read it), computed once
when the model is loaded for serving, on the model's side, so that the HTTP layer only serves it.

It names no path of the machine: files by name and sha256 (provenance.json, hashed at training; the weights, hashed
here, once per description), the run by `run_label`. Like the rest of this room it imports no torch at its top: an
exported ONNX folder is described from what its serving.json recorded at export.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matching.files import file_sha256
from matching.inference.predictor import Predictor
from matching.saved.examples import page_examples


@dataclass(frozen=True)
class ModelFacts:
    """What a loaded model is, in one frozen object (`Matcher.facts`; each field also `Matcher.<field>`).

    Attributes:
        task: The task's name (`snli`, `wikiqa`, ..., or the name of your own pairs).
        kind: `"classify"` or `"rank"` (a pointwise ranking model: its labels are no match, match).
        labels: The label names, in the order of the logits' columns.
        columns: The run's own column names (`task.columns`: a, b, label, group), which dicts of pairs may be keyed by.
        backend: What runs the model: `torch`, `onnx` or `onnx-int8`.
        device: Where the model runs: `cpu`, `cuda:N`, `mps` (ONNX Runtime: `cpu`).
        dtype: The arithmetic: `fp32`, `bf16`, or `int8` (weights).
        can_align: Whether `align` answers (the PyTorch backend; an exported graph returns the logits only).
        max_length: The most tokens of a text the model reads (`data.max_length`; longer ones are cut); None: no
            limit.
        null_token: Whether the model puts a NULL token (`"<null>"`) first on both sides (`model.null_token`).
        reads_every_word: An encoder reads every word; a table's unknown words hash to OOV buckets.
        origin: The folder or file it was loaded from.
        about: What the model is, for people: its aligner, embeddings, run folder, the checkpoint's sha256, ...
        config: The run's config when the model came with one (a run, a shared folder); None for an exported ONNX
            folder.
        vocab: The run's vocabulary (`matching.data.vocab.Vocabulary`; saved beside the weights as `vocab.txt`).
    """

    task: str
    kind: str
    labels: list[str]
    columns: dict[str, str | None]
    backend: str
    device: str
    dtype: str
    can_align: bool
    max_length: int | None
    null_token: bool
    reads_every_word: bool
    origin: Path
    about: dict[str, Any]
    config: Any
    vocab: Any

    @classmethod
    def of(cls, predictor: Predictor) -> ModelFacts:
        p, backend = predictor, predictor.backend
        return cls(p.task, p.kind, list(p.labels), p.columns, backend.name, backend.device, p.dtype,
                   backend.can_align, p.max_length, p.null_token, p.reads_every_word, p.origin, p.about, p.config,
                   p.vocab)  # fmt: skip


def run_description(predictor: Predictor) -> dict[str, Any]:
    """A loaded model's description: its task, labels, the column names a pair may be keyed by, aligner, embeddings,
    the data it was trained on, its weights (name and sha256), backend and arithmetic, and the example inputs its page
    offers (`page_examples`). The weights are hashed here: describe a model once, where it is loaded."""
    cfg, about = predictor.config, predictor.about
    if cfg is None:  # an exported ONNX folder: what its serving.json recorded at export
        exported = about.get("exported") or {}
        folder = predictor.origin
        made = {"aligner": exported.get("aligner"), "intra": exported.get("intra"),
                "embeddings": exported.get("embeddings"), "data": {}, "provenance": {},
                "checkpoint": f"{run_label(folder)}/{Path(about.get('graph') or 'model.onnx').name}",
                "exported_from": about.get("checkpoint"),
                "checkpoint_sha256": about.get("checkpoint_sha256"), "run_dir": run_label(folder)}  # fmt: skip
        run_dir = folder
    else:  # a run or a shared folder (torch is here: what reads its provenance and options may use it)
        from matching.saved.provenance import embeddings_name, read_provenance
        from matching.saved.run_folder import option_name

        run_dir = Path(about["run_dir"])
        provenance = read_provenance(run_dir)
        data = provenance.get("data") or {}
        weights = Path(about["weights"])
        made = {
            "aligner": option_name(cfg, "aligner"),
            "intra": option_name(cfg, "intra") if cfg.get("intra") is not None else None,
            "embeddings": embeddings_name(cfg, provenance),
            "data": {split: record.get("file") or record.get("hub") for split, record in data.items()},
            "provenance": provenance,
            "checkpoint": weights_label(run_dir, weights),
            "checkpoint_sha256": file_sha256(weights),
            "run_dir": run_label(run_dir),
        }
    examples, examples_from = page_examples(cfg, run_dir, predictor.task, predictor.kind)
    return {
        "task": predictor.task,
        "kind": predictor.kind,
        "labels": list(predictor.labels),
        "columns": {k: v for k, v in predictor.columns.items() if k in ("a", "b") and v},  # what a pair is keyed by
        **made,
        "backend": predictor.backend.name,
        "dtype": predictor.dtype,
        "null_token": predictor.null_token,
        "vocabulary_size": len(predictor.vocab),
        "max_length": predictor.max_length,
        "examples": examples,
        "examples_from": examples_from,
    }


def weights_label(run_dir: Path, weights: Path) -> str:
    """The weights' file as a description names it: under its run's label (`<run>/checkpoints/best.ckpt`, a shared
    folder's `<folder>/model.safetensors`)."""
    try:
        inside = weights.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        inside = weights.name
    return f"{run_label(run_dir)}/{inside}"


def run_label(folder: Path) -> str:
    """A run directory as a description and the page name it: relative to the working directory when it lies under it
    (`outputs/runs/claims/coda/<time>`), else its last three parts (`claims/coda/<time>`; a shared folder: its
    name) and never its first one, so that no label is a path from the root of the machine (`/tmp/run`: `run`)."""
    resolved = folder.resolve()
    if resolved.is_relative_to(Path.cwd()) and resolved != Path.cwd():
        return resolved.relative_to(Path.cwd()).as_posix()
    parts = resolved.parts[1:]
    keep = 3 if (folder / "checkpoints").is_dir() else 1
    return "/".join(parts[-min(keep, len(parts) - 1) :] if len(parts) > 1 else parts)
