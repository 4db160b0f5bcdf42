"""Configs saved by earlier versions of matching, read as today's; and the import paths that code written for them
uses.

A run folder's or a shared folder's `config.yaml` names the classes it builds by where they lived when it was
trained (`_target_: matching.aligners.CoDAAligner`). Those modules have since moved into the package's rooms
(`matching.model.aligners`); `upgraded` reads such a config with today's names, so that every run trained before the
move still loads, evaluates, exports, resumes and is recognised by a relaunched sweep as the same run. A run saved
before the `dtype` key computed in fp32 and is given that key. Nothing else is changed: the same classes with the
same arguments.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import warnings
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


#: The modules that a user's own code imports to extend matching (docs/extending.md before the package's rooms:
#: `from matching.aligners import Aligner`, `from matching.layers import pair_mask`, `from matching.data.embeddings
#: import EmbeddingSource`), and where they are now. Importing one by its old path gives today's module, with a
#: DeprecationWarning naming the new path.
OLD_IMPORT_PATHS = {
    old: MOVED_MODULES[old] for old in ("matching.aligners", "matching.layers", "matching.data.embeddings")
}


class OldImportPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a module of `OLD_IMPORT_PATHS` by its old name and hands back today's module (the same object, so
    that a class subclassed through either path is one class); answers no other name."""

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        return importlib.util.spec_from_loader(name, self) if name in OLD_IMPORT_PATHS else None

    def create_module(self, spec):
        today = OLD_IMPORT_PATHS[spec.name]
        warnings.warn(f"{spec.name} is now {today}: import it from there (the old path will go in a later version)",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return importlib.import_module(today)

    def exec_module(self, module) -> None:  # today's module is already run
        pass


def keep_old_import_paths() -> None:
    """Let code written against the flat layout import the extension points by their old paths (once a process)."""
    if not any(isinstance(finder, OldImportPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldImportPaths())
