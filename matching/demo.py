"""`matching-demo` (`make demo`, `python -m matching.demo`; conf/demo.yaml): the first five minutes, offline.

Trains Decomposable Attention with the softmax and the CoDA aligner on the SNLI sample that ships inside the
package (`matching/demo_data/`: 3,000 training and 500 dev pairs, and word vectors for their words), with the
same settings and seeds for both (`experiment=demo`), as one Hydra sweep of `matching.train`; then prints the
comparison table (`matching.report`), predicts a few new pairs with each trained model (`matching.predict` through
`Matcher`), draws the alignment heat-maps of one pair (`matching.visualize`), and says where every file is and
which commands go further. Everything lands in one folder, `outputs/demo/<time>/` by default. The sample is a
sample: nothing here stands in for the full corpus (`make train TASK=snli`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import subprocess
import sys
from itertools import islice
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from matching import DEMO_DATA
from matching.cli import command
from matching.configs import CONF
from matching.data.pairs import Pair
from matching.data.sources import resolve_path
from matching.demo_sample import DEV, NEW_PAIRS, TRAIN, VECTORS
from matching.errors import MissingFileError, UserError
from matching.results.rows import Row
from matching.results.significance import MIN_SEEDS, RESOLVED, TOO_FEW_SEEDS

log = logging.getLogger(__name__)


class DemoError(UserError, ValueError):
    """The demo cannot go on (its sample is missing, training failed); the message says what to do."""


def say(text: str = "") -> None:
    print(text, flush=True)  # flushed: the training subprocess writes to the same terminal


def check_sample() -> None:
    missing = [name for name in (TRAIN, DEV, VECTORS, NEW_PAIRS) if not (DEMO_DATA / name).is_file()]
    if missing:
        raise DemoError(
            f"the demo's sample is incomplete: {', '.join(missing)} missing from {DEMO_DATA}. It ships with the "
            "package; reinstall it (pip install -e . in a clone, or make install)"
        )


def read_pairs(path: Path) -> tuple[list[Pair], list[str]]:
    """The pairs to predict (any input `predict` reads) and, for JSON Lines, each pair's `expected` label."""
    from matching.data.tables import read_new_pairs

    if not path.is_file():
        raise MissingFileError(f"pairs={path}: no such file; give a file of pairs as predict reads them")
    pairs = list(read_new_pairs(path))
    if not pairs:
        raise DemoError(f"pairs={path} holds no pairs; give at least one")
    expected = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for pair in pairs:
        try:
            record = json.loads(lines[pair.line - 1])
        except (IndexError, json.JSONDecodeError):
            record = None
        expected.append(str(record.get("expected", "")) if isinstance(record, dict) else "")
    return pairs, expected


def train_command(cfg: DictConfig, sweep: Path) -> list[str]:
    """The training sweep as a command line: every aligner and seed with the demo's settings, and what the aligners'
    defaults would otherwise make differ, held the same for all, so that the comparison is controlled (a difference
    is the aligner's): when every aligner has a score function F (`aligner.projection`), the same F (none: the
    model's own projection, CoDA's default); when every aligner has token centring (`aligner.center_tokens`), on for
    all (CoDA's default; softmax's is off, and centring is what moved CoDA most: docs/results/index.md)."""
    options = [OmegaConf.load(CONF / "aligner" / f"{a}.yaml") for a in cfg.aligners]
    held = [override for key, override in (("projection", "aligner.projection=none"),
                                           ("center_tokens", "aligner.center_tokens=true"))
            if all(key in option for option in options)]  # fmt: skip
    return [
        "-m", "experiment=demo", f"aligner={','.join(map(str, cfg.aligners))}",
        f"seed={','.join(map(str, cfg.seeds))}", *held,
        f"hydra.sweep.dir={sweep}", *shlex.split(str(cfg.train or "")),
    ]  # fmt: skip


def dev_pairs(run_dir: Path) -> int:
    """How many pairs the run's first dev split has (what each accuracy was measured on)."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    task = instantiate(cfg.task)
    split = task.splits[task.eval_splits[0]]
    return sum(1 for _ in islice(task.reader(resolve_path(split.path, cfg.paths.data_dir)), split.start, split.stop))


def comparison(rows: list[Row], n_dev: int) -> list[str]:
    """What the table says and does not say: each aligner's dev accuracy and, against the first aligner, the
    method-level test's difference, interval and p over the `n_dev` dev pairs and the seeds (both counted: a verdict
    about the aligner, not about the seeds drawn), what it could resolve and how many seeds would resolve the
    difference seen; then the test over the pairs alone, which speaks only of these trained models
    (see matching.results.significance)."""
    accuracy = {r.aligner: r for r in rows if r.metric == "acc" and r.split == "dev" and r.n}
    if len(accuracy) < 2:
        return []
    shown = ", ".join(f"{name} {r.mean:.2f} ± {r.std:.2f}" for name, r in accuracy.items())
    variant = next(iter(accuracy.values())).variant
    lines = [f"Dev accuracy (mean ± std over seeds{', the same ' + variant if variant else ''}): {shown}."]
    for name, r in accuracy.items():
        if not r.tested:
            continue
        c = r.comparison
        head = f"{name} − {c.baseline}: {c.diff:+.2f} points over {n_dev:,} dev pairs and {c.seed_counts} seeds"
        if c.verdict == TOO_FEW_SEEDS:
            lines.append(f"{head}: fewer than {MIN_SEEDS} seeds a side say too little about how much a method varies "
                         f"from seed to seed, so there is no verdict about the aligners; train more seeds "
                         f"(seeds=[1,2,3]).")  # fmt: skip
            continue
        said = (f"{head}: 95 % CI [{c.ci_low:+.2f}, {c.ci_high:+.2f}] counting both the seeds and the pairs, "
                f"p = {c.p_value:.2g}: ")  # fmt: skip
        if c.verdict == RESOLVED:
            said += "resolved on this sample, with these settings, for the aligners (not just these seeds)."
        else:
            said += (f"not resolved (which is not the same as equal): these seeds and pairs can only resolve a "
                     f"difference of about {c.detectable:.1f} points (80 % power, α = 0.05)")  # fmt: skip
            if c.units_limit:
                said += "; more seeds would not resolve it, more pairs would."
            elif c.seeds_needed:
                said += f"; about {c.seeds_needed} seeds a side would resolve {c.diff:+.2f} (seeds=[1,...])."
            else:
                said += "."
        lines.append(said)
        if c.units_p is not None and not math.isnan(c.units_p):
            lines.append(
                f"  Over the pairs alone, the seeds fixed: [{c.units_ci_low:+.2f}, {c.units_ci_high:+.2f}], "
                f"p = {c.units_p:.2g}: whether these {c.seed_counts} trained models differ on these pairs, which says "
                "nothing about the aligners."
            )
    lines.append("The CoDA paper compares them on the full corpus (test accuracy: softmax 84.61, CoDA 85.71).")
    return lines


def demo(cfg: DictConfig) -> Path:
    """The `demo` command on its composed config (conf/demo.yaml); returns the demo's folder."""
    check_sample()
    aligners, seeds = [str(a) for a in cfg.aligners], [int(s) for s in cfg.seeds]
    if not aligners or not seeds:
        raise DemoError("aligners= and seeds= each need at least one value, e.g. aligners=[softmax,coda] seeds=[1]")
    pairs, expected = read_pairs(Path(str(cfg.pairs)))
    out = Path(str(cfg.out)).absolute()
    sweep = out / "runs"
    say(f"matching demo: Decomposable Attention with {' and '.join(aligners)} alignment, {len(seeds)} seed(s) each,")
    say("on a sample of SNLI that ships with the package (3,000 training pairs, 500 dev pairs; CC BY-SA 4.0).")
    say(f"Everything goes to {out}/\n")

    args = train_command(cfg, sweep)
    say(f"== 1. Training: python -m matching.train {' '.join(map(shlex.quote, args))}\n")
    done = subprocess.run([sys.executable, "-m", "matching.train", *args], env=os.environ.copy())
    if done.returncode != 0:
        raise DemoError(
            f"training stopped with exit status {done.returncode} (its message is above); nothing was compared. "
            "Fix what it says and run the demo again"
        )

    from matching.results.discovery import find_runs
    from matching.results.study import report

    say("\n== 2. Comparison (matching.report: mean ± std over seeds, dev split; a test counting seeds and pairs)\n")
    rows = report([sweep], out, baseline=aligners[0] if len(aligners) > 1 else None)
    runs = {r.aligner: r.path for r in find_runs([sweep]) if r.seed == seeds[0] and not r.missing}
    for line in comparison(rows, dev_pairs(runs[aligners[0]])):
        say(line)

    from matching import Matcher
    from matching.predict import predict
    from matching.results.alignment_figures import heatmap

    say(f"\n== 3. Predictions on new pairs (matching.predict; the seed-{seeds[0]} model of each aligner)\n")
    answers: dict[str, list[dict]] = {}
    matchers = {}
    for aligner, run in runs.items():
        matchers[aligner] = Matcher.load(run)
        file = out / f"predictions_{aligner}.jsonl"
        with open(file, "w", encoding="utf-8") as stream:
            predict(matchers[aligner], pairs, stream, source=str(cfg.pairs))
        answers[aligner] = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    for i, (pair, want) in enumerate(zip(pairs, expected, strict=True)):
        say(f"{i + 1}. a: {pair.a}\n   b: {pair.b}")
        got = [f"{a}: {answers[a][i]['label']} ({max(answers[a][i]['probs'].values()):.2f})" for a in aligners]
        say("   " + "   ".join([f"a person: {want}"] * bool(want) + got))

    say(f"\n== 4. Alignment heat-maps of pair 1 (matching.visualize; the seed-{seeds[0]} models)\n")
    pictures = [heatmap(matchers[a], pairs[0].a, pairs[0].b, out / f"alignment_{a}.png") for a in aligners]
    for picture in pictures:
        say(f"wrote {picture}")

    first = runs[aligners[-1]]
    say(f"""
== Done. What is where ({out}/):
  runs/<n>_snli_sample_<aligner>_seed<seed>/   one run directory per model: config.yaml, vocab.txt,
                                    checkpoints/best.ckpt, metrics.json, train.log, logs/metrics.csv
  report.md, report.csv, report.png the comparison table above, and its bar chart
  predictions_<aligner>.jsonl       each new pair's label and probabilities, one model each
  alignment_<aligner>.png           the heat-maps of pair 1: which words each model aligned

Go further:
  python -m matching.predict ckpt={first}/checkpoints/best.ckpt input={cfg.pairs}
  python -m matching.visualize ckpt={first}/checkpoints/best.ckpt a="Two dogs play in the snow." b="Animals are out."
  python -m matching.train -m experiment=demo aligner=softmax,coda,conflict,softmax_conflict seed=1,2,3   # all aligners
  make train TASK=snli     # the full corpus and the paper's settings (needs SNLI and GloVe: internet, or local files)
  python -m matching.train task=wikiqa paths.data_dir=/path/to/corpora embeddings=minilm   # ranking: WikiQA
What each file and option is: docs/getting-started/demo.md""")
    return out


main = command("demo", demo, verbatim=("train",))

if __name__ == "__main__":
    sys.exit(main())
