"""Optional dependencies (pyproject's extras): import one, or say which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ValueError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """`module`, imported; MissingExtraError naming `extra` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f'{purpose} needs {err.name or module}, from the {extra} extra: pip install -e ".[{extra}]" '
            f'(or pip install "matching[{extra}]")'
        ) from None
