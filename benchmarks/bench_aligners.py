"""Forward and backward time of one aligner's alignment step, alone, at the shapes of a real batch.

    python benchmarks/bench_aligners.py [--code DIR] [--rounds 5] [--steps 10] [--shapes snli,wikiqa]
                                        [--aligners 'score=dot,feature_wise=true;...']

Each aligner is `matching.model.attention.AttentionAligner` (or `softmax`/`coda` from matching.model.aligners) built
with the options given (`key=value` pairs separated by commas, aligners by semicolons), fed random (B, La, D) and (B,
Lb, D) batches whose last quarter of b is padding, and timed over `--steps` forward + backward passes; the median over
`--rounds` rounds is printed in milliseconds per step. Shapes: SNLI (batch 64, 14 × 8 tokens) and WikiQA (batch 64, 12 ×
40), hidden 200, one thread.

`--code DIR` times another checkout too (e.g. `git worktree add /tmp/before HEAD~1`), the two alternating round by
round in separate processes, and prints the ratio of the medians: a before/after in one sitting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {"snli": (64, 14, 8), "wikiqa": (64, 12, 40)}
DEFAULT_ALIGNERS = "softmax;score=dot;heads=4;feature_wise=true;score=additive;distribution=sparsemax"


def parse(spec: str) -> tuple[str, dict]:
    """'heads=4,score=general' -> ('attention', {...}); 'softmax' or 'coda' -> that aligner with its defaults."""
    if spec in ("softmax", "coda"):
        return spec, {}
    options = {}
    for item in spec.split(","):
        key, value = item.split("=")
        options[key] = {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
    return "attention", options


def time_one(spec: str, shape: str, steps: int, dim: int = 200) -> float:
    """Milliseconds per forward + backward step of one aligner at one shape (in this process's checkout)."""
    import torch

    from matching.model.aligners import CoDAAligner, SoftmaxAligner
    from matching.model.attention import AttentionAligner

    torch.set_num_threads(1)
    torch.manual_seed(0)
    kind, options = parse(spec)
    build = {"softmax": SoftmaxAligner, "coda": CoDAAligner, "attention": AttentionAligner}[kind]
    aligner = build(dim, **options)
    batch, la, lb = SHAPES[shape]
    a = torch.randn(batch, la, dim, requires_grad=True)
    b = torch.randn(batch, lb, dim, requires_grad=True)
    mask_a = torch.ones(batch, la, dtype=torch.bool)
    mask_b = torch.ones(batch, lb, dtype=torch.bool)
    mask_b[:, lb - lb // 4 :] = False

    def step():
        out = aligner(a, b, mask_a, mask_b)
        (out.a_aligned.sum() + out.b_aligned.sum()).backward()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1000


def measure(code: Path, specs: list[str], shapes: list[str], steps: int) -> dict[str, float]:
    """One round in a fresh process of the checkout at `code`: {'<shape> <aligner>': ms}."""
    program = (
        f"import sys, json; sys.path[:0] = [{str(code)!r}, {str(Path(__file__).parent)!r}]; import bench_aligners as b;"
        f" print(json.dumps({{f'{{s}} {{a}}': b.time_one(a, s, {steps}) for s in {shapes!r} for a in {specs!r}}}))"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=None, help="another checkout, timed alternately")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--shapes", default="snli,wikiqa")
    parser.add_argument("--aligners", default=DEFAULT_ALIGNERS)
    args = parser.parse_args()
    specs, shapes = args.aligners.split(";"), args.shapes.split(",")
    checkouts = {"this": Path(__file__).resolve().parents[1]}
    if args.code:
        checkouts["other"] = args.code.resolve()
    times: dict[str, dict[str, list[float]]] = {tag: {} for tag in checkouts}
    for _ in range(args.rounds):
        for tag, code in checkouts.items():
            for key, ms in measure(code, specs, shapes, args.steps).items():
                times[tag].setdefault(key, []).append(ms)
    print(f"ms per forward + backward step, median of {args.rounds} rounds of {args.steps} steps, one thread")
    header = f"{'shape':8} {'aligner':34} {'this':>9}" + (f" {'other':>9} {'other/this':>10}" if args.code else "")
    print(header)
    for key in times["this"]:
        shape, spec = key.split(" ", 1)
        this = statistics.median(times["this"][key])
        line = f"{shape:8} {spec:34} {this:9.1f}"
        if args.code:
            other = statistics.median(times["other"][key])
            line += f" {other:9.1f} {other / this:10.2f}"
        print(line)


if __name__ == "__main__":
    main()
