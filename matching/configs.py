"""The configs: where the package's config folder is, and the objects a `_target_` node builds (the checks of a
training config's values, run before any data is read, are training's: matching.training.config_checks)."""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from matching.errors import ConfigError
from matching.files import config_dir

CONF = config_dir()


def build(node: DictConfig, **kwargs: Any) -> Any:
    """The object a `_target_` node describes, with `kwargs` (objects made at run time) added to its arguments.

    The node is made a partial first and then called: Hydra would otherwise merge the run-time objects into the
    config (turning a dataclass into a config node), and would wrap a constructor's own error (a bad value, a
    missing file) in an InstantiationException that hides what the user did wrong."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        keys = f"with keys {', '.join(map(str, list(node)[:8]))}" if isinstance(node, DictConfig) else repr(node)[:80]
        raise ConfigError(
            f"a config node ({keys}) has no _target_ (the class or function it builds); it was probably saved by an "
            "older version of matching: retrain, or start from the matching file under conf/"
        )
    return instantiate(node, _partial_=True)(**kwargs)
