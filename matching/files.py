"""Files: writes that a kill cannot leave half-done, and the plain-or-gzip files that corpora and vectors come in.

Every file `matching` writes (run config, vocabulary, metrics, checkpoints, corpus and vectors caches) goes
through :func:`write_atomic`: the bytes go to a temporary file in the same folder, which is then renamed over
the target, so a reader sees the old file or the new one, never a truncated one. (Lightning's own checkpoint
writer is not enough: its fsspec transaction writes to the system temp folder and *moves* the file, which is a
copy, not a rename, whenever /tmp is another filesystem.)
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from matching.errors import DataFormatError

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Call `write(temporary path)`, then rename the temporary file onto `path`; on error nothing is left.

    The file gets the permissions of any new file of the user's (0666 less the umask), whatever `write` does: some
    writers (safetensors) create their file private (0600), which a team's shared model folder cannot be."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666))  # the mode the umask gives
        mode = os.stat(tmp).st_mode & 0o777
        write(tmp)
        if os.stat(tmp).st_mode & 0o777 != mode:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 16 MB blocks (an encoder's weights, a cache of its states)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_npz_atomic(path: str | os.PathLike, **arrays: Any) -> Path:
    """`numpy.savez` through :func:`write_atomic` (given a file object, numpy adds no `.npz` to the name)."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    return write_atomic(path, write)


def gz_twin(path: str | os.PathLike) -> Path:
    """`x` -> `x.gz` and `x.gz` -> `x`."""
    p = Path(path)
    return p.with_name(p.name[:-3]) if p.name.endswith(".gz") else p.with_name(p.name + ".gz")


def existing(path: str | os.PathLike) -> Path | None:
    """`path` if it exists, else its gzip twin if that exists, else None."""
    p = Path(path)
    if p.exists():
        return p
    twin = gz_twin(p)
    return twin if twin.exists() else None


def zip_member(raw: BinaryIO, path: Path) -> BinaryIO:
    """The one data file inside a zip archive (GloVe ships `glove.840B.300d.zip` holding one .txt), streamed."""
    archive = zipfile.ZipFile(raw)
    members = [m for m in archive.infolist() if not m.is_dir() and not m.filename.startswith("__MACOSX")]
    if len(members) != 1:
        names = [m.filename for m in members]
        raise DataFormatError(
            f"{path} holds {len(members)} files ({names[:5]}); a zip is read when it holds exactly one. Unpack it and "
            "point at the file you want (e.g. embeddings.path=<file>)."
        )
    return archive.open(members[0])  # type: ignore[return-value]


def open_binary(path: Path) -> BinaryIO:
    """The file's bytes: gunzipped when it is gzip, the single member when it is a zip."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == GZIP_MAGIC:
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if magic == ZIP_MAGIC:
        return zip_member(open(path, "rb"), path)
    return open(path, "rb")


def config_dir() -> Path:
    """The config folder, found through the package, never the working directory: `matching/conf/` in an installed
    wheel (pyproject.toml maps the repository's `conf/` there), `conf/` beside the package in a source checkout or
    an editable install. An absolute path: Hydra would resolve a relative one against the calling module."""
    package = Path(__file__).resolve().parent  # matching/
    for folder in (package / "conf", package.parent / "conf"):
        if (folder / "train.yaml").is_file():
            return folder
    raise RuntimeError(  # a broken installation, not a user's mistake: the traceback says where we looked
        f"matching's configs are missing: neither {package / 'conf'} nor {package.parent / 'conf'} holds train.yaml; "
        "reinstall the package (pip install --force-reinstall sentence-matching)"
    )


def package_node(entry: str, key: str) -> Any:
    """The node `key` of the package's entry config `conf/<entry>.yaml`, as written there (plain dicts and lists,
    interpolations unresolved): what a config saved without that node is given. A copy of its own each call (the
    file is read once: reading a study's hundreds of runs gives each this node)."""
    return copy.deepcopy(_entry_config(entry)[key])


@functools.cache
def _entry_config(entry: str) -> dict:
    import yaml

    return yaml.safe_load((config_dir() / f"{entry}.yaml").read_text(encoding="utf-8"))
