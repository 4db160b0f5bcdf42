"""Reading a shared model folder (`matching-export format=hub`; matching.saved.shared_folder writes one): download it
from the hub, check that its config builds nothing but matching's own components, and read its config, vocabulary and
weights from YAML, text and safetensors only, never a pickle: a config.yaml from someone else cannot make Hydra call an
arbitrary function. What an embedding source loads from elsewhere (an encoder) is not in the folder: the config names it
by hub id and revision, and the weights are checked against the sha256 recorded at training.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from matching.data.vocab import Vocabulary
from matching.errors import RunError
from matching.extras import require
from matching.files import package_node
from matching.saved.earlier_versions import upgraded

WEIGHTS = "model.safetensors"
#: The files of a shared folder that loading reads (the others are for people and other clients).
REQUIRED = ("config.yaml", "vocab.txt", WEIGHTS)

#: What a shared folder's config may name as a `_target_` besides every Aligner and EmbeddingSource of matching: its
#: own model and text components (by name: the data settings' module is not imported to check it).
SHARED_TARGETS = frozenset(
    {"matching.data.tasks.Task", "matching.training.datamodule.DataSettings",
     "matching.model.decomposable.DecomposableAttention", "matching.data.tasks.keep_recent_turns"}
)  # fmt: skip


def is_shared_folder(folder: Path) -> bool:
    return folder.is_dir() and (folder / WEIGHTS).is_file() and (folder / "config.yaml").is_file()


def download(repo_id: str, revision: str | None = None) -> Path:
    """The local copy of a shared folder on the hub (downloaded once into the hub library's cache)."""
    hub = require("huggingface_hub", "hub", f"loading {repo_id} from the Hugging Face hub")
    try:
        folder = Path(hub.snapshot_download(repo_id, revision=revision))
    except Exception as err:  # offline and not cached, unknown name, no permission
        raise RunError(
            f"no folder {repo_id} here, and cannot get the model {repo_id!r}"
            f"{f' at revision {revision}' if revision else ''} from the Hugging Face "
            f"hub ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). Check the name (owner/name), "
            "the network and your login for a private model; offline, a model loads only once it is in the hub "
            "cache, or from a local folder: Matcher.load('/path/to/folder')"
        ) from None
    if not is_shared_folder(folder):
        raise RunError(
            f"{repo_id} is not a shared model of matching: it has no {' and '.join(REQUIRED)}; such a folder is "
            "written by matching-export format=hub"
        )
    return folder


# --- loading ----------------------------------------------------------------------------------------------------


def check_targets(node: Any, folder: Path, key: str = "") -> None:
    """RunError unless every `_target_` under `node` is one of matching's own model and text components, and no
    value is an interpolation (`${...}`: a resolver could read the environment)."""
    if isinstance(node, DictConfig):
        target = node.get("_target_") if "_target_" in node else None
        if target is not None and not _allowed(str(target)):
            raise RunError(
                f"{folder / 'config.yaml'}: {key or 'the config'} names {target!r} (_target_), which is not one of "
                "matching's own components; a shared folder builds nothing else, so that loading it cannot run "
                "code. If you trust this model, train or load it as a run directory instead"
            )
        for name in node:
            if OmegaConf.is_interpolation(node, name):
                raise RunError(f"{folder / 'config.yaml'}: {key}.{name} is an interpolation; a shared folder holds "
                               "plain values only")  # fmt: skip
            check_targets(node[name], folder, f"{key}.{name}".lstrip("."))
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            check_targets(value, folder, f"{key}[{i}]")


def _allowed(target: str) -> bool:
    module, _, name = target.rpartition(".")
    if not module.startswith("matching.") or name.startswith("_"):
        return False
    if target in SHARED_TARGETS:
        return True
    if module in ("matching.data.readers", "matching.data.tables"):
        return name.startswith("read_")
    from hydra.utils import get_object  # Hydra and torch only when a shared folder is read (not to locate one)

    from matching.model.aligners import Aligner
    from matching.model.embeddings import EmbeddingSource

    try:
        obj = get_object(target)  # a module of matching: importing it runs nothing but our own code
    except Exception:  # a name this version of matching does not have
        return False
    return isinstance(obj, type) and issubclass(obj, (Aligner, EmbeddingSource))


def read_shared(
    folder: Path, settings: dict[str, Any] | None = None, config: DictConfig | None = None
) -> tuple[DictConfig, Path, Vocabulary, dict, dict]:
    """A shared folder's config, weights file, vocabulary, weights and metadata (what
    matching.model.assembly.trained_model builds the model from), read from YAML, text and safetensors only; `settings`:
    dotted config keys to override (see matching.inference.load); `config`: the folder's config as a command composed it
    (checked all the same)."""
    from matching.saved.run_folder import configured

    safetensors = require("safetensors", "hub", "loading a shared model folder (safetensors)")
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        raise RunError(f"{folder} is not a complete shared model folder: {', '.join(missing)} missing")
    try:
        cfg = upgraded(OmegaConf.load(folder / "config.yaml"))
    except Exception as err:
        raise RunError(f"cannot read {folder / 'config.yaml'} ({type(err).__name__}: {err})") from None
    if not isinstance(cfg, DictConfig) or any(k not in cfg for k in ("task", "data", "embeddings", "model")):
        raise RunError(f"{folder / 'config.yaml'} is not the config of a shared model (task, data, embeddings, model)")
    check_targets(cfg, folder)
    if config is not None:
        check_targets(config, folder)
    cfg = configured(cfg if config is None else config, settings or {})
    if "datamodule" not in cfg:  # the package's own (after the checks): it wires the folder's task, data, embeddings
        with open_dict(cfg):
            cfg.datamodule = package_node("train", "datamodule")
    weights_file = folder / WEIGHTS
    try:
        with safetensors.safe_open(str(weights_file), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("matching", "{}"))
            weights = {f"model.{k}": f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iteration)
    except Exception as err:
        raise RunError(
            f"cannot read {weights_file} ({type(err).__name__}: {err}); the file is damaged or not safetensors: "
            "download or export the folder again"
        ) from None
    encoder = meta.get("encoder")
    if encoder is not None and not re.fullmatch(r"[0-9a-f]{64}", str(encoder.get("weights_sha256", ""))):
        raise RunError(f"{weights_file}: its metadata names no encoder weights sha256; export the folder again")
    return cfg, weights_file, Vocabulary.load(folder / "vocab.txt"), weights, meta
