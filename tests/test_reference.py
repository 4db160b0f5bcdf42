"""The generated command reference (docs/hooks/reference.py) against the commands themselves.

Every key of each command's config, composed as the command composes it (matching.cli, Hydra's compose API), and every
option of every config group it takes must be a row or a heading of its page; the check is tested on a page with a
planted omission. The comment reader is tested on a file written here, and the MkDocs hook on a files collection.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from conftest import reference_hook
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from matching.cli import compose_config, register_trained_run
from matching.files import config_dir

ROOT = Path(__file__).resolve().parents[1]


reference = reference_hook()


def _scripts() -> dict[str, str]:
    """pyproject.toml's console scripts, read by tomllib (Python 3.11+), else as installed (3.10)."""
    try:
        import tomllib
    except ModuleNotFoundError:
        from importlib.metadata import entry_points

        return {e.name: e.value for e in entry_points(group="console_scripts") if e.value.startswith("matching.")}
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


SCRIPTS = _scripts()


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference.pages(ROOT)


# -- the check ---------------------------------------------------------------------------------------------------------
def documented(page: str) -> tuple[set[str], set[str]]:
    """The keys a page documents (the first cell of a table row, as code) and the options (headings `group=option`)."""
    keys = set(re.findall(r"^\| `([^`|]+)` \|", page, re.M))
    options = set(re.findall(r"^#{2,6} `([^`=]+=[^`]+)`", page, re.M))
    return keys, options


def omissions(page: str, keys: set[str], options: set[str]) -> list[str]:
    """What a page leaves out of `keys` (dotted) and `options` (`group=option`)."""
    have_keys, have_options = documented(page)
    return sorted(f"key {k}" for k in keys - have_keys) + sorted(f"option {o}" for o in options - have_options)


def leaf_keys(node, prefix: str = "") -> set[str]:
    """Every key of a config, nested keys flattened `a.b.c` (an empty mapping and a list are values)."""
    if isinstance(node, dict) and node:
        return set().union(*(leaf_keys(value, f"{prefix}{key}.") for key, value in node.items()))
    return {prefix.rstrip(".")}


def composed(config: str) -> tuple[set[str], set[str]]:
    """A command's keys (hydra.* left out) and its groups' options, composed as the command does: a command that takes
    `ckpt=` over an empty trained run (no run given), the groups from Hydra's own record of the choices it made."""
    register_trained_run([], required=False)
    container = OmegaConf.to_container(compose_config(config), resolve=False)
    keys = leaf_keys({k: v for k, v in container.items() if k != "hydra"})
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        choices = compose(config, return_hydra_config=True).hydra.runtime.choices
        loader = GlobalHydra.instance().config_loader()
        options = {f"{g}={o}" for g in choices if not g.startswith("hydra/") for o in loader.get_group_options(g)}
    return keys, options


def command_config(module: str) -> str | None:
    """The config name of a console script's module (`main = command("train", ...)`), None for a plain script."""
    found = re.search(r'\bcommand\(\s*"(\w+)"', (ROOT / (module.replace(".", "/") + ".py")).read_text())
    return found.group(1) if found else None


# -- every command, every key, every option ----------------------------------------------------------------------------
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_key_and_option_of_a_command_is_on_its_page(script, pages):
    module = SCRIPTS[script].split(":")[0]
    page = pages[f"reference/commands/{script.removeprefix('matching-')}.md"]
    config = command_config(module)
    if config is None:  # a plain script: the keys it takes of another command's config
        taken = importlib.import_module(module).EXPORTED_KEYS
        serve = OmegaConf.to_container(OmegaConf.load(config_dir() / "serve.yaml"), resolve=False)
        keys, options = leaf_keys({k: v for k, v in serve.items() if k in taken}), set()
        assert keys, f"{module} takes no key of conf/serve.yaml"
    else:
        keys, options = composed(config)
    assert keys
    assert omissions(page, keys, options) == []


def test_train_lists_the_hydra_groups_options_that_conf_ships(pages):
    """`hydra/launcher=slurm` and the rest of conf/hydra/ are on train's page, where sweeps are."""
    shipped = {f"hydra/{p.parent.name}={p.stem}" for p in (config_dir() / "hydra").glob("*/*.yaml")}
    assert {"hydra/launcher=slurm", "hydra/sweeper=job_list"} <= shipped
    assert omissions(pages["reference/commands/train.md"], set(), shipped) == []


def test_the_check_finds_a_planted_omission(pages):
    """The same check on train's page with one key's row and one option's section taken out names both; a key that
    only a comment mentions does not count as documented."""
    page = pages["reference/commands/train.md"]
    keys, options = composed("train")
    assert "data.max_length" in keys and "aligner=coda" in options
    doctored = "\n".join(line for line in page.splitlines() if not line.startswith("| `data.max_length` |"))
    doctored = doctored.replace("### `aligner=coda`", "### the CoDA aligner")
    assert omissions(doctored, keys, options) == ["key data.max_length", "option aligner=coda"]
    mentioned = doctored + "\n\nSee `data.max_length` and `aligner=coda`.\n"
    assert omissions(mentioned, keys, options) == ["key data.max_length", "option aligner=coda"]


def test_every_script_has_a_page_and_the_index_links_it(pages):
    index = pages["reference/commands/index.md"]
    for script, target in SCRIPTS.items():
        name = script.removeprefix("matching-")
        assert f"reference/commands/{name}.md" in pages, script
        assert f"[`{script}`]({name}.md)" in index, script
        assert f"`python -m {target.split(':')[0]}`" in index, script
    assert set(pages) == {"reference/commands/index.md"} | {
        f"reference/commands/{s.removeprefix('matching-')}.md" for s in SCRIPTS
    }


def test_the_commands_that_take_ckpt_say_so_and_link_to_train(pages):
    for script, target in SCRIPTS.items():
        config = command_config(target.split(":")[0])
        if config is None:
            continue
        page = pages[f"reference/commands/{script.removeprefix('matching-')}.md"]
        takes_run = "trained_run" in (config_dir() / f"{config}.yaml").read_text()
        assert ("[`matching-train`](train.md#keys)" in page) == takes_run, script


def test_every_link_within_the_reference_lands_on_a_heading(pages):
    """Links to `#anchor` on the same page or to `<page>.md#anchor` of another generated page name an id that page
    has (MkDocs' strict build checks the same, with the whole site)."""
    ids = {path: set(re.findall(r"\{ #([\w-]+) \}", text)) for path, text in pages.items()}
    for path, text in pages.items():
        for target, anchor in re.findall(r"\]\(([\w.-]*)#([\w-]+)\)", text):
            where = f"reference/commands/{target}" if target else path
            assert anchor in ids[where], f"{path}: link to {target}#{anchor}"
        assert len(re.findall(r"\{ #([\w-]+) \}", text)) == len(ids[path]), f"{path}: an id used twice"


# -- how a file's comments are read ------------------------------------------------------------------------------------
EXAMPLE = """\
# @package things
# What this option is: the first sentence.
# More about it, and a command:
#   matching-train things=example

defaults:
  - reader: plain       # the reader it picks

size: 3                 # how many, continued
                        # on a second line
# A comment above a key.
name: "x"
flow: {a: 1, b: null}   # said once, of the mapping
part:
  # What the mapping is, above its first key.
  inner: true           # the first key's own
  other: [1, 2]
text: >-
  A folded
  paragraph.
bare: null
"""


def test_comments_land_on_their_keys(tmp_path):
    path = tmp_path / "example.yaml"
    path.write_text(EXAMPLE)
    config = reference.read_config(path, package="ignored")
    assert config.package == "things"
    assert config.about == [
        "What this option is: the first sentence.", "More about it, and a command:", "  matching-train things=example",
    ]  # fmt: skip
    assert [(d.group, d.option, d.comment) for d in config.defaults] == [("reader", "plain", "the reader it picks")]
    said = {s.key: (s.value, s.comment) for s in config.settings}
    assert said == {
        "things.size": ("3", "how many, continued on a second line"),
        "things.name": ('"x"', "A comment above a key."),
        "things.flow": (None, "said once, of the mapping"),
        "things.flow.a": ("1", ""),
        "things.flow.b": ("null", ""),
        "things.part": (None, "What the mapping is, above its first key."),
        "things.part.inner": ("true", "the first key's own"),
        "things.part.other": ("[1, 2]", ""),
        "things.text": ("A folded paragraph.", ""),
        "things.bare": ("null", ""),
    }
    markdown = reference.paragraphs(config.about, lambda path: None)
    assert "```bash\nmatching-train things=example\n```" in markdown


def test_comment_text_is_escaped_but_code_and_existing_pages_are_not():
    def link(path):
        return "../../how-to/data.md" if path == "how-to/data.md" else None

    text = "a <run dir>, `<kept> | as_is`, x | y, docs/how-to/data.md and docs/gone.md"
    assert reference.prose(text, link) == (
        "a &lt;run dir&gt;, `<kept> | as_is`, x \\| y, [docs/how-to/data.md](../../how-to/data.md) and docs/gone.md"
    )


# -- the MkDocs hook ---------------------------------------------------------------------------------------------------
def test_the_hook_adds_the_pages_as_generated_files(tmp_path):
    """As MkDocs runs it (mkdocs.yml's `hooks:`): every page is a generated file, replacing a file of the same path."""
    files_module = pytest.importorskip("mkdocs.structure.files")
    from mkdocs.config.defaults import MkDocsConfig

    docs = tmp_path / "docs"
    (docs / "reference" / "commands").mkdir(parents=True)
    (docs / "reference" / "commands" / "train.md").write_text("# a stale copy\n")
    config = MkDocsConfig(config_file_path=str(tmp_path / "mkdocs.yml"))
    config.load_dict({"site_name": "x", "docs_dir": str(docs), "site_dir": str(tmp_path / "site"),
                      "hooks": [str(ROOT / "docs" / "hooks" / "reference.py")]})  # fmt: skip
    errors, _ = config.validate()
    assert errors == []
    files = config.plugins.on_files(files_module.get_files(config), config=config)
    train = files.get_file_from_path("reference/commands/train.md")
    here = reference.pages(ROOT, exists=lambda path: (docs / path).is_file())  # links only to this site's pages
    assert train.abs_src_path is None and train.content_string == here["reference/commands/train.md"]
    assert [f.src_uri for f in files if f.src_uri == "reference/commands/train.md"] == ["reference/commands/train.md"]
    for script in SCRIPTS:
        assert files.get_file_from_path(f"reference/commands/{script.removeprefix('matching-')}.md") is not None


# -- the Python API page -----------------------------------------------------------------------------------------------
API_PAGE = ROOT / "docs" / "reference" / "python-api.md"


def api_targets() -> list[str]:
    """The objects docs/reference/python-api.md renders (`::: <dotted path>`)."""
    return re.findall(r"^::: ([\w.]+)$", API_PAGE.read_text(), re.M)


def test_the_api_page_renders_objects_that_exist_and_keeps_its_anchors():
    """Every `::: target` imports (a renamed object would fail the site's build), and the headings that other pages
    link to (`python-api.md#loading`, `#sharing`) are still there."""
    targets = api_targets()
    assert "matching.matcher.Matcher" in targets and "matching.matcher.Matcher.load" in targets
    for target in targets:
        parts = target.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for name in parts[cut:]:
                obj = getattr(obj, name)
            break
        else:
            pytest.fail(f"{target} cannot be imported")
    headings = re.findall(r"^## (.+)$", API_PAGE.read_text(), re.M)
    assert {"Loading", "Sharing"} <= set(headings)


def test_the_api_docstrings_read_as_google_style_and_name_real_parameters(caplog):
    """The docstrings the page renders parse in the style mkdocs.yml sets (Google) without a warning: a documented
    argument the signature lacks, or a section the parser cannot read, is one. The check itself is tried on a
    planted mistake."""
    griffe = pytest.importorskip("griffe")
    package = griffe.load("matching", search_paths=[str(ROOT)], docstring_parser="google")

    def objects(obj):
        yield obj
        for member in obj.members.values():
            if not member.is_alias and not member.name.startswith("_"):
                yield from objects(member)

    def warnings_of(obj) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING"):
            for each in objects(obj):
                if each.docstring is not None:
                    each.docstring.parse("google")
        return [r.getMessage() for r in caplog.records]

    rendered = [package[t.removeprefix("matching.")] if t != "matching" else package for t in api_targets()]
    found = {obj.path: warnings_of(obj) for obj in rendered}
    assert not any(found.values()), found
    load = package["matcher.Matcher.load"]
    planted = griffe.Docstring("Loads.\n\nArgs:\n    no_such_argument: Said of nothing.\n", parent=load)
    caplog.clear()
    with caplog.at_level("WARNING"):
        planted.parse("google")
    assert any("no_such_argument" in r.getMessage() for r in caplog.records)


def test_the_api_pages_example_runs_and_says_what_it_returns(wikiqa_run):
    """The ten lines at the top of python-api.md, run on a trained WikiQA CoDA run: each commented expression's
    value has the keys (or, for the alignment, the words and matrices) its comment says."""
    import ast

    block = re.search(r"```python\n(.*?)```", API_PAGE.read_text(), re.S).group(1)
    run_dir, _ = wikiqa_run
    code = block.replace('"outputs/runs/wikiqa/coda/<time>"', repr(str(run_dir)))
    assert code != block
    lines = code.splitlines()
    namespace: dict = {}
    said = []
    for statement in ast.parse(code).body:
        source = ast.get_source_segment(code, statement)
        if isinstance(statement, ast.Expr):
            value = eval(compile(ast.Expression(statement.value), "<example>", "eval"), namespace)
            after = lines[statement.end_lineno] if statement.end_lineno < len(lines) else ""
            here = lines[statement.end_lineno - 1]
            comment = here.partition("  # ")[2] or (after[2:] if after.startswith("# ") else "")
            said.append((source, value, comment))
        else:
            exec(compile(ast.Module([statement], []), "<example>", "exec"), namespace)
    (rank, ranked, rank_said), (predict, predicted, predict_said), (_, (tokens, matrices), align_said) = said
    assert rank.startswith("matcher.rank(") and len(ranked) == 1
    assert list(ranked[0]) == re.findall(r"'(\w+)':", rank_said) == ["index", "candidate", "score", "p_match"]
    assert predict.startswith("matcher.predict(") and len(predicted) == 1
    assert list(predicted[0]) == re.findall(r"'(\w+)':", predict_said) == ["score", "p_match"]
    assert tokens[:2] == ["how", "big"] and align_said.startswith("(['how', 'big', ...], ")
    assert f"{matrices}" in align_said
