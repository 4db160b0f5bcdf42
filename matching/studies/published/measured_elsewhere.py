"""What the README and docs/ publish of the figures measured outside this repository's study pages
(docs/figures/measured_elsewhere.yaml, whose `published` names these renderers: held-out test splits, benchmark
sittings) and of the reranking frontier's data files (benchmarks/bench_rerank.py --json), each rendered from its file
(matching.results.publish)."""

from __future__ import annotations

import json
from pathlib import Path

from matching.results.publish import DENORMALS, FRONTIER, figures


def spread(pair: list[float]) -> str:
    return f"{pair[0]:.2f} ± {pair[1]:.2f}"


def interval(triple: list[float]) -> str:
    """[difference, low, high] as printed; an interval that does not contain its estimate is a wrong record."""
    if not triple[1] <= triple[0] <= triple[2]:
        raise ValueError(f"the interval [{triple[1]}, {triple[2]}] does not contain its estimate {triple[0]}")
    return f"{triple[0]:+.2f} [{triple[1]:+.2f}, {triple[2]:+.2f}]"


def frontier_rows(folder: Path, task: str) -> tuple[dict, dict[tuple[str, int], dict]] | None:
    """A task's frontier data file (its command, date, questions and sitting) and its results by (model, threads);
    None while it has none. A file of the first sittings (one pass, no runtime recorded, the CrossEncoder on PyTorch
    only) gets each row's runtime and precision from its name (`+ort`: our encoder on ONNX Runtime, the aligner on
    PyTorch) and the CrossEncoder each ratio was taken against, so that what renders it can say what it compared."""
    path = folder / FRONTIER.format(task=task)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = {}
    for r in data["results"]:
        if "runtime" not in r:  # a first sitting's row
            ort = "ort" in r["model"].split("+")[1:]
            r = {**r, "side": "cross-encoder" if r["model"].startswith("cross-encoder") else "ours",
                 "runtime": "ONNX Runtime encoder, PyTorch aligner" if ort else "PyTorch", "precision": "fp32",
                 "repeats": 1, **({"against": "cross-encoder"} if "x_new" in r else {})}  # fmt: skip
        rows[(r["model"], r["threads"])] = r
    return data, rows


def _runtime_of(r: dict) -> str:
    """A row's runtime and precision as the frontier's sentences say them."""
    return f"{r['runtime']} {r['precision']}"


def _processor(sitting: dict) -> str:
    """The sitting's processor, with its family and model where recorded (a virtual machine's name alone, "AMD EPYC",
    does not tell its generation)."""
    cpuid = sitting.get("cpuid") or {}
    if "cpu family" not in cpuid:
        return sitting["processor"]
    return f"{sitting['processor']} (family {cpuid['cpu family']}, model {cpuid.get('model', '?')})"


def _spread(r: dict, key: str, form: str) -> str:
    """A figure of a frontier row, its range of the passes after it in brackets where it has one."""
    low_high = r.get(f"{key}_range")
    said = format(r[key], form)
    return said if not low_high else f"{said} ({format(low_high[0], form)}–{format(low_high[1], form)})"


def _ratio(r: dict, key: str) -> str:
    low_high = r.get(f"{key}_range")
    return f"{r[key]:.1f}x" + ("" if not low_high else f" ({low_high[0]:.1f}–{low_high[1]:.1f})")


def frontier_table(folder: Path, task: str) -> str:
    """docs/results/performance.md's table of a task's frontier under both conditions: each row's runtime and
    precision, its rank pairs/s on texts seen once (an index's build counted) and on a corpus indexed in advance, at
    each thread count, the index's build seconds and memory, dev MAP and MRR, and each speed against the
    CrossEncoder's on the same runtime and precision and against its fastest row; each speed the median of the
    sitting's passes with their range. A first sitting's file (one pass, the CrossEncoder on PyTorch only) says so,
    and that its ratios set our runtime against the CrossEncoder on PyTorch."""
    found = frontier_rows(folder, task)
    if found is None:
        return (
            f"This sitting has not run yet: `python benchmarks/bench_rerank.py --task {task} ... --json docs/figures/"
            f"{FRONTIER.format(task=task)}`."
        )
    data, rows = found
    sitting = data.get("sitting")
    if sitting is None:
        about = (f"{data['date']}, torch {data['torch']}; {data['questions']} questions, {data['pairs']:,} pairs; one "
                 "pass a row, the processor not recorded; every ratio is against the CrossEncoder on PyTorch fp32, so "
                 "a row with its encoder on ONNX Runtime sets that runtime against PyTorch")  # fmt: skip
        against = "× the CrossEncoder on PyTorch fp32 (seen once / indexed)"
    else:
        versions = sitting["versions"]
        load = f"load average {sitting['load_before'][0]:.2f} before, {sitting['load_after'][0]:.2f} after"
        about = (f"{data['date']}, {_processor(sitting)}, {sitting['cores']} cores, torch {versions['torch']}, ONNX "
                 f"Runtime {versions['onnxruntime']}, sentence-transformers {versions['sentence_transformers']}; "
                 f"{data['questions']} questions, {data['pairs']:,} pairs; each figure the median of "
                 f"{data['repeats']} passes, every row timed in turn in each, its range in brackets; {load}"
                 + (f"; {sitting['load_note']}" if sitting.get("load_note") else ""))  # fmt: skip
        against = ("× the CrossEncoder on the same runtime and precision (seen once / indexed; an encoder on ONNX "
                   "Runtime against it on ONNX Runtime)")  # fmt: skip
    lines = [
        f"`{data['command']}` ({about}):",
        "",
        f"| model | runtime | precision | threads | rank pairs/s, texts seen once | indexed in advance | {against} | "
        "× the CrossEncoder's fastest row (indexed) | index build s | index MB per 1,000 | dev MAP | MRR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, threads), r in rows.items():
        times = "–" if "x_new" not in r else f"{_ratio(r, 'x_new')} / {_ratio(r, 'x_indexed')}"
        best = "–" if "x_best_indexed" not in r else f"{_ratio(r, 'x_best_indexed')}, {r['best_cross_encoder']}"
        build = "–" if not r.get("index_seconds") else _spread(r, "index_seconds", ".1f")
        memory = "–" if not r.get("index_mb_per_1000") else f"{r['index_mb_per_1000']:.2f}"
        lines.append(f"| {model} | {r['runtime']} | {r['precision']} | {threads} | {_spread(r, 'rank_new', ',.0f')} | "
                     f"{_spread(r, 'rank', ',.0f')} | {times} | {best} | {build} | {memory} | {r['map']:.2f} | "
                     f"{r['mrr']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def trecqa_frontier_table(folder: Path) -> str:
    """TrecQA clean-dev's frontier under both conditions (frontier_table)."""
    return frontier_table(folder, "trecqa")


def wikiqa_frontier_table(folder: Path) -> str:
    """WikiQA dev's frontier under both conditions (frontier_table)."""
    return frontier_table(folder, "wikiqa")


def denormals_table(folder: Path) -> str:
    """docs/results/performance.md's table of training with denormal floats kept and flushed (benchmarks/denormals.py
    --json): each case's training seconds both ways, its first and last epoch's, and whether the dev scores agree."""
    path = folder / DENORMALS
    if not path.is_file():
        return f"This sitting has not run yet: `python benchmarks/denormals.py ... --json docs/figures/{DENORMALS}`."
    data = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        f"`{data['command']}` ({data['date']}, {data['processor']}, {data['cores']} cores, torch {data['torch']}; one "
        "thread a run, a case's two runs at the same time):",
        "",
        "| TrecQA, 8 epochs, seed 1 | training s, denormals kept | flushed | kept / flushed | epoch 1 → 8 s, kept | "
        "flushed | dev scores |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        kept, flushed = r["kept"], r["flushed"]
        same = "the same to the bit" if r["same_scores"] else "differ"
        lines.append(f"| {r['what']} | {kept['train_seconds']:.1f} | {flushed['train_seconds']:.1f} | "
                     f"{r['speedup']:.2f}x | {kept['first_epoch']:.1f} → {kept['last_epoch']:.1f} | "
                     f"{flushed['first_epoch']:.1f} → {flushed['last_epoch']:.1f} | {same} |")  # fmt: skip
    return "\n".join(lines)


def frontier_clause(folder: Path, task: str, name: str) -> str | None:
    """One task's speed claim from its frontier data file, one thread, both conditions, every ratio naming the
    runtimes and precisions it sets against each other: each of our fine-tuned model's rows with an index against the
    CrossEncoder on the same runtime and precision (medians of the passes, their ranges), and our fastest against the
    CrossEncoder's fastest. A first sitting's file (one pass, the CrossEncoder on PyTorch only) is said to be one, each
    ratio with the runtimes it set against each other. None while the file or one of the models is missing."""
    found = frontier_rows(folder, task)
    if found is None:
        return None
    data, rows = found
    ce = rows.get(("cross-encoder", 1))
    ours = [r for (model, threads), r in rows.items()
            if threads == 1 and r["side"] == "ours" and r.get("index_seconds") and "x_indexed" in r]  # fmt: skip
    ours = [r for r in ours if r["model"].split("+")[0] == "fine-tuned"] or ours  # the headline's model
    if not (ce and ours):
        return None
    first = ours[0]
    build = (f"the index's build, {first['index_seconds']:.1f} s for {first['index_candidates']:,} candidates, "
             f"{first['index_mb_per_1000']:.2f} MB per 1,000")  # fmt: skip
    seen_once = ", ".join(f"{r['x_new']:.1f}x" for r in ours)
    sitting = data.get("sitting")
    if sitting is None:  # a first sitting: one pass, the CrossEncoder on PyTorch fp32 only
        runtimes = {True: "our encoder on ONNX Runtime against the CrossEncoder on PyTorch",
                    False: "both on PyTorch fp32"}  # fmt: skip
        said = [f"**{r['x_indexed']:.1f}x**" + (" the CrossEncoder's pairs/s" if i == 0 else "")
                + f" with {runtimes['ONNX' in r['runtime']]}" for i, r in enumerate(ours)]  # fmt: skip
        return (f"{name}, an earlier sitting ({data['date']}: one pass a row, the processor not recorded, the "
                f"CrossEncoder on PyTorch only), candidates indexed in advance ({build}, not counted): "
                f"{', '.join(said)}; on texts seen once (the build counted) {seen_once} in the same order; at "
                f"{first['map']:.2f} against {ce['map']:.2f} dev MAP")  # fmt: skip

    def against(r: dict) -> str:
        theirs = rows[(r["against"], 1)]
        if r["runtime"] == theirs["runtime"]:
            return f"both on {_runtime_of(r)}"
        return f"both on {_runtime_of(theirs)} (our aligner on PyTorch)"

    said = [f"**{r['x_indexed']:.1f}x** ({r['x_indexed_range'][0]:.1f}–{r['x_indexed_range'][1]:.1f})"
            + (" the CrossEncoder's pairs/s" if i == 0 else "") + f" with {against(r)}"
            for i, r in enumerate(ours)]  # fmt: skip
    fastest = max(ours, key=lambda r: r["rank"])
    best = rows[(fastest["best_cross_encoder"], 1)]
    low, high = fastest["x_best_indexed_range"]
    maps = ", ".join(f"{r['map']:.2f}" for r in ours)
    theirs = ", ".join(f"{rows[(r['against'], 1)]['map']:.2f}" for r in ours)
    return (f"{name}, candidates indexed in advance ({build}, not counted): {', '.join(said)}; our fastest "
            f"({_runtime_of(fastest)}) against the CrossEncoder's fastest ({_runtime_of(best)}): "
            f"**{fastest['x_best_indexed']:.1f}x** ({low:.1f}–{high:.1f}); on texts seen once (the build counted) "
            f"{seen_once} in the same order; dev MAP {maps} against the CrossEncoder's {theirs}, in the same order "
            f"(each speed the median of {data['repeats']} passes, its range in brackets; {_processor(sitting)}, "
            f"{sitting['cores']} cores, {data['date']})")  # fmt: skip


def frontier_sentence(folder: Path) -> str:
    """The docs' speed claim for reranking, each figure with the models, runtimes, precisions and condition it
    belongs to: each task's from its data file (both conditions); WikiQA's, until its file exists, from the earlier
    sitting (indexed in advance only)."""
    f = figures(folder)["frontier"]
    wikiqa, trecqa = f["wikiqa"], f["trecqa"]
    clauses = {task: frontier_clause(folder, task, name)
               for task, name in (("trecqa", "TrecQA clean-dev"), ("wikiqa", "WikiQA dev"))}  # fmt: skip
    if clauses["trecqa"] is not None:
        lead = ("On one thread, CoDA over the encoder with its top layer fine-tuned (seed 1) against a MiniLM "
                "CrossEncoder kept at its dev-best epoch (seed 1). ")  # fmt: skip
        if clauses["wikiqa"] is not None:
            return lead + f"{clauses['trecqa']}. {clauses['wikiqa']}."
        return (f"{lead}{clauses['trecqa']}. WikiQA dev, an earlier sitting against the CrossEncoder trained 2 "
                f"epochs, on PyTorch, with our encoder on ONNX Runtime: {wikiqa['ratio']:.0f}x indexed in advance "
                f"(building the index, {wikiqa['index_seconds'][0]:.0f}–{wikiqa['index_seconds'][1]:.0f} s, not "
                "counted); about 1.3x on texts seen once (issue 78).")  # fmt: skip
    return (f"WikiQA dev at {wikiqa['ratio']:.0f}x the rank speed of a MiniLM CrossEncoder fine-tuned as long, TrecQA "
            f"clean-dev at {trecqa['ratio']:.0f}x, on one thread: CoDA over the encoder with its top layer fine-tuned "
            f"(the headline's model, seed 1), its candidates indexed in advance (building the index, "
            f"{wikiqa['index_seconds'][0]:.0f}–{wikiqa['index_seconds'][1]:.0f} s and "
            f"{trecqa['index_seconds'][0]:.1f}–{trecqa['index_seconds'][1]:.1f} s, is not counted), its encoder "
            "on ONNX Runtime against the CrossEncoder on PyTorch, one pass each.")  # fmt: skip


def held_out_test(folder: Path) -> str:
    """The README's held-out test figures: the headline's comparison on the test splits, the fine-tuned models and
    the CrossEncoder kept at its dev-best epoch on TrecQA's test, and an earlier uncentred one on WikiQA's."""
    f = figures(folder)
    snli, trecqa = f["centring_test"]["rows"]["snli_test"], f["centring_test"]["rows"]["trecqa_test"]
    tuned, ce = f["fine_tuning_test"]["trecqa_test"], f["cross_encoder_epochs"]
    best = next(row for row in ce["rows"] if row[0] == ce["dev_best_epoch"])
    test_map = ce["columns"].index("test_map")
    return (f"CoDA centred − softmax centred, the headline's comparison, on SNLI's test split "
            f"**{interval(snli['coda_centred_vs_softmax_centred'])}** (9,824 pairs, {snli['verdict']}) and "
            f"TrecQA's clean test **{interval(trecqa['coda_centred_vs_softmax_centred'])}** MAP (68 questions, "
            f"{trecqa['verdict']}), 3 "
            f"seeds, static vectors (issue {f['centring_test']['source']['issue']}: "
            f"`{f['centring_test']['source']['command'].split(' paths.')[0]}`); "
            f"on TrecQA's clean test CoDA over the frozen encoder {spread(tuned['coda_frozen']['test'])} MAP, "
            f"with its "
            f"top layer fine-tuned {spread(tuned['coda_n1']['test'])}, against {best[test_map]:.2f} for the "
            f"CrossEncoder trained {len(ce['rows'])} epochs and kept at its dev-best ({ce['dev_best_epoch']}; "
            f"one seed, "
            f"issue {ce['source']['issue']}): a tie, as on dev with both sides' epochs chosen on dev; uncentred "
            f"CoDA − softmax on "
            f"WikiQA's test {interval(f['earlier_test']['wikiqa_coda_vs_softmax'])} MAP (237 questions, issue "
            f"54).")  # fmt: skip


def gpu_and_cpu_speed(folder: Path) -> str:
    """The README's training-speed sentence: the newest H100 sitting and the CPU step's cost."""
    f = figures(folder)
    gpu, cpu, bf16 = f["gpu_2026_11_26"], f["cpu_step"]["ratio_to_bare_loop"], f["bf16_cpu"]["speed_up"]
    eager = gpu["epoch_seconds"]["eager"].values()
    return (f"Speed: one H100 runs an SNLI-sized epoch in {min(eager):.0f}–{max(eager):.0f} s per aligner eager, "
            f"{gpu['epoch_seconds']['compiled']['coda']:.0f} s for CoDA compiled (8 runs sharing it: "
            f"{gpu['concurrent_ratio'][8]:.1f}x one's throughput; {gpu['date']}); on 2 CPU cores a step costs "
            f"{cpu['softmax']:.2f}x (softmax) and {cpu['coda']:.2f}x (CoDA) a bare PyTorch loop. A CPU with AMX or "
            f"AVX512-BF16 trains in bf16 by default (`dtype=auto`, {bf16[0]:.1f}–{bf16[1]:.1f}x faster, dev metrics "
            "within noise of fp32).")  # fmt: skip


def centring_test_table(folder: Path) -> str:
    """docs/results/index.md's held-out test table of the controlled comparison, from the figures file."""
    f = figures(folder)["centring_test"]
    families = ("softmax", "softmax_centred", "coda", "coda_centred", "conflict", "conflict_centred")
    names = ("softmax", "softmax, centred", "CoDA", "CoDA, centred", "conflict", "conflict, centred")
    lines = ["| test, mean ± std over 3 seeds | " + " | ".join(names) + " | CoDA, centred − softmax, centred [95 "
             "% CI] |",
             "|---" * (len(names) + 2) + "|"]  # fmt: skip
    for row in f["rows"].values():
        cells = [spread(row[family]) for family in families]
        lines.append(f"| {row['label']} | " + " | ".join(cells) +
                     f" | {interval(row['coda_centred_vs_softmax_centred'])}, {row['verdict']} |")  # fmt: skip
    snli, trecqa = f["rows"]["snli_test"]["centring"], f["rows"]["trecqa_test"]["centring"]
    verdicts = f["centring_verdicts"]
    said = "; ".join(f"{name} {snli[key]:+.2f} / {trecqa[key]:+.2f} ({verdicts[key]})"
                     for key, name in (("coda", "CoDA"), ("softmax", "softmax"), ("conflict", "conflict")))  # fmt: skip
    return "\n".join([*lines, "", f"Centring on test, each aligner against itself uncentred (SNLI / TrecQA): {said}. "
                      f"Measured separately (issue {f['source']['issue']}, `{f['source']['command']}`, {f['date']}); "
                      "not our runs."])  # fmt: skip


def fine_tuning_test(folder: Path) -> str:
    """The fine-tuning comparison on TrecQA's held-out clean test: the CrossEncoder's per-epoch table (dev and test
    scored after each of 8 epochs) and CoDA's test MAP at the study's settings, from the figures file."""
    f = figures(folder)
    ce, tuned = f["cross_encoder_epochs"], f["fine_tuning_test"]["trecqa_test"]
    lines = ["| epoch (of 8) | minutes | dev MAP | dev MRR | test MAP | test MRR |", "|---|---|---|---|---|---|"]
    for epoch, minutes, *scores in ce["rows"]:
        bold = "**" if epoch == ce["dev_best_epoch"] else ""
        lines.append(f"| {bold}{epoch}{bold} | {minutes:.1f} | " + " | ".join(f"{x:.2f}" for x in scores) + " |")
    best = next(row for row in ce["rows"] if row[0] == ce["dev_best_epoch"])[ce["columns"].index("test_map")]
    said = (f"Kept at its dev-best epoch ({ce['dev_best_epoch']}) the CrossEncoder scores {best:.2f} test MAP "
            f"(one seed); "
            f"at the study's settings, 3 seeds, tested once: CoDA over the frozen encoder "
            f"{spread(tuned['coda_frozen']['test'])} (dev {tuned['coda_frozen']['dev']:.2f}), with its top layer "
            f"fine-tuned {spread(tuned['coda_n1']['test'])} (dev {tuned['coda_n1']['dev']:.2f}), CoDA centred over "
            f"static vectors {spread(tuned['coda_centred_static']['test'])}: "
            f"{ce['against_coda_test']['coda_frozen']:+.2f} and {ce['against_coda_test']['coda_n1']:+.2f} against the "
            f"CrossEncoder, a tie. Measured separately (issue {ce['source']['issue']}, {ce['date']}); not our "
            f"runs.")  # fmt: skip
    return "\n".join([*lines, "", said])


def demo_duration(folder: Path) -> str:
    """The demo page's "How long": the newest sitting with the demo's seeds, and the fresh clone's install."""
    demo = figures(folder)["demo"]
    seconds = demo["demo_seconds"]
    return (f"`make demo` with {demo['seeds']} seeds a side, the project installed: "
            f"{seconds['three_seeds_installed']} s; `git clone` + `make install` (from PyPI): "
            f"{demo['install_seconds']} s ({demo['date']}).")  # fmt: skip


def scitail_test(folder: Path) -> str:
    """The SciTail study's row on the held-out test: each family's two seeds and the two differences over the pairs."""
    f = figures(folder)["scitail_test"]
    seeds = f["per_seed"]
    names = {"softmax": "DecompAtt", "coda": "CoDA as printed", "coda_centred": "CoDA centred"}
    per = "; ".join(f"{name} {' / '.join(f'{v:.2f}' for v in seeds[key])}" for key, name in names.items())
    return (f"SciTail 1.1 test (2,126 pairs), frozen encoder, seeds 1 and 2: {per} acc; "
            f"over the test pairs, the seeds averaged: CoDA − DecompAtt {interval(f['coda_vs_softmax'])}, CoDA centred "
            f"− CoDA as printed {interval(f['coda_centred_vs_coda'])}. Two seeds a side: no verdict about the "
            f"method. Measured separately (issue {f['source']['issue']}, `{f['source']['command']}`, "
            f"{f['date']}); not our runs.")  # fmt: skip


def signed_aligners_test(folder: Path) -> str:
    """The signed-aligner study's TrecQA-over-the-encoder row on the held-out test."""
    f = figures(folder)["signed_aligners_trecqa_test"]
    names = {"softmax_centred": "softmax centred", "coda_centred": "CoDA centred", "softpick": "softpick", "cog": "cog"}
    maps = "; ".join(f"{name} {f['map'][key][0]:.2f} ± {f['map'][key][1]:.2f}" for key, name in names.items())

    def said(key: str, name: str) -> str:
        c = f[key]
        p = f", Holm p = {c['p_holm']}" if c.get("p_holm") else ""
        return f"{name} {interval(c['interval'])} ({c['verdict']}{p})"

    comparisons = "; ".join([said("coda_centred_vs_softmax_centred", "CoDA centred − softmax centred"),
                             said("softpick_vs_coda_centred", "softpick − CoDA centred"),
                             said("cog_vs_coda_centred", "cog − CoDA centred")])  # fmt: skip
    return (f"TrecQA's held-out clean test (68 questions), frozen encoder, seeds 1–3, tested once: {maps} MAP; "
            f"{comparisons}. Measured separately (issue {f['source']['issue']}, `{f['source']['command']}`, "
            f"{f['date']}); not our runs.")  # fmt: skip
