"""The reranking frontier: how fast each model ranks a question's candidates, and how well, on PyTorch and on ONNX
Runtime, float32 and int8, ours and a CrossEncoder's, in one sitting.

    python benchmarks/bench_rerank.py --task trecqa --data-dir /path/to/corpora --threads 1,2 --repeats 3 \
        --model fine-tuned=<run> --model fine-tuned+onnx=<run> --model fine-tuned+onnx+int8=<run> \
        --model fine-tuned+index=<run> --model fine-tuned+index+ort=<run> --model fine-tuned+index+ort+int8=<run> \
        --cross-encoder <CrossEncoder folder> [--cross-encoder-as torch,onnx,onnx+int8] --json ... --chart ...
    python benchmarks/bench_rerank.py --pairs WikiQA-dev.tsv.gz --columns Question,Sentence,QuestionID,Label ...

A model is `name=path` (any form `Matcher.load` takes); the flags after `+` in its name say how it runs:

- none: PyTorch, float32;
- `index`: it ranks against an index of all the file's candidates (`Matcher.index`), built in each pass and timed
  apart;
- `ort`: a contextual model's encoder runs new text on ONNX Runtime (`encoder_backend="onnx"`), its aligner on
  PyTorch; with `int8`, that encoder's graph with int8 weights (ONNX Runtime's dynamic quantization, the function
  `quantize="int8"` uses, `int8_encoder`);
- `onnx`: the whole model on ONNX Runtime (`backend="onnx"`, with `int8` `quantize="int8"`): its graph encodes each
  pair's texts itself, so it has no index.

The CrossEncoder (`--cross-encoder`: a fine-tuned sentence-transformers CrossEncoder folder, e.g.
benchmarks/cross_encoder.py's `seed1/model`; `pip install sentence-transformers`, not a dependency of matching) is
timed through sentence-transformers' own `CrossEncoder.predict` on each runtime of `--cross-encoder-as`: `torch`
(PyTorch, float32), `onnx` and `onnx+int8` (ONNX Runtime, float32 or int8 weights). Its ONNX Runtime form is the one
sentence-transformers' `backend="onnx"` builds, without Optimum: its transformer exported once into
`<folder>/onnx/model.onnx` (torch.onnx, the exporter of our encoder's graph), run by an ONNX Runtime session that
takes the PyTorch model's place inside the CrossEncoder (`OrtSequenceClassifier`, what Optimum's
ORTModelForSequenceClassification is there), so its tokenisation, length-sorted batches and activation are
sentence-transformers' own on both runtimes; int8: the same dynamic quantization as ours. (Optimum, which
`backend="onnx"` needs, requires transformers < 5: installing it would replace the transformers matching runs on.)

For each thread count every row is loaded and warmed, then `--repeats` passes run, each pass timing every row in
turn, so that a change in the machine's speed falls on all rows alike. Each figure is the median of the passes,
with their range:

- `rank` pairs/s under two conditions: *indexed in advance* (a fixed corpus whose index is built before the clock
  starts; its build seconds and memory per 1,000 candidates beside) and *texts seen once* (`rank_new`: the build
  counted). One `Matcher.rank(question, its candidates)` (or `CrossEncoder.predict` on its pairs) per question, all
  the pairs over the total time; a row without an index has one speed, both;
- `predict` pairs/s: every pair in one call;
- MAP and MRR over the questions with both a correct and an incorrect candidate (the filtered protocol of WikiQA and
  TrecQA), from the first pass's `rank` answers.

Each of our rows is set against the CrossEncoder on the same runtime and precision at the same threads (`x_new`,
`x_indexed`: the ratio of the medians, its range from each pass's own ratio; an `ort` row, whose aligner stays on
PyTorch, against the CrossEncoder on ONNX Runtime) and against the CrossEncoder's fastest row at those threads
(`x_best_new`, `x_best_indexed`, `best_cross_encoder`). The JSON records the sitting once: processor, cores,
versions, the load average before and after, what else ran (`--load-note`). Threads: torch's intra-op threads
(`torch.set_num_threads`, Matcher's `threads=`) and each ONNX Runtime session's; our encoder on ONNX Runtime uses one
thread for a short query within that count (matching.inference.threads). `--profile ROW`: one rank pass of that row
under cProfile first, its top functions printed.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import gzip
import io
import json
import os
import platform
import pstats
import re
import shlex
import statistics
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


#: What a row's runtime is called in the data file, by its flag; the CrossEncoder each of our rows is set against runs
#: on `COMPARED_ON`'s runtime (an `ort` row's encoder is on ONNX Runtime, the cost that matters; its aligner is not).
RUNTIMES = {"torch": "PyTorch", "onnx": "ONNX Runtime", "ort": "ONNX Runtime encoder, PyTorch aligner"}
COMPARED_ON = {"torch": "PyTorch", "onnx": "ONNX Runtime", "ort": "ONNX Runtime"}
FLAGS = {"index", "ort", "onnx", "int8"}


class Row:
    """One way of ranking in the sitting: a model on a runtime at a precision, and the calls that time it.

    `model`: its name in the sitting (`fine-tuned+index+ort`, `cross-encoder+onnx+int8`); `side`: "ours" or
    "cross-encoder"; `runtime`: a key of RUNTIMES; `precision`: "fp32" or "int8" (weights); `scores`: one question's
    candidates' scores, in their order; `predict`: every pair at once; `build`: an index of every candidate, used from
    then on (ours with `index`)."""

    def __init__(self, model: str, side: str, runtime: str, precision: str,
                 scores: Callable[[str, list[str]], list[float]], predict: Callable[[list[tuple[str, str]]], object],
                 build: Callable[[], object] | None = None) -> None:  # fmt: skip
        self.model, self.side, self.runtime, self.precision = model, side, runtime, precision
        self.scores, self.predict, self.build = scores, predict, build


def timed(run: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def matcher_row(name: str, path: str, questions: Sequence[Question], threads: int) -> Row:
    """One of our models as its name's flags say (see the module docstring)."""
    flags = set(name.split("+")[1:])
    if flags - FLAGS:
        sys.exit(f"--model {name}: unknown flag(s) {sorted(flags - FLAGS)}; the flags are {sorted(FLAGS)}")
    if "onnx" in flags and flags & {"index", "ort"}:
        sys.exit(f"--model {name}: +onnx runs the whole graph on ONNX Runtime, which encodes each pair's texts itself: "
                 "it has no index and no separate encoder (+ort: the encoder alone)")  # fmt: skip
    if "int8" in flags and not flags & {"onnx", "ort"}:
        sys.exit(f"--model {name}: int8 weights run on ONNX Runtime: add +onnx (the whole model) or +ort (the encoder)")
    precision = "int8" if "int8" in flags else "fp32"
    if "onnx" in flags:
        matcher = Matcher.load(path, backend="onnx", quantize="int8" if "int8" in flags else None, threads=threads)
        runtime = "onnx"
    else:
        runtime = "ort" if "ort" in flags else "torch"
        matcher = Matcher.load(path, backend="torch", dtype="fp32", threads=threads,
                               encoder_backend="onnx" if runtime == "ort" else "torch")  # fmt: skip
        if precision == "int8":
            int8_encoder(matcher)

    def scores(question: str, candidates: list[str]) -> list[float]:
        by_index = {r["index"]: r["score"] for r in matcher.rank(question, candidates)}
        return [by_index[i] for i in range(len(candidates))]

    candidates = list(dict.fromkeys(c for _, cs, _ in questions for c in cs))

    def build() -> object:
        """A new index of every candidate, the previous one dropped first: with it in use, the encoder reads the
        candidates' states from it instead of encoding them (a second pass's build took 0.1 s instead of 12)."""
        matcher.use_index(None)
        return matcher.index(candidates)

    return Row(name, "ours", runtime, precision, scores, matcher.predict, build if "index" in flags else None)


def int8_encoder(matcher: Matcher) -> None:
    """Our encoder on ONNX Runtime with int8 weights: the graph `encoder_backend="onnx"` exported, quantized by the
    function `quantize="int8"` uses (matching.inference.onnx_backend.quantized: dynamic quantization, reduce_range on a
    CPU without VNNI), in place of its float32 session. `Matcher.load` has no switch for it: its `quantize="int8"`
    quantizes the whole graph (backend=onnx), which has no index."""
    from matching.inference.onnx_backend import Sessions, quantized

    encoder = matcher._predictor.backend.text_states.runtime  # matching.inference.onnx_encoder.OnnxEncoder
    encoder.session = Sessions(encoder.ort, quantized(encoder.path))
    encoder.session(1)


class OrtSequenceClassifier(torch.nn.Module):
    """A CrossEncoder's transformer on ONNX Runtime, in the PyTorch model's place inside sentence-transformers'
    CrossEncoder: what Optimum's ORTModelForSequenceClassification is to its `backend="onnx"` (the tensors in as
    numpy, one session run, the logits back as a tensor). The session's intra-op threads are the sitting's."""

    def __init__(self, graph: Path, threads: int, config) -> None:
        super().__init__()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]
        self.config = config  # sentence-transformers reads the transformer's config

    def forward(self, input_ids, attention_mask, token_type_ids=None, **_) -> dict:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        logits = self.session.run(["logits"], {n: feed[n].numpy() for n in self.names})[0]
        return {"logits": torch.from_numpy(logits)}


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model.eval()

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits


def exported_cross_encoder(model, folder: Path) -> Path:
    """The CrossEncoder's transformer as an ONNX graph (ids, mask, token types -> logits; any batch and length up to
    its positions), written into `<folder>/onnx/model.onnx`, where sentence-transformers keeps its own ONNX export, by
    torch.onnx's exporter as matching.inference.onnx_encoder exports our encoder; exported again when the weights
    it was exported from (their sha256 beside it, `model.weights.sha256`) are not the model's."""
    import hashlib
    import warnings

    from matching.files import write_atomic

    out, stamp = folder / "onnx" / "model.onnx", folder / "onnx" / "model.weights.sha256"
    transformer = model[0].model
    digest = hashlib.sha256()
    for name, tensor in transformer.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    weights = digest.hexdigest()
    if out.is_file() and stamp.is_file() and stamp.read_text().strip() == weights:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    features = model.preprocess([("what is a glacier cave", "a cave formed in the ice of a glacier"),
                                 ("who", "a cave")])  # fmt: skip
    inputs = tuple(features[k] for k in ("input_ids", "attention_mask", "token_type_ids"))
    batch = torch.export.Dim("batch")
    pieces = torch.export.Dim("pieces", max=transformer.config.max_position_embeddings)

    def export(tmp: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(_Logits(transformer), inputs,
                                        input_names=["input_ids", "attention_mask", "token_type_ids"],
                                        output_names=["logits"], dynamo=True, external_data=False, verbose=False,
                                        dynamic_shapes=({0: batch, 1: pieces},) * 3)  # fmt: skip
        program.save(str(tmp))

    write_atomic(out, export)
    stamp.write_text(weights + "\n")
    return out


def cross_encoder_row(path: str, how: str, threads: int, agreement: dict) -> Row:
    """The CrossEncoder on `how` (torch, onnx, onnx+int8), timed through `CrossEncoder.predict`; on ONNX Runtime,
    its scores' largest difference from PyTorch's on 64 pairs goes into `agreement`."""
    try:
        from sentence_transformers import CrossEncoder
    except ImportError:
        raise SystemExit(
            "--cross-encoder needs sentence-transformers, which matching does not depend on: "
            "pip install sentence-transformers (6.2 gave docs/results/performance.md's figures)"
        ) from None
    if how not in ("torch", "onnx", "onnx+int8"):
        sys.exit(f"--cross-encoder-as: {how!r} is none of torch, onnx, onnx+int8")
    model = CrossEncoder(path, num_labels=1, device="cpu")
    name, precision = "cross-encoder" + ("" if how == "torch" else "+" + how), "int8" if "int8" in how else "fp32"
    if how != "torch":
        if not Path(path).is_dir():
            sys.exit("--cross-encoder on ONNX Runtime needs the model's folder (its graph is exported into it)")
        from matching.inference.onnx_backend import quantized

        graph = exported_cross_encoder(model, Path(path))
        graph = quantized(graph) if precision == "int8" else graph
        probe = [
            ("what is a glacier cave", f"a cave formed in the ice of a glacier, {i} metres deep") for i in range(64)
        ]
        before = model.predict(probe, show_progress_bar=False)
        model[0].model = OrtSequenceClassifier(graph, threads, model[0].model.config)
        agreement[name] = float(np.max(np.abs(model.predict(probe, show_progress_bar=False) - before)))

    def scores(question: str, candidates: list[str]) -> list[float]:
        return model.predict([(question, c) for c in candidates], show_progress_bar=False).tolist()

    def predict(pairs: list[tuple[str, str]]) -> object:
        return model.predict(pairs, batch_size=64, show_progress_bar=False)

    return Row(name, "cross-encoder", "onnx" if how != "torch" else "torch", precision, scores, predict)


def figures(values: Sequence[float]) -> tuple[float, list[float]]:
    """The median of a figure's passes and their range [min, max]."""
    return statistics.median(values), [min(values), max(values)]


def run_sitting(rows: list[Row], questions: Sequence[Question], threads: int, repeats: int) -> list[dict]:
    """Every row warmed, then `repeats` passes, each timing every row in turn: its index's build (a row with one),
    a rank call per question, one predict of every pair. Each row's figures: medians and ranges of the passes, the
    passes themselves, MAP and MRR of the first pass's answers."""
    pairs = [(q, c) for q, candidates, _ in questions for c in candidates]
    for row in rows:  # warm: an encoder's first call loads it, a session's first run allocates
        row.scores(*questions[0][:2])
        row.predict(pairs[:8])
    passes: dict[str, list[dict]] = {row.model: [] for row in rows}
    answers: dict[str, list[list[float]]] = {}
    footprint: dict[str, tuple[int, int]] = {}
    for repeat in range(repeats):
        for row in rows:
            built = None
            if row.build is not None:
                built, index = timed(row.build)
                footprint[row.model] = (index.states.nbytes + index.offsets.nbytes, len(index))
            seconds, scores = timed(lambda row=row: [row.scores(q, candidates) for q, candidates, _ in questions])
            predict_seconds, _ = timed(lambda row=row: row.predict(pairs))
            answers.setdefault(row.model, scores)
            passes[row.model].append({"rank": len(pairs) / seconds, "rank_new": len(pairs) / (seconds + (built or 0)),
                                      "predict": len(pairs) / predict_seconds, "index_seconds": built})  # fmt: skip
            note = "" if built is None else f" (index built in {built:.1f} s)"
            print(f"  pass {repeat + 1}/{repeats}, {threads} thread(s): {row.model:<28} rank "
                  f"{len(pairs) / seconds:8,.0f} pairs/s{note}", flush=True)  # fmt: skip
    results = []
    for row in rows:
        each = passes[row.model]
        ap, rr, scored = map_mrr(questions, answers[row.model])
        result = {"model": row.model, "side": row.side, "runtime": RUNTIMES[row.runtime], "precision": row.precision,
                  "threads": threads, "repeats": repeats}  # fmt: skip
        for key in ("rank", "rank_new", "predict"):
            result[key], result[f"{key}_range"] = figures([p[key] for p in each])
            result[f"{key}_passes"] = [p[key] for p in each]
        if row.build is not None:
            result["index_seconds"], result["index_seconds_range"] = figures([p["index_seconds"] for p in each])
            size, candidates = footprint[row.model]
            result["index_candidates"], result["index_mb_per_1000"] = candidates, size * 1000 / candidates / 2**20
        else:
            result["index_seconds"] = result["index_candidates"] = result["index_mb_per_1000"] = None
        results.append({**result, "map": ap, "mrr": rr, "questions": scored})
    return results


def profile_row(row: Row, questions: Sequence[Question], top: int = 15) -> None:
    """One rank pass of `row` under cProfile (after a warm call), its top functions by their own time and by
    cumulative time: what a rank call spends its time on (tokenising, the session, Python around them)."""
    row.scores(*questions[0][:2])
    if row.build is not None:
        row.build()
    profiler = cProfile.Profile()
    profiler.enable()
    for q, candidates, _ in questions:
        row.scores(q, candidates)
    profiler.disable()
    print(f"profile of one rank pass of {row.model}:")
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def with_ratios(results: list[dict]) -> None:
    """Each of our rows' rank speed against the CrossEncoder's at the same threads under both conditions (`x_new`:
    texts seen once, against the CrossEncoder, which indexes nothing; `x_indexed`: a corpus indexed in advance): on
    the same runtime and precision (`against`; an encoder on ONNX Runtime against the CrossEncoder on ONNX Runtime)
    and against its fastest row (`best_cross_encoder`, `x_best_*`). A ratio is that of the medians, its range the
    lowest and highest of each pass's own ratio (the passes time every row in turn), rounded as published; none
    without such a CrossEncoder row in the sitting."""
    theirs = {(r["threads"], r["runtime"], r["precision"]): r for r in results if r["side"] == "cross-encoder"}

    def ratio(ours: list[float], against: list[float]) -> tuple[float, list[float]]:
        each = [o / a for o, a in zip(ours, against, strict=True)]
        return round(statistics.median(ours) / statistics.median(against), 1), [
            round(min(each), 1),
            round(max(each), 1),
        ]

    for r in results:
        if r["side"] != "ours":
            continue
        runtime = next(COMPARED_ON[k] for k, v in RUNTIMES.items() if v == r["runtime"])
        same = theirs.get((r["threads"], runtime, r["precision"]))
        if same is not None:
            r["against"] = same["model"]
            r["x_new"], r["x_new_range"] = ratio(r["rank_new_passes"], same["rank_passes"])
            r["x_indexed"], r["x_indexed_range"] = ratio(r["rank_passes"], same["rank_passes"])
        at_threads = [t for t in theirs.values() if t["threads"] == r["threads"]]
        if at_threads:
            best = max(at_threads, key=lambda t: t["rank"])
            r["best_cross_encoder"] = best["model"]
            r["x_best_new"], r["x_best_new_range"] = ratio(r["rank_new_passes"], best["rank_passes"])
            r["x_best_indexed"], r["x_best_indexed_range"] = ratio(r["rank_passes"], best["rank_passes"])


def machine() -> dict:
    """The processor (its model name in /proc/cpuinfo, else the platform's; with its family, model and stepping, which
    tell a generation where a virtual machine's model name does not: AMD family 25 model 17 is Zen 4), its cores, the
    instructions int8 and bf16 arithmetic use, and the versions of what ran."""
    name, flags, cpuid = platform.processor() or platform.machine(), set(), {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "model name" and name in (platform.processor(), platform.machine()):
                    name = value
                elif key in ("cpu family", "model", "stepping") and key not in cpuid:
                    cpuid[key] = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("onnxruntime", "sentence_transformers", "transformers"):
        try:
            versions[package] = __import__(package).__version__
        except ImportError:
            versions[package] = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"processor": name, "cpuid": cpuid, "cores": os.cpu_count(), "cores_usable": usable,
            "instructions": sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
                                            "amx_int8"}), "versions": versions}  # fmt: skip


def code_version() -> dict:
    """The commit the sitting ran at and whether the working tree differed from it (the code timed is the tree's)."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no", "--", "matching", "benchmarks")
    return {"commit": git("rev-parse", "--short=8", "HEAD"), "changed_files": None if status is None else
            len(status.splitlines())}  # fmt: skip


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--pairs", type=Path, help="a TSV or CSV of (question, candidate, question id, label) rows")
    source.add_argument("--task", help="a ranking task's dev split as matching reads it (wikiqa, trecqa: clean-dev)")
    source.add_argument("--draw-from", type=Path, default=None, metavar="JSON",
                        help="draw --chart from a sitting's data file, measuring nothing")  # fmt: skip
    parser.add_argument("--data-dir", type=Path, default=None, help="with --task: the folder that holds the corpora")
    parser.add_argument("--columns", default="Question,Sentence,QuestionID,Label", help="a,b,group,label")
    parser.add_argument("--model", action="append", default=[],
                        help="name=path; the name's flags: +index, +ort, +onnx, +int8 (see above)")  # fmt: skip
    parser.add_argument("--cross-encoder", default=None, help="a fine-tuned sentence-transformers CrossEncoder folder")
    parser.add_argument("--cross-encoder-as", default="torch,onnx,onnx+int8",
                        help="the CrossEncoder's runtimes: torch, onnx, onnx+int8")  # fmt: skip
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=3, help="passes per row; each figure the median (>= 1)")
    parser.add_argument("--queries", type=int, default=0, help="the first N questions (0: all)")
    parser.add_argument("--load-note", default=None, help="what else ran on the machine, for the data file")
    parser.add_argument("--profile", default=None, metavar="ROW", help="profile one rank pass of this row first")
    parser.add_argument("--chart", type=Path, default=None, help="a PNG of MAP against rank pairs/s (log)")
    parser.add_argument("--split", default=None, help="what --pairs is, for the chart (default: from its file name)")
    parser.add_argument("--json", type=Path, default=None, help="every figure as JSON")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.draw_from:
        if not args.chart:
            parser.error("--draw-from draws --chart")
        data = json.loads(args.draw_from.read_text(encoding="utf-8"))
        task = re.search(r"--task (\S+)", data["command"])
        draw(data["results"], args.chart, args.split or "dev", task.group(1) if task else args.draw_from.name)
        return
    if args.task:
        if args.data_dir is None:
            parser.error("--task reads the task's dev split from --data-dir /path/to/corpora")
        questions = ranking_questions(args.task, "dev", args.data_dir)[1]
        questions, source_name, split = questions[: args.queries or None], args.task, "dev"
    else:
        questions = read_questions(args.pairs, args.columns.split(","), args.queries)
        source_name, split = args.pairs.name, split_name(args.pairs)
    pairs = sum(len(c) for _, c, _ in questions)
    sitting = {**machine(), "code": code_version(), "load_before": load_average(), "load_note": args.load_note}
    print(f"{len(questions)} questions, {pairs} pairs from {source_name}; {sitting['processor']}, "
          f"{sitting['cores']} cores, load {sitting['load_before']}; {sitting['versions']}")  # fmt: skip
    results, agreement = [], {}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        rows = [matcher_row(*spec.split("=", 1), questions, threads) for spec in args.model]
        if args.cross_encoder:
            rows += [cross_encoder_row(args.cross_encoder, how, threads, agreement)
                     for how in args.cross_encoder_as.split(",")]  # fmt: skip
        if args.profile and threads == int(args.threads.split(",")[0]):
            profile_row(next(r for r in rows if r.model == args.profile), questions)
        results += run_sitting(rows, questions, threads, args.repeats)
    with_ratios(results)
    sitting["load_after"] = load_average()
    print(f"{'model':<28} {'runtime':<38} {'prec':<5} {'thr':>3} {'rank new':>17} {'rank indexed':>17} "
          f"{'predict':>7} {'MAP':>6} {'x same (new/idx)':>17} {'x best':>11}")  # fmt: skip
    for r in results:
        same = f"{r['x_new']:.1f}x/{r['x_indexed']:.1f}x" if "x_new" in r else "–"
        best = f"{r['x_best_new']:.1f}x/{r['x_best_indexed']:.1f}x" if "x_best_new" in r else "–"
        print(f"{r['model']:<28} {r['runtime']:<38} {r['precision']:<5} {r['threads']:>3} "
              f"{r['rank_new']:>6,.0f} ({r['rank_new_range'][0]:,.0f}–{r['rank_new_range'][1]:,.0f}) "
              f"{r['rank']:>6,.0f} ({r['rank_range'][0]:,.0f}–{r['rank_range'][1]:,.0f}) {r['predict']:>7,.0f} "
              f"{r['map']:>6.2f} {same:>17} {best:>11}")  # fmt: skip
    print(f"CrossEncoder on ONNX Runtime against PyTorch, largest score difference: {agreement}; load "
          f"{sitting['load_before']} -> {sitting['load_after']}")  # fmt: skip
    if args.json:  # the data file docs/results/performance.md's frontier quotes (with how it was measured)
        said = said_command(sys.argv[1:])  # no folder of this machine
        said = [shlex.quote(a) if " " in a and not a.endswith(">") else a for a in said]  # pasteable, <...> as said
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": "python benchmarks/bench_rerank.py " + " ".join(said),
                                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "torch": torch.__version__, "questions": len(questions), "pairs": pairs,
                                         "repeats": args.repeats, "sitting": sitting,
                                         "order": "each pass times every row in turn; a figure is the median of the "
                                                  "passes, its range their lowest and highest",
                                         "cross_encoder_onnx": {
                                             "how": "its transformer exported by torch.onnx (dynamo), run by an ONNX "
                                                    "Runtime session inside sentence-transformers' CrossEncoder; int8: "
                                                    "ONNX Runtime dynamic quantization",
                                             "largest_score_difference": agreement},
                                         "results": results}, indent=1) + "\n")  # fmt: skip
    if args.chart:
        draw(results, args.chart, args.split or split, source_name)


#: What a flag's value that is a path of this machine is published as; a written file (--json, --chart) outside docs/
#: as its name alone.
SAID_PATHS = {
    "--data-dir": "/path/to/corpora",
    "--cross-encoder": "<CrossEncoder folder>",
    "--pairs": "/path/to/{name}",
    "--draw-from": "{name}",
    "--json": "{name}",
    "--chart": "{name}",
}


def said_command(argv: list[str]) -> list[str]:
    """The command line as the data file says it, each value by the flag it follows (`--flag value` or
    `--flag=value`): the corpora folder as /path/to/corpora, a model's run as <its name's run>, the CrossEncoder's
    folder as <CrossEncoder folder>, a file written outside docs/ by its name, so that no path of this machine is
    published."""
    said, flag = [], None
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            said.append(f"{name}={said_value(name, value)}")
        else:
            said.append(said_value(flag, arg) if flag else arg)
        flag = arg if arg.startswith("--") and "=" not in arg else None
    return said


def said_value(flag: str, value: str) -> str:
    if flag == "--model" and "=" in value and "/" in value.split("=", 1)[1]:
        name = value.split("=", 1)[0]
        return f"{name}=<{name.split('+')[0]} run>"
    if flag not in SAID_PATHS or (flag != "--data-dir" and ("/" not in value or value.startswith("docs/"))):
        return value
    return SAID_PATHS[flag].format(name=Path(value).name)


def split_name(path: Path) -> str:
    """Which split a pairs file holds, from its name (`WikiQA-test.tsv` -> "test"), else the name itself: what the
    chart says its MAP is of (a chart of the test file once said "dev")."""
    words = re.split(r"[^a-z]+", path.name.lower())
    found = [w for w in ("test", "dev", "validation", "train") if w in words]
    return found[0] if found else path.name


#: The chart's marker for each runtime and precision.
MARKERS = {("PyTorch", "fp32"): "o", ("ONNX Runtime", "fp32"): "s", ("ONNX Runtime", "int8"): "^",
           (RUNTIMES["ort"], "fp32"): "D", (RUNTIMES["ort"], "int8"): "v"}  # fmt: skip


def draw(results: list[dict], out: Path, split: str, source: str) -> None:
    """MAP against `rank` pairs/s (log scale), a panel per thread count: each row at its median speed with its range
    (the bar), ours blue and the CrossEncoder's red, the marker its runtime and precision; a row with an index drawn
    twice, indexed in advance (filled) and on texts seen once (hollow, the index's build counted), joined by a dotted
    line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    counts = sorted({r["threads"] for r in results})
    fig, axes = plt.subplots(1, len(counts), figsize=(7 * len(counts), 5.5), sharey=True, squeeze=False)
    for ax, threads in zip(axes[0], counts, strict=True):
        labels, points = [], {}
        for r in (r for r in results if r["threads"] == threads):
            colour = "C0" if r["side"] == "ours" else "C3"
            marker = MARKERS.get((r["runtime"], r["precision"]), "o")
            low, high = r.get("rank_range", [r["rank"], r["rank"]])
            ax.errorbar(r["rank"], r["map"], xerr=[[r["rank"] - low], [high - r["rank"]]], fmt=marker, color=colour,
                        ms=7, capsize=3, lw=1, zorder=2)  # fmt: skip
            points.setdefault(r["model"], []).append((r["rank"], r["map"]))
            if r.get("index_seconds"):  # texts seen once: the build counted
                low, high = r.get("rank_new_range", [r["rank_new"], r["rank_new"]])
                ax.plot([r["rank_new"], r["rank"]], [r["map"]] * 2, color=colour, ls=":", lw=1, zorder=1)
                ax.errorbar(r["rank_new"], r["map"], xerr=[[r["rank_new"] - low], [high - r["rank_new"]]], fmt=marker,
                            mfc="none", color=colour, ms=7, capsize=3, lw=1, zorder=2)  # fmt: skip
                points[r["model"]].append((r["rank_new"], r["map"]))
            labels.append((r["model"], r["model"], r["rank"], r["map"]))
        ax.set_xscale("log")
        ax.set_title(f"{threads} thread{'s' if threads > 1 else ''}")
        ax.set_xlabel("rank per question: pairs/s (log; median, bar: range of the passes)")
        ax.grid(True, which="both", alpha=0.3)
        low, high = ax.get_ylim()
        ax.set_ylim(low - 0.3, high + 0.15 * (high - low))  # room for the names
        fig.tight_layout()
        place_labels(ax, labels, points)
    axes[0][0].set_ylabel(f"{split} MAP (%)")
    legend = [Line2D([], [], color="C0", marker="o", ls="", label="ours (CoDA)"),
              Line2D([], [], color="C3", marker="o", ls="", label="CrossEncoder"),
              *(Line2D([], [], color="0.4", marker=m, ls="", label=f"{runtime}, {precision}")
                for (runtime, precision), m in MARKERS.items()),
              Line2D([], [], color="0.4", marker="o", mfc="none", ls=":",
                     label="texts seen once (index build counted)")]  # fmt: skip
    repeats = results[0].get("repeats", 1) if results else 1
    fig.suptitle(f"{source} ({split}): ranking quality against speed, one sitting, median of {repeats} passes")
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # the legend below the panels, clear of every point
    fig.legend(handles=legend, fontsize=8, loc="lower center", ncol=4, frameon=False)
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
