"""Configs saved by earlier versions of matching, read as today's; and the import paths that code written for them
uses.

A run folder's or a shared folder's `config.yaml` names the classes it builds by where they lived when it was
trained (`_target_: matching.aligners.CoDAAligner`). Those modules have since moved into the package's rooms
(`matching.model.aligners`); `upgraded` reads such a config with today's names, so that every run trained before the
move still loads, evaluates, exports, resumes and is recognised by a relaunched sweep as the same run. A run saved
before the `dtype` key computed in fp32 and is given that key. A run saved before the `loss` config group chose its
training loss by name (`loss: {kind: pairwise, margin: 1.0, class_weights: null}`, or no `loss` node at all before
the ranking losses: pointwise); it is read as the node of that group that builds the same loss (`loss: {_target_:
...PairwiseHinge, margin: 1.0}`), the settings the chosen loss did not read left out. A run folder's config saved before
the `system` node is given it. Its `data` node, which built the data module itself before the data module was
given its settings, builds those settings (`DataSettings`, the same keys); one saved before the `datamodule` node
(which wires the task, data and embeddings nodes into the data module) is given the package's. Nothing else is
changed: the same classes with the same arguments.

The same holds for what users type: `loss.kind=<option>`, the old spelling of `loss=<option>`, is read as the new one
with a warning (`current_overrides`), so that commands in notes, study specs (conf/study/) and saved sweeps still run.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from matching.errors import ConfigError
from matching.files import config_dir, package_node

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


#: The `_target_`s that name another class today (after their module's move): the `data` node built the data
#: module itself before it built the settings the data module is given (`DataSettings`, the same keys).
RENAMED_TARGETS = {"matching.training.datamodule.PairDataModule": "matching.training.datamodule.DataSettings"}


def current_target(target: str) -> str:
    """Today's name of a `_target_` (the same name when it has not moved)."""
    module, _, name = target.rpartition(".")
    moved = f"{MOVED_MODULES[module]}.{name}" if module in MOVED_MODULES else target
    return RENAMED_TARGETS.get(moved, moved)


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


#: The loss each `loss.kind` of an earlier version chose, and the settings of that node it read: the node of the
#: `loss` group (conf/loss/<kind>.yaml) that builds the same loss.
LOSS_KINDS = {
    "pointwise": ("matching.training.losses.pointwise.PointwiseCrossEntropy", ("class_weights",)),
    "pairwise": ("matching.training.losses.pairwise.PairwiseHinge", ("margin",)),
    "listwise": ("matching.training.losses.listwise.ListwiseSoftmax", ()),
}


def current_loss(node: dict) -> bool:
    """Rewrite, in place, a plain config's `loss` node of the form before the `loss` group (`kind`, `margin`,
    `class_weights`) as that group's node for the same loss; whether it did."""
    loss = node.get("loss")
    if not isinstance(loss, dict) or "_target_" in loss:
        return False
    kind = str(loss.get("kind") or "pointwise")
    if kind not in LOSS_KINDS:  # a saved config never held another kind (the version that wrote it refused it)
        raise ConfigError(f"a saved config's loss.kind={kind!r} is none of {sorted(LOSS_KINDS)}")
    target, reads = LOSS_KINDS[kind]
    defaults = {"class_weights": None, "margin": 1.0}
    node["loss"] = {"_target_": target, **{key: loss.get(key, defaults[key]) for key in reads}}
    if isinstance(node.get("choices"), dict):  # the options a run chose, by group: the loss is one now
        node["choices"].setdefault("loss", kind)
    return True


def current_form(container: dict) -> list[str]:
    """Rewrite, in place, a saved config (plain dicts and lists, as YAML or `OmegaConf.to_container` gives them) in
    today's form: its moved `_target_`s and its loss (see the module docstring); what was changed, in words."""
    changes = [f"{old} -> {new}" for old, new in current_targets(container)]
    if current_loss(container):
        changes.append(f"loss -> {container['loss']['_target_']}")
    if "optim" in container and "datamodule" not in container:  # a run folder's (a shared folder's has no training)
        container["datamodule"] = package_node("train", "datamodule")
        changes.append("datamodule node added")
    return changes


def upgraded(cfg: DictConfig) -> DictConfig:
    """`cfg`, a config read from a saved model, as today's version reads it (see the module docstring)."""
    container = OmegaConf.to_container(cfg, resolve=False)
    changes = current_form(container)
    if changes:
        cfg = OmegaConf.create(container)
        log.debug("a config saved by an earlier version, read in today's form: %s", ", ".join(changes))
    if "dtype" not in cfg:
        cfg.dtype = "fp32"
    if "optim" in cfg:  # a run folder's config, which a resumed run trains from (a shared folder's has no training)
        if "loss" not in cfg:  # saved before the ranking losses: it trained with the pointwise cross-entropy
            cfg.loss = {"_target_": LOSS_KINDS["pointwise"][0], "class_weights": None}
        if "system" not in cfg:
            cfg.system = {"_target_": "matching.training.system.MatchingSystem"}
    return cfg


#: The overrides whose spelling changed: `loss.kind=<option>` is now the config group's `loss=<option>`.
OLD_OVERRIDE_KEYS = {"loss.kind": "loss"}

_warned: set[str] = set()


def current_overrides(overrides: Sequence[str], warn: bool = True) -> list[str]:
    """`overrides` (command-line arguments, a sweep job's overrides, a saved run's `.hydra/overrides.yaml`) with every
    old spelling of a key (`OLD_OVERRIDE_KEYS`) in today's, each said once a process as a warning unless `warn` is
    false (reading saved runs); other arguments as they are. An option that the group does not have is a ConfigError
    naming the options, as the old key's check said."""
    current = []
    for override in overrides:
        key, equals, value = override.partition("=")
        if not equals or key.lstrip("+~") not in OLD_OVERRIDE_KEYS:
            current.append(override)
            continue
        group = OLD_OVERRIDE_KEYS[key.lstrip("+~")]
        options = sorted(path.stem for path in (config_dir() / group).glob("*.yaml"))
        chosen = [v.strip() for v in value.split(",")] if value.replace(",", "").isidentifier() else []
        unknown = [v for v in chosen if v not in options]
        if unknown:
            raise ConfigError(f"{key.lstrip('+~')} must be one of {options}, got {unknown[0]!r} (it is now spelled "
                              f"{group}=<option>)")  # fmt: skip
        if warn and override not in _warned:
            _warned.add(override)
            log.warning("%s is now spelled %s=%s (the %s config group, conf/%s/); read as that", override, group,
                        value, group, group)  # fmt: skip
        current.append(f"{group}={value}")
    return current


#: The modules that a user's own code imports to extend matching (docs/how-to/extending.md before the package's rooms:
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
