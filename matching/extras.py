"""Optional dependencies (pyproject's extras): import one, or say which extra installs it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from matching.errors import UserError


class MissingExtraError(UserError, ValueError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def _missing(module: str, extra: str, purpose: str) -> MissingExtraError:
    return MissingExtraError(
        f'{purpose} needs {module}, from the {extra} extra: pip install -e ".[{extra}]" '
        f'(or pip install "sentence-matching[{extra}]")'
    )


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """`module`, imported; MissingExtraError naming `extra` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise _missing(err.name or module, extra, purpose) from None


def check_installed(module: str, extra: str, purpose: str) -> None:
    """MissingExtraError naming `extra` when `module` is not installed (without importing it)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        found = False
    if not found:
        raise _missing(module, extra, purpose)
