"""What the README and docs/results.md publish from a study, rendered from the study's own files, never typed.

A published study lives in `docs/studies/<name>/`: its page (study.md, study.csv, seeds.json, selection.json, its
figures) and the small files of its finished runs (`runs/<task>/<family>/<setting>/seed<N>/`: config.yaml,
metrics.json, provenance.json, train.log, logs/metrics.csv, scores/), which are what a study needs to count a run
as finished and to test it. `make results` runs three steps, each also a command of its own:

    python -m matching.results.publish pull  <study>   # the committed runs into outputs/studies/<study>/runs
    python -m matching.study study=<study> launcher=joblib jobs=2 threads=1     # trains what is missing (resumable)
    python -m matching.results.publish push  <study>   # the page and the runs' small files back into docs/studies
    python -m matching.results.publish render           # the README's and docs/results.md's blocks from them

A rendered block sits between `<!-- results:<block> -->` and `<!-- /results:<block> -->` in its file;
tests/test_docs.py renders every block again from the committed files and fails when a file's block differs, so a
number typed by hand, or left stale, cannot land. What a study has not run yet says so in the block ("not run yet").
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path.cwd()  # a clone's root: where `make results` runs
#: The files of a finished run that a page needs (the rest, checkpoints above all, stays in outputs/).
RUN_FILES = ("config.yaml", "metrics.json", "provenance.json", "train.log", "logs/metrics.csv")
PAGE_FILES = ("study.md", "study.csv", "seeds.json", "selection.json", "ranking.png", "curves.png")

#: The centring study's tasks as its tables show them, in order: (task, what its row says).
CENTRING_TASKS = {
    "snli_check": "SNLI check acc (842 dev pairs)",
    "trecqa": "TrecQA clean-dev MAP (65 questions)",
    "wikiqa": "WikiQA dev MAP (122 questions)",
    "snli_check_encoder": "SNLI check acc, frozen encoder",
    "trecqa_encoder": "TrecQA clean-dev MAP, frozen encoder",
    "wikiqa_encoder": "WikiQA dev MAP, frozen encoder",
}
CENTRING_FAMILIES = ("softmax", "softmax_centred", "coda", "coda_centred", "conflict", "conflict_centred",
                     "softmax_conflict", "softmax_conflict_centred")  # fmt: skip
MONITORED = {"acc", "map"}

#: The fine-tuning study's tasks and families as its table shows them, in order.
FINE_TUNING_TASKS = {"wikiqa": "WikiQA dev (122 questions)", "trecqa": "TrecQA clean-dev (65 questions)"}
FINE_TUNING_FAMILIES = ("coda_frozen", "coda_n1", "coda_n2", "coda_n3", "softmax_n2")
#: A baseline trained outside a study, whose folder sits in the study's (benchmarks/cross_encoder.py --out): its
#: comparison with the study's runs and its seeds' small files are published with the page.
OUTSIDE_BASELINE = "cross_encoder"
OUTSIDE_FILES = ("*/comparison.json", "*/seed*/metrics.json", "*/seed*/scores/val.csv")  # <task>/...


def study_rows(folder: Path) -> list[dict[str, str]]:
    """The page's rows that have runs (a planned family with none is left out: "not run yet")."""
    path = folder / "study.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("n") not in ("", "0", None)]


def _interval(row: dict[str, str], prefix: str) -> str:
    low, _, high = row.get(f"{prefix}_ci", "").partition(" ")
    if not row.get(f"{prefix}_diff"):
        return "–"
    diff = float(row[f"{prefix}_diff"])
    if not low or low == "nan":  # too few seeds for an interval
        return f"{diff:+.2f}"
    return f"{diff:+.2f} [{float(low):+.2f}, {float(high):+.2f}]"


def _verdict(row: dict[str, str], prefix: str) -> str:
    verdict = row.get(f"{prefix}_verdict", "")
    p = row.get(f"{prefix}_p_holm") or row.get(f"{prefix}_p")
    if not verdict:
        return "–"
    return f"{verdict}, p = {float(p):.2g}" if p else verdict


def centring_summary(folder: Path) -> str:
    """The table alone (the README's): `centring_table` without each aligner's centred − uncentred list."""
    return centring_table(folder, twins=False)


def centring_table(folder: Path, twins: bool = True) -> str:
    """The controlled comparison's table: each family's dev mean ± std (seeds), then CoDA centred against softmax
    centred, then each centred aligner against itself uncentred (its twin), each with its interval and verdict."""
    rows = [r for r in study_rows(folder) if r["split"] == "dev" and r["metric"] in MONITORED]
    by = {(r["task"], r["family"]): r for r in rows}
    labels = {r["family"]: r["label"] for r in rows}
    families = [f for f in CENTRING_FAMILIES if f in labels] or list(CENTRING_FAMILIES)
    head = "| dev, mean ± std over seeds | " + " | ".join(labels.get(f, f) for f in families)
    head += " | CoDA, centred − softmax, centred [95 % CI] | verdict (Holm) |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    listed = []
    for task, title in CENTRING_TASKS.items():
        cells = []
        for f in families:
            r = by.get((task, f))
            if r is None:
                cells.append("–")
            elif r.get("std") and int(r["n"]) > 1:
                cells.append(f"{float(r['mean']):.2f} ± {float(r['std']):.2f}")
            else:
                cells.append(f"{float(r['mean']):.2f} ({r['n']} seed{'s' if int(r['n']) > 1 else ''})")
        coda = by.get((task, "coda_centred"))
        if all(c == "–" for c in cells):
            lines.append(f"| {title} | " + " | ".join(["not run yet"] + ["–"] * (len(families) + 1)) + " |")
            continue
        vs = [_interval(coda, "softmax_centred"), _verdict(coda, "softmax_centred")] if coda else ["–", "–"]
        lines.append(f"| {title} | " + " | ".join(cells + vs) + " |")
        parts = [f"{labels[f].split(',')[0]} {_interval(by[(task, f)], 'twin')} ({by[(task, f)]['twin_verdict']})"
                 for f in families if (task, f) in by and by[(task, f)].get("twin_diff")]  # fmt: skip
        if parts:
            listed.append(f"- {title}: " + "; ".join(parts) + ".")
    note = (f"{_seed_counts(rows, labels)} Centred − uncentred, each aligner against itself (95 % CI counting seeds "
            "and units, Holm over the page):")  # fmt: skip
    return "\n".join([*lines, "", note, "", *listed]) if twins and listed else "\n".join(lines)


def _seed_counts(rows: list[dict[str, str]], labels: dict[str, str]) -> str:
    """How many seeds each cell has: the count most cells have, then every cell with another (a study that adds seeds
    until decided gives the undecided comparisons' families more)."""
    counts = collections.Counter(r["n"] for r in rows if r["n"])
    if not counts:
        return ""
    usual = counts.most_common(1)[0][0]
    others = []
    for task, title in {r["task"]: CENTRING_TASKS.get(r["task"], r["task"]) for r in rows}.items():
        cells = {r["family"]: r["n"] for r in rows if r["task"] == task and r["n"]}
        off = {family: n for family, n in cells.items() if n != usual}
        if not off:
            continue
        if len(off) == len(cells) and len(set(off.values())) == 1:  # the whole task took more (or fewer)
            others.append(f"{title}: {next(iter(off.values()))} in every cell")
            continue
        said_of = []  # an aligner centred and not, with the same count, said once
        for family, n in off.items():
            base = family.removesuffix("_centred")
            if family != base and off.get(base) == n:
                continue
            both = family == base and off.get(f"{base}_centred") == n
            said_of.append(f"{labels[family]}{' (centred and not)' if both else ''} {n}")
        others.append(f"{title}: {', '.join(said_of)}")
    said = f"Seeds per cell: {usual}" + (f", except {'; '.join(others)}" if others else "")
    return said + " (as the study's rule took them)."


def centring_headline(folder: Path, primary: dict[str, dict[str, str]] | None = None) -> str:
    """One sentence per task of the study's declared primary comparison (conf/study/centring.yaml's `primary`: how
    much of CoDA's gain survives when softmax is centred too), beside the same two aligners uncentred."""
    primary = declared_primary("centring", folder.parents[2]) if primary is None else primary
    found = study_rows(folder)
    rows = {(r["task"], r["family"]): r for r in found if r["split"] == "dev" and r["metric"] in MONITORED}
    labels = {r["family"]: r["label"] for r in found}
    said = []
    for task, title in CENTRING_TASKS.items():
        if task not in primary:
            continue
        family, against = primary[task]["family"], primary[task]["against"]
        coda = rows.get((task, family))
        uncentred = rows.get((task, family.removesuffix("_centred")))
        if coda is None or not coda.get(f"{against}_diff"):
            continue
        text = (f"{title}: {labels.get(family, family)} − {labels.get(against, against)} "
                f"**{_interval(coda, against)}** ({_verdict(coda, against)}; {coda['n']} seeds)")  # fmt: skip
        plain = against.removesuffix("_centred")
        if family.endswith("_centred") and uncentred is not None and uncentred.get(f"{plain}_diff"):
            text += f", against {_interval(uncentred, plain)} for both uncentred"
        said.append(text)
    missing = [t for t in CENTRING_TASKS if t in primary and (t, primary[t]["family"]) not in rows]
    out = "; ".join(said) + "." if said else "The controlled comparison has no finished task yet."
    if missing:
        out += f" Not run yet: {', '.join(missing)} (`make results` runs them)."
    return out


def _minutes(folder: Path, task: str, family: str) -> str:
    """Training minutes a run (the mean over the family's published seeds, from each run's metrics.json)."""
    seconds = [json.loads(m.read_text()).get("train_seconds") for m in (folder / "runs" / task / family).glob(
        "*/seed*/metrics.json")]  # fmt: skip
    seconds = [s for s in seconds if s]
    return f"{statistics.mean(seconds) / 60:.1f}" if seconds else "–"


def fine_tuning_table(folder: Path) -> str:
    """The fine-tuning study's table: per task, each family's dev MAP and MRR (mean ± std over seeds), training
    minutes a run, Δ MAP against the frozen encoder and against the CrossEncoder fine-tuned as long (each with its
    interval and verdict, Holm), then the CrossEncoder's own row (benchmarks/cross_encoder.py's comparison.json)."""
    rows = {(r["task"], r["family"], r["metric"]): r for r in study_rows(folder) if r["split"] == "dev"}
    lines = ["| | seeds | dev MAP | MRR | training minutes a run | Δ MAP vs frozen [95 % CI] (verdict) | Δ MAP vs "
             "the CrossEncoder [95 % CI] (verdict, Holm) |", "|---|---|---|---|---|---|---|"]  # fmt: skip

    def spread(row: dict[str, str] | None) -> str:
        if row is None:
            return "–"
        return (
            f"{float(row['mean']):.2f} ± {float(row['std']):.2f}" if int(row["n"]) > 1 else f"{float(row['mean']):.2f}"
        )

    for task, title in FINE_TUNING_TASKS.items():
        side = folder / OUTSIDE_BASELINE / task / "comparison.json"
        comparison = json.loads(side.read_text()) if side.is_file() else None
        against = {row["name"]: row for row in (comparison or {}).get("compared", [])}
        found = [f for f in FINE_TUNING_FAMILIES if (task, f, "map") in rows]
        if not found:
            lines.append(f"| **{title}**: not run yet | – | – | – | – | – | – |")
            continue
        lines.append(f"| **{title}** | | | | | | |")
        missing = [f for f in FINE_TUNING_FAMILIES if f not in found]
        for family in found:
            r = rows[(task, family, "map")]
            ce = against.get(family)
            versus = (f"{ce['difference']:+.2f} [{ce['low']:+.2f}, {ce['high']:+.2f}] ({ce['verdict']}, p = "
                      f"{ce['p_holm']:.2g})" if ce else "–")  # fmt: skip
            frozen = "–" if family == "coda_frozen" else f"{_interval(r, 'coda_frozen')} ({_verdict(r, 'coda_frozen')})"
            lines.append(f"| {r['label']} | {r['n']} | {spread(r)} | {spread(rows.get((task, family, 'mrr')))} | "
                         f"{_minutes(folder, task, family)} | {frozen} | {versus} |")  # fmt: skip
        for family in missing:
            lines.append(f"| `{family}`: not run yet | – | – | – | – | – | – |")
        if comparison:
            ce = comparison["cross_encoder"]
            lines.append(f"| CrossEncoder MiniLM-L6, fine-tuned as long | {ce['seeds']} | {ce['map']['mean']:.2f} ± "
                         f"{ce['map']['std']:.2f} | {ce['mrr']['mean']:.2f} ± {ce['mrr']['std']:.2f} | "
                         f"{ce['train_minutes']:.1f} | – | – |")  # fmt: skip
    return "\n".join(lines)


def declared_primary(study: str, root: Path | None = None) -> dict[str, dict[str, str]]:
    """The primary comparison conf/study/<study>.yaml declares, per task: {family, against, declared} (the spec's
    `primary`, one mapping for every task or one per task; `matching.studies.spec.read_spec` checks its names, and this
    room may not import that one). Empty when the study declares none."""
    import yaml

    path = (root or ROOT) / "conf" / "study" / f"{study}.yaml"
    spec = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    node = (spec or {}).get("primary") or {}
    tasks = list((spec or {}).get("tasks") or {})
    per_task = dict.fromkeys(tasks, node) if {"family", "against"} <= set(node) else node
    return {task: {"family": one["family"], "against": one["against"], "declared": one.get("declared") or ""}
            for task, one in per_task.items()}  # fmt: skip


def fine_tuning_headline(folder: Path, primary: dict[str, dict[str, str]] | None = None,
                         study: str = "fine_tuning") -> str:  # fmt: skip
    """A sentence for the README per task compared (WikiQA's first): the study's primary comparison, a fine-tuned
    family's dev MAP against the CrossEncoder fine-tuned as long, with the interval and verdict that count both sides'
    seeds, and the family's Δ over the frozen encoder; `primary` as `declared_primary` gives it (the study's spec by
    default). A study that declares none gets the fine-tuned family with the best dev MAP, and the sentence says that
    it was selected on the dev questions it reports. `study`: fine_tuning (2 epochs each side) or
    fine_tuning_selected (both sides' epochs chosen on dev)."""
    primary = declared_primary(study, folder.parents[2]) if primary is None else primary
    rows = {(r["task"], r["family"], r["metric"]): r for r in study_rows(folder) if r["split"] == "dev"}
    labels = {r["family"]: r["label"] for r in study_rows(folder)}
    sentences = []
    for task, split in (("wikiqa", "WikiQA dev"), ("trecqa", "TrecQA clean-dev")):
        side = folder / OUTSIDE_BASELINE / task / "comparison.json"
        comparison = json.loads(side.read_text()) if side.is_file() else {"compared": []}
        tuned = [row for row in comparison["compared"] if row["name"] != "coda_frozen"]
        if not tuned:
            continue
        declared = primary.get(task)
        chosen = [row for row in tuned if declared and row["name"] == declared["family"]]
        best = chosen[0] if chosen else max(tuned, key=lambda row: row["map"]["mean"])
        ce = comparison["cross_encoder"]
        numbers = (f"MAP **{best['map']['mean']:.2f} ± {best['map']['std']:.2f}** against {ce['map']['mean']:.2f} ± "
                   f"{ce['map']['std']:.2f}")  # fmt: skip
        if best.get("too_few_seeds"):  # no interval yet: a verdict about the method needs 3 seeds a side
            verdict = f"{best['difference']:+.2f}, no verdict yet: it needs 3 seeds a side"
        else:
            verdict = (f"{best['difference']:+.2f} [{best['low']:+.2f}, {best['high']:+.2f}], {best['verdict']}, "
                       f"p = {best['p_holm']:.2g}")  # fmt: skip
        detail = (f"{best['seeds']} and {ce['seeds']} seeds; {verdict}; {best['train_minutes']:.0f} against "
                  f"{ce['train_minutes']:.0f} training minutes a run on one thread")  # fmt: skip
        frozen = rows.get((task, best["name"], "map"))
        if frozen and frozen.get("coda_frozen_diff"):
            detail += (f"; over the frozen encoder {_interval(frozen, 'coda_frozen')}, "
                       f"{_verdict(frozen, 'coda_frozen')}")  # fmt: skip
        label = labels.get(best["name"], best["name"])
        if not sentences:
            if chosen and declared["declared"]:
                said = f"the study's primary comparison, declared {declared['declared']}"
            elif chosen:
                said = "the study's primary comparison, declared before its runs"
            else:
                said = "selected: the fine-tuned family with the best dev MAP, reported on the same dev questions"
            how_long = (
                "fine-tuned from the same weights, each side's epochs chosen on dev (up to 8)"
                if study == "fine_tuning_selected"
                else "fine-tuned as long from the same weights"
            )
            sentences.append(f"{label} ({said}): {split} {numbers} for a MiniLM-L6 CrossEncoder {how_long} "
                             f"({detail}).")  # fmt: skip
        else:
            sentences.append(f"{split}: {label}, {numbers} ({detail}).")
    not_yet = f"Fine-tuned against a CrossEncoder: not run yet (`study={study}`)."
    return " ".join(sentences) or not_yet


def fine_tuning_selected(folder: Path) -> str:
    """The README's sentence of the fine-tuning comparison with both sides' epochs chosen on dev."""
    return fine_tuning_headline(folder, study="fine_tuning_selected")


#: Figures measured outside this repository's data files (held-out test splits, benchmark sittings that wrote no
#: file), each with what it is, its source and its date: the blocks below render them from it.
FIGURES = Path("docs") / "figures" / "measured_elsewhere.yaml"


def figures(folder: Path) -> dict:
    import yaml

    return yaml.safe_load((folder / FIGURES.name).read_text(encoding="utf-8"))


def _spread(pair: list[float]) -> str:
    return f"{pair[0]:.2f} ± {pair[1]:.2f}"


def _diff(triple: list[float]) -> str:
    return f"{triple[0]:+.2f} [{triple[1]:+.2f}, {triple[2]:+.2f}]"


#: The reranking frontier's data files (benchmarks/bench_rerank.py --json), by task: both conditions, one sitting.
FRONTIER = "rerank_frontier_{task}.json"


def frontier_rows(folder: Path, task: str) -> tuple[dict, dict[tuple[str, int], dict]] | None:
    """A task's frontier data file (its command, date and questions) and its results by (model, threads); None
    while it has none."""
    path = folder / FRONTIER.format(task=task)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data, {(r["model"], r["threads"]): r for r in data["results"]}


def frontier_table(folder: Path) -> str:
    """docs/performance.md's table of TrecQA's frontier under both conditions: each model's rank pairs/s on texts seen
    once (an index's build counted) and on a corpus indexed in advance, at 1 and 2 threads, the index's build
    seconds and memory, dev MAP and MRR, and each speed against the CrossEncoder's."""
    found = frontier_rows(folder, "trecqa")
    if found is None:
        return (
            "Not measured yet: `python benchmarks/bench_rerank.py --task trecqa ... --json docs/figures/"
            "rerank_frontier_trecqa.json`."
        )
    data, rows = found
    lines = [
        f"`{data['command']}` ({data['date']}, torch {data['torch']}; {data['questions']} questions, "
        f"{data['pairs']:,} pairs):",
        "",
        "| model | threads | rank pairs/s, texts seen once | indexed in advance | × the CrossEncoder (seen once / "
        "indexed) | index build s | index MB per 1,000 | dev MAP | MRR |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, threads), r in rows.items():
        times = "–" if "x_new" not in r else f"{r['x_new']:.1f}x / {r['x_indexed']:.1f}x"
        build = "–" if not r.get("index_seconds") else f"{r['index_seconds']:.1f}"
        memory = "–" if not r.get("index_mb_per_1000") else f"{r['index_mb_per_1000']:.2f}"
        lines.append(f"| {model} | {threads} | {r['rank_new']:,.0f} | {r['rank']:,.0f} | {times} | {build} | {memory} "
                     f"| {r['map']:.2f} | {r['mrr']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def frontier_sentence(folder: Path) -> str:
    """The README's speed claim for reranking, each figure with the model and the condition it belongs to: TrecQA's
    from its data file (both conditions), WikiQA's from the earlier sitting (indexed in advance only)."""
    f = figures(folder)["frontier"]
    wikiqa, trecqa = f["wikiqa"], f["trecqa"]
    found = frontier_rows(folder, "trecqa")
    if found is not None:
        data, rows = found
        ce, ours = rows.get(("cross-encoder", 1)), rows.get(("fine-tuned+index+ort", 1))
        if ce and ours:
            indexed, seen_once = ours["x_indexed"], ours["x_new"]
            build = (f"the index's build, {ours['index_seconds']:.1f} s for {ours['index_candidates']:,} candidates, "
                     f"{ours['index_mb_per_1000']:.2f} MB per 1,000")  # fmt: skip
            return (
                f"TrecQA clean-dev on one thread: CoDA over the encoder with its top layer fine-tuned (seed 1) "
                f"ranks **{indexed:.1f}x** the pairs/s of a MiniLM CrossEncoder kept at its dev-best epoch when "
                f"the candidates are indexed in advance ({build}, not counted), and **{seen_once:.1f}x** on texts "
                f"seen once (the build counted), at {ours['map']:.2f} against {ce['map']:.2f} dev MAP "
                f"({data['date']}). WikiQA dev, an earlier sitting against the CrossEncoder trained 2 epochs: "
                f"{wikiqa['ratio']:.0f}x indexed in advance (building the index, {wikiqa['index_seconds'][0]:.0f}–"
                f"{wikiqa['index_seconds'][1]:.0f} s, not counted); about 1.3x on texts seen once (issue 78)."
            )
    return (f"WikiQA dev at {wikiqa['ratio']:.0f}x the rank speed of a MiniLM CrossEncoder fine-tuned as long, TrecQA "
            f"clean-dev at {trecqa['ratio']:.0f}x, on one thread: CoDA over the encoder with its top layer fine-tuned "
            f"(the headline's model, seed 1), its candidates indexed in advance (building the index, "
            f"{wikiqa['index_seconds'][0]:.0f}–{wikiqa['index_seconds'][1]:.0f} s and "
            f"{trecqa['index_seconds'][0]:.1f}–{trecqa['index_seconds'][1]:.1f} s, is not counted), its encoder "
            f"on ONNX "
            "Runtime.")  # fmt: skip


def held_out_test(folder: Path) -> str:
    """The README's held-out test figures: the headline's comparison on the test splits, the fine-tuned models and
    the CrossEncoder kept at its dev-best epoch on TrecQA's test, and an earlier uncentred one on WikiQA's."""
    f = figures(folder)
    snli, trecqa = f["centring_test"]["rows"]["snli_test"], f["centring_test"]["rows"]["trecqa_test"]
    tuned, ce = f["fine_tuning_test"]["trecqa_test"], f["cross_encoder_epochs"]
    best = next(row for row in ce["rows"] if row[0] == ce["dev_best_epoch"])
    test_map = ce["columns"].index("test_map")
    return (f"CoDA centred − softmax centred, the headline's comparison, on SNLI's test split "
            f"**{_diff(snli['coda_centred_vs_softmax_centred'])}** (9,824 pairs, {snli['verdict']}) and TrecQA's clean "
            f"test **{_diff(trecqa['coda_centred_vs_softmax_centred'])}** MAP (68 questions, {trecqa['verdict']}), 3 "
            f"seeds, static vectors (issue {f['centring_test']['source']['issue']}: "
            f"`{f['centring_test']['source']['command'].split(' paths.')[0]}`); "
            f"on TrecQA's clean test CoDA over the frozen encoder {_spread(tuned['coda_frozen']['test'])} MAP, "
            f"with its "
            f"top layer fine-tuned {_spread(tuned['coda_n1']['test'])}, against {best[test_map]:.2f} for the "
            f"CrossEncoder trained {len(ce['rows'])} epochs and kept at its dev-best ({ce['dev_best_epoch']}; "
            f"one seed, "
            f"issue {ce['source']['issue']}): a tie, where the dev figures above train it 2 epochs; uncentred "
            f"CoDA − softmax on "
            f"WikiQA's test {_diff(f['earlier_test']['wikiqa_coda_vs_softmax'])} MAP (237 questions, issue "
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
    """docs/results.md's held-out test table of the controlled comparison, from the figures file."""
    f = figures(folder)["centring_test"]
    families = ("softmax", "softmax_centred", "coda", "coda_centred", "conflict", "conflict_centred")
    names = ("softmax", "softmax, centred", "CoDA", "CoDA, centred", "conflict", "conflict, centred")
    lines = ["| test, mean ± std over 3 seeds | " + " | ".join(names) + " | CoDA, centred − softmax, centred [95 "
             "% CI] |",
             "|---" * (len(names) + 2) + "|"]  # fmt: skip
    for row in f["rows"].values():
        cells = [_spread(row[family]) for family in families]
        lines.append(f"| {row['label']} | " + " | ".join(cells) +
                     f" | {_diff(row['coda_centred_vs_softmax_centred'])}, {row['verdict']} |")  # fmt: skip
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
            f"{_spread(tuned['coda_frozen']['test'])} (dev {tuned['coda_frozen']['dev']:.2f}), with its top layer "
            f"fine-tuned {_spread(tuned['coda_n1']['test'])} (dev {tuned['coda_n1']['dev']:.2f}), CoDA centred over "
            f"static vectors {_spread(tuned['coda_centred_static']['test'])}: "
            f"{ce['against_coda_test']['coda_frozen']:+.2f} and {ce['against_coda_test']['coda_n1']:+.2f} against the "
            f"CrossEncoder, a tie. Measured separately (issue {ce['source']['issue']}, {ce['date']}); not our "
            f"runs.")  # fmt: skip
    return "\n".join([*lines, "", said])


#: Every rendered block: (file, block name) -> (its study folder, its renderer).
BLOCKS: dict[tuple[str, str], tuple[str, Callable[[Path], str]]] = {
    ("README.md", "centring-headline"): ("docs/studies/centring", centring_headline),
    ("README.md", "centring-table"): ("docs/studies/centring", centring_summary),
    ("docs/results.md", "centring-table"): ("docs/studies/centring", centring_table),
    ("README.md", "fine-tuning-headline"): ("docs/studies/fine_tuning", fine_tuning_headline),
    ("README.md", "fine-tuning-selected-headline"): ("docs/studies/fine_tuning_selected", fine_tuning_selected),
    ("docs/ranking.md", "fine-tuning-table"): ("docs/studies/fine_tuning", fine_tuning_table),
    ("README.md", "frontier-speed"): ("docs/figures", frontier_sentence),
    ("docs/performance.md", "frontier-conditions"): ("docs/figures", frontier_table),
    ("README.md", "held-out-test"): ("docs/figures", held_out_test),
    ("README.md", "speed"): ("docs/figures", gpu_and_cpu_speed),
    ("docs/results.md", "centring-test"): ("docs/figures", centring_test_table),
    ("docs/results.md", "fine-tuning-test"): ("docs/figures", fine_tuning_test),
}


def page_data(folder: Path) -> list[Path]:
    """The files a block's rendered numbers come from: a study page's table and an outside baseline's comparison, or
    the file of figures measured elsewhere and the reranking frontier's data files."""
    return [path for path in (folder / "study.csv", *sorted(folder.glob(f"{OUTSIDE_BASELINE}/*/comparison.json")),
                              folder / FIGURES.name, *sorted(folder.glob(FRONTIER.format(task="*"))))
            if path.is_file()]  # fmt: skip


def block_pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results:{re.escape(name)} -->\n)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S)


def rendered(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """Every block's content as the committed study files give it."""
    return {key: render(root / folder) for key, (folder, render) in BLOCKS.items()}


def render_files(root: Path = ROOT) -> list[Path]:
    """Rewrite every block in its file; returns the files changed. A file without the block's markers is an
    error: the markers say where a block goes."""
    changed = []
    for (name, block), content in rendered(root).items():
        path = root / name
        text = path.read_text(encoding="utf-8")
        pattern = block_pattern(block)
        if not pattern.search(text):
            raise SystemExit(f"{name} has no block {block}: add <!-- results:{block} --> and "
                             f"<!-- /results:{block} --> where it goes")  # fmt: skip
        new = pattern.sub(lambda m, content=content: m.group(1) + content + "\n" + m.group(3), text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


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
                (destination / name).write_text(text, encoding="utf-8")
        if (run / "scores").is_dir():
            shutil.copytree(run / "scores", destination / "scores", dirs_exist_ok=True)
        copied += 1
    return copied


def pull(study: str, root: Path = ROOT) -> int:
    """The committed runs' small files into outputs/studies/<study>/runs, where a run is not there yet: the study
    then counts them finished and trains only the rest. The page's heat-maps come too (where none is there), as
    the page written again from runs without weights keeps them."""
    target = root / "outputs" / "studies" / study
    target.mkdir(parents=True, exist_ok=True)
    for figure in (root / "docs" / "studies" / study).glob("alignments_*.png"):
        if not (target / figure.name).exists():
            shutil.copy2(figure, target / figure.name)
    return _copy_runs(root / "docs" / "studies" / study / "runs", root / "outputs" / "studies" / study / "runs",
                      RUN_FILES, only_missing=True)  # fmt: skip


def push(study: str, root: Path = ROOT, source: Path | None = None) -> int:
    """The study's page, its finished runs' small files and an outside baseline's (its comparison, its seeds' metrics
    and scores) from outputs/studies/<study> (or `source`) into docs/studies/<study>, naming no folder of the
    machine they ran on (`machine_paths`)."""
    source = source or root / "outputs" / "studies" / study
    target = root / "docs" / "studies" / study
    target.mkdir(parents=True, exist_ok=True)
    for path in [*(source / name for name in PAGE_FILES), *source.glob("alignments_*.png")]:
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
    sub.add_parser("render", help="the README's and docs/results.md's blocks from docs/studies")
    args = parser.parse_args(argv)
    if not (ROOT / "docs" / "studies").is_dir() or not (ROOT / "README.md").is_file():
        print(f"error: run this from the root of a clone of matching (with README.md and docs/studies/); {ROOT} is "
              "not one", file=sys.stderr)  # fmt: skip
        return 2
    if args.verb == "pull":
        print(f"{pull(args.study)} runs copied into outputs/studies/{args.study}/runs")
    elif args.verb == "push":
        print(f"{push(args.study, source=args.source)} runs' small files in docs/studies/{args.study}/runs")
    else:
        changed = render_files()
        print("rendered: " + (", ".join(str(p.relative_to(ROOT)) for p in changed) or "nothing changed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
