"""ONNX Runtime: the exported graph (`matching-export format=onnx`, or exported on the fly by matching.inference.load)
answering prepared pairs on the CPU, in float32 or with int8 weights (dynamic quantization). Imports no torch.

int8: ONNX Runtime's dynamic quantization (weights int8 once, activations quantized per call). On x86-64 CPUs
without VNNI instructions its u8×s8 products can saturate; ONNX Runtime's documentation advises `reduce_range`
(7-bit weights) there, which is what `reduce_range=None` picks from the CPU's flags.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import numpy as np

from matching.data.preparation import CPU_BATCH_PAIRS, PreparedPairs
from matching.extras import require
from matching.inference.threads import call_tokens, thread_count

log = logging.getLogger(__name__)

#: What `quantize=` takes: None (the float32 graph) or int8 (dynamic quantization of the weights).
QUANTIZE = (None, "int8")

Inputs = Callable[[PreparedPairs, np.ndarray], dict[str, np.ndarray]]


def vnni() -> bool:
    """Whether this CPU has the VNNI instructions int8 products use (x86-64: avx512_vnni or avx_vnni)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_vnni", "avx_vnni"})
    except OSError:
        pass
    return False


#: What ONNX Runtime's quantizer prints on the root logger on every call (`logging.warning`): advice to run its
#: pre-processing, which a dynamic quantization of our graphs does not need.
PREPROCESSING_ADVICE = "Please consider to run pre-processing before quantization"


@contextmanager
def without_preprocessing_advice() -> Iterator[None]:
    """The quantizer's one advice line left out, and the root logger as it was after: no level changed, every other
    record passes, and the handler that `logging.warning` installs on a root logger without one is taken away again
    (the application's logging is its own)."""
    root = logging.getLogger()
    handlers = list(root.handlers)

    def advice(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(PREPROCESSING_ADVICE)

    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
        if not handlers:  # logging.basicConfig's, from the quantizer's logging.warning
            for handler in list(root.handlers):
                root.removeHandler(handler)


def quantized(model_file: Path, reduce_range: bool | None = None) -> Path:
    """`model_file` with int8 weights beside it (`model.int8.onnx`, or `model.int8-7bit.onnx` with `reduce_range`),
    written once. `reduce_range`: None picks it for CPUs without VNNI (see the module docstring)."""
    reduce_range = (not vnni()) if reduce_range is None else reduce_range
    out = model_file.with_name(model_file.stem + (".int8-7bit" if reduce_range else ".int8") + ".onnx")
    if out.is_file() and out.stat().st_mtime >= model_file.stat().st_mtime:
        return out
    quantization = require("onnxruntime.quantization", "export", "int8 quantization (ONNX Runtime)")
    onnx = require("onnx", "export", "int8 quantization (ONNX Runtime)")
    # The exporter's stored shapes of intermediate values are dropped (shape inference recomputes them): one that
    # disagrees with inference stops the quantizer (seen with torch 2.11's exporter: "Inferred shape and existing
    # shape differ in dimension 0: (400) vs (200)").
    graph = onnx.load(str(model_file))
    del graph.graph.value_info[:]
    plain, tmp = out.with_name(out.name + ".in.tmp"), out.with_name(out.name + ".tmp")
    onnx.save(graph, str(plain))
    try:
        with without_preprocessing_advice():
            quantization.quantize_dynamic(str(plain), str(tmp), weight_type=quantization.QuantType.QInt8,
                                          reduce_range=reduce_range)  # fmt: skip
    finally:
        plain.unlink(missing_ok=True)
    tmp.replace(out)
    log.info("int8 weights (dynamic quantization%s): %s", ", reduce_range" if reduce_range else "", out)
    return out


class Sessions:
    """ONNX Runtime sessions over one graph file, one per intra-op thread count used (ONNX Runtime fixes a session's
    threads when it is made), on the CPU provider, errors only in its log (no warnings about unused initializers)."""

    def __init__(self, ort, path: Path):
        self.ort, self.path = ort, path
        self.made: dict[int, object] = {}

    def __call__(self, threads: int):
        if threads not in self.made:
            options = self.ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            options.log_severity_level = 3
            self.made[threads] = self.ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        return self.made[threads]


class OnnxBackend:
    """An ONNX Runtime session over `model_file`, fed by `inputs` (the ids; an encoder's word pieces), one session
    per thread count used (ONNX Runtime fixes its intra-op threads when a session is made)."""

    def __init__(self, model_file: Path, inputs: Inputs, name: str = "onnx", cost: str = "onnx",
                 threads: int = 0, cap: int | None = None):  # fmt: skip
        self.ort = require("onnxruntime", "export", "running a model on ONNX Runtime (backend=onnx)")
        self.model_file, self.inputs, self.name, self.cost = model_file, inputs, name, cost
        self.threads, self.cap = threads, cap
        self.batch_pairs = CPU_BATCH_PAIRS  # ONNX Runtime's CPU provider
        self.device, self.can_align = "cpu", False  # the exported graph returns the logits only
        self.frozen_encoder = None  # a contextual graph encodes each pair's texts itself
        self.session = Sessions(self.ort, model_file)
        self.session(1)  # a broken file fails here, at load, not at the first request

    def set_threads(self, threads: int, cap: int | None = None) -> None:
        self.threads, self.cap = threads, cap

    def call(self, prepared: PreparedPairs) -> AbstractContextManager[None]:
        """One call's scope: nothing to keep across its batches (the graph encodes each pair's texts itself)."""
        return nullcontext()

    def threads_for(self, tokens: int) -> AbstractContextManager[None]:
        """Nothing to set: each session run is given its threads (`run`)."""
        return nullcontext()

    def alignment(self, prepared: PreparedPairs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raise NotImplementedError("an exported graph returns the logits only (can_align is False)")

    def logits(self, prepared: PreparedPairs, index: np.ndarray) -> np.ndarray:
        return self.run(self.inputs(prepared, index), call_tokens(prepared.sides()[index]))

    def run(self, feed: dict[str, np.ndarray], tokens: int) -> np.ndarray:
        """(B, C) float32 logits of the graph's inputs `feed` (`tokens`: the call's padded tokens, for threads)."""
        threads = thread_count(self.threads, tokens, self.cost, self.cap)
        return np.asarray(self.session(threads).run(["logits"], feed)[0], np.float32)
