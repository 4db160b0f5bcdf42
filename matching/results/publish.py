"""What the README and docs/results/index.md publish from a study, rendered from the study's own files, never typed.

A published study lives in `docs/studies/<name>/`: its page (study.md, study.csv, seeds.json, selection.json, its
figures) and the small files of its finished runs (`runs/<task>/<family>/<setting>/seed<N>/`: config.yaml,
metrics.json, provenance.json, train.log, logs/metrics.csv, scores/), which are what a study needs to count a run
as finished and to test it. `make results` runs three steps, each also a command of its own:

    python -m matching.results.publish pull  <study>   # the committed runs into outputs/studies/<study>/runs
    python -m matching.study study=<study> launcher=joblib jobs=2 threads=1     # trains what is missing (resumable)
    python -m matching.results.publish push  <study>   # the page and the runs' small files back into docs/studies
    python -m matching.results.publish render           # the README's and docs/results/index.md's blocks from them

A rendered block sits between `<!-- results:<block> -->` and `<!-- /results:<block> -->` in its file, and is declared
beside the data it quotes: a study's spec names its blocks and their renderers under `published` (conf/study/
centring.yaml: `README.md#centring-headline: matching.studies.published.centring.headline`), as the file of figures
measured elsewhere does (docs/figures/measured_elsewhere.yaml); this module names no study. The commands find the
clone's root from the working directory (`clone_root`). tests/test_docs.py renders every block again from the
committed files and fails when a file's block differs, so a number typed by hand, or left stale, cannot land. What a
study has not run yet says so in the block ("not run yet").
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from matching.errors import ConfigError, UserError

#: The files of a finished run that a page needs (the rest, checkpoints above all, stays in outputs/).
RUN_FILES = ("config.yaml", "metrics.json", "provenance.json", "train.log", "logs/metrics.csv")
PAGE_FILES = ("study.md", "study.csv", "seeds.json", "selection.json", "ranking.png", "curves.png")

#: A baseline trained outside a study, whose folder sits in the study's (benchmarks/cross_encoder.py --out): its
#: comparison with the study's runs and its seeds' small files are published with the page.
OUTSIDE_BASELINE = "cross_encoder"
OUTSIDE_FILES = ("*/comparison.json", "*/seed*/metrics.json", "*/seed*/scores/val.csv")  # <task>/...


def _decision(row: dict, prefix: str) -> dict | None:
    """The look that decided a row's comparison against `prefix` (a baseline, or `twin`), if the study recorded it."""
    baseline = row.get("twin") if prefix == "twin" else prefix
    return (row.get("decisions") or {}).get(baseline)


def interval_cell(row: dict, prefix: str) -> str:
    """A page row's difference against `prefix` (a baseline, `twin`) with its 95 % interval, as a table cell. When the
    comparison was decided at a look with fewer seeds than the row now has (its family took more seeds for another
    comparison), the interval pools all of them and says so: it is descriptive, the verdict is the look's."""
    low, _, high = row.get(f"{prefix}_ci", "").partition(" ")
    if not row.get(f"{prefix}_diff"):
        return "–"
    diff = float(row[f"{prefix}_diff"])
    if not low or low == "nan":  # too few seeds for an interval
        return f"{diff:+.2f}"
    cell = f"{diff:+.2f} [{float(low):+.2f}, {float(high):+.2f}]"
    look = _decision(row, prefix)
    if look and int(look["seeds"]) < int(row["n"]):
        cell += f" over all {row['n']} seeds (descriptive)"
    return cell


def mean_cell(row: dict[str, str] | None, counted: bool = False) -> str:
    """A page row's mean ± std over its seeds as a table cell ("–" without a row); a row without a spread (one seed)
    says how many seeds it has; `counted`: a spread says it too."""
    if row is None:
        return "–"
    n, mean = int(row["n"]), f"{float(row['mean']):.2f}"
    if n > 1 and row.get("std"):
        return f"{mean} ± {float(row['std']):.2f}" + (f" ({n} seeds)" if counted else "")
    return f"{mean} ({n} seed{'s' if n > 1 else ''})"


def verdict_cell(row: dict, prefix: str) -> str:
    """A page row's verdict against `prefix` with its (Holm-adjusted) p, as a table cell; where the study decided it
    at a look, the look's seeds, and its difference where the interval beside it pools more seeds."""
    verdict = row.get(f"{prefix}_verdict", "")
    p = row.get(f"{prefix}_p_holm") or row.get(f"{prefix}_p")
    if not verdict:
        return "–"
    look = _decision(row, prefix)
    if look:
        said = f"{look['status']} at {look['seeds']} seeds a side"
        if int(look["seeds"]) < int(row["n"]):
            said += f" (Δ {float(look['difference']):+.2f} there)"
        return f"{said}, Holm p = {float(look['p_adjusted']):.2g}"
    return f"{verdict}, p = {float(p):.2g}" if p else verdict


#: Figures measured outside this repository's data files (held-out test splits, benchmark sittings that wrote no
#: file), each with what it is, its source and its date (matching.studies.published.measured_elsewhere renders them).
FIGURES = Path("docs") / "figures" / "measured_elsewhere.yaml"


def figures(folder: Path) -> dict:
    """The figures measured elsewhere, as `folder` (docs/figures) holds them."""
    import yaml

    return yaml.safe_load((folder / FIGURES.name).read_text(encoding="utf-8"))


#: The reranking frontier's data files (benchmarks/bench_rerank.py --json), by task: both conditions, one sitting.
FRONTIER = "rerank_frontier_{task}.json"
#: Training with denormal floats kept and flushed, each case's two runs at the same time (benchmarks/denormals.py).
DENORMALS = "denormals.json"


def page_data(folder: Path) -> list[Path]:
    """The files a block's rendered numbers come from: a study page's table, the looks that decided its comparisons
    and an outside baseline's comparison, or
    the file of figures measured elsewhere, the reranking frontier's data files and the denormals sitting's."""
    return [path for path in (folder / "study.csv", folder / "seeds.json",
                              *sorted(folder.glob(f"{OUTSIDE_BASELINE}/*/comparison.json")),
                              folder / FIGURES.name, *sorted(folder.glob(FRONTIER.format(task="*"))),
                              folder / DENORMALS)
            if path.is_file()]  # fmt: skip


def block_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results:{re.escape(name)} -->\n)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S)


def clone_root(start: Path | None = None) -> Path:
    """The root of the clone of matching whose pages are published: the working directory (`start`) or the nearest
    folder above it that holds README.md, conf/study/ and docs/studies/, so that the commands work from any folder
    of the clone (the package may be installed elsewhere). A ConfigError when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (
            (folder / "README.md").is_file()
            and (folder / "conf" / "study").is_dir()
            and (folder / "docs" / "studies").is_dir()
        ):
            return folder
    raise ConfigError(f"{here} is not inside a clone of matching (no folder from it up holds README.md, conf/study/ "
                      "and docs/studies/); run this from the clone whose pages you publish")  # fmt: skip


def published_blocks(root: Path | None = None) -> dict[tuple[str, str], tuple[str, Callable[[Path], str]]]:
    """Every rendered block: (file, block name) -> (the folder of its data, relative to the root; its renderer), as
    declared beside that data under `published` ("<file>#<block>": the renderer's dotted name, a function of the
    folder): a study's spec (conf/study/<name>.yaml, its page in docs/studies/<name>; the renderers in
    matching.studies.published) and the file of figures measured elsewhere (docs/figures, FIGURES). This room names no
    study: each study says what of it is published."""
    import yaml

    root = root or clone_root()
    declared = []
    for spec in sorted((root / "conf" / "study").glob("*.yaml")):
        node = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
        declared.append((f"docs/studies/{node.get('name') or spec.stem}", spec, node.get("published")))
    figures_file = root / FIGURES
    if figures_file.is_file():
        declared.append((FIGURES.parent.as_posix(), figures_file, figures(figures_file.parent).get("published")))
    blocks: dict[tuple[str, str], tuple[str, Callable[[Path], str]]] = {}
    for folder, source, node in declared:
        for where, renderer in (node or {}).items():
            name, _, block = str(where).partition("#")
            key = f"{source.relative_to(root).as_posix()}: published.{where}"
            if not name or not block:
                raise ConfigError(f"{key}: a published block is named <file>#<block> (README.md#centring-table), got "
                                  f"{where!r}")  # fmt: skip
            if (name, block) in blocks:
                raise ConfigError(f"{key}: the block {block} of {name} is already rendered from "
                                  f"{blocks[(name, block)][0]}; one block, one declaration")  # fmt: skip
            blocks[(name, block)] = (folder, _renderer(str(renderer), key))
    return blocks


def _renderer(dotted: str, key: str) -> Callable[[Path], str]:
    """The function a declaration names (`matching.studies.published.centring.headline`)."""
    module, _, name = dotted.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name, None) if module else None
    except ModuleNotFoundError:
        found = None
    if not callable(found):
        raise ConfigError(f"{key}: {dotted!r} is no function; name a renderer by its module and name, e.g. "
                          "matching.studies.published.centring.headline")  # fmt: skip
    return found


def rendered(root: Path | None = None) -> dict[tuple[str, str], str]:
    """Every block's content as the committed study files give it."""
    root = root or clone_root()
    return {key: render(root / folder) for key, (folder, render) in published_blocks(root).items()}


def render_files(root: Path | None = None) -> list[Path]:
    """Rewrite every block in its file; returns the files changed. A file without the block's markers is an
    error: the markers say where a block goes."""
    root = root or clone_root()
    changed = []
    for (name, block), content in rendered(root).items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        pattern = block_pattern(block)
        if not pattern.search(text):
            raise ConfigError(f"{name} has no block {block}: add <!-- results:{block} --> and "
                              f"<!-- /results:{block} --> where it goes")  # fmt: skip
        new = pattern.sub(lambda m, content=content: m.group(1) + content + "\n" + m.group(3), text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


#: A study folder of another clone or machine (a run copied in from another study names where it first ran, e.g.
#: "sweep run /home/me/clone/outputs/studies/signed_aligners/runs/...: skipped"): published as `<study NAME>`.
OTHER_STUDY = re.compile(r"(?<![\w<>])/[^\s'\"<>]*?/outputs/studies/(\w+)")


def machine_paths(run: Path, source: Path) -> dict[str, str]:
    """The absolute paths of the machine a run was trained on, as they appear in its config and log, and what a
    published copy says instead: each `paths.*` folder as `<paths.KEY>`, the study's folder as `<study>` (the keys
    interpolated from `paths.*` are the ones a relaunched study ignores, so a copy resumes as the original does)."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
    places = {str(v): f"<paths.{k}>" for k, v in ((config or {}).get("paths") or {}).items()
              if isinstance(v, str) and v.startswith("/")}  # fmt: skip
    study = source.resolve().parent
    places[str(study)] = "<study>"
    if study.parent.name == "studies" and study.parent.parent.name == "outputs":  # the folder the study ran from
        places[str(study.parent.parent.parent)] = "<cwd>"
    return dict(sorted(places.items(), key=lambda kv: -len(kv[0])))  # the longest first: a folder inside another


def _copy_runs(source: Path, target: Path, files: tuple[str, ...], only_missing: bool, scrub: bool = False) -> int:
    copied = 0
    for metrics in sorted(source.glob("*/*/*/seed*/metrics.json")):
        run = metrics.parent
        destination = target / run.relative_to(source)
        if only_missing and (destination / "metrics.json").is_file():
            continue
        destination.mkdir(parents=True, exist_ok=True)
        places = machine_paths(run, source) if scrub else {}
        for name in files:
            if (run / name).is_file():
                (destination / name).parent.mkdir(parents=True, exist_ok=True)
                text = (run / name).read_text(encoding="utf-8", errors="replace") if places else None
                if text is None:
                    shutil.copy2(run / name, destination / name)
                    continue
                for absolute, said in places.items():
                    text = text.replace(absolute, said)
                text = OTHER_STUDY.sub(lambda m: f"<study {m[1]}>", text)
                (destination / name).write_text(text, encoding="utf-8")
        if (run / "scores").is_dir():
            shutil.copytree(run / "scores", destination / "scores", dirs_exist_ok=True)
        copied += 1
    return copied


#: What a page draws from runs' weights, which runs pulled without checkpoints cannot draw again: its heat-maps and
#: its weights tables' data (matching.studies.page.weight_table).
PAGE_FIGURES = ("alignments_*.png", "weights_*.json")


def page_figures(folder: Path) -> list[Path]:
    """A study folder's files of PAGE_FIGURES."""
    return [path for pattern in PAGE_FIGURES for path in folder.glob(pattern)]


def pull(study: str, root: Path | None = None) -> int:
    """The committed runs' small files into outputs/studies/<study>/runs, where a run is not there yet: the study
    then counts them finished and trains only the rest. The page's heat-maps come too (where none is there), as
    the page written again from runs without weights keeps them."""
    root = root or clone_root()
    target = root / "outputs" / "studies" / study
    target.mkdir(parents=True, exist_ok=True)
    for figure in page_figures(root / "docs" / "studies" / study):
        if not (target / figure.name).exists():
            shutil.copy2(figure, target / figure.name)
    return _copy_runs(root / "docs" / "studies" / study / "runs", root / "outputs" / "studies" / study / "runs",
                      RUN_FILES, only_missing=True)  # fmt: skip


def push(study: str, root: Path | None = None, source: Path | None = None) -> int:
    """The study's page, its finished runs' small files and an outside baseline's (its comparison, its seeds' metrics
    and scores) from outputs/studies/<study> (or `source`) into docs/studies/<study>, naming no folder of the
    machine they ran on (`machine_paths`)."""
    root = root or clone_root()
    source = source or root / "outputs" / "studies" / study
    target = root / "docs" / "studies" / study
    target.mkdir(parents=True, exist_ok=True)
    for path in [*(source / name for name in PAGE_FILES), *page_figures(source)]:
        if path.is_file() and path.suffix == ".md":  # the page's command, as a user types it: no out= of ours
            text = path.read_text(encoding="utf-8").replace(f" out={source}", "")
            (target / path.name).write_text(text, encoding="utf-8")
        elif path.is_file():
            shutil.copy2(path, target / path.name)
    for pattern in OUTSIDE_FILES:
        for path in (source / OUTSIDE_BASELINE).glob(pattern):
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
    return _copy_runs(source / "runs", target / "runs", RUN_FILES, only_missing=False, scrub=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m matching.results.publish", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("pull", help="committed runs into outputs/studies/<study>").add_argument("study")
    pushed = sub.add_parser("push", help="a study's page and runs' small files into docs/studies/<study>")
    pushed.add_argument("study")
    pushed.add_argument("--from", dest="source", type=Path, default=None, help="the study's folder (default outputs)")
    sub.add_parser("render", help="the README's and docs' blocks and quoted figures from their records")
    args = parser.parse_args(argv)
    try:
        root = clone_root()
        if args.verb == "pull":
            print(f"{pull(args.study, root)} runs copied into outputs/studies/{args.study}/runs")
        elif args.verb == "push":
            print(f"{push(args.study, root, source=args.source)} runs' small files in docs/studies/{args.study}/runs")
        else:
            from matching.results.quotes import render_pages

            changed = list(dict.fromkeys([*render_files(root), *render_pages(root)]))
            print("rendered: " + (", ".join(str(p.relative_to(root)) for p in changed) or "nothing changed"))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
