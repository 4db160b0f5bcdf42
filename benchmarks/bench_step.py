"""The fixed cost of a training step: the real `matching.train` command against the same model in a plain loop.

    python benchmarks/bench_step.py [--trainer cpu|gpu] [--aligners softmax,coda] [--pairs 32000] [--code DIR]
                                    [--repeats N] [--real-pairs 64000] [--dtypes fp32,bf16] [--real-repeats N]
                                    [--skip-real | --skip-tiny] [--decompose ROUNDS] [overrides ...]

1. Fixed cost. A tiny model (hidden 8, 8-d frozen random vectors) on an SNLI-shaped corpus at batch 64, so that
   the arithmetic is negligible and what is left is the work done around it every step:
   - command: one epoch through `python -m matching.train` (Lightning, the data module, logging, metrics,
     checkpoint callbacks; EpochTimer, validation excluded), milliseconds per step;
   - plain loop: the same model (built from the same composed config), the same batches (collated beforehand,
     already on the device) and the same optimiser in a bare `for` loop: zero_grad, forward, cross-entropy,
     backward, step;
   - their ratio: the framework's overhead per step.
2. Real size (hidden 200, 300-d vectors): training pairs/s of one epoch through the command, SNLI and WikiQA shapes,
   in each `--dtypes` (default fp32 and bf16, matching.model.precision) side by side, the dtypes alternating for
   `--real-repeats` rounds; with two dtypes, their paired ratio. First, the processor, its ISA flags and the
   matrix-product ceiling of each dtype at the model's shapes (`matmul_ceiling`): what the step is measured against.

`--decompose ROUNDS` prints instead where the tiny model's step goes, in one process: the plain loop, then Lightning's
loop around it, our training system, our data module's batches, and the command's callbacks, one stage added at a
time (STAGES), the stages alternating for ROUNDS rounds, each with its median ms per step and its ratio to the plain
loop.

`--code DIR` times the command of another checkout as well (e.g. `git worktree add /tmp/before HEAD~3`), so a
before/after is measured in one sitting; `--repeats N` runs each command N times, the checkouts alternating, and
prints the medians and the paired ratio (one run of the command on a shared machine varies by up to 30 %). Run
single-threaded on a CPU (OMP_NUM_THREADS=1) for stable figures. The last lines (HEADLINE) are what `make bench` quotes.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from bench_epoch import ROOT, corpus, steps_per_epoch, train_epoch  # noqa: E402

TINY = ["model.hidden=8", "embeddings.dim=8"]


def tiny_setup(work: Path, aligner: str, trainer: str, pairs: int, extra: list[str]):
    """The composed config of the tiny-model command, its prepared data module and word vectors."""
    from matching.cli import compose_config
    from matching.training.build import build_datamodule

    train, dev = corpus(work, "snli", pairs)
    cfg = compose_config(
        "train",
        [f"aligner={aligner}", f"trainer={trainer}", "embeddings=random", "embeddings.freeze=true",
         f"paths.data_dir={work / 'data'}", f"paths.cache_dir={work / 'cache'}", f"task.splits.train.path={train}",
         f"task.splits.dev.path={dev}", "task.splits.test=null", "task.test_splits=[]", "~logger",
         "trainer.enable_progress_bar=false", f"paths.output_dir={work / 'runs' / 'decompose'}", *TINY, *extra],
    )  # fmt: skip
    torch.manual_seed(cfg.seed)
    dm = build_datamodule(cfg)
    dm.setup("fit")
    return cfg, dm, dm.vectors.matrix(dm.vocab, cfg.seed, cfg.paths.cache_dir)


def plain_loop_ms(work: Path, aligner: str, trainer: str, pairs: int, extra: list[str], repeats: int = 3) -> float:
    """Median milliseconds per step of the model alone in a bare training loop (one epoch's batches)."""
    cfg, dm, vectors = tiny_setup(work, aligner, trainer, pairs, extra)
    epoch = plain_epoch(cfg, dm, vectors)
    epoch()  # warm-up
    return statistics.median(epoch() for _ in range(repeats))


def precollated(cfg, dm) -> list[dict[str, torch.Tensor]]:
    """One epoch of the data module's training batches, collated beforehand and moved to the training device."""
    device = torch.device("cuda" if cfg.trainer.accelerator == "gpu" else "cpu")
    return [{k: v.to(device) for k, v in b.items()} for b in dm.train_dataloader()]


def plain_epoch(cfg, dm, vectors, batches: list[dict[str, torch.Tensor]] | None = None) -> Callable[[], float]:
    """A function that trains the model one epoch in a bare loop (zero_grad, forward, cross-entropy, backward, step)
    over `batches` (default: `precollated(cfg, dm)`), and returns ms per step."""
    from hydra.utils import instantiate

    from matching.model.assembly import build_model

    batches = precollated(cfg, dm) if batches is None else batches
    device = batches[0]["a"].device
    model = build_model(cfg, vectors, len(dm.labels)).to(device)
    optimizer = instantiate(cfg.optim)([p for p in model.parameters() if p.requires_grad])
    autocast = torch.autocast("cuda", torch.bfloat16) if "bf16" in str(cfg.trainer.precision) else nullcontext()
    model.train()

    def epoch() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for batch in batches:
            optimizer.zero_grad()
            with autocast:
                logits = model(batch["a"], batch["b"]).logits
                loss = F.cross_entropy(logits, batch["label"])
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / len(batches) * 1000

    return epoch


STAGES = {
    "plain loop": "the model, its optimiser and precollated batches in a bare loop",
    "Lightning": "+ Lightning's loop (a bare LightningModule, no callbacks, over the same batches)",
    "MatchingSystem": "+ the training system (loss, accuracy count, logging) instead of the bare module",
    "data module": "+ batches gathered each step by the data module's loader",
    "command": "+ the command's callbacks (checkpoints, early stopping, timer, guards): all of matching.train",
}


def decompose(work: Path, aligner: str, trainer: str, pairs: int, extra: list[str], rounds: int) -> None:
    """Where the fixed cost of a step goes: one epoch per stage of STAGES, in one process, the stages alternating
    for `rounds` rounds; prints each stage's median ms per step and what it adds over the stage before."""
    import lightning.pytorch as pl
    from hydra.utils import instantiate

    from matching.model.assembly import build_model
    from matching.training.build import build_systems
    from matching.training.callbacks import EpochTimer, run_callbacks

    cfg, dm, vectors = tiny_setup(work, aligner, trainer, pairs, extra)
    batches = precollated(cfg, dm)
    plain = plain_epoch(cfg, dm, vectors, batches)

    class Batches:  # the precollated batches as a loader
        def __len__(self) -> int:
            return len(batches)

        def __iter__(self):
            return iter(batches)

    class BareModule(pl.LightningModule):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.model(batch["a"], batch["b"]).logits, batch["label"])

        def configure_optimizers(self):
            return instantiate(cfg.optim)([p for p in self.parameters() if p.requires_grad])

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # "GPU available", "fit stopped", per fit
    warnings.filterwarnings("ignore", message=".*no `val_dataloader`")  # the stages over the precollated batches

    def fit(stage: str) -> float:
        shutil.rmtree(cfg.paths.output_dir, ignore_errors=True)  # the command stage's checkpoints of the round before
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, vectors, len(dm.labels))
        if stage == "command":
            callbacks, _, timer = run_callbacks(cfg)
        else:
            timer = EpochTimer()
            callbacks = [timer]
        options = {"enable_checkpointing": stage == "command", "enable_model_summary": False, "logger": False}
        trainer_ = instantiate(cfg.trainer, callbacks=callbacks, max_epochs=1, limit_val_batches=2,
                               default_root_dir=cfg.paths.output_dir, **options)  # fmt: skip
        if stage == "Lightning":
            system = BareModule(model)
        else:
            system, _ = build_systems(cfg, model, dm, Path(cfg.paths.output_dir))
        if stage in ("Lightning", "MatchingSystem"):
            trainer_.fit(system, train_dataloaders=Batches())
        else:
            trainer_.fit(system, datamodule=dm)
        return timer.seconds[0] / trainer_.num_training_batches * 1000

    plain()  # warm-up
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for _ in range(rounds):
        for stage in STAGES:
            times[stage].append(plain() if stage == "plain loop" else fit(stage))
    print(f"  {aligner}: where a step's time goes (median of {rounds} rounds, ms per step; ratio to the plain loop, "
          "paired by round)")  # fmt: skip
    before = None
    for stage, description in STAGES.items():
        ms = statistics.median(times[stage])
        ratio = statistics.median(t / p for t, p in zip(times[stage], times["plain loop"], strict=True))
        added = "" if before is None else f" ({ms - before:+.2f})"
        print(f"    {stage:<15} {ms:6.2f} ms{added:<9} {ratio:5.2f}x  {description}", flush=True)
        before = ms


#: (M, K, N) of the matrix products of a real-size step (hidden 200, 300-d vectors, batch 64): M the batch's
#: tokens (SNLI ~22 a pair, WikiQA ~39), K x N the projection (300 x 200), G's first layer (400 x 200) and the
#: 200 x 200 layers.
MATMUL_SHAPES = [(1408, 300, 200), (1408, 400, 200), (1408, 200, 200), (2496, 300, 200), (2496, 400, 200)]
#: The processor flags that say which arithmetic it has (of /proc/cpuinfo's).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def processor_line() -> str:
    """The processor, its arithmetic flags, the kernels PyTorch picked and the torch threads."""
    from torch.backends.cpu import get_cpu_capability

    from matching.model.precision import bf16_instructions, cpu_flags
    from matching.training.run import cpu_model

    flags = [f for f in ISA_FLAGS if f in cpu_flags()] or ["(flags not readable here)"]
    bf16 = bf16_instructions() or "none: bf16 is emulated, expect it slower than fp32"
    threads = torch.get_num_threads()
    return (f"processor {cpu_model() or 'unknown'}; flags {' '.join(flags)}; bf16 arithmetic: {bf16}; "
            f"torch {torch.__version__}, CPU kernels {get_cpu_capability()}, {threads} thread(s)")  # fmt: skip


def matmul_ceiling(dtypes: list[str], rounds: int = 5) -> dict[str, float]:
    """GFLOP/s of `a @ b` at MATMUL_SHAPES in each dtype (torch's threads; the dtypes alternate for `rounds` rounds,
    median); prints one line per shape and returns each dtype's median over the shapes."""
    from matching.model.precision import DTYPES

    print(f"matrix-product ceiling, GFLOP/s of a @ b at the model's shapes ({rounds} alternating rounds, median):")
    best: dict[str, list[float]] = {d: [] for d in dtypes}
    for m, k, n in MATMUL_SHAPES:
        pairs = {d: (torch.randn(m, k).to(DTYPES[d]), torch.randn(k, n).to(DTYPES[d])) for d in dtypes}
        times: dict[str, list[float]] = {d: [] for d in dtypes}
        reps = max(1, int(2e9 / (2 * m * k * n)))  # ~2 GFLOP a round
        for _ in range(rounds + 1):  # the first round warms up
            for d, (a, b) in pairs.items():
                start = time.perf_counter()
                for _ in range(reps):
                    a @ b
                times[d].append((time.perf_counter() - start) / reps)
        gflops = {d: 2 * m * k * n / statistics.median(t[1:]) / 1e9 for d, t in times.items()}
        row = ", ".join(f"{d} {g:6.1f}" for d, g in gflops.items())
        if len(dtypes) == 2:
            row += f" ({gflops[dtypes[1]] / gflops[dtypes[0]]:.2f}x)"
        print(f"  ({m}x{k})·({k}x{n}): {row}", flush=True)
        for d, g in gflops.items():
            best[d].append(g)
    return {d: statistics.median(g) for d, g in best.items()}


def command_ms(work: Path, aligner: str, trainer: str, pairs: int, extra: list[str], code: Path, tag: str) -> float:
    metrics = train_epoch(work, "snli", pairs, aligner, trainer, [*TINY, *extra], code, name=f"tiny-{tag}-{aligner}")
    if metrics is None:
        return float("nan")
    return metrics["seconds_per_epoch_median"] / steps_per_epoch(pairs) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer", default="cpu")
    parser.add_argument("--aligners", default="softmax,coda")
    parser.add_argument("--pairs", type=int, default=32_000, help="training pairs of the tiny-model epoch")
    parser.add_argument("--real-pairs", type=int, default=64_000, help="training pairs of the real-size epochs")
    parser.add_argument("--dtypes", default="fp32,bf16", help="dtype= values of the real-size epochs, side by side")
    parser.add_argument("--real-repeats", type=int, default=1, help="real-size epochs per dtype (alternating)")
    parser.add_argument("--skip-real", action="store_true", help="only the fixed cost (part 1)")
    parser.add_argument("--skip-tiny", action="store_true", help="only the real-size epochs (part 2)")
    parser.add_argument("--code", type=Path, default=None, help="another checkout whose command is timed as well")
    parser.add_argument(
        "--repeats", type=int, default=1, help="tiny-model command runs per checkout (alternating); medians are shown"
    )
    parser.add_argument(
        "--decompose", type=int, default=0, metavar="ROUNDS",
        help="instead: where a tiny-model step's time goes, stage by stage, in one process (ROUNDS rounds)",
    )  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more overrides for every run")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-step-"))
    if args.decompose:
        print(f"fixed cost per step by stage, tiny model, batch 64, {args.pairs:,} pairs, trainer={args.trainer}")
        for aligner in args.aligners.split(","):
            decompose(work, aligner, args.trainer, args.pairs, args.extra, args.decompose)
        return
    codes = {"this": ROOT} | ({"other": args.code.resolve()} if args.code else {})
    headline = []
    if not args.skip_tiny:
        print(f"1. fixed cost per step, tiny model, batch 64, {args.pairs:,} pairs, trainer={args.trainer}", flush=True)
    for aligner in [] if args.skip_tiny else args.aligners.split(","):
        loop = plain_loop_ms(work, aligner, args.trainer, args.pairs, args.extra)
        times: dict[str, list[float]] = {tag: [] for tag in codes}
        for _ in range(args.repeats):  # the checkouts alternate, so that a slow moment of the machine hits both
            for tag, code in codes.items():
                times[tag].append(command_ms(work, aligner, args.trainer, args.pairs, args.extra, code, tag))
        row = [f"{aligner:<10} plain loop {loop:6.2f} ms"]
        for tag, runs in times.items():
            ms = statistics.median(runs)
            spread = f" [{min(runs):.2f}-{max(runs):.2f}]" if len(runs) > 1 else ""
            row.append(f"command[{tag}] {ms:6.2f} ms{spread} ({ms / loop:.2f}x loop)")
            if tag == "this":
                headline.append(f"{aligner} {ms:.2f} ms/step = {ms / loop:.2f}x plain loop")
        if "other" in times and args.repeats > 1:  # paired: run k of this checkout against run k of the other
            ratios = [t / o for t, o in zip(times["this"], times["other"], strict=True)]
            spread = f"[{min(ratios):.3f}-{max(ratios):.3f}]"
            row.append(f"this/other per pair: median {statistics.median(ratios):.3f} {spread}")
        print("  " + ", ".join(row), flush=True)
    if not args.skip_real:
        dtypes = args.dtypes.split(",")
        print(f"2. real size (hidden 200, 300-d), batch 64, {args.real_pairs:,} pairs, trainer={args.trainer}, "
              f"dtypes {', '.join(dtypes)} ({args.real_repeats} alternating round(s), median)")  # fmt: skip
        print("  " + processor_line())
        if args.trainer == "cpu":
            ceiling = matmul_ceiling(dtypes)
            headline.append("matmul " + ", ".join(f"{d} {g:.0f} GFLOP/s" for d, g in ceiling.items()))
        for shape in ("snli", "wikiqa"):
            for aligner in args.aligners.split(","):
                row = [f"{shape:<7}{aligner:<10}"]
                for tag, code in codes.items():
                    rates: dict[str, list[float]] = {d: [] for d in dtypes}
                    for _ in range(args.real_repeats):
                        for d in dtypes:
                            metrics = train_epoch(work, shape, args.real_pairs, aligner, args.trainer,
                                                  [f"dtype={d}", *args.extra], code,
                                                  name=f"real-{tag}-{shape}-{aligner}-{d}")  # fmt: skip
                            seconds = metrics["seconds_per_epoch_median"] if metrics else float("nan")
                            rates[d].append(args.real_pairs / seconds)
                    for d, r in rates.items():
                        row.append(f"command[{tag}] {d} {statistics.median(r):8,.0f} pairs/s")
                    line = ", ".join(f"{d} {statistics.median(r):,.0f}" for d, r in rates.items())
                    if len(dtypes) == 2:  # round k of one dtype against round k of the other
                        ratios = [b / a for a, b in zip(*rates.values(), strict=True)]
                        spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
                        row.append(f"{dtypes[1]}/{dtypes[0]} {statistics.median(ratios):.2f}x{spread}")
                        line += f" ({statistics.median(ratios):.2f}x)"
                    if tag == "this":
                        headline.append(f"{shape} {aligner} {line} pairs/s")
                print("  " + ", ".join(row), flush=True)
    print(f"HEADLINE bench_step trainer={args.trainer}: " + "; ".join(headline))


if __name__ == "__main__":
    main()
