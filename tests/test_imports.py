"""The package uses its dependencies' public APIs only: no import of a private module (`from x._y import z`,
`import x._y`) or of a private name (`from x import _y`) of any package but matching itself. A private module
changes without notice in a minor release (the server once copied LitServe's internals and had to pin
`litserve<0.3`); a public API is deprecated first."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("matching", "hydra_plugins")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: statement` of every import of another package's private module or name in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            parts = module.split(".")
            if parts[0] in OURS:
                continue
            if any(_private(p) for p in parts) or any(_private(n) for n in names):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_each_form_of_private_import():
    source = "\n".join([
        "import os.path, json", "from fastapi import Request", "from __future__ import annotations",
        "import litserve.loops._base", "from hydra._internal.core_plugins import basic_sweeper",
        "from litserve.loops.base import _SENTINEL_VALUE", "from matching._private import x", "from .x import _y",
    ])  # fmt: skip
    assert [line.split(": ", 1)[1] for line in private_imports(source)] == [
        "import litserve.loops._base",
        "from hydra._internal.core_plugins import basic_sweeper",
        "from litserve.loops.base import _SENTINEL_VALUE",
    ]


@pytest.mark.parametrize("package", OURS)
def test_no_import_of_a_private_module_of_a_dependency(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    found = [
        hit for path in files for hit in private_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found, "imports of private modules or names of other packages:\n" + "\n".join(found)
