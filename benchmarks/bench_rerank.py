"""The reranking frontier: how fast each model ranks a question's candidates, and how well, in one sitting.

    python benchmarks/bench_rerank.py --pairs WikiQA-dev.tsv.gz --columns Question,Sentence,QuestionID,Label \
        --model static=<run> --model contextual=<run> --model contextual+index=<run> [--model distilled=<run>] \
        [--cross-encoder <folder or hub name>] [--threads 1,2] [--queries 0]
    python benchmarks/bench_rerank.py --task trecqa --data-dir /path/to/corpora --model ...   # its dev split

For each model (`name=path`, any form `Matcher.load` takes; a name with `+index` ranks against an index of all the
file's candidates, built first and timed apart; with `+ort`, a contextual model's encoder runs new text on ONNX
Runtime, `encoder_backend="onnx"`) and each thread count, it prints:

- `rank` pairs/s under two conditions: *indexed* (a fixed corpus whose candidates are indexed in advance: the
  encoder's index is built before the clock starts, and its build seconds and memory per 1,000 candidates are
  reported beside) and *new* (texts seen once, as when ranking new candidates: the build counted in the time).
  `Matcher.rank(question, its candidates)` once per question, the candidates' pairs over the total time; a model
  without an index has one speed, both;
- `predict` pairs/s: every pair in one `Matcher.predict` call;
- MAP and MRR over the questions with both a correct and an incorrect candidate (the filtered protocol of
  WikiQA and TrecQA), from the `rank` answers.

`--cross-encoder`: a sentence-transformers CrossEncoder (e.g. a fine-tuned MiniLM-L6 folder; `pip install
sentence-transformers`, not a dependency of matching) timed the same way
(`CrossEncoder.predict` on a question's pairs; on all pairs); its MAP is meaningful only for a fine-tuned one
(a bi-encoder's weights, e.g. the `minilm` extra's all-MiniLM-L6-v2, get an untrained scoring head: speed only).
Threads: torch's intra-op threads for everything (`torch.set_num_threads`, Matcher's `threads=`).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from matching import Matcher  # noqa: E402
from matching.cli import compose_config  # noqa: E402
from matching.data.sources import read_split  # noqa: E402
from matching.errors import UserError  # noqa: E402
from matching.model.assembly import build_task  # noqa: E402

Question = tuple[str, list[str], list[int]]  # the question, its candidates, their labels (1: correct)


def read_questions(path: Path, columns: Sequence[str], limit: int) -> list[Question]:
    """The file's questions in order of first appearance (a TSV or CSV with a header, plain or .gz)."""
    a, b, group, label = columns
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    text = io.StringIO(raw.decode("utf-8"))
    delimiter = "," if ".csv" in path.name else "\t"
    groups: dict[str, Question] = {}
    for row in csv.DictReader(text, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else 0):
        question = groups.setdefault(row[group], (row[a], [], []))
        question[1].append(row[b])
        question[2].append(int(float(row[label])))
    questions = list(groups.values())
    return questions[:limit] if limit else questions


def ranking_questions(task_name: str, split: str, data_dir: Path) -> tuple[list[str], list[Question]]:
    """(question ids, questions) of a ranking task's split as matching reads it (the task's own reader, config and
    files: the ids are those of our runs' score files), in order of first appearance."""
    cfg = compose_config("train", [f"task={task_name}", f"paths.data_dir={data_dir}"])
    task = build_task(cfg.task)
    if task.kind != "rank":
        sys.exit(f"--task {task_name} is a {task.kind} task; reranking is measured on a ranking task "
                 "(wikiqa, trecqa)")  # fmt: skip
    positive = task.labels[-1]
    try:
        pairs = read_split(task, split, data_dir, cfg.paths.cache_dir)
    except UserError as error:
        sys.exit(f"{error}\nGive --data-dir the folder that holds the corpora.")
    groups: dict[str, Question] = {}
    for pair in pairs:
        question = groups.setdefault(pair.group, (pair.a, [], []))
        question[1].append(pair.b)
        question[2].append(int(pair.label == positive))
    return list(groups), list(groups.values())


def map_mrr(questions: Sequence[Question], scores: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """MAP and MRR (in %) over the questions with both a correct and an incorrect candidate, and their count."""
    aps, rrs = [], []
    for (_, _, labels), score in zip(questions, scores, strict=True):
        if 0 < sum(labels) < len(labels):
            order = np.argsort(-np.asarray(score), kind="stable")
            hits = np.asarray(labels)[order]
            ranks = np.flatnonzero(hits) + 1
            aps.append(float(np.mean(np.arange(1, len(ranks) + 1) / ranks)))
            rrs.append(1.0 / ranks[0])
    return 100 * float(np.mean(aps)), 100 * float(np.mean(rrs)), len(aps)


def timed(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def bench_matcher(name: str, path: str, questions: Sequence[Question], threads: int) -> dict:
    flags = set(name.split("+")[1:])
    encoder = "onnx" if "ort" in flags else "torch"
    matcher = Matcher.load(path, backend="torch", threads=threads, encoder_backend=encoder)
    pairs = [(q, c) for q, candidates, _ in questions for c in candidates]
    built, index_bytes, candidates_indexed = None, None, None
    if "index" in flags:
        matcher.rank(*questions[0][:2])  # warm before the build is timed: the encoder's first call loads it
        built, index = timed(lambda: matcher.index(dict.fromkeys(c for _, cs, _ in questions for c in cs)))
        index_bytes, candidates_indexed = index.states.nbytes + index.offsets.nbytes, len(index)
    matcher.rank(*questions[0][:2])  # warm: the encoder's first call loads it
    seconds, ranked = timed(lambda: [matcher.rank(q, candidates) for q, candidates, _ in questions])
    scores = []
    for answers, (_, candidates, _) in zip(ranked, questions, strict=True):
        by_index = {r["index"]: r["score"] for r in answers}
        scores.append([by_index[i] for i in range(len(candidates))])
    predict_seconds, _ = timed(lambda: matcher.predict(pairs))
    ap, rr, scored = map_mrr(questions, scores)
    return {"rank": len(pairs) / seconds, "predict": len(pairs) / predict_seconds, "map": ap, "mrr": rr,
            "questions": scored, **conditions(len(pairs), seconds, built, index_bytes, candidates_indexed)}  # fmt: skip


def conditions(pairs: int, seconds: float, built: float | None, index_bytes: int | None,
               candidates: int | None) -> dict:  # fmt: skip
    """A model's rank speed under both conditions: `rank_new` ranks texts seen once (an index built for them counted:
    each candidate belongs to one question), `rank` a fixed corpus indexed in advance (the build not counted, its
    seconds and the index's memory per 1,000 candidates beside). A model without an index does no work in advance:
    both are its one speed."""
    per_1000 = None if index_bytes is None else index_bytes * 1000 / candidates
    return {"rank_new": pairs / (seconds + (built or 0.0)), "index_seconds": built, "index_candidates": candidates,
            "index_mb_per_1000": None if per_1000 is None else per_1000 / 2**20}  # fmt: skip


def bench_cross_encoder(path: str, questions: Sequence[Question], threads: int) -> dict:
    try:
        from sentence_transformers import CrossEncoder
    except ImportError:
        raise SystemExit(
            "--cross-encoder needs sentence-transformers, which matching does not depend on: "
            "pip install sentence-transformers (6.2 gave docs/results/performance.md's figures)"
        ) from None

    model = CrossEncoder(path, num_labels=1, device="cpu")
    pairs = [(q, c) for q, candidates, _ in questions for c in candidates]
    model.predict(pairs[:8], show_progress_bar=False)
    seconds, scores = timed(lambda: [model.predict([(q, c) for c in candidates], show_progress_bar=False).tolist()
                                     for q, candidates, _ in questions])  # fmt: skip
    predict_seconds, _ = timed(lambda: model.predict(pairs, batch_size=64, show_progress_bar=False))
    ap, rr, scored = map_mrr(questions, scores)
    return {"rank": len(pairs) / seconds, "predict": len(pairs) / predict_seconds, "map": ap, "mrr": rr,
            "questions": scored, **conditions(len(pairs), seconds, None, None, None)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", type=Path, help="a TSV or CSV of (question, candidate, question id, label) rows")
    source.add_argument("--task", help="a ranking task's dev split as matching reads it (wikiqa, trecqa: clean-dev)")
    parser.add_argument("--data-dir", type=Path, default=None, help="with --task: the folder that holds the corpora")
    parser.add_argument("--columns", default="Question,Sentence,QuestionID,Label", help="a,b,group,label")
    parser.add_argument("--model", action="append", default=[], help="name=path (name+index: with an index)")
    parser.add_argument("--cross-encoder", default=None)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--queries", type=int, default=0, help="the first N questions (0: all)")
    parser.add_argument(
        "--cross-encoder-map",
        type=float,
        default=None,
        help="the CrossEncoder's MAP on the same split measured elsewhere (e.g. a fine-tuned one's), drawn instead",
    )
    parser.add_argument("--chart", type=Path, default=None, help="a PNG of MAP against rank pairs/s (log)")
    parser.add_argument("--split", default=None, help="what --pairs is, for the chart (default: from its file name)")
    parser.add_argument("--json", type=Path, default=None, help="every figure as JSON")
    args = parser.parse_args()
    results = []
    if args.task:
        if args.data_dir is None:
            parser.error("--task reads the task's dev split from --data-dir /path/to/corpora")
        questions = ranking_questions(args.task, "dev", args.data_dir)[1]
        questions, source_name, split = questions[: args.queries or None], args.task, "dev"
    else:
        questions = read_questions(args.pairs, args.columns.split(","), args.queries)
        source_name, split = args.pairs.name, split_name(args.pairs)
    pairs = sum(len(c) for _, c, _ in questions)
    print(f"{len(questions)} questions, {pairs} pairs from {source_name}; torch {torch.__version__}")
    print(f"{'model':<22} {'threads':>7} {'rank new':>9} {'rank indexed':>13} {'predict pairs/s':>16} {'MAP':>6} "
          f"{'MRR':>6}  note")  # fmt: skip
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        rows = [(spec.split("=", 1)[0], spec.split("=", 1)[1]) for spec in args.model]
        if args.cross_encoder:
            rows.append(("cross-encoder", args.cross_encoder))
        for name, path in rows:
            if name == "cross-encoder":
                result = bench_cross_encoder(path, questions, threads)
            else:
                result = bench_matcher(name, path, questions, threads)
            note = "" if not result["index_seconds"] else (
                f"index of {result['index_candidates']:,} candidates built in {result['index_seconds']:.1f} s, "
                f"{result['index_mb_per_1000']:.2f} MB per 1,000")  # fmt: skip
            print(f"{name:<22} {threads:>7} {result['rank_new']:>9,.0f} {result['rank']:>13,.0f} "
                  f"{result['predict']:>16,.0f} {result['map']:>6.2f} {result['mrr']:>6.2f}  {note}",
                  flush=True)  # fmt: skip
            if name == "cross-encoder" and args.cross_encoder_map is not None:
                result["map_quoted"] = args.cross_encoder_map
            results.append({"model": name, "threads": threads, **result})
    with_ratios(results)
    if args.json:  # the data file docs/results/performance.md's frontier quotes (with how it was measured)
        said = [said_argument(arg, args.data_dir) for arg in sys.argv[1:]]  # no folder of this machine
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": "python benchmarks/bench_rerank.py " + " ".join(said),
                                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "torch": torch.__version__, "questions": len(questions), "pairs": pairs,
                                         "results": results}, indent=1) + "\n")  # fmt: skip
    if args.chart:
        draw(results, args.chart, args.split or split, source_name)


def with_ratios(results: list[dict]) -> None:
    """Each model's rank speed against the CrossEncoder's at the same threads, under both conditions (`x_new`: texts
    seen once against the CrossEncoder, which indexes nothing; `x_indexed`: a corpus indexed in advance), rounded as
    published; none without a CrossEncoder in the sitting."""
    theirs = {r["threads"]: r["rank"] for r in results if r["model"] == "cross-encoder"}
    for r in results:
        if r["model"] != "cross-encoder" and r["threads"] in theirs:
            r["x_new"] = round(r["rank_new"] / theirs[r["threads"]], 1)
            r["x_indexed"] = round(r["rank"] / theirs[r["threads"]], 1)


def said_argument(arg: str, data_dir: Path | None) -> str:
    """A command-line argument as the data file says it: the corpora folder as /path/to/corpora, a model's run as
    <its name's run>, the CrossEncoder's folder as <CrossEncoder folder>, so that no path of this machine is
    published."""
    if arg == "/path/to/corpora" or (data_dir is not None and arg == str(data_dir)):
        return "/path/to/corpora"
    if "=" in arg and "/" in arg.split("=", 1)[1]:
        name = arg.split("=", 1)[0]
        return f"{name}=<{name.split('+')[0]} run>"
    return "<CrossEncoder folder>" if "/" in arg and not arg.startswith("docs/") else arg


def split_name(path: Path) -> str:
    """Which split a pairs file holds, from its name (`WikiQA-test.tsv` -> "test"), else the name itself: what the
    chart says its MAP is of (a chart of the test file once said "dev")."""
    words = re.split(r"[^a-z]+", path.name.lower())
    found = [w for w in ("test", "dev", "validation", "train") if w in words]
    return found[0] if found else path.name


def draw(results: list[dict], out: Path, split: str, source: str) -> None:
    """MAP against `rank` pairs/s (log scale): each model at 1 thread (labelled, blue) joined to its 2-thread point
    (orange), a quoted MAP drawn hollow; a model with an index drawn twice, its candidates indexed in advance (a dot)
    and seen once (a cross, the index's build counted), joined by a dotted line; dashed, the CrossEncoder's MAP and
    10x its 1-thread speed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    by_model: dict[str, list[dict]] = {}
    for r in results:
        by_model.setdefault(r["model"], []).append(r)
    labels, points = [], {}
    for name, rows in by_model.items():
        rows = sorted(rows, key=lambda r: r["threads"])
        ys = [r["map_quoted"] if r.get("map_quoted") is not None else r["map"] for r in rows]
        ax.plot([r["rank"] for r in rows], ys, color="0.7", lw=1, zorder=1)
        for r, y in zip(rows, ys, strict=True):
            colour = "C0" if r["threads"] == 1 else "C1"
            hollow = r.get("map_quoted") is not None
            ax.scatter(r["rank"], y, s=55, edgecolors=colour, facecolors="none" if hollow else colour, zorder=2)
            points.setdefault(name, []).append((r["rank"], y))
        for r, y in zip(rows, ys, strict=True):  # an indexed model's speed on texts seen once: the build counted
            if r.get("index_seconds"):
                colour = "C0" if r["threads"] == 1 else "C1"
                ax.plot([r["rank_new"], r["rank"]], [y, y], color=colour, ls=":", lw=1, zorder=1)
                ax.scatter(r["rank_new"], y, s=45, marker="x", color=colour, zorder=2)
                points.setdefault(name, []).append((r["rank_new"], y))
        first = rows[0]
        labels.append(
            (name, name + (" (MAP quoted)" if first.get("map_quoted") is not None else ""), first["rank"], ys[0])
        )
        if name == "cross-encoder":
            ax.axhline(ys[0], color="C2", ls="--", lw=0.8)
            ax.axvline(10 * first["rank"], color="C2", ls="--", lw=0.8)
            ax.annotate("10x the CrossEncoder's rank speed (1 thread)", (10 * first["rank"], ax.get_ylim()[0]),
                        textcoords="offset points", xytext=(4, 4), fontsize=7, color="C2")  # fmt: skip
    low, high = ax.get_ylim()
    ax.set_ylim(low - 0.5, high + 0.12 * (high - low))  # room above the best models for their names
    ax.set_xscale("log")
    ax.set_xlabel("rank per question: pairs/s (log; blue: 1 thread, orange: 2; x: new texts, index build counted)")
    ax.set_ylabel(f"{split} MAP (%)")
    ax.set_title(f"{source} ({split}): ranking quality against speed (one sitting)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    place_labels(ax, labels, points)
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


def place_labels(ax, labels: list[tuple[str, str, float, float]], points: dict[str, list[tuple[float, float]]]) -> None:
    """Each model's name beside its 1-thread point (`labels`: the model, its name as drawn, that point's x and y),
    where it covers the least of the other models' points, the names already placed and the outside of the axes:
    just above or below it, else further off with a leader line to it (models of nearly one MAP and speed sit close
    on a log scale)."""
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)

    def marker_boxes(model: str) -> list[tuple[float, float, float, float]]:
        """Other models' markers with a margin: a name that touches another model's point reads as its."""
        centres = [ax.transData.transform(xy) for other, xys in points.items() if other != model for xy in xys]
        return [(px - 10, py - 10, px + 10, py + 10) for px, py in centres]

    def overlap(box, x0: float, y0: float, x1: float, y1: float) -> float:
        return max(0.0, min(box.x1, x1) - max(box.x0, x0)) * max(0.0, min(box.y1, y1) - max(box.y0, y0))

    near = ((-4, 7), (-4, -13))
    further = ((-4, 24), (-4, -30), (-50, 24), (-50, -30), (30, 24), (30, -30), (-4, 38), (-4, -44))
    placed: list[tuple[float, float, float, float]] = []
    for model, text, x, y in labels:
        obstacles = marker_boxes(model) + placed
        best = None
        for dx, dy in near + further:
            leader = {} if (dx, dy) in near else {"arrowprops": {"arrowstyle": "-", "color": "0.5", "lw": 0.6}}
            note = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=8, **leader)
            note.update_positions(renderer)
            box = Text.get_window_extent(note, renderer)  # the name alone, not its leader line
            outside = box.width * box.height - overlap(box, frame.x0, frame.y0, frame.x1, frame.y1)
            cost = outside + sum(overlap(box, *other) for other in obstacles)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, note, box)
            else:
                note.remove()
            if best[0] == 0:
                break
        placed.append((best[2].x0, best[2].y0, best[2].x1, best[2].y1))


if __name__ == "__main__":
    main()
