"""Configs saved by earlier versions of matching, read as today's.

A run folder's or a shared folder's `config.yaml` names the classes it builds by where they lived when it was
trained (`_target_: matching.aligners.CoDAAligner`). Those modules have since moved into the package's rooms
(`matching.model.aligners`); `upgraded` reads such a config with today's names, so that every run trained before the
move still loads, evaluates, exports, resumes and is recognised by a relaunched sweep as the same run. A run saved
before the `dtype` key computed in fp32 and is given that key. Nothing else is changed: the same classes with the
same arguments.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

#: Where the modules a `_target_` can name lived before the package's rooms, and where they are now.
MOVED_MODULES = {
    "matching.aligners": "matching.model.aligners",
    "matching.attention": "matching.model.attention",
    "matching.model": "matching.model.decomposable",
    "matching.encoders": "matching.model.encoders",
    "matching.layers": "matching.model.layers",
    "matching.data.embeddings": "matching.model.embeddings",
    "matching.data.contextual": "matching.model.contextual",
    "matching.data.datamodule": "matching.training.datamodule",
    "matching.callbacks": "matching.training.callbacks",
    "matching.sweeps": "matching.training.sweeps",
}


def current_target(target: str) -> str:
    """Today's name of a `_target_` (the same name when it has not moved)."""
    module, _, name = target.rpartition(".")
    return f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else target


def current_targets(node: Any) -> list[tuple[str, str]]:
    """Rename, in place, every moved `_target_` under `node` (plain dicts and lists, as YAML or
    `OmegaConf.to_container` gives them); the renames, as (old, new)."""
    renamed = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str) and current_target(value) != value:
                node[key] = current_target(value)
                renamed.append((value, node[key]))
            else:
                renamed += current_targets(value)
    elif isinstance(node, list):
        for item in node:
            renamed += current_targets(item)
    return renamed


def upgraded(cfg: DictConfig) -> DictConfig:
    """`cfg`, a config read from a saved model, as today's version reads it (see the module docstring)."""
    container = OmegaConf.to_container(cfg, resolve=False)
    renamed = current_targets(container)
    if renamed:
        cfg = OmegaConf.create(container)
        log.debug("a config saved by an earlier version, read with today's module names: %s",
                  ", ".join(f"{old} -> {new}" for old, new in renamed))  # fmt: skip
    if "dtype" not in cfg:
        cfg.dtype = "fp32"
    return cfg
