"""The cache of a split's word states under a frozen encoder (matching.model.contextual): every distinct text of
the split encoded once, kept in float16 in a memory-mapped file keyed by the split and the encoder."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from matching.files import file_sha256, write_atomic, write_npz_atomic

if TYPE_CHECKING:
    from matching.model.contextual import ContextualEncoder

log = logging.getLogger(__name__)


@dataclass
class SplitStates:
    """The word states of one split: `rows` (total words, dim) float16 memory-mapped, and per pair the first row
    of each text (`a_start`, `b_start`); text i of side a has len(split.a[i]) rows from a_start[i]."""

    rows: np.ndarray
    a_start: np.ndarray
    b_start: np.ndarray

    def gather(self, starts: np.ndarray, lengths: Sequence[int]) -> Tensor:
        """(len(starts), max length, dim) float16, zero-padded."""
        out = np.zeros((len(starts), max(lengths), self.rows.shape[1]), np.float16)
        for k, (s, n) in enumerate(zip(starts.tolist(), lengths, strict=True)):
            out[k, :n] = self.rows[s : s + n]
        return torch.from_numpy(out)


def state_files(encoder: ContextualEncoder, key: dict, folder: Path, name: str) -> tuple[Path, Path]:
    """The cache files of a split's states (rows, index) for `key` (the split's identity) and this encoder."""
    digest = hashlib.sha256(json.dumps([key, encoder.identity()], sort_keys=True, default=str).encode()).hexdigest()
    stem = folder / f"{key.get('task') or name}-{digest[:24]}"  # by content: any split of the same file finds it
    return stem.with_suffix(".states.npy"), stem.with_suffix(".index.npz")


def cached_states(encoder: ContextualEncoder, key: dict, folder: Path, name: str, pairs: int | None = None,
                  check_only: bool = False) -> SplitStates | bool | None:  # fmt: skip
    """A split's states from the cache (None when absent or unusable); `check_only`: whether they are there."""
    rows_file, index_file = state_files(encoder, key, folder, name)
    if check_only:
        return rows_file.exists() and index_file.exists()
    if not (rows_file.exists() and index_file.exists()):
        return None
    try:
        with np.load(index_file) as z:
            a_start, b_start = z["a_start"], z["b_start"]
            stored = str(z["states_sha256"]) if "states_sha256" in z else None
        digest = stored or file_sha256(rows_file)  # a cache written before the fingerprint has none
        rows = np.load(rows_file, mmap_mode="r")
    except Exception as err:  # a damaged cache is rebuilt, never trusted
        log.warning("ignoring unreadable contextual cache %s (%s); rebuilding it", rows_file, err)
        return None
    if rows.ndim != 2 or rows.shape[1] != encoder.dim or (pairs is not None and len(a_start) != pairs):
        log.warning("ignoring contextual cache %s: it does not match the split; rebuilding it", rows_file)
        return None
    if stored is None:
        try:  # kept beside it, so it is hashed once; a read-only cache is still used, hashed on every run
            write_npz_atomic(index_file, a_start=a_start, b_start=b_start, states_sha256=np.array(digest))
        except OSError:
            pass
    log.info("%s: contextual states reused from the cache %s (%d word states, %.1f MB, sha256 %s)", name, rows_file,
             rows.shape[0], rows_file.stat().st_size / 1e6, digest[:16])  # fmt: skip
    return SplitStates(rows, a_start, b_start)


def encode_states(encoder: ContextualEncoder, key: dict, folder: Path, name: str, texts_a: Sequence[Sequence[str]],
                  texts_b: Sequence[Sequence[str]]) -> SplitStates:  # fmt: skip
    """Encode a split's texts (a list per side, the words exactly as the model sees them), each distinct text once,
    with a progress bar, into a float16 memory-mapped file of the cache `folder` (see `state_files`); the rows are
    written as they are encoded, so memory stays bounded by one batch."""
    rows_file, index_file = state_files(encoder, key, folder, name)
    started = time.perf_counter()
    index: dict[tuple[str, ...], int] = {}
    ids = []
    for texts in (texts_a, texts_b):
        ids.append(np.fromiter((index.setdefault(tuple(t), len(index)) for t in texts), np.int64, len(texts)))
    unique = list(index)
    lengths = np.fromiter(map(len, unique), np.int64, len(unique))
    starts = np.zeros(len(unique), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        rows = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(int(lengths.sum()), encoder.dim))
        order = np.argsort(lengths, kind="stable")  # similar lengths together: little padding
        with tqdm(total=len(unique), desc=f"encoding {name} with {Path(encoder.name).name}", unit=" texts") as bar:
            for k in range(0, len(order), encoder.batch_size):
                chunk = order[k : k + encoder.batch_size].tolist()
                for i, states in zip(chunk, encoder.encode_batch([unique[i] for i in chunk]), strict=True):
                    rows[starts[i] : starts[i] + lengths[i]] = states
                bar.update(len(chunk))
        rows.flush()
        del rows

    write_atomic(rows_file, write)
    # The states' fingerprint, logged by every run that builds or reuses them: a seed repeats its numbers bit for
    # bit only from identical states, so two machines compare this first (docs/data.md, "Contextual embedder").
    digest = file_sha256(rows_file)
    write_npz_atomic(index_file, a_start=starts[ids[0]], b_start=starts[ids[1]], states_sha256=np.array(digest))
    encoder.report(name)
    # A new cache folder is said aloud (it may be ./data/cache in the user's own folder, tens of MB): where, and how
    # to put it elsewhere; later writes into it are the log's business.
    (log.warning if created else log.info)(
        "%s: encoded %d distinct texts (%d word states) in %.1f s; cached in %s (%.1f MB, float16, sha256 %s)%s",
        name, len(unique), int(lengths.sum()), time.perf_counter() - started, rows_file,
        rows_file.stat().st_size / 1e6, digest[:16],
        f"; a new cache folder, {folder.resolve()}: paths.cache_dir=<folder> (or MATCHING_CACHE_DIR) puts it "
        "elsewhere" if created else "",
    )  # fmt: skip
    return SplitStates(np.load(rows_file, mmap_mode="r"), starts[ids[0]], starts[ids[1]])
