"""What a run was trained from, named by file name, hub id and sha256, never by a path of the training machine.

`train` writes `provenance.json` into the run directory once, before training: each split it read (file name,
bytes and sha256, or the hub dataset, config and split) and the embeddings (the vectors file's name and sha256, an
encoder's name and weights sha256, or the option: `random`). The model card of `export format=hub`, the server's
`/info` and its page read it from there: a 2 GB vectors file is hashed once per run (and once per machine, see
`content_sha256`), never per request or export. A run trained before this file existed is described from its
config, by file names only.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from matching.data.cache import content_sha256
from matching.data.sources import resolve_path
from matching.data.tasks import Task
from matching.files import existing, write_json
from matching.model.embeddings import EmbeddingSource
from matching.saved.run_folder import option_name

log = logging.getLogger(__name__)

PROVENANCE = "provenance.json"


def split_record(task: Task, split: str, data_dir: str | os.PathLike, cache_dir: str | os.PathLike | None) -> dict:
    """Where a split came from: a local file or folder by name, size and sha256; else the hub dataset."""
    spec = task.splits[split]
    found = existing(resolve_path(spec.path, data_dir))
    if found is not None:
        record: dict[str, Any] = {"file": found.name, "sha256": content_sha256(found, cache_dir)}
        if found.is_file():
            record["bytes"] = found.stat().st_size
    else:
        hub = task.hub or {}
        record = {"hub": hub.get("name"), "config": hub.get("config"), "split": (hub.get("splits") or {}).get(split)}
    if spec.start is not None or spec.stop is not None:
        record["rows"] = [spec.start, spec.stop]
    return record


def embeddings_record(cfg: DictConfig, source: EmbeddingSource, cache_dir: str | os.PathLike | None) -> dict:
    """The embeddings a run used, as the source says of itself (`identity`): a vectors file by name and sha256, an
    encoder by its name (a hub id, or a local folder's name) and weights sha256; else the option (`random`)."""
    identity = source.identity() or {}
    node = cfg.embeddings
    if "weights_sha256" in identity:  # an encoder
        encoder = encoder_name(str(node.get("model") or identity.get("encoder")))
        return {"encoder": encoder, "weights_sha256": identity["weights_sha256"]}
    if "path" in identity:  # a file of word vectors
        path = Path(identity["path"])
        return {"file": path.name, "bytes": identity.get("size"), "sha256": content_sha256(path, cache_dir)}
    return {"option": option_name(cfg, "embeddings")}


def encoder_name(model: str) -> str:
    """An encoder as a model card names it: its hub id, or a local folder by its name alone (no path)."""
    local = Path(model).expanduser().exists() or model.startswith(("/", ".", "~"))
    return Path(model).name if local else model


def write_provenance(cfg: DictConfig, task: Task, source: EmbeddingSource, run_dir: Path,
                     arithmetic: str | None = None) -> dict:  # fmt: skip
    """Record the splits a run reads, its embeddings and its arithmetic (`arithmetic`: what its `dtype` computes in
    on the training machine, "bf16 (auto: this CPU has amx_bf16)") in `run_dir/provenance.json`; returns it."""
    splits = [*dict.fromkeys(["train", *task.eval_splits, *(task.test_splits if cfg.get("test") else [])])]
    cache_dir = cfg.paths.get("cache_dir")
    record = {
        "data": {s: split_record(task, s, cfg.data.data_dir, cache_dir) for s in splits if task.splits.get(s)},
        "embeddings": embeddings_record(cfg, source, cache_dir),
    }
    if arithmetic is not None:
        record["arithmetic"] = {"dtype": str(cfg.get("dtype", "fp32")), "computed_in": arithmetic}
    write_json(run_dir / PROVENANCE, record)
    return record


def read_provenance(run_dir: Path) -> dict:
    """A run's provenance.json ({} for a run trained before it was written, or a folder without one)."""
    file = run_dir / PROVENANCE
    try:
        return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    except (OSError, ValueError):
        log.warning("ignoring unreadable %s", file)
        return {}


def embeddings_name(cfg: DictConfig, provenance: dict) -> str:
    """The embeddings in a word: the vectors file's name or the encoder's, else the option (`random`). Not the
    config group's choice alone: `embeddings=glove embeddings.path=<a MiniLM file>` is that file, not GloVe."""
    used = provenance.get("embeddings") or {}
    if used.get("file") or used.get("encoder"):
        return str(used.get("file") or used.get("encoder"))
    node = cfg.get("embeddings") or {}
    if node.get("model"):
        return encoder_name(str(node.model))
    if node.get("path"):
        return Path(str(node.path)).name
    return option_name(cfg, "embeddings")


def describe_data(provenance: dict) -> list[str]:
    """One line per split for people: `train: claims_train.tsv (1,234 bytes, sha256 ab12…)` or a hub dataset."""
    lines = []
    order = ("train", "dev", "validation", "test")
    records = sorted((provenance.get("data") or {}).items(), key=lambda kv: (kv[0] not in order, order.index(kv[0])
                     if kv[0] in order else 0, kv[0]))  # fmt: skip
    for split, record in records:
        if record.get("file"):
            size = f"{record['bytes']:,} bytes, " if record.get("bytes") is not None else ""
            what = f"`{record['file']}` ({size}sha256 `{record['sha256'][:16]}…`)"
        else:
            config = f", config `{record['config']}`" if record.get("config") else ""
            what = f"the Hugging Face dataset `{record.get('hub')}`{config}, split `{record.get('split')}`"
        rows = f", rows [{record['rows'][0]}, {record['rows'][1]})" if record.get("rows") else ""
        lines.append(f"{split}: {what}{rows}")
    return lines
