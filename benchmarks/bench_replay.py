"""The whole training step replayed (`capture=true`, matching.training.replay) against the same step run eagerly,
in a bare loop with no Lightning around it: what the step itself costs on the device, and so how much of an epoch
through the command is the loop around it.

    python benchmarks/bench_replay.py [--trainer gpu] [--aligners softmax,coda,conflict,softmax_conflict]
                                      [--pairs 32000] [--rounds 3] [--compile] [overrides ...]

The real model size (hidden 200, frozen random 300-d vectors, batch 64, SNLI-shaped corpus of `--pairs` pairs, widths
rounded to 8) and bf16-mixed autocast on a GPU (fp32 on a CPU). For each aligner, one process: the model, its fused
Adam (capturable) and the training split on the device; an epoch's batches (IndexCollator: indices and widths) are
made once; then the epoch is trained `--rounds` times each way, alternating, through StepReplay: eagerly
(`capturable=False`) and replayed (the first round captures one graph per shape, after each shape's warm-up steps;
later rounds only replay). Prints the median ms per step and pairs/s of each, their ratio, the number of shapes and
the SNLI epoch (550,152 pairs) each rate implies; on a GPU also the most used shape's graph replayed back to back
with nothing between (the device's own time for a step: the floor under any loop). `--compile` compiles the model
(torch.compile, mode default) first: the capture then records its fused kernels.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from bench_epoch import fp32_unless_asked  # noqa: E402
from bench_step import tiny_setup  # noqa: E402

SNLI_PAIRS = 550_152
REAL = ["model.hidden=200", "embeddings.dim=300", "data.pad_to=8", "capture=true"]


def measure(work: Path, aligner: str, trainer: str, pairs: int, rounds: int, compile_model: bool, extra: list[str]):
    from hydra.utils import instantiate

    from matching.model.assembly import build_model
    from matching.training.batching import IndexCollator
    from matching.training.build import build_loss
    from matching.training.replay import StepReplay, make_capturable

    cfg, dm, vectors = tiny_setup(work, aligner, trainer, pairs, [*REAL, *fp32_unless_asked(extra), *extra])
    device = torch.device("cuda" if trainer == "gpu" else "cpu")
    split = dm.splits["train"]
    sampler = dm.loader("train", train=True).batch_sampler
    collate = IndexCollator(split, device if device.type == "cuda" else None, dm.settings.pad_to)
    batches = [collate(indices) for indices in sampler]
    shapes = {b["widths"] for b in batches}
    full = sum(len(b["index"]) == dm.settings.batch_size for b in batches)
    autocast = torch.autocast("cuda", torch.bfloat16) if "bf16" in str(cfg.trainer.precision) else nullcontext()

    def runner(capturable: bool):
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, vectors, len(dm.labels), source=dm.vectors).to(device)
        if compile_model:
            model.compile()
        loss = build_loss(cfg, dm, work).to(device)
        model.train()
        optimizer = instantiate(cfg.optim)([p for p in model.parameters() if p.requires_grad])
        if device.type == "cuda":
            make_capturable(optimizer)
        replay = StepReplay(split, dm.settings.batch_size, capture_graphs=capturable)
        replay.start(model, loss, optimizer, str(cfg.get("dtype", "fp32")), device)

        def epoch() -> float:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            with autocast:
                for b in batches:
                    step_loss, _ = replay.step(b["index"], b["widths"])
            float(step_loss)  # waits for the last step
            return (time.perf_counter() - start) / len(batches) * 1000

        return epoch, replay, model

    # The first epoch of each from the same seed (built, then run, in turn): the weights they reach are compared
    eager, _, eager_system = runner(capturable=False)
    first = {"eager": eager()}
    weights = [p.detach().float().clone() for p in eager_system.parameters()]
    replayed, replay, replayed_system = runner(capturable=True)
    first["replayed"] = replayed()  # captures each shape's graph after its warm-up steps
    largest = max(p.abs().max().item() for p in weights)
    gap = max(
        (p.detach().float() - w).abs().max().item() for p, w in zip(replayed_system.parameters(), weights, strict=True)
    )
    agreement = (
        f"after one epoch from the same seed, largest |weight difference| {gap:.3g} (largest |weight| {largest:.3g})"
    )
    times = {"eager": [], "replayed": []}
    for _ in range(rounds):
        times["eager"].append(eager())
        times["replayed"].append(replayed())
    return first, times, len(batches), full, len(shapes), replay.steps_summary(), agreement, graph_alone_ms(replay)


def graph_alone_ms(replay, launches: int = 200) -> float | None:
    """Milliseconds per launch of the most used shape's graph replayed back to back, nothing else between: the
    device's own time for a step (the host's ~10 µs per launch hides behind it), the floor under any loop."""
    if not replay.graphs:
        return None
    graph = max(replay.graphs.items(), key=lambda item: replay.seen[item[0]])[1].graph
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(launches):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / launches * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--aligners", default="softmax,coda,conflict,softmax_conflict")
    parser.add_argument("--pairs", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--workdir", default=None)
    args, extra = parser.parse_known_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-replay-"))
    if args.trainer == "gpu":
        print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    print(f"{args.pairs} SNLI-shaped pairs, batch 64, hidden 200, 300-d frozen vectors, widths rounded to 8; "
          f"{'compiled, ' if args.compile else ''}medians of {args.rounds} epochs each way, alternating")  # fmt: skip
    print(f"{'aligner':<17} {'steps':>6} {'shapes':>6} {'eager ms':>9} {'replay ms':>10} {'ratio':>6} "
          f"{'eager SNLI s':>12} {'replay SNLI s':>13} {'1st eager/replay ms':>20}")  # fmt: skip
    for aligner in args.aligners.split(","):
        first, times, steps, full, shapes, described, agreement, alone = measure(
            work, aligner, args.trainer, args.pairs, args.rounds, args.compile, extra
        )
        e, r = statistics.median(times["eager"]), statistics.median(times["replayed"])
        per_pair = SNLI_PAIRS / (args.pairs / steps)  # steps of an SNLI epoch at this corpus's batches per pair
        print(f"{aligner:<17} {steps:>6} {shapes:>6} {e:>9.3f} {r:>10.3f} {e / r:>5.1f}x {e * per_pair / 1000:>12.1f} "
              f"{r * per_pair / 1000:>13.1f} {first['eager']:>9.2f}/{first['replayed']:.2f}")  # fmt: skip
        print(
            f"  {aligner}: {full} of {steps} batches full; replayed runner: {described}; eager and replayed {agreement}"
        )
        if alone is not None:
            print(f"  {aligner}: the most used shape's graph alone, replayed back to back: {alone:.3f} ms a step "
                  f"(SNLI epoch {alone * per_pair / 1000:.1f} s at that rate)")  # fmt: skip
        print(f"RESULT aligner={aligner} eager_ms={e:.4f} replay_ms={r:.4f} graph_alone_ms={alone} steps={steps} "
              f"shapes={shapes}")  # fmt: skip


if __name__ == "__main__":
    main()
