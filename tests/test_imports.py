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


# --- the package's own imports: commands on top, the library below, no cycle ---------------------------------------

#: Modules that are commands: the Hydra wrappers (`main = command(...)`) and the command machinery (cli). Nothing
#: below them may import one: a library module that imports a command module runs upward.
COMMAND_MACHINERY = {"matching.cli"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """The nodes of `tree` that run on import or call, leaving out `if TYPE_CHECKING:` blocks (annotations only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def own_imports(source: str, module: str, modules: set[str], is_package: bool = False) -> set[str]:
    """The modules of `modules` that `source` (the module `module`) imports, at its top or inside a function:
    `from matching.x import y` names `matching.x.y` when that is a module, else `matching.x`."""
    found = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)
    return found - {module}


def import_graph(root: Path = ROOT, package: str = "matching") -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    return {m: own_imports(p.read_text(encoding="utf-8"), m, set(files), p.name == "__init__.py")
            for m, p in files.items()}  # fmt: skip


def command_modules(root: Path = ROOT, package: str = "matching") -> set[str]:
    """The modules that define a command: `main = command(...)` at their top level."""
    found = set(COMMAND_MACHINERY)
    for path in (root / package).rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if ast.unparse(node.value.func) == "command" and any(ast.unparse(t) == "main" for t in node.targets):
                    found.add(module_name(path, root))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: its strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_imports(graph: dict[str, set[str]], commands: set[str]) -> list[str]:
    return sorted(f"{m} imports {c}" for m, deps in graph.items() if m not in commands for c in deps & commands)


def test_the_checks_find_a_cycle_and_an_upward_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from pkg.sub import b\n",
        "sub/__init__.py": "",
        "sub/b.py": "def f():\n    from pkg import c  # inside a function: still an import\n",
        "c.py": "from . import a\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import tool\n",
        "tool.py": "from pkg.cli import command\nmain = command('tool', print)\n",
        "cli.py": "def command(name, body): ...\n",
        "lib.py": "from pkg.tool import main\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.tool" not in graph["pkg.c"]  # an annotation-only import is no import at run time
    assert command_modules(tmp_path, "pkg") - COMMAND_MACHINERY == {"pkg.tool"}
    assert upward_imports(graph, {"pkg.tool", "pkg.cli"}) == ["pkg.lib imports pkg.tool"]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_library_module_imports_a_command_module():
    commands = command_modules()
    assert {"matching.train", "matching.predict", "matching.report", "matching.serve"} <= commands
    found = upward_imports(import_graph(), commands)
    assert not found, "library modules importing command modules:\n" + "\n".join(found)


#: Underscored names that are public APIs: a NamedTuple's `_replace` (underscored so as not to clash with field
#: names), `os._exit` (the exit that skips cleanup), an ATen operator's own name (what the ONNX exporter is told
#: to translate), and Hydra's config keys (`_target_`, `_partial_`).
PUBLIC_UNDERSCORED = {"_replace", "_exit", "_cdist_forward"}


def private_attributes(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: expression` of every read of another object's private attribute (`x._y`, not through `self` or
    `cls`) and every import of a private name of our own modules (`from matching.x import _y`)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute):
            name, base = node.attr, ast.unparse(node.value)
            if (
                _private(name)
                and not name.endswith("_")
                and name not in PUBLIC_UNDERSCORED
                and base not in ("self", "cls")
            ):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            found += [f"{filename}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                      if _private(a.name)]  # fmt: skip
    return found


def test_the_attribute_check_finds_each_form():
    source = "\n".join([
        "trainer._logger_connector.should_update_logs", "node._get_node('a')._value()", "self._cache", "cls._made",
        "cfg.model._target_", "row._replace(a=1)", "from matching.training.datamodule import _split", "os._exit(1)",
    ])  # fmt: skip
    assert sorted(hit.split(": ", 1)[1] for hit in private_attributes(source)) == [
        "from matching.training.datamodule import _split", "node._get_node", "node._get_node('a')._value",
        "trainer._logger_connector",
    ]  # fmt: skip


@pytest.mark.parametrize("package", OURS)
def test_no_module_reads_a_private_attribute_of_another_object(package):
    """Lightning's `trainer._logger_connector`, OmegaConf's `_get_node`, `_value`, `_get_full_key`, a data module's
    `_split_key` read from distillation: each was read once; a private name changes without notice."""
    found = [hit for path in sorted((ROOT / package).rglob("*.py"))
             for hit in private_attributes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]  # fmt: skip
    assert not found, "private attributes read from outside their object:\n" + "\n".join(found)


#: Receivers whose attributes are data or a library's documented way in, by the first name of the receiver: config
#: nodes (`cfg`, `config`, `node`: OmegaConf, set under open_dict), the interpreter's `sys.argv`/`sys.stderr`,
#: torch.autograd.Function's `ctx`, a logging `logger`, FastAPI's `app.openapi` and a command's own `main.__doc__`.
SETTABLE_RECEIVERS = {"cfg", "config", "node", "sys", "ctx", "logger", "app", "main"}


def outside_assignments(source: str, filename: str = "<source>") -> list[str]:
    """`file: target` of every assignment to an attribute of another object than `self`/`cls` (`x.y = ...`,
    `x.y += ...`, `self.x.y = ...`, `setattr(x, ...)`), except on a receiver of SETTABLE_RECEIVERS and on an object
    the same function made (`x = Thing(...)` then `x.y = ...`: a function may finish what it makes; what it was
    given, or what an object owns, it asks through a method or passes to a constructor)."""
    tree = ast.parse(source, filename)
    made: dict[int, set[str]] = {}  # each node of a function: the names that function binds to a call's result
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)]
        bound = [e for n in calls for t in n.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        names = {e.id for e in bound if isinstance(e, ast.Name)}
        for n in ast.walk(function):
            made.setdefault(id(n), set()).update(names)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and node.args:
            targets = [ast.Attribute(node.args[0], "(setattr)", ast.Store())]
        else:
            continue
        for target in targets:
            for attribute in ast.walk(target):
                if not (isinstance(attribute, ast.Attribute) and isinstance(attribute.ctx, ast.Store)):
                    continue
                base = ast.unparse(attribute.value)
                root = base.split(".")[0].split("[")[0]
                if base in ("self", "cls") or root in SETTABLE_RECEIVERS or root in made.get(id(node), ()):
                    continue
                found.append(f"{filename}: {base}.{attribute.attr}")
    return found


def test_the_assignment_check_finds_each_form():
    source = "\n".join([
        "def run(system, trainer):", "    system.teacher_logits = 1", "    trainer.callback.x += 1",
        "    setattr(system, 'record', True)", "    made = Thing()", "    made.x = 1", "    cfg.task.labels = []",
        "class A:", "    def f(self):", "        self.x = 1", "        self.part.y = 2",
    ])  # fmt: skip
    assert sorted(hit.split(": ", 1)[1] for hit in outside_assignments(source)) == [
        "self.part.y", "system.(setattr)", "system.teacher_logits", "trainer.callback.x",
    ]  # fmt: skip


#: Assignments from outside an object that stay: Lightning's checkpoint callback told where `save_last` (for
#: StopCheckpoint and LastEveryEpoch) wrote last.ckpt (Lightning's own object, which has no method for it). A new one
#: is a failure.
KNOWN_OUTSIDE_ASSIGNMENTS = {"matching/training/callbacks.py: checkpoint.last_model_path"}


@pytest.mark.parametrize("package", OURS)
def test_no_attribute_of_a_built_object_is_assigned_from_another_module(package):
    """A built object is given what it uses when it is made (its constructor's arguments, or objects it owns) and
    is asked through its methods: the training system's teacher logits, prediction recording and ONNX scorer were
    once assigned by run.py, replay.py and evaluate.py, so that what it did depended on who had set what."""
    found = {hit for path in sorted((ROOT / package).rglob("*.py"))
             for hit in outside_assignments(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))}  # fmt: skip
    new = sorted(found - KNOWN_OUTSIDE_ASSIGNMENTS)
    assert not new, "attributes assigned from outside their object:\n" + "\n".join(new)
    known_here = {k for k in KNOWN_OUTSIDE_ASSIGNMENTS if k.startswith(f"{package}/")}
    assert not known_here - found, f"fixed, so no longer known: remove {sorted(known_here - found)}"


def test_export_inference_and_the_saved_forms_run_without_lightning(snli_run, tmp_path):
    """Exporting a run (hub and ONNX), loading it back and answering import no Lightning: the model assembly and the
    inference object are the whole path (training's LightningModule is for training and `evaluate`)."""
    import subprocess
    import sys

    run_dir, _ = snli_run
    script = f"""
import importlib, pkgutil, sys
from matching.cli import compose_config
from matching.export import export_command
for room in ("matching.inference", "matching.saved", "matching.model"):
    for module in pkgutil.iter_modules(importlib.import_module(room).__path__):
        importlib.import_module(room + "." + module.name)
for fmt in ("hub", "onnx"):
    export_command(compose_config("export", ["ckpt={run_dir}", "format=" + fmt, "out={tmp_path}/" + fmt]))
from matching import Matcher
for path in ("{run_dir}", "{tmp_path}/hub", "{tmp_path}/onnx"):
    Matcher.load(path).predict([("A man plays a guitar.", "A person makes music.")])
print(sorted(m for m in sys.modules if m.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]


def test_reading_results_imports_neither_lightning_nor_torchmetrics():
    """A report, a study's page and the published blocks read scores files: every module of results/ and studies/
    loads without Lightning or torchmetrics (seconds at every start)."""
    import subprocess
    import sys

    script = """
import importlib, pkgutil, sys
for room in ("matching.results", "matching.studies"):
    for module in pkgutil.iter_modules(importlib.import_module(room).__path__):
        importlib.import_module(room + "." + module.name)
print(sorted({m.split(".")[0] for m in sys.modules} & {"lightning", "pytorch_lightning", "torchmetrics"}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]


#: The package's rooms, lowest first: each imports only rooms before it (docs/concepts/architecture.md draws them).
ROOMS = ("data", "model", "saved", "inference", "training", "results", "studies", "serving")


def upward_room_imports(graph: dict[str, set[str]]) -> list[str]:
    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in ROOMS else None

    found = []
    for module, imported in graph.items():
        for other in imported:
            a, b = room(module), room(other)
            if a and b and ROOMS.index(b) > ROOMS.index(a):
                found.append(f"{module} ({a}) imports {other} ({b})")
    return sorted(found)


def test_the_base_imports_no_room():
    graph = import_graph()
    found = [f"{m} imports {d}" for m, ds in graph.items() for d in ds if room_of(m) == "base" != room_of(d)]
    assert not found, "the modules every room stands on import a room:\n" + "\n".join(found)


def test_the_rooms_import_downward_only():
    assert upward_room_imports({"matching.data.x": {"matching.model.y"}, "matching.model.y": {"matching.data.x"}}) == [
        "matching.data.x (data) imports matching.model.y (model)"
    ]
    found = upward_room_imports(import_graph())
    assert not found, "a room importing a room above it:\n" + "\n".join(found)


def room_of(module: str) -> str:
    """A module's room: its folder under matching/ (data, model, ...), `Matcher` for the public face (matcher.py and
    the package itself), `base` for what every room stands on (errors, configs, files, extras, console), else
    `commands`."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ROOMS:
        return parts[1]
    if module in ("matching.matcher", "matching"):  # the package's face: Matcher, DEMO_DATA, the config resolvers
        return "Matcher"
    if module in ("matching.errors", "matching.configs", "matching.files", "matching.extras", "matching.console"):
        return "base"
    return "commands"


def rooms_drawing(graph: dict[str, set[str]] | None = None) -> str:
    """The rooms and how many imports run between each two, as a Mermaid flowchart (docs/concepts/architecture.md)."""
    graph = import_graph() if graph is None else graph
    counts: dict[tuple[str, str], int] = {}
    for module, imported in graph.items():
        for other in imported:
            a, b = room_of(module), room_of(other)
            if a != b and b != "base":  # every room stands on base: its arrows would hide the others
                counts[(a, b)] = counts.get((a, b), 0) + 1
    order = ("commands", "serving", "studies", "results", "Matcher", "training", "inference", "saved", "model", "data")
    lines = ["```mermaid", "flowchart TD"]
    lines += [
        f"    {a} -->|{n}| {b}"
        for (a, b), n in sorted(counts.items(), key=lambda e: (order.index(e[0][0]), order.index(e[0][1])))
    ]
    return "\n".join(lines + ["```"])


ARCHITECTURE = ROOT / "docs" / "concepts" / "architecture.md"


def test_the_architecture_page_draws_the_rooms_as_the_code_imports_them():
    """docs/concepts/architecture.md's drawing is the one the code gives; `python tests/test_imports.py` redraws it."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("```mermaid")
    drawn = text[start : text.index("```", start + 3) + 3]
    assert drawn == rooms_drawing(), (
        "the rooms moved: run `python tests/test_imports.py` to redraw docs/concepts/architecture.md"
    )


if __name__ == "__main__":  # redraw docs/concepts/architecture.md's drawing from the code
    page = ARCHITECTURE.read_text(encoding="utf-8")
    begin = page.index("```mermaid")
    ARCHITECTURE.write_text(page[:begin] + rooms_drawing() + page[page.index("```", begin + 3) + 3 :], encoding="utf-8")
    print(f"redrew {ARCHITECTURE}")
