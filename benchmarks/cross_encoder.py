"""The practitioner's baseline: a MiniLM-L6 CrossEncoder fine-tuned on a ranking task, per seed, against our runs.

    python benchmarks/cross_encoder.py --data-dir /path/to/corpora [--task wikiqa] --seeds 1,2,3 --epochs 2 \
        [--compare 'coda_n2=outputs/studies/fine_tuning/runs/wikiqa/coda_n2/*/seed*' ...] \
        [--out outputs/studies/fine_tuning/cross_encoder/<task>] [--threads 1] [--train-pairs 0]

Needs sentence-transformers (`pip install sentence-transformers`; 6.2 gave the figures in docs/ranking.md), which
matching does not depend on. The task's train and dev splits are read as matching reads them (`--task` names its
config: wikiqa, trecqa, with their defaults, e.g. TrecQA's TRAIN and clean-dev), so the questions are the units of
our runs' score files. Per seed, a CrossEncoder starts from the same all-MiniLM-L6-v2 weights as our contextual
runs (the `minilm` extra's copy; a scoring head on top, initialised by the seed), and is fine-tuned on the train
split as sentence-transformers fits one: binary cross-entropy on each (question, candidate) pair, AdamW at lr 2e-5
(weight decay 0.01), batch 32, linear warm-up over the first 10 % of the steps, gradients clipped at 1. Then it
scores dev, and writes into `<out>/seed<N>/` (by default in the fine-tuning study's folder, whose page publishes
them: `python -m matching.results.publish push fine_tuning`): `scores/val.csv` (each question's AP and RR, the
columns and filtered protocol of a run's score file), `metrics.json` (MAP, MRR, training minutes, pairs, epochs)
and `model/` (the fine-tuned CrossEncoder, for benchmarks/bench_rerank.py --cross-encoder). A seed whose folder
holds metrics.json is read, not trained again.

`--compare NAME=GLOB` (repeatable; a bare glob is named "ours"): run folders of ours (each a training run with
`scores/val.csv`, e.g. a study's seeds of one family) against the CrossEncoder's seeds by the method-level test of
docs/comparing.md (seeds and questions both counted), Holm-adjusted over the names compared: each name's dev MAP and
MRR (mean ± std over its seeds), training minutes a run, Δ MAP against the CrossEncoder with its 95 % interval, p,
Holm's p and the verdict, printed as a table and written to `<out>/comparison.json` (with the command that made it).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import random
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_rerank import Question, ranking_questions  # noqa: E402

from matching.model.pretrained_encoder import MINILM, locate_encoder  # noqa: E402
from matching.results.significance import holm, method_test  # noqa: E402
from matching.training.metrics import question_scores  # noqa: E402
from matching.training.scores import unit_scores  # noqa: E402


def question_rows(ids: list[str], questions: list[Question], scores: list[np.ndarray]) -> list[dict]:
    """Each question's AP and RR as a run's score file has them: matching's own per-question scores
    (`question_scores`, with its tie rule), the candidates of question i forming group i."""
    labels = [np.asarray(candidates_labels, np.int64) for _, _, candidates_labels in questions]
    sizes = [len(each) for each in labels]
    per_question = question_scores(np.concatenate(scores), np.concatenate(labels),
                                   np.repeat(np.arange(len(questions)), sizes), np.arange(sum(sizes)))  # fmt: skip
    return [{"unit": unit, "question": question, "candidates": int(per_question["candidates"][i]),
             "positives": int(per_question["positives"][i]), "ap": round(float(per_question["ap"][i]), 6),
             "rr": round(float(per_question["rr"][i]), 6)}
            for i, (unit, (question, _, _)) in enumerate(zip(ids, questions, strict=True))]  # fmt: skip


class DevSelection:
    """sentence-transformers' evaluator hook, called after every epoch: scores dev as our runs are scored (each
    question's AP and RR), appends the epoch's figures to `<seed>/epochs.jsonl` (so a long run shows its progress)
    and keeps the weights and score rows of the dev-best epoch in memory, as a practitioner keeps the best
    checkpoint with an evaluator and as our runs keep `best.ckpt`. Its minutes leave dev scoring out."""

    def __init__(self, dev: tuple[list[str], list[Question]], folder: Path, started: float):
        self.ids, self.questions = dev
        self.folder, self.started = folder, started
        self.scoring_seconds = 0.0
        self.epochs: list[dict] = []
        self.best: dict | None = None
        self.best_rows: list[dict] = []
        self.best_state: dict | None = None

    def __call__(self, model, output_path=None, epoch: int = -1, steps: int = -1) -> float:
        minutes = (time.perf_counter() - self.started - self.scoring_seconds) / 60
        scoring = time.perf_counter()
        rows = question_rows(self.ids, self.questions, dev_scores(model, self.questions))
        self.scoring_seconds += time.perf_counter() - scoring
        figures = {"epoch": epoch + 1, "train_minutes": round(minutes, 2), **filtered_map_mrr(rows)}
        self.epochs.append(figures)
        with open(self.folder / "epochs.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(figures) + "\n")
        if self.best is None or figures["val/map"] > self.best["val/map"]:  # a tie keeps the earlier epoch
            self.best, self.best_rows = figures, rows
            self.best_state = {k: v.detach().clone() for k, v in model.model.state_dict().items()}
        print(f"  epoch {epoch + 1}: dev MAP {100 * figures['val/map']:.2f}, MRR {100 * figures['val/mrr']:.2f} "
              f"({minutes:.1f} training minutes)", flush=True)  # fmt: skip
        return figures["val/map"]


def dev_scores(model, questions: list[Question]) -> list[np.ndarray]:
    return [np.asarray(model.predict([(q, c) for c in cs], batch_size=64, show_progress_bar=False), np.float64)
            for q, cs, _ in questions]  # fmt: skip


def filtered_map_mrr(rows: list[dict]) -> dict:
    """MAP and MRR (fractions) over the questions with both a correct and an incorrect candidate, and their count."""
    filtered = [r for r in rows if 0 < r["positives"] < r["candidates"]]
    return {"val/map": float(np.mean([r["ap"] for r in filtered])),
            "val/mrr": float(np.mean([r["rr"] for r in filtered])), "questions": len(filtered)}  # fmt: skip


def train_seed(seed: int, args: argparse.Namespace, train: list[Question], dev: tuple[list[str], list[Question]]):
    """One seed fine-tuned for `--epochs` epochs (the learning rate's linear decay spans them all). With
    `--select best` (the default) dev is scored after every epoch and the dev-best epoch's weights and scores are
    kept; with `--select last`, the last epoch's (the recipe of the first comparison)."""
    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    folder = args.out / f"seed{seed}"
    if (folder / "metrics.json").is_file():
        return json.loads((folder / "metrics.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "epochs.jsonl").unlink(missing_ok=True)  # an unfinished seed starts again from its first epoch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    examples = [InputExample(texts=[q, c], label=float(y)) for q, cs, ys in train for c, y in zip(cs, ys, strict=True)]
    if args.train_pairs:
        examples = examples[: args.train_pairs]
    model = CrossEncoder(str(locate_encoder(MINILM[0])), num_labels=1, device="cpu", max_length=256)
    loader = DataLoader(examples, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))
    steps = len(loader) * args.epochs
    started = time.perf_counter()
    selection = DevSelection(dev, folder, started) if args.select == "best" else None
    model.old_fit(loader, evaluator=selection, epochs=args.epochs, warmup_steps=int(0.1 * steps),
                  optimizer_params={"lr": 2e-5}, save_best_model=False, show_progress_bar=False)  # fmt: skip
    minutes = (time.perf_counter() - started - (selection.scoring_seconds if selection else 0)) / 60
    if selection is not None:
        model.model.load_state_dict(selection.best_state)
        rows, best_epoch, epochs = selection.best_rows, selection.best["epoch"], selection.epochs
    else:
        rows = question_rows(dev[0], dev[1], dev_scores(model, dev[1]))
        best_epoch, epochs = args.epochs, []
    (folder / "scores").mkdir(parents=True, exist_ok=True)
    with open(folder / "scores" / "val.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    metrics = {"seed": seed, "epochs": args.epochs, "select": args.select, "best_epoch": best_epoch,
               "train_pairs": len(examples), "threads": torch.get_num_threads(), "train_minutes": round(minutes, 2),
               **filtered_map_mrr(rows), "per_epoch": epochs}  # fmt: skip
    if selection is not None:
        metrics["train_minutes_to_best"] = selection.best["train_minutes"]
    model.save(str(folder / "model"))
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def named_glob(spec: str) -> tuple[str, str]:
    """`NAME=GLOB` -> (NAME, GLOB); a bare glob (a path may hold "=", as Hydra's folders do) is "ours"."""
    name, separator, pattern = spec.partition("=")
    if not separator or not name or any(c in name for c in "/*?["):
        return "ours", spec
    return name, pattern


def seed_figures(folders: list[Path]) -> dict:
    """Dev MAP and MRR (mean, std over the folders, each a seed) and training minutes a run, from the score files
    (MAP, MRR) and metrics.json (`train_seconds` of ours, `train_minutes` of the CrossEncoder's)."""
    figures: dict = {"seeds": len(folders)}
    for metric in ("map", "mrr"):
        values = [100 * float(np.mean(list(unit_scores(f, "val", metric).values()))) for f in folders]
        figures[metric] = {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1
                           else float("nan"), "values": values}  # fmt: skip
    minutes = []
    for folder in folders:
        metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").is_file() else {}
        if "train_minutes" in metrics or "train_seconds" in metrics:
            minutes.append(metrics.get("train_minutes", metrics.get("train_seconds", 0) / 60))
    figures["train_minutes"] = float(np.mean(minutes)) if minutes else None
    return figures


def compare(globs: dict[str, str], out: Path, seeds: list[int]) -> dict:
    """Each named family of our runs against the CrossEncoder's seeds under `out` (see the module docstring).
    ValueError when a glob finds no run, or a run has no dev score file."""
    theirs_folders = [out / f"seed{seed}" for seed in seeds]
    theirs = [unit_scores(folder, "val", "map") for folder in theirs_folders]
    if any(scores is None for scores in theirs):
        raise ValueError(f"a CrossEncoder seed under {out} has no scores/val.csv (train it first)")
    rows = []
    for name, pattern in globs.items():
        runs = sorted(Path(p) for p in glob.glob(pattern))
        ours = [unit_scores(run, "val", "map") for run in runs]
        missing = [str(run) for run, scores in zip(runs, ours, strict=True) if scores is None]
        if not runs or missing:
            raise ValueError(f"{name}: no run folders, or some without scores/val.csv: {missing or pattern}")
        test = method_test(ours, theirs)
        rows.append({"name": name, "runs": [str(run) for run in runs], **seed_figures(runs),
                     "difference": 100 * test.difference, "low": 100 * test.low, "high": 100 * test.high,
                     "p": test.p_value, "questions": test.units, "too_few_seeds": test.too_few_seeds})  # fmt: skip
    for row, adjusted in zip(rows, holm([row["p"] for row in rows]), strict=True):
        row["p_holm"] = adjusted
        decided = "resolved" if adjusted < 0.05 else "not resolved"
        row["verdict"] = "too few seeds" if row["too_few_seeds"] else decided
    return {"cross_encoder": seed_figures(theirs_folders), "compared": rows}


def comparison_markdown(table: dict) -> str:
    """The comparison as a Markdown table, the CrossEncoder's row last."""

    def cell(figures: dict, metric: str) -> str:
        return f"{figures[metric]['mean']:.2f} ± {figures[metric]['std']:.2f}"

    def minutes(figures: dict) -> str:
        return "–" if figures["train_minutes"] is None else f"{figures['train_minutes']:.1f}"

    lines = ["| ours | seeds | dev MAP | MRR | training minutes a run | Δ MAP vs the CrossEncoder [95 % CI] | p (Holm) "
             "| verdict |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in table["compared"]:
        lines.append(f"| {row['name']} | {row['seeds']} | {cell(row, 'map')} | {cell(row, 'mrr')} | {minutes(row)} | "
                     f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}] | {row['p_holm']:.2g} | "
                     f"{row['verdict']} |")  # fmt: skip
    ce = table["cross_encoder"]
    lines.append(
        f"| CrossEncoder | {ce['seeds']} | {cell(ce, 'map')} | {cell(ce, 'mrr')} | {minutes(ce)} | – | – | – |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=2, help="the schedule's epochs (with --select best: the cap)")
    parser.add_argument("--select", choices=("best", "last"), default="best",
                        help="keep the dev-best epoch (dev scored after each) or the last")  # fmt: skip
    parser.add_argument("--task", default="wikiqa", help="a ranking task of matching's (wikiqa, trecqa)")
    parser.add_argument("--out", type=Path, default=None, help="default outputs/studies/fine_tuning/cross_encoder/TASK")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=GLOB",
                        help="our run folders (each with scores/val.csv), one name a family; repeatable")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--train-pairs", type=int, default=0, help="only the first N training pairs (a smoke run)")
    args = parser.parse_args()
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs sentence-transformers, which matching does not depend on: "
                 "pip install sentence-transformers")  # fmt: skip
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out = args.out or Path("outputs/studies/fine_tuning/cross_encoder") / args.task
    _, train = ranking_questions(args.task, "train", args.data_dir)
    dev = ranking_questions(args.task, "dev", args.data_dir)
    seeds = [int(s) for s in args.seeds.split(",")]
    kept = "the dev-best epoch kept" if args.select == "best" else "the last epoch kept"
    print(f"CrossEncoder all-MiniLM-L6-v2, {args.task} train -> dev, {args.epochs} epoch(s), {kept}, "
          f"{torch.get_num_threads()} thread(s)", flush=True)  # fmt: skip
    for seed in seeds:
        m = train_seed(seed, args, train, dev)
        print(
            f"seed {seed}: dev MAP {100 * m['val/map']:.2f}, MRR {100 * m['val/mrr']:.2f} ({m['questions']} "
            f"questions), epoch {m.get('best_epoch', m['epochs'])} of {m['epochs']}; {m['train_minutes']:.1f} "
            f"training minutes on {m['threads']} thread(s)",
            flush=True,
        )
    if args.compare:
        try:
            table = compare(dict(named_glob(spec) for spec in args.compare), args.out, seeds)
        except ValueError as error:
            sys.exit(f"--compare: {error}")
        said = ["/path/to/corpora" if arg == str(args.data_dir) else arg for arg in sys.argv[1:]]  # no folder of ours
        table["command"] = "python benchmarks/cross_encoder.py " + shlex.join(said)  # the globs quoted
        (args.out / "comparison.json").write_text(json.dumps(table, indent=2) + "\n")
        print(comparison_markdown(table))


if __name__ == "__main__":
    main()
