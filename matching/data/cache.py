"""On-disk cache of prepared splits (token ids, labels, groups) and the vocabulary built with them.

Reading and tokenising a large corpus is the slow part of starting a run; the result depends only on the
split files' contents, the slice, the text preparation settings and the label space, so it is cached under
`paths.cache_dir/corpora/` keyed by a hash of exactly those. A file is named in a key by its sha256
(`file_content`), not by its path or modification time: a corpus copied to another folder or machine, moved, or
touched finds what was cached for it. The sha256 itself is remembered under `paths.cache_dir/sha256/` by path,
size and modification time (`content_sha256`), so a large file is read for it once. Files are written through a
temporary name and a rename, and an unreadable cache entry is rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from matching.files import existing, file_sha256, write_npz_atomic, write_text_atomic

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def cache_key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps({"v": FORMAT_VERSION, **parts}, sort_keys=True, default=str).encode()).hexdigest()[
        :24
    ]


def file_stamp(path: Path) -> dict[str, Any] | None:
    """Identity of a local split file or folder (None when it is not local, e.g. read from the hub)."""
    p = existing(path)
    if p is not None and p.is_file():
        st = p.stat()
        return {"path": str(p.resolve()), "size": st.st_size, "mtime": st.st_mtime_ns}
    if p is not None and p.is_dir():  # TrecQA's token folders
        files = sorted(q for q in p.iterdir() if q.is_file())
        return {"path": str(p.resolve()), "files": [(q.name, q.stat().st_size, q.stat().st_mtime_ns) for q in files]}
    return None


def content_sha256(path: Path, cache_dir: str | os.PathLike | None) -> str:
    """The sha256 of a file, or of a folder's files (names and contents), remembered in `cache_dir/sha256/` under the
    file's path, size and modification time, so that a large file is read for it once per machine."""
    stamp = file_stamp(path)
    key = hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()[:32] if stamp else None
    memo = Path(cache_dir) / "sha256" / key if cache_dir is not None and key else None
    if memo is not None and memo.is_file():
        return memo.read_text().strip()
    if path.is_dir():
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{file.relative_to(path).as_posix()}\0{file_sha256(file)}\n".encode())
        value = digest.hexdigest()
    else:
        value = file_sha256(path)
    if memo is not None:
        try:
            write_text_atomic(memo, value)
        except OSError:  # a read-only cache: the next run hashes again
            pass
    return value


def file_content(path: Path, cache_dir: str | os.PathLike | None) -> dict[str, Any] | None:
    """A local split file or folder as a cache key names it: by its bytes (sha256, `content_sha256`), not by where it
    is or when it was written; None when it is not local (read from the hub)."""
    found = existing(path)
    return None if found is None else {"sha256": content_sha256(found, cache_dir)}


def by_content(identity: dict[str, Any] | None, cache_dir: str | os.PathLike | None) -> dict[str, Any] | None:
    """An embedding source's `identity` as a cache key names it: the file it names by "path" (with its size and
    modification time) by that file's sha256 instead; the rest as it is."""
    if not identity or "path" not in identity:
        return identity
    rest = {k: v for k, v in identity.items() if k not in ("path", "size", "mtime")}
    return rest | {"sha256": content_sha256(Path(identity["path"]), cache_dir)}


def _flatten(seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    flat = np.concatenate(seqs).astype(np.int32) if seqs else np.zeros(0, np.int32)
    return flat, offsets


def _unflatten(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, offsets[1:-1])


def save(path: Path, words: list[str] | None, splits: Mapping[str, Any]) -> None:
    """Store the vocabulary words (when built here) and each EncodedSplit."""
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {"words": words, "splits": {}}
    for name, split in splits.items():
        arrays[f"{name}.a"], arrays[f"{name}.a_off"] = _flatten(split.a)
        arrays[f"{name}.b"], arrays[f"{name}.b_off"] = _flatten(split.b)
        arrays[f"{name}.labels"], arrays[f"{name}.groups"] = split.labels, split.groups
        meta["splits"][name] = {"group_names": split.group_names, "truncated": split.truncated}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    write_npz_atomic(path, **arrays)


def load(path: Path) -> tuple[list[str] | None, dict[str, dict[str, Any]]] | None:
    """(vocabulary words or None, {split: fields of EncodedSplit}), or None when absent or unreadable."""
    if not path.exists():
        return None
    try:
        with np.load(path) as data:
            meta = json.loads(data["meta"].tobytes().decode("utf-8"))
            splits = {}
            for name, extra in meta["splits"].items():
                splits[name] = {
                    "a": _unflatten(data[f"{name}.a"], data[f"{name}.a_off"]),
                    "b": _unflatten(data[f"{name}.b"], data[f"{name}.b_off"]),
                    "labels": data[f"{name}.labels"],
                    "groups": data[f"{name}.groups"],
                    **extra,
                }
        return meta["words"], splits
    except Exception as err:  # a damaged cache entry is rebuilt, never trusted
        log.warning("ignoring unreadable corpus cache %s (%s: %s); rebuilding it", path, type(err).__name__, err)
        return None
