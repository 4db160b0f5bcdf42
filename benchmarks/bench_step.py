"""The fixed cost of a training step: the real `matching.train` command against the same model in a plain loop.

    python benchmarks/bench_step.py [--trainer cpu|gpu] [--aligners softmax,coda] [--pairs 32000] [--code DIR]
                                    [--repeats N] [--real-pairs 64000] [--skip-real | --skip-tiny]
                                    [--decompose ROUNDS] [overrides ...]

1. Fixed cost. A tiny model (hidden 8, 8-d frozen random vectors) on an SNLI-shaped corpus at batch 64, so that
   the arithmetic is negligible and what is left is the work done around it every step:
   - command: one epoch through `python -m matching.train` (Lightning, the data module, logging, metrics,
     checkpoint callbacks; EpochTimer, validation excluded), milliseconds per step;
   - plain loop: the same model (built from the same composed config), the same batches (collated beforehand,
     already on the device) and the same optimiser in a bare `for` loop: zero_grad, forward, cross-entropy,
     backward, step;
   - their ratio: the framework's overhead per step.
2. Real size (hidden 200, 300-d vectors): training pairs/s of one epoch through the command, SNLI and WikiQA shapes.

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
    from matching.runs import build_datamodule

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

    from matching.runs import build_model

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

    from matching.runs import build_model, build_system
    from matching.train import EpochTimer, run_callbacks

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
        system = BareModule(model) if stage == "Lightning" else build_system(cfg, model, dm)
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
        print(f"2. real size (hidden 200, 300-d), batch 64, {args.real_pairs:,} pairs, trainer={args.trainer}")
        for shape in ("snli", "wikiqa"):
            for aligner in args.aligners.split(","):
                row = [f"{shape:<7}{aligner:<10}"]
                for tag, code in codes.items():
                    metrics = train_epoch(work, shape, args.real_pairs, aligner, args.trainer, args.extra, code,
                                          name=f"real-{tag}-{shape}-{aligner}")  # fmt: skip
                    seconds = metrics["seconds_per_epoch_median"] if metrics else float("nan")
                    row.append(f"command[{tag}] {seconds:6.1f} s/epoch {args.real_pairs / seconds:8,.0f} pairs/s")
                    if tag == "this":
                        headline.append(f"{shape} {aligner} {args.real_pairs / seconds:,.0f} pairs/s")
                print("  " + ", ".join(row), flush=True)
    print(f"HEADLINE bench_step trainer={args.trainer}: " + "; ".join(headline))


if __name__ == "__main__":
    main()
