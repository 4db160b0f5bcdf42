"""The practitioner's baseline: a MiniLM-L6 CrossEncoder fine-tuned on a ranking task, per seed, against our runs.

    python benchmarks/cross_encoder.py --data-dir /path/to/corpora [--task wikiqa] --seeds 1,2,3 --epochs 2 \
        [--compare 'coda_n2=outputs/studies/fine_tuning/runs/wikiqa/coda_n2/*/seed*' ...] \
        [--out outputs/studies/fine_tuning/cross_encoder/<task>] [--threads 1] [--train-pairs 0]

Needs sentence-transformers (`pip install sentence-transformers`; 6.2 gave the figures in docs/how-to/ranking.md), which
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
holds metrics.json is read, not trained again; one stopped between epochs (a sitting's end: a WikiQA seed of 8
epochs is longer than one on one thread) continues from its last finished epoch (`<seed>/resume.pt`), with the
numbers of an unbroken run.

`--compare NAME=GLOB` (repeatable; a bare glob is named "ours"): run folders of ours (each a training run with
`scores/val.csv`, e.g. a study's seeds of one family) against the CrossEncoder's seeds by the method-level test of
docs/concepts/comparing.md (seeds and questions both counted), Holm-adjusted over the names compared: each name's dev
MAP and MRR (mean ± std over its seeds), training minutes a run, Δ MAP against the CrossEncoder with its 95 % interval,
p, Holm's p and the verdict, printed as a table and written to `<out>/comparison.json` (with the command that made it).
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

from matching.files import write_atomic  # noqa: E402
from matching.model.pretrained_encoder import MINILM, locate_encoder  # noqa: E402
from matching.results.significance import holm, method_test  # noqa: E402
from matching.studies.results import training_minutes  # noqa: E402
from matching.training.question_scores import question_scores  # noqa: E402
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
    """Called after every epoch: scores dev as our runs are scored (each question's AP and RR), appends the epoch's
    figures to `<seed>/epochs.jsonl` (so a long run shows its progress) and keeps the weights and score rows of the
    dev-best epoch in memory, as a practitioner keeps the best checkpoint with an evaluator and as our runs keep
    `best.ckpt`. `record` and `restore` carry it over a resumed seed (`fine_tune`)."""

    def __init__(self, dev: tuple[list[str], list[Question]], folder: Path):
        self.ids, self.questions = dev
        self.folder = folder
        self.epochs: list[dict] = []
        self.best: dict | None = None
        self.best_rows: list[dict] = []
        self.best_state: dict | None = None

    def __call__(self, model, epoch: int, train_minutes: float) -> float:
        """Epoch `epoch` (from 0) scored, after `train_minutes` of training (dev scoring left out: `fine_tune`)."""
        rows = question_rows(self.ids, self.questions, dev_scores(model, self.questions))
        figures = {"epoch": epoch + 1, "train_minutes": round(train_minutes, 2), **filtered_map_mrr(rows)}
        self.epochs.append(figures)
        with open(self.folder / "epochs.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(figures) + "\n")
        if self.best is None or figures["val/map"] > self.best["val/map"]:  # a tie keeps the earlier epoch
            self.best, self.best_rows = figures, rows
            self.best_state = {k: v.detach().clone() for k, v in model.model.state_dict().items()}
        print(f"  epoch {epoch + 1}: dev MAP {100 * figures['val/map']:.2f}, MRR {100 * figures['val/mrr']:.2f} "
              f"({train_minutes:.1f} training minutes)", flush=True)  # fmt: skip
        return figures["val/map"]

    def record(self) -> dict:
        return {"epochs": self.epochs, "best": self.best, "best_rows": self.best_rows, "best_state": self.best_state}

    def restore(self, record: dict) -> None:
        """The selection as `record` left it; epochs.jsonl rewritten to its epochs (an epoch scored after the
        resume file was written is scored again)."""
        self.epochs, self.best = record["epochs"], record["best"]
        self.best_rows, self.best_state = record["best_rows"], record["best_state"]
        lines = "".join(json.dumps(figures) + "\n" for figures in self.epochs)
        (self.folder / "epochs.jsonl").write_text(lines, encoding="utf-8")


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
    kept; with `--select last`, the last epoch's (the recipe of the first comparison). A seed stopped between two
    epochs continues from the last one finished (`<seed>/resume.pt`, see `fine_tune`)."""
    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    folder = args.out / f"seed{seed}"
    if (folder / "metrics.json").is_file():
        return json.loads((folder / "metrics.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    examples = [InputExample(texts=[q, c], label=float(y)) for q, cs, ys in train for c, y in zip(cs, ys, strict=True)]
    if args.train_pairs:
        examples = examples[: args.train_pairs]
    model = CrossEncoder(str(args.encoder or locate_encoder(MINILM[0])), num_labels=1, device="cpu", max_length=256)
    loader = DataLoader(examples, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(seed))
    selection = DevSelection(dev, folder) if args.select == "best" else None
    recipe = {"task": args.task, "epochs": args.epochs, "select": args.select, "train_pairs": len(examples)}
    minutes = fine_tune(model, loader, args.epochs, selection, folder / "resume.pt", recipe)
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
    (folder / "resume.pt").unlink(missing_ok=True)
    return metrics


def fine_tune(model, loader, epochs: int, selection: DevSelection | None, resume_file: Path, recipe: dict) -> float:
    """sentence-transformers' CrossEncoder fit (its `old_fit`, the recipe of every seed so far, step for step: binary
    cross-entropy on the logit, AdamW at lr 2e-5 with weight decay 0.01 off biases and LayerNorm, linear warm-up over
    the first 10 % of the steps then linear decay to 0, gradients clipped at 1, `selection` called after every
    epoch), which also writes, after every epoch, all that the next epoch depends on to `resume_file`: the weights,
    the optimiser's and the schedule's state, the random generators (dropout's, the shuffle's) and the selection's
    record. A seed stopped (a sitting's end) continues there with the numbers an unbroken run gives; WikiQA's seed
    is longer than a sitting. A resume file of another recipe (task, epochs, selection, pairs) is not used. Returns
    the training minutes (dev scoring and the time between sittings left out)."""
    from sentence_transformers import SentenceTransformer

    loader.collate_fn = model.smart_batching_collate
    parameters = list(model.model.named_parameters())
    no_decay = ("bias", "LayerNorm.bias", "LayerNorm.weight")
    decayed = [p for n, p in parameters if not any(nd in n for nd in no_decay)]
    undecayed = [p for n, p in parameters if any(nd in n for nd in no_decay)]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.01},
                                   {"params": undecayed, "weight_decay": 0.0}], lr=2e-5)  # fmt: skip
    total = len(loader) * epochs
    schedule = SentenceTransformer._get_scheduler(optimizer, scheduler="WarmupLinear", warmup_steps=int(0.1 * total),
                                                  t_total=total)  # fmt: skip
    loss_function = torch.nn.BCEWithLogitsLoss()
    first, trained_seconds = 0, 0.0
    state = torch.load(resume_file, weights_only=False) if resume_file.is_file() else None
    if state is not None and state["recipe"] == recipe:
        model.model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["torch_rng"])
        loader.generator.set_state(state["shuffle_rng"])
        first, trained_seconds = state["epoch"], state["trained_seconds"]
        if selection is not None:
            selection.restore(state["selection"])
        print(f"  resumed after epoch {first} ({trained_seconds / 60:.1f} training minutes)", flush=True)
    elif selection is not None:
        (selection.folder / "epochs.jsonl").unlink(missing_ok=True)  # an unfinished seed starts from its first epoch
    for epoch in range(first, epochs):
        started = time.perf_counter()
        model.model.zero_grad()
        model.model.train()
        for features, labels in loader:
            loss = loss_function(model.model(**features, return_dict=True).logits.view(-1), labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
        trained_seconds += time.perf_counter() - started
        if selection is not None:
            selection(model, epoch=epoch, train_minutes=trained_seconds / 60)
        state = {"recipe": recipe, "epoch": epoch + 1, "trained_seconds": trained_seconds,
                 "model": model.model.state_dict(), "optimizer": optimizer.state_dict(),
                 "schedule": schedule.state_dict(), "torch_rng": torch.get_rng_state(),
                 "shuffle_rng": loader.generator.get_state(),
                 "selection": selection.record() if selection is not None else None}  # fmt: skip
        write_atomic(resume_file, lambda tmp, state=state: torch.save(state, tmp))
    return trained_seconds / 60


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
        # the CrossEncoder's minutes count every sitting (`fine_tune`); ours, where they are whole (training_minutes)
        each = metrics["train_minutes"] if "train_minutes" in metrics else training_minutes(folder, metrics)
        if each is not None:
            minutes.append(each)
    figures["train_minutes"] = float(np.mean(minutes)) if minutes else None
    figures["timed_seeds"] = len(minutes)  # a run resumed by an earlier version has no whole minutes
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
    parser.add_argument("--encoder", type=Path, default=None,
                        help="the starting model's folder (default: the minilm extra's all-MiniLM-L6-v2)")  # fmt: skip
    args = parser.parse_args()
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs sentence-transformers, which matching does not depend on: "
                 "pip install sentence-transformers")  # fmt: skip
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # the arithmetic our runs train in (flush_denormal, docs/results/performance.md)
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
