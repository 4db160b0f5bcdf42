"""The arithmetic a model computes in: `dtype=auto` (the default of `train`), `fp32` or `bf16`.

`dtype` is a key of a run's config (`python -m matching.train dtype=bf16`; any command that loads a run:
`matching-predict ckpt=... dtype=bf16`; `Matcher.load(path, dtype="bf16")`). Every forward pass goes through
`forward_in` (MatchingSystem.predict_step: training, validation, evaluate, predict, visualize, serve).

- fp32: the model as it is, in float32; a seed's numbers are what they always were.
- bf16: the model's products and activations in bfloat16, its weights, gradients, optimiser and loss in float32.
  Each forward pass casts the trainable weights to bf16 once (autocast casts around every product and leaves the
  element-wise work, the softmax, dropout and masks in float32, converting back and forth); the word vectors are
  gathered from their table (float16 when frozen) and the gathered rows cast, never the whole table; from the
  projection to the classifier every activation stays bf16; the classifier (`float32_modules`) keeps float32
  weights and takes its input in float32, so that the logits, and a ranking score (their difference), are not
  rounded to bf16's 8 bits. The float32 parameters are the master copy: the cast's backward hands each weight a
  float32 gradient,
  Adam (fused) updates float32 weights, and checkpoints hold float32 weights, so a run trained in either dtype is
  evaluated in either. What bf16 would spoil stays float32: PyTorch's bf16 softmax, sums and matrix products
  accumulate in float32, and CoDA's means over the alignment are float32 sums (`layers.masked_mean`).
- auto: bf16 where a CPU has bf16 arithmetic (AMX or AVX512-BF16: `bf16_instructions`), fp32 elsewhere; on a GPU
  `trainer.precision` (bf16-mixed in `trainer=gpu`) decides and auto is fp32. The default of `train` (conf/train.yaml):
  bf16 held dev quality within the paired test's noise of fp32 (WikiQA, both aligners; the SNLI check), and the
  run's log says what auto chose. A run saved before the dtype key is read as fp32.

What bf16 gains is the matrix products' (oneDNN's bf16 kernels); PyTorch's element-wise bf16 kernels convert to
float32 and back and are no faster than float32 ones. docs/results/performance.md has the figures.

The same pair computed in another batch (alone, beside other pairs, padded to a longer pair) can get a slightly
different answer, in either dtype: a matrix product's kernel and the order in which it adds up its float32 sums
depend on the product's shape (the batch's rows and padded lengths), and so do the last bits of each sum. In fp32
that moves a probability by about 1e-7 (the sums keep 24 bits); in bf16 now and then a sum that lies near the
middle between two bf16 numbers rounds to the other one (8 bits: a step of 0.4 %), in the projection of the word
vectors or an aligner's product, and the answer moves by up to about 1e-3. `answer_tolerance` says how far; the
server (whose batches are whichever requests arrive together) and `Matcher` (whose batches are the pairs it is
given) agree within it, and benchmarks/bench_serve.py checks every answer against it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from matching.errors import ConfigError

#: The `dtype=` values and what each computes in (auto resolves to one of them).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CHOICES = (*DTYPES, "auto")

#: CPU flags (Linux /proc/cpuinfo) of instructions that compute in bf16, best first: Intel's AMX tiles
#: (Sapphire Rapids and later), then AVX512-BF16's dot products (Cooper Lake; AMD Zen 4 and later).
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def check(name: Any) -> str:
    """`name` if it is a `dtype=` value, else a ConfigError that says which are."""
    if name not in CHOICES:
        raise ConfigError(
            f"dtype={name!r}: choose fp32 (float32), bf16 (bfloat16 products and activations with float32 "
            "weights; faster on CPUs with AMX or AVX512-BF16) or auto (the default: bf16 where the CPU has bf16 "
            "arithmetic, else fp32)"
        )
    return name


def resolve(name: str, device: str | torch.device = "cpu") -> torch.dtype:
    """The dtype that `dtype=name` computes in on `device` (a type such as "cpu" or a torch.device)."""
    if check(name) != "auto":
        return DTYPES[name]
    on_cpu = torch.device(device).type == "cpu"
    return torch.bfloat16 if on_cpu and bf16_instructions() else torch.float32


def short(dtype: torch.dtype) -> str:
    """A computing dtype's name as `dtype=` spells it: bf16 or fp32."""
    return "bf16" if dtype == torch.bfloat16 else "fp32"


def arithmetic_summary(name: str, device: str | torch.device = "cpu") -> str:
    """What `dtype=name` computes in on `device`, for the run's log ("bf16 (auto: this CPU has amx_bf16)")."""
    dtype = resolve(name, device)
    name_of = short(dtype)
    if name == "auto":
        found = bf16_instructions()
        why = f"this CPU has {found}" if found else "no bf16 arithmetic here"
        return f"{name_of} (auto: {why})"
    if dtype == torch.bfloat16 and torch.device(device).type == "cpu" and not bf16_instructions():
        return f"{name_of} (this CPU has no bf16 arithmetic: slower than fp32 here)"
    return name_of


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The processor's feature flags as the operating system lists them (Linux: /proc/cpuinfo); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            line = next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def bf16_instructions() -> str | None:
    """The best of BF16_FLAGS this CPU has, or None."""
    return next((flag for flag in BF16_FLAGS if flag in cpu_flags()), None)


def flushes_denormals() -> bool:
    """Whether this process's CPU arithmetic sets denormal float results to 0 now (PyTorch has no getter: the
    smallest float64 denormal survives a tensor's creation only when they are kept)."""
    return torch.tensor([5e-324], dtype=torch.float64).item() == 0.0


@contextmanager
def denormals_flushed(flush: bool) -> Iterator[bool]:
    """Within the block, CPU float results below the smallest normal number (1.2e-38 in float32) are 0 when `flush`
    (`torch.set_flush_denormal`, x86's flush-to-zero and denormals-are-zero); the process's own setting is restored
    after it, so that training from Python leaves the caller's arithmetic as it was. Yields whether they are flushed
    (False where the CPU cannot)."""
    before = flushes_denormals()
    flushed = torch.set_flush_denormal(flush) and flush
    try:
        yield flushed
    finally:
        torch.set_flush_denormal(before)


def forward_in(dtype: torch.dtype, model: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """`model(*args, **kwargs)` computed in `dtype`: the model itself for float32; otherwise the model with its
    weights cast once (see the module docstring), its MatchOutput's logits returned as float32."""
    if dtype == torch.float32:
        return model(*args, **kwargs)
    out = functional_call(model, cast_weights(model, dtype), args, kwargs, strict=False)
    return out._replace(logits=out.logits.float())


def cast_weights(model: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Each floating-point weight of `model` cast to `dtype`, by name, but the tables that are gathered from
    (nn.Embedding: the model casts the rows it gathers) and the submodules the model keeps in float32 (its
    `float32_modules`, e.g. the classifier); a trainable weight's cast passes its gradient back in float32. A
    fine-tuned encoder inside the model (`encoder.`) is cast whole, its embedding tables too: it adds their rows
    and normalises the sum itself, and its LayerNorm takes its input in its weights' dtype."""
    tables = {f"{name}.weight" for name, module in model.named_modules()
              if isinstance(module, nn.Embedding) and not name.startswith("encoder.")}  # fmt: skip
    kept = tuple(f"{name}." for name in getattr(model, "float32_modules", ()))
    return {
        name: p.to(dtype)
        for name, p in model.named_parameters()
        if p.is_floating_point() and p.dtype != dtype and name not in tables and not name.startswith(kept)
    }


@dataclass(frozen=True)
class Tolerance:
    """How far one pair's answer (Matcher.predict's, the server's) may move with the batch it is computed in:
    each probability (a ranking model's P(match) too) by `probability`, a ranking model's score (the logit
    margin, which is not squashed into [0, 1]) by `score`."""

    probability: float
    score: float


#: Per dtype, the `Tolerance` of an answer across batches. fp32: the sums' last bits (measured: probabilities
#: 3e-6, scores 6e-5 at most). bf16: about four times the largest difference measured between a pair computed alone
#: and in the batches `Matcher` forms over 2,000 pairs (random pairs of WikiQA's lengths, SNLI dev, WikiQA dev;
#: SNLI-sample CoDA runs of 1 and 10 epochs and a WikiQA CoDA run of 3, on AMX): probabilities 1.05e-3, scores
#: 9.6e-3 (docs/archive/2026-11-performance.md, "The same pair, the same answer").
TOLERANCES = {
    torch.float32: Tolerance(probability=1e-5, score=1e-4),
    torch.bfloat16: Tolerance(probability=4e-3, score=4e-2),
}


def answer_tolerance(dtype: torch.dtype) -> Tolerance:
    """How far an answer computed in `dtype` may move with its batch (see `TOLERANCES`)."""
    return TOLERANCES[dtype]
