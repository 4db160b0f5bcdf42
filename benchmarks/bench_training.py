"""Training and inference throughput of the framework against a naive plain-PyTorch baseline.

    python benchmarks/bench_training.py [--steps 30] [--repeats 3] [--batches 32,64,256] [--quick]

For each aligner, shape (SNLI-like: premise ≈ 14, hypothesis ≈ 8 tokens; WikiQA-like: question ≈ 7, answer ≈ 30)
and batch size, it measures pairs/s of:

- framework training: the real MatchingSystem training step under a Lightning Trainer, fed by the real
  PairDataModule machinery (length-bucketed batches padded per batch);
- framework inference: the model's forward pass under torch.inference_mode on the same batches;
- naive training: identical model math written here in plain PyTorch (random batches padded to the batch
  maximum, no bucketing, no Lightning; CoDA's L1 distance and conflict's difference by broadcasting, as the
  papers write them).

It also prints the achieved FLOP/s as a fraction of the machine's FP32 peak, CoDA's step time relative to
softmax's with the peak memory of one step, and the step time with and without data loading (does the loader
starve the model?). Figures are medians over repeats; the last line is the headline ratio.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from functools import partial

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from matching.data.encoding import EncodedSplit
from matching.model.aligners import CoDAAligner, ConflictAligner, SoftmaxAligner, SoftmaxConflictAligner
from matching.model.decomposable import DecomposableAttention
from matching.training.batching import BucketBatchSampler, PadCollator
from matching.training.losses import PointwiseCrossEntropy
from matching.training.metrics import TaskMetrics
from matching.training.system import MatchingSystem

ALIGNERS = {
    "softmax": SoftmaxAligner,
    "coda": CoDAAligner,
    "conflict": ConflictAligner,
    "softmax_conflict": SoftmaxConflictAligner,
}
SHAPES = {"snli": (14, 8), "wikiqa": (7, 30)}  # mean lengths (a, b)
VOCAB, EMB, HIDDEN, CLASSES = 40_000, 300, 200, 3


def synthetic_split(n: int, mean_a: int, mean_b: int, seed: int = 0) -> EncodedSplit:
    """Token ids with a realistic spread of lengths (gamma-distributed around the mean, at least 2)."""
    rng = np.random.default_rng(seed)

    def lengths(mean: int) -> np.ndarray:
        return np.maximum(2, rng.gamma(4.0, mean / 4.0, size=n).round().astype(int))

    la, lb = lengths(mean_a), lengths(mean_b)
    a = [rng.integers(102, VOCAB, size=k).astype(np.int32) for k in la]
    b = [rng.integers(102, VOCAB, size=k).astype(np.int32) for k in lb]
    labels = rng.integers(0, CLASSES, size=n)
    return EncodedSplit("bench", a, b, labels, np.full(n, -1), [])


def build_model(aligner: str, seed: int = 0) -> DecomposableAttention:
    torch.manual_seed(seed)
    return DecomposableAttention(torch.randn(VOCAB, EMB), CLASSES, partial(ALIGNERS[aligner], hidden=HIDDEN), HIDDEN)


# ----------------------------------------------------------------------------------------- naive baseline


class NaiveDecompAtt(nn.Module):
    """The same model written plainly: no shared helpers, fills instead of masks, broadcast L1/differences."""

    def __init__(self, aligner: str):
        super().__init__()
        self.kind = aligner
        torch.manual_seed(0)
        self.emb = nn.Embedding(VOCAB, EMB)
        self.emb.weight.requires_grad_(False)
        self.proj = nn.Linear(EMB, HIDDEN)

        def ff(i):
            return nn.Sequential(nn.Dropout(0.2), nn.Linear(i, HIDDEN), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(HIDDEN, HIDDEN), nn.ReLU())  # fmt: skip

        self.f = ff(HIDDEN)
        self.wu, self.wv, self.ws = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, 1, False)
        copies = 2 if aligner == "softmax_conflict" else 1
        self.g = ff(HIDDEN * (1 + copies))
        self.h = ff(2 * HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def _softmax(self, a, b, ma, mb):
        e = self.f(a) @ self.f(b).transpose(1, 2)
        valid = ma[:, :, None] & mb[:, None, :]
        e = e.masked_fill(~valid, -1e9)
        return torch.softmax(e, 2) @ b, torch.softmax(e, 1).transpose(1, 2) @ a

    def _coda(self, a, b, ma, mb):
        fa, fb = a, b  # the default F_E: the shared projection (projection=none)
        valid = (ma[:, :, None] & mb[:, None, :]).float()
        e = fa @ fb.transpose(1, 2)
        n = -(fa[:, :, None, :] - fb[:, None, :, :]).abs().sum(-1)  # (B, La, Lb, d) materialised
        n = n - (n * valid).sum((1, 2), keepdim=True) / valid.sum((1, 2), keepdim=True)
        m = torch.tanh(e) * torch.sigmoid(n) * valid
        return m @ b, m.transpose(1, 2) @ a

    def _conflict(self, a, b, ma, mb):
        u, v = torch.tanh(self.wu(a)), torch.tanh(self.wv(b))
        c = self.ws((u[:, :, None, :] - v[:, None, :, :]).abs()).squeeze(-1)  # (B, La, Lb, d) materialised
        valid = ma[:, :, None] & mb[:, None, :]
        c = c.masked_fill(~valid, -1e9)
        return torch.softmax(c, 2) @ b, torch.softmax(c, 1).transpose(1, 2) @ a

    def forward(self, a_ids, b_ids):
        ma, mb = a_ids != 0, b_ids != 0
        a, b = self.proj(self.emb(a_ids)), self.proj(self.emb(b_ids))
        if self.kind == "softmax_conflict":
            (b1, a1), (b2, a2) = self._softmax(a, b, ma, mb), self._conflict(a, b, ma, mb)
            beta, alpha = torch.cat([b1, b2], -1), torch.cat([a1, a2], -1)
        else:
            beta, alpha = getattr(self, f"_{self.kind}")(a, b, ma, mb)
        v1 = (self.g(torch.cat([a, beta], -1)) * ma[..., None]).sum(1)
        v2 = (self.g(torch.cat([b, alpha], -1)) * mb[..., None]).sum(1)
        return self.out(self.h(torch.cat([v1, v2], -1)))


def naive_training(aligner: str, split: EncodedSplit, batch: int, steps: int) -> float:
    model = NaiveDecompAtt(aligner)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-4)
    perm = torch.randperm(len(split))
    times = []
    for step in range(steps + 3):
        idx = perm[step * batch : (step + 1) * batch].tolist()
        start = time.perf_counter()
        a = nn.utils.rnn.pad_sequence([torch.from_numpy(split.a[i]).long() for i in idx], batch_first=True)
        b = nn.utils.rnn.pad_sequence([torch.from_numpy(split.b[i]).long() for i in idx], batch_first=True)
        y = torch.from_numpy(split.labels[idx])
        loss = F.cross_entropy(model(a, b), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 3:  # warm-up excluded
            times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


# ----------------------------------------------------------------------------------------- framework


class StepTimer(pl.Callback):
    """Per-step compute time (batch start to end) and wall time between consecutive steps (includes loading)."""

    def __init__(self) -> None:
        self.compute: list[float] = []
        self.wall: list[float] = []
        self._last_end: float | None = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._start = time.perf_counter()
        if self._last_end is not None:
            self.wall.append(self._start - self._last_end)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        end = time.perf_counter()
        self.compute.append(end - self._start)
        if self.wall:
            self.wall[-1] += end - self._start
        self._last_end = end


def framework_training(aligner: str, split: EncodedSplit, batch: int, steps: int) -> tuple[float, float, float]:
    """(pairs/s, median compute seconds per step, median wall seconds per step including data loading)."""
    system = MatchingSystem(build_model(aligner), PointwiseCrossEntropy(), partial(torch.optim.Adam, lr=3e-4),
                            TaskMetrics(("0", "1", "2")))  # fmt: skip
    sampler = BucketBatchSampler(split.lengths(), batch, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(split, batch_sampler=sampler, collate_fn=PadCollator(split))
    timer = StepTimer()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=steps + 3, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer], limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(system, train_dataloaders=loader)
    compute, wall = statistics.median(timer.compute[3:]), statistics.median(timer.wall[3:])
    return batch / compute, compute, wall


@torch.inference_mode()
def framework_inference(aligner: str, split: EncodedSplit, batch: int, steps: int) -> float:
    model = build_model(aligner).eval()
    collate = PadCollator(split)
    sampler = iter(BucketBatchSampler(split.lengths(), batch, True))
    batches = [collate(next(sampler)) for _ in range(steps + 3)]
    times = []
    for i, b in enumerate(batches):
        start = time.perf_counter()
        model(b["a"], b["b"])
        if i >= 3:
            times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


# ----------------------------------------------------------------------------------------- FLOPs and peak


def forward_flops(aligner: str, la: float, lb: float) -> float:
    """Multiply-adds counted as 2 FLOPs; element-wise work counted where it is comparable (CoDA's L1)."""
    h, e, n = HIDDEN, EMB, la + lb
    flops = 2 * n * e * h  # projection
    copies = 2 if aligner == "softmax_conflict" else 1
    if aligner in ("softmax", "softmax_conflict"):
        flops += 2 * n * 2 * h * h + 2 * la * lb * h + 2 * 2 * la * lb * h  # F, scores, two poolings
    if aligner == "coda":  # F_E is the shared projection (projection=none): no F
        flops += 2 * la * lb * h + 3 * la * lb * h + 2 * 2 * la * lb * h  # E, |x - y| summed, two poolings
    if aligner in ("conflict", "softmax_conflict"):
        flops += 2 * n * h * h + 3 * la * lb * h + 2 * 2 * la * lb * h  # W_u/W_v, weighted |u - v|, two poolings
    flops += 2 * n * ((1 + copies) * h * h + h * h)  # G
    flops += 2 * (2 * h * h + h * h) + 2 * h * CLASSES  # H and the classifier
    return flops


def measured_peak() -> float:
    """Sustained FP32 FLOP/s of a large matrix product on all threads (the practical peak)."""
    x, y = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(2):
        x @ y
    times = []
    for _ in range(5):
        start = time.perf_counter()
        x @ y
        times.append(time.perf_counter() - start)
    return 2 * 2048**3 / min(times)


def theoretical_peak() -> tuple[float, str]:
    mhz = 0.0
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                mhz = max(mhz, float(line.split(":")[1]))
    except OSError:
        pass
    cores = torch.get_num_threads()
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    per_cycle = 32 if ("avx2" in flags and "fma" in flags) else 16  # 2 FMA units x 8 FP32 lanes x 2
    how = f"{cores} cores x {mhz:.0f} MHz x {per_cycle} FP32 FLOP/cycle (2 FMA x 256-bit; AVX-512 runs as 2x256 on Zen)"
    return cores * mhz * 1e6 * per_cycle, how


def largest_allocation(model: nn.Module, split: EncodedSplit, batch: int) -> float:
    """Bytes of the largest single tensor allocation in one training step (forward and backward)."""
    from torch.profiler import ProfilerActivity, profile

    b = PadCollator(split)(list(range(batch)))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(b["a"], b["b"])
        loss = F.cross_entropy(out.logits if hasattr(out, "logits") else out, b["label"])
        loss.backward()
    return max((ev.cpu_memory_usage for ev in prof.events() if ev.cpu_memory_usage > 0), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="32,64,256")
    parser.add_argument("--quick", action="store_true", help="one repeat, 10 steps, batch 64 only")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.batches = 10, 1, "64"
    batches = [int(x) for x in args.batches.split(",")]
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}, hidden {HIDDEN}, vectors {EMB}-d")

    peak, peak_how = theoretical_peak()
    practical = measured_peak()
    print(f"FP32 peak assumed: {peak / 1e9:.0f} GFLOP/s = {peak_how}")
    print(f"measured 2048x2048 sgemm on all threads: {practical / 1e9:.0f} GFLOP/s")

    ratios, fractions = {}, {}
    print("\nshape  aligner           batch | train pairs/s: framework naive ratio | infer pairs/s | GFLOP/s (% peak)")
    for shape, (la, lb) in SHAPES.items():
        split = synthetic_split(max(batches) * (args.steps + 4), la, lb)
        real_la = statistics.fmean(len(x) for x in split.a)
        real_lb = statistics.fmean(len(x) for x in split.b)
        for aligner in ALIGNERS:
            for batch in batches:
                fw = [framework_training(aligner, split, batch, args.steps)[0] for _ in range(args.repeats)]
                nv = [naive_training(aligner, split, batch, args.steps) for _ in range(args.repeats)]
                inf = [framework_inference(aligner, split, batch, args.steps) for _ in range(args.repeats)]
                fw_m, nv_m, inf_m = statistics.median(fw), statistics.median(nv), statistics.median(inf)
                achieved = 3 * forward_flops(aligner, real_la, real_lb) * fw_m
                ratios[(shape, aligner, batch)] = fw_m / nv_m
                fractions[(shape, aligner, batch)] = achieved / peak
                print(f"{shape:6} {aligner:17} {batch:5} | {fw_m:8.0f} {nv_m:8.0f} {fw_m / nv_m:6.2f}x "
                      f"| {inf_m:8.0f} | {achieved / 1e9:6.1f} ({100 * achieved / peak:4.1f}%)")  # fmt: skip

    split = synthetic_split(64 * (args.steps + 4), *SHAPES["snli"])
    soft = statistics.median([framework_training("softmax", split, 64, args.steps)[1] for _ in range(args.repeats)])
    coda = statistics.median([framework_training("coda", split, 64, args.steps)[1] for _ in range(args.repeats)])
    big = synthetic_split(64, 40, 40)
    longest = max(len(x) for x in big.a) * max(len(x) for x in big.b)
    four_d = 64 * longest * HIDDEN * 4
    models = {"softmax": build_model("softmax"), "coda": build_model("coda"), "naive coda": NaiveDecompAtt("coda"),
              "conflict": build_model("conflict"), "naive conflict": NaiveDecompAtt("conflict")}  # fmt: skip
    sizes = {name: largest_allocation(model, big, 64) for name, model in models.items()}
    print(f"\nCoDA step / softmax step (SNLI-like, batch 64): {coda / soft:.2f}x "
          f"({coda * 1e3:.1f} ms vs {soft * 1e3:.1f} ms)")  # fmt: skip
    print("largest single allocation in one training step (batch 64, lengths ~40): "
          + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sizes.items())
          + f"; a (B, La, Lb, d) tensor is {four_d / 2**20:.1f} MiB")  # fmt: skip

    _, compute, wall = framework_training("softmax", split, 64, args.steps)
    print(f"softmax batch 64 step: compute {compute * 1e3:.2f} ms, with data loading {wall * 1e3:.2f} ms "
          f"(loader share {100 * (wall - compute) / wall:.1f}%)")  # fmt: skip

    key = ("snli", "softmax", 64)
    print(
        f"\nmedian framework/naive training ratio over all cells: {statistics.median(ratios.values()):.2f}x; "
        f"best % of FP32 peak at batch 64: {100 * max(v for k, v in fractions.items() if k[2] == 64):.1f}%"
    )
    print(f"HEADLINE framework/naive training throughput, SNLI-like softmax batch 64: {ratios.get(key, math.nan):.2f}x")


if __name__ == "__main__":
    main()
