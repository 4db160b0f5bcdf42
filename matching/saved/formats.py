"""The files a trained run is served from by other runtimes (`format=onnx|torchscript`) or shared as (`format=hub`,
see matching.saved.shared_folder): the export behind the `export` command (matching/export.py says what is written).

`format=onnx|torchscript` writes the model (`model.onnx` or `model.pt`), a copy of `vocab.txt`, `tokenizer.json`
and `serving.json` (matching.saved.onnx_folder), so that a client needs nothing of this package. The exported model
takes two int64 tensors of token ids, a (batch, len_a) and b (batch, len_b), 0-padded on the right, with batch and both
lengths dynamic, and returns class probabilities `probs` and `logits` (batch, classes).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf

from matching.data.vocab import hf_tokenizer
from matching.errors import RunError
from matching.files import write_json, write_text_atomic
from matching.model.assembly import TrainedModel
from matching.model.embeddings import EmbeddingSource
from matching.saved.onnx_folder import serving_spec
from matching.saved.onnx_graph import ServingModel, example_inputs, write_onnx
from matching.saved.shared_folder import shared_config, write_folder

log = logging.getLogger(__name__)

FORMATS = {"onnx": "model.onnx", "torchscript": "model.pt", "hub": "model.safetensors"}


def check_format(fmt: str, source: type[EmbeddingSource], checkpoint: str) -> None:
    """RunError unless a run with an embedding source of this class can be exported in `fmt` (asked before the
    source is built, which may load an encoder)."""
    if fmt not in FORMATS:
        raise RunError(f"format must be one of {sorted(FORMATS)}, got {fmt!r}")
    refusal = source.export_refusal(fmt, checkpoint)
    if refusal:
        raise RunError(refusal)


def export(
    run: TrainedModel, fmt: str, out_dir: Path, encoder: str | None = None, encoder_revision: str | None = None
) -> Path:
    """Write the run in `fmt` into `out_dir`; returns the model file's path."""
    check_format(fmt, type(run.source), str(run.weights_file))
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
    run.source.export.write_serving_files(out_dir)
    shutil.copyfile(run.run_dir / "vocab.txt", out_dir / "vocab.txt")  # the mode of a new file (umask)
    hf_tokenizer(run.text.tokenizer, run.vocab).save(str(out_dir / "tokenizer.json"))
    write_json(out_dir / "serving.json", serving_spec(run, fmt, path.name))
    if not run.source.reads_every_word:  # the run's config, reduced and path-free as a shared folder's (the
        write_text_atomic(out_dir / "config.yaml", OmegaConf.to_yaml(shared_config(run)))  # commands compose theirs
        # over it); a contextual model's names its encoder by hub id only in a shared folder (format=hub)
    return path
