"""Where a saved run keeps what a trained model needs (its checkpoint, `config.yaml`, `vocab.txt`), found and read
without torch: a command's `ckpt=` is located and its saved config read before anything heavy is imported, so that a
mistake on the command line is answered at once.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from matching.errors import RunError
from matching.saved import SAVED_FORMS
from matching.saved.earlier_versions import upgraded

if TYPE_CHECKING:
    from matching.model.assembly import TrainedModel


def find_run_dir(checkpoint: Path) -> Path:
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (folder / "config.yaml").exists():
            return folder
    raise RunError(
        f"no config.yaml beside {checkpoint} or in its parent folder: a checkpoint is used from inside its run "
        f"directory (outputs/runs/<task>/<aligner>/<time>/checkpoints/best.ckpt), which holds config.yaml and vocab.txt"
    )


def check_checkpoint(checkpoint: str | os.PathLike) -> Path:
    """The checkpoint file, or a RunError that lists the checkpoints of its folder."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        hint = (
            f"; checkpoints there: {sorted(p.name for p in checkpoint.parent.glob('*.ckpt'))}"
            if checkpoint.parent.is_dir()
            else ""
        )
        raise RunError(f"no checkpoint file at {checkpoint}{hint}")
    return checkpoint


def find_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint that `path` names: the file itself, or a run directory's checkpoints/best.ckpt."""
    path = Path(path)
    if path.is_dir() and path.name == "checkpoints" and (path / "best.ckpt").is_file():  # a run's checkpoints/
        return path / "best.ckpt"
    if path.is_dir():
        best = path / "checkpoints" / "best.ckpt"
        if best.is_file():
            return best
        found = sorted(p.name for p in (path / "checkpoints").glob("*.ckpt"))
        raise RunError(
            f"{path} is not a run directory with checkpoints/best.ckpt"
            + (f" (checkpoints there: {found}; give one of them)" if found else "")
            + ", nor a shared model folder (config.yaml, vocab.txt, model.safetensors) or an exported ONNX folder "
            f"(model.onnx, serving.json); give {SAVED_FORMS}"
        )
    if not path.exists():
        raise RunError(f"no run directory, checkpoint or shared model folder at {path}; give {SAVED_FORMS}")
    return check_checkpoint(path)


def run_config(checkpoint: str | os.PathLike) -> DictConfig:
    """The saved config of the run a checkpoint belongs to (matching.inference.saved_config reads every saved
    form's); a run saved before the `dtype` key computed in fp32, and is given that key, so that `dtype=bf16`
    overrides it as in any other run."""
    return upgraded(OmegaConf.load(find_run_dir(check_checkpoint(checkpoint)) / "config.yaml"))


#: The nodes that a run's config.yaml keeps as written: they only wire other nodes together (`datamodule: {task:
#: ${task}, ...}`), and a resolved copy would duplicate those nodes and miss an override of them on the saved run.
WIRING_NODES = ("datamodule",)


def saved_form(cfg: DictConfig) -> dict:
    """The config as a run saves it (config.yaml): resolved, every value as the run used it, except the nodes that
    only wire others together (`WIRING_NODES`), kept as their references."""
    rest = OmegaConf.masked_copy(cfg, [key for key in cfg if key not in WIRING_NODES])
    container = OmegaConf.to_container(rest, resolve=True)
    return container | {key: OmegaConf.to_container(cfg[key], resolve=False) for key in WIRING_NODES if key in cfg}


#: The folders of a run's `paths` that a command may give anew: the corpora moved since training, a run copied to
#: another machine, a published run's `<paths.data_dir>`.
MOVABLE_PATHS = ("paths.data_dir", "paths.cache_dir")


def moved(cfg: DictConfig, places: Mapping[str, str]) -> DictConfig:
    """`cfg` (a run's saved config, resolved when it was saved) with the folders of `places` (`{"paths.data_dir":
    "/corpora"}`, keys of MOVABLE_PATHS) moved: the key itself and every value that lay under the folder it held
    (`data.data_dir`, `embeddings.path`, ...), so that the run reads its files where they are now; the run's other
    `paths` (its output folder) stay. A value lies under the longest of the run's folders that holds it (`data/cache`
    is the cache's, not `data`'s)."""
    held = {key: str(value) for key in MOVABLE_PATHS if (value := OmegaConf.select(cfg, key)) is not None}
    places = {key: str(value) for key, value in places.items() if key in held and str(value) != held[key]}
    if not places:
        return cfg
    folders = sorted(held.items(), key=lambda item: -len(item[1]))

    def relocated(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: relocated(v) for k, v in value.items()}
        if isinstance(value, list):
            return [relocated(v) for v in value]
        if isinstance(value, str):
            for key, folder in folders:
                if value == folder or value.startswith(folder.rstrip("/") + "/"):
                    return places[key] + value[len(folder) :] if key in places else value
        return value

    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    out = relocated(container)
    out["paths"] |= {k: v for k, v in container["paths"].items() if f"paths.{k}" not in places}  # output_dir, ...
    return OmegaConf.create(out)


def configured(cfg: DictConfig, settings: dict[str, Any]) -> DictConfig:
    """A copy of a run's config with `settings` (dotted keys of the config: `{"data.batch_tokens": 4096}`) applied;
    a key the config does not have is a RunError. A folder of MOVABLE_PATHS moves every value under it (`moved`)."""
    cfg = moved(upgraded(copy.deepcopy(cfg)), {k: v for k, v in settings.items() if k in MOVABLE_PATHS})
    for key, value in settings.items():
        if OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
            raise RunError(f"the run's config has no key {key!r} to set; its keys are in config.yaml beside the model")
        OmegaConf.update(cfg, key, value)
    return cfg


_ABSENT = object()


def load_run(
    checkpoint: str | os.PathLike, cfg: DictConfig | None = None, settings: dict | None = None
) -> TrainedModel:
    """The trained model of a run directory's checkpoint, from the run's files alone (no vectors file or training
    data needed). `cfg`: the run's config as a command composed it (None: the saved one); `settings`: dotted keys
    of the config to override (matching.saved.run_folder.configured)."""
    from matching.model.assembly import read_checkpoint, read_vocabulary, trained_model

    checkpoint = check_checkpoint(checkpoint)
    run_dir = find_run_dir(checkpoint)
    cfg = configured(cfg if cfg is not None else run_config(checkpoint), settings or {})
    vocab, (weights, meta) = read_vocabulary(run_dir), read_checkpoint(checkpoint)
    return trained_model(cfg, run_dir, checkpoint, vocab, weights, meta)


def option_name(cfg: Mapping, group: str) -> str:
    """The option of a config group a run was trained with (`aligner=coda` -> "coda"), as saved by `train` (`cfg`:
    its config, a dict or a DictConfig); for a run composed without Hydra's record of its choices, the class name
    of the group's `_target_`."""
    chosen = (cfg.get("choices") or {}).get(group)
    return chosen or str(cfg[group]["_target_"]).rsplit(".", 1)[-1]
