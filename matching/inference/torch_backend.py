"""PyTorch eager: the trained `DecomposableAttention` answering prepared pairs, in the run's arithmetic, on a CPU or a
GPU. No LightningModule: the model and the forward pass that training uses (matching.model.decomposable.run_batch)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from matching.data.preparation import CPU_BATCH_PAIRS, PreparedPairs
from matching.errors import RunError
from matching.inference.threads import call_tokens, thread_count
from matching.model.decomposable import DecomposableAttention, run_batch
from matching.model.pipeline import TextPipeline
from matching.model.precision import resolve, short


def device_name(device: str) -> str:
    """`device` checked: cpu, cuda, cuda:N, mps, or auto (the GPU when there is one)."""
    import re

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise RunError(f"device must be cpu, cuda, cuda:N, mps or auto, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RunError(f"device={device}, but torch sees no CUDA GPU here; use device='cpu' (or 'auto')")
    return device


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch (tensors, nested in dicts: a fine-tuned encoder's word pieces) on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


class TorchBackend:
    """The model in eval mode on `device`, computing in `dtype` (fp32, bf16 or auto: matching.model.precision);
    `pipeline` makes its batches (ids, and what the embedding source adds: an encoder's word states)."""

    name = "torch"
    can_align = True

    def __init__(self, model: DecomposableAttention, pipeline: TextPipeline, dtype: str, device: str = "cpu",
                 threads: int = 0, cap: int | None = None):  # fmt: skip
        self.model, self.pipeline = model.eval(), pipeline
        self.torch_device = torch.device(device)
        self.device = str(self.torch_device)
        self.dtype = dtype
        self.compute = resolve(dtype, self.torch_device)
        self.threads, self.cap = threads, cap
        self.batch_pairs = CPU_BATCH_PAIRS if self.torch_device.type == "cpu" else None
        self.cost = "contextual" if pipeline.source is not None and pipeline.source.reads_every_word else "static"
        if self.torch_device.type != "cpu":
            self.model.to(self.torch_device)
        if pipeline.source is not None:
            pipeline.source.on_device(str(self.torch_device))

    @classmethod
    def from_trained(cls, parts, *, device: str, threads: int, quantize: str | None = None,
                     reduce_range: bool | None = None) -> TorchBackend:  # fmt: skip
        """A trained model (matching.model.assembly.TrainedModel) in its config's arithmetic (`dtype`), on `device`
        (checked already: `device_name`)."""
        if quantize:
            raise RunError("quantize=int8 runs on ONNX Runtime: give backend=onnx (or leave backend=auto)")
        return cls(parts.model, parts.text, str(parts.cfg.get("dtype", "fp32")), device, threads)

    @property
    def arithmetic(self) -> str:
        """What the arithmetic is: fp32 or bf16 (matching.model.precision)."""
        return short(self.compute)

    @property
    def about(self) -> dict:
        return {}

    def set_threads(self, threads: int, cap: int | None = None) -> None:
        self.threads, self.cap = threads, cap

    @torch.inference_mode()
    def outputs(self, prepared: PreparedPairs, index: np.ndarray):
        batch = self.pipeline.batch(prepared, index)
        if self.torch_device.type != "cpu":
            batch = to_device(batch, self.torch_device)
        return run_batch(self.model, batch, self.compute)

    @property
    def text_states(self):
        """What encodes new text outside the model: a contextual run's TextStates, its encoder frozen or the run's
        fine-tuned one (None for static vectors)."""
        source = self.pipeline.source
        return None if source is None else source.text_states

    @contextmanager
    def call(self, prepared: PreparedPairs) -> Iterator[None]:
        """One call's scope: a contextual encoder encodes each distinct text of the call once, here, and its batches
        read the states (a query is not encoded again with each of its candidates)."""
        encoder = self.text_states
        if encoder is None:
            yield
            return
        with self.threads_for(call_tokens(prepared.sides())), encoder.remember(prepared.words_a + prepared.words_b):
            yield

    @contextmanager
    def threads_for(self, tokens: int) -> Iterator[None]:
        """Intra-op threads chosen for a piece of work of `tokens` tokens (matching.inference.threads), set for the
        block: the process's own setting is back after it."""
        wanted = thread_count(self.threads, tokens, self.cost, self.cap) if self.torch_device.type == "cpu" else 0
        before = torch.get_num_threads()
        if not wanted or wanted == before:
            yield
            return
        torch.set_num_threads(wanted)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def logits(self, prepared: PreparedPairs, index: np.ndarray) -> np.ndarray:
        with self.threads_for(call_tokens(prepared.sides()[index])):
            return self.outputs(prepared, index).logits.float().cpu().numpy()

    def alignment(self, prepared: PreparedPairs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The first pair's logits (1, C) and every alignment matrix the model used, (len a, len b) each."""
        out = self.outputs(prepared, np.arange(1))
        matrices = {name: m[0].float().cpu().numpy() for name, m in out.matrices.items()}
        return out.logits.float().cpu().numpy(), matrices
