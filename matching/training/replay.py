"""The whole training step as one replay (`capture=true`): on a GPU, gathering the batch from the split on the
device, the forward pass, the loss, the backward pass and the optimiser's update are captured once per bucket shape
as a CUDA graph and replayed, so that a step costs the host one copy of the batch's indices and one graph launch
instead of ~800 kernel launches.

Why `torch.cuda.graph` directly rather than torch.compile's CUDA graphs (`compile_mode=reduce-overhead`): those
capture the model's forward and backward as separate graphs and leave the loss, the optimiser and the batch gather
to Python, which is where the step's time went (docs/results/performance.md); a whole-step graph needs the optimiser
inside it (Adam's `capturable` update) and the batch gathered inside it, which only a capture of the whole step gives.
`compile=true` (compile_mode=default) still fuses the model's kernels, and the capture then records the fused ones.

What a graph fixes, and so what is replayed: the batch's size and both sides' padded widths (`data.pad_to` rounds
the widths, default 8 with capture, so an SNLI-shaped split has a few dozen shapes), and every tensor's address.
The first `warmup` batches of a shape run eagerly (real steps: cuBLAS and the optimiser's state are set up by them),
the next is captured and every later one replayed. A batch of another size (the last of an epoch, a memory budget's
batch of long pairs) runs eagerly, as do all steps of a loss whose batches depend on the data's groups (pairwise,
listwise, distillation against a query's candidates). On a CPU there is nothing to capture: every step runs eagerly,
the same operations in the same order as the Lightning step of `capture=false`, so that a seed gives the same
weights either way (tests/test_replay.py)."""

from __future__ import annotations

import logging
from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from matching.data.encoding import EncodedSplit
from matching.model.decomposable import run_batch
from matching.model.precision import resolve
from matching.training.losses import TrainingLoss

log = logging.getLogger(__name__)


@dataclass
class CapturedStep:
    """One bucket shape's graph: its input (the batch's indices) and its output (the loss), at fixed addresses."""

    graph: torch.cuda.CUDAGraph
    index: torch.Tensor
    loss: torch.Tensor
    correct: torch.Tensor


class StepReplay:
    """The training steps of a fit, on batches gathered from `split` (the training split, packed on the training
    device when the fit starts) in batches of `batch_size` (a batch of another size runs eagerly); `warmup`: the eager
    steps of each batch shape before its capture; `capture_graphs=False`: every step eager (the baseline of
    benchmarks/bench_replay.py). The system that owns it (MatchingSystem, `capture=true`) starts each fit with
    `start(model, loss, optimizer, compute_dtype, device)`: the model, loss and optimiser whose steps are replayed,
    forward passes in `compute_dtype` (matching.model.precision); the graphs of an earlier fit, which hold the
    addresses of its optimiser state, are dropped. Then `step(index, widths)` trains on the pairs `index` padded to
    `widths` and returns the step's loss and its count of correctly predicted pairs (on a GPU the replayed graph's
    output tensors, overwritten by the next replay)."""

    def __init__(self, split: EncodedSplit, batch_size: int, warmup: int = 2, capture_graphs: bool = True):
        self.split, self.batch_size, self.warmup, self.capture_graphs = split, batch_size, warmup, capture_graphs

    def start(self, model: torch.nn.Module, loss: TrainingLoss, optimizer: torch.optim.Optimizer, compute_dtype: str,
              device: torch.device) -> None:  # fmt: skip
        """A fit starts: what it trains, the split on its device, no graph yet."""
        self.model, self.loss, self.optimizer, self.compute_dtype = model, loss, optimizer, compute_dtype
        self.device = torch.device(device)
        self.packed = self.split.packed(self.device)
        # The losses that compare a query's candidates run different operations for every batch: none is captured.
        self.captures = self.capture_graphs and self.device.type == "cuda" and not loss.compares_candidates
        self.graphs: dict[tuple[int, int], CapturedStep] = {}
        self.seen: Counter[tuple[int, int]] = Counter()
        self.replayed = self.eager = 0
        if self.captures:
            self.pool = torch.cuda.graph_pool_handle()  # one memory pool for every shape's graph (replayed in turn)
            self.stream = torch.cuda.Stream(self.device)

    def step(self, index: torch.Tensor, widths: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        widths = (int(widths[0]), int(widths[1]))
        captured = self.graphs.get(widths)
        if captured is not None and len(index) == self.batch_size:
            captured.index.copy_(index, non_blocking=True)
            captured.graph.replay()
            self.replayed += 1
            return captured.loss, captured.correct
        if not self.captures or len(index) != self.batch_size or self.seen[widths] < self.warmup:
            self.seen[widths] += 1
            self.eager += 1
            return self._eager(index, widths)
        return self._capture(index, widths)

    def steps_summary(self) -> str:
        """What the steps so far were: replayed, eager, and the shapes captured."""
        if not self.captures:
            why = ("no CUDA device: nothing to capture" if self.device.type != "cuda" else
                   "this loss's operations depend on each batch's queries, so none is captured")  # fmt: skip
            return f"{self.eager} training steps run eagerly ({why})"
        return (f"{self.replayed} training steps replayed from {len(self.graphs)} captured CUDA graphs (one per "
                f"batch shape), {self.eager} run eagerly (each shape's first {self.warmup}, and batches of another "
                f"size)")  # fmt: skip

    def _eager(self, index: torch.Tensor, widths: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        self.optimizer.zero_grad(set_to_none=True)
        if not self.captures:
            return self._run(index, widths)
        # On a side stream, as the capture will run: what the warm-up sets up (cuBLAS workspaces, the autograd
        # engine's streams) is then set up for the stream the graph is captured on.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            step = self._run(index, widths)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return step

    def _capture(self, index: torch.Tensor, widths: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        static = index.clone()  # outside the graph's pool: the input every replay copies its indices into
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward then writes gradients of its own
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss, correct = self._run(static, widths)
        self.graphs[widths] = CapturedStep(graph, static, loss, correct)
        graph.replay()  # a capture records the step without running it: this is the step of this batch
        self.replayed += 1
        return loss, correct

    def _run(self, index: torch.Tensor, widths: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One step, as Lightning's automatic optimisation runs it: forward (as MatchingSystem.predict_step) and loss
        under the run's autocast, backward and the optimiser's update outside it; the loss and the correct count."""
        batch = self.packed.gather(index, widths)
        with self._forward_context():
            logits = run_batch(self.model, batch, resolve(self.compute_dtype, self.device)).logits
            loss = self.loss(logits, batch)
        correct = (logits.detach().argmax(-1) == batch["label"]).sum()
        with torch.autocast(self.device.type, enabled=False):
            loss.backward()
            self.optimizer.step()
        return loss.detach(), correct

    def _forward_context(self) -> AbstractContextManager:
        """The run's autocast (bf16-mixed, which Lightning enters around the training step), with its cache of cast
        weights off: a capture must not keep cast copies of weights that the update then changes."""
        kind = self.device.type
        if not torch.is_autocast_enabled(kind):
            return nullcontext()
        return torch.autocast(kind, dtype=torch.get_autocast_dtype(kind), cache_enabled=False)


class UpdateInStep:
    """The optimiser Lightning steps under `capture=true`: `step(closure)` runs the closure, the whole step of
    StepReplay, whose graph (or eager step) holds the real optimiser's update; its parameter groups, state, defaults
    and state_dict are the real optimiser's (`inner`), so that checkpoints, resume and learning-rate readers see
    what they would see without capture."""

    def __init__(self, inner: torch.optim.Optimizer):
        self.inner = inner

    param_groups = property(lambda self: self.inner.param_groups)
    defaults = property(lambda self: self.inner.defaults)
    state = property(lambda self: self.inner.state)

    def step(self, closure):
        return closure()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.inner.load_state_dict(state_dict)


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """The optimiser's update made capturable where it has the option (Adam, AdamW and the others that keep a
    step count: on the device, no host read); an optimiser without it (SGD) captures as it is."""
    if "capturable" in optimizer.defaults:
        optimizer.defaults["capturable"] = True
        for group in optimizer.param_groups:
            group["capturable"] = True
