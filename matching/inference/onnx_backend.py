"""ONNX Runtime: the exported graph (`matching-export format=onnx`, or exported on the fly by matching.inference.load)
answering prepared pairs on the CPU, in float32 or with int8 weights (dynamic quantization). Imports no torch.

The runtime's one unit: its backend (`OnnxBackend`), built from a trained model (`from_trained`: the graph exported
once into a cache, quantized once) or from an exported folder (`from_folder`), the inputs its graph takes (token
ids; a contextual graph's word pieces too) and the quantization.

int8: ONNX Runtime's dynamic quantization (weights int8 once, activations quantized per call). On x86-64 CPUs
without VNNI instructions its u8×s8 products can saturate; ONNX Runtime's documentation advises `reduce_range`
(7-bit weights) there, which is what `reduce_range=None` picks from the CPU's flags.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from matching.data.preparation import (
    CPU_BATCH_PAIRS,
    PIECE_INPUTS,
    PIECE_KEYS,
    PreparedPairs,
    TextPreparation,
    piece_windows,
)
from matching.errors import RunError
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


#: What the quantizer's pre-processing marks a graph with (ONNX Runtime's metadata key): an int8 graph without it was
#: quantized before the weights were folded, most of a contextual model's left in float32, and is quantized again.
PREPROCESSED = "onnx.quant.pre_process"
#: The operators whose weights are made int8: the products (MatMul, Gemm) and the tables looked up (Gather). The
#: quantizer's default list also names operators that only pass values on (Transpose), which it then reports, on
#: the root logger, it cannot quantize when they carry integers.
INT8_OPERATORS = ["MatMul", "Gemm", "Gather"]


def quantized(model_file: Path, reduce_range: bool | None = None) -> Path:
    """`model_file` with int8 weights beside it (`model.int8.onnx`, or `model.int8-7bit.onnx` with `reduce_range`),
    written once. `reduce_range`: None picks it for CPUs without VNNI (see the module docstring).

    The graph is pre-processed first, as ONNX Runtime's quantization guide asks (shape inference and constant
    folding): the exporter writes most of a contextual model's weights as Transpose(W), which the quantizer does not
    take for weights; folded, every product with a weight is quantized (a MiniLM-L6 CoDA graph: 5 of its 106
    products without the pre-processing, 79 with it, the other 27 multiply two activations)."""
    reduce_range = (not vnni()) if reduce_range is None else reduce_range
    out = model_file.with_name(model_file.stem + (".int8-7bit" if reduce_range else ".int8") + ".onnx")
    onnx = require("onnx", "export", "int8 quantization (ONNX Runtime)")
    if out.is_file() and out.stat().st_mtime >= model_file.stat().st_mtime and _preprocessed(onnx, out):
        return out
    quantization = require("onnxruntime.quantization", "export", "int8 quantization (ONNX Runtime)")
    # The exporter's stored shapes of intermediate values are dropped (shape inference recomputes them): one that
    # disagrees with inference stops the quantizer (seen with torch 2.11's exporter: "Inferred shape and existing
    # shape differ in dimension 0: (400) vs (200)").
    graph = onnx.load(str(model_file))
    del graph.graph.value_info[:]
    plain, ready, tmp = (out.with_name(out.name + suffix) for suffix in (".in.tmp", ".ready.tmp", ".tmp"))
    # Saved to a file, not handed to the pre-processing as a proto: it cannot read a proto whose weights were
    # loaded from an external data file (a static model's embedding table is one).
    onnx.save(graph, str(plain))
    try:  # symbolic shape inference left out: it does not complete on our graphs (ONNX's own inference runs)
        quantization.shape_inference.quant_pre_process(str(plain), str(ready), skip_symbolic_shape=True)
        quantization.quantize_dynamic(str(ready), str(tmp), weight_type=quantization.QuantType.QInt8,
                                      reduce_range=reduce_range, op_types_to_quantize=INT8_OPERATORS)  # fmt: skip
    finally:
        plain.unlink(missing_ok=True)
        ready.unlink(missing_ok=True)
    tmp.replace(out)
    log.info("int8 weights (dynamic quantization%s): %s", ", reduce_range" if reduce_range else "", out)
    return out


def _preprocessed(onnx, graph_file: Path) -> bool:
    model = onnx.load(str(graph_file), load_external_data=False)
    return any(prop.key == PREPROCESSED for prop in model.metadata_props)


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
        self.text_states = None  # a contextual graph encodes each pair's texts itself
        self.session = Sessions(self.ort, model_file)
        self.session(1)  # a broken file fails here, at load, not at the first request

    @classmethod
    def from_trained(cls, parts, *, device: str, threads: int, quantize: str | None = None,
                     reduce_range: bool | None = None) -> OnnxBackend:  # fmt: skip
        """A trained model (matching.model.assembly.TrainedModel) on ONNX Runtime: its graph exported once into the
        cache, with int8 weights when `quantize="int8"`."""
        if device != "cpu":
            raise RunError("backend=onnx runs on the CPU here (ONNX Runtime's CPU provider); give device=cpu")
        graph = exported_graph(parts, parts.weights_file)
        if quantize:
            graph = quantized(graph, reduce_range)
        contextual = parts.source.reads_every_word
        inputs = contextual_inputs(parts) if contextual else ids_inputs(parts.text)
        return cls(graph, inputs, "onnx-int8" if quantize else "onnx", "contextual" if contextual else "onnx", threads)

    @classmethod
    def from_folder(cls, graph: Path, text: TextPreparation, spec: dict, *, threads: int, quantize: str | None = None,
                    reduce_range: bool | None = None) -> OnnxBackend:  # fmt: skip
        """An exported folder's graph (`spec`: its serving.json; `text`: the preparation it describes)."""
        if quantize:
            graph = quantized(graph, reduce_range)
        contextual = bool(spec.get("contextual"))
        inputs = exported_contextual_inputs(text, graph.parent, spec) if contextual else ids_inputs(text)
        return cls(graph, inputs, "onnx-int8" if quantize else "onnx", "contextual" if contextual else "onnx", threads)

    @property
    def arithmetic(self) -> str:
        """What the arithmetic is: fp32, or int8 weights."""
        return "int8" if self.name == "onnx-int8" else "fp32"

    @property
    def about(self) -> dict:
        return {"graph": self.model_file}

    def set_threads(self, threads: int, cap: int | None = None) -> None:
        self.threads, self.cap = threads, cap

    def call(self, prepared: PreparedPairs) -> AbstractContextManager[None]:
        """One call's scope: nothing to keep across its batches (the graph encodes each pair's texts itself)."""
        return nullcontext()

    def threads_for(self, tokens: int) -> AbstractContextManager[None]:
        """Nothing to set: each session run is given its threads (`run`)."""
        return nullcontext()

    def alignment(self, prepared: PreparedPairs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """None to give (`can_align` is False): a RunError saying what to load instead."""
        raise RunError(
            f"this model runs on {self.name}, whose exported graph returns the logits only: alignments "
            "need the PyTorch model; load the run directory or shared folder with backend=torch"
        )

    def logits(self, prepared: PreparedPairs, index: np.ndarray) -> np.ndarray:
        return self.run(self.inputs(prepared, index), call_tokens(prepared.sides()[index]))

    def run(self, feed: dict[str, np.ndarray], tokens: int) -> np.ndarray:
        """(B, C) float32 logits of the graph's inputs `feed` (`tokens`: the call's padded tokens, for threads)."""
        threads = thread_count(self.threads, tokens, self.cost, self.cap)
        return np.asarray(self.session(threads).run(["logits"], feed)[0], np.float32)


# -- what the graph is built from and fed ------------------------------------------------------------------------
def cache_root() -> Path:
    """Where backend=onnx keeps the graphs it exports: $MATCHING_ONNX_CACHE, default ~/.cache/matching/onnx."""
    return Path(os.environ.get("MATCHING_ONNX_CACHE") or Path.home() / ".cache" / "matching" / "onnx").expanduser()


def exported_graph(parts, weights_file: Path) -> Path:
    """The ONNX graph of a trained model, exported once into the cache under its weights' sha256."""
    from matching.files import file_sha256
    from matching.saved.onnx_graph import write_onnx

    folder = cache_root() / file_sha256(weights_file)[:32]
    graph = folder / "model.onnx"
    if graph.is_file():
        return graph
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunError(
            f"cannot create the ONNX cache folder {folder} ({err.strerror or err}); set MATCHING_ONNX_CACHE=<a "
            "writable folder>, or export the model once with matching-export format=onnx and load that folder"
        ) from None
    tmp = folder / f"model.{os.getpid()}.onnx"
    write_onnx(parts.model, parts.source, parts.text, tmp)
    tmp.replace(graph)
    log.warning("exported the model to ONNX once, for backend=onnx: %s (MATCHING_ONNX_CACHE= moves it)", graph)
    return graph


def ids_inputs(text: TextPreparation):
    """The exported token-id model's inputs: `a` and `b`."""
    return text.ids


def piece_inputs(text: TextPreparation, pieces_of: Callable[[list[list[str]]], list[tuple]], frame: tuple[int, ...]):
    """An exported contextual model's inputs: the ids, and each side's word pieces (`pieces_of`: each text's piece
    ids and the word of each piece) in the windows `frame` describes (width, step, cls, sep and pad ids:
    matching.data.preparation.piece_windows), as the run's PyTorch pipeline makes them."""

    def inputs(prepared: PreparedPairs, index: np.ndarray) -> dict[str, np.ndarray]:
        feed = text.ids(prepared, index)
        for side, words in (("a", prepared.words_a), ("b", prepared.words_b)):
            windows = piece_windows(pieces_of([words[i] for i in index]), *frame)
            feed |= {f"{side}_{name}": windows[key] for name, key in zip(PIECE_INPUTS, PIECE_KEYS, strict=True)}
        return feed

    return inputs


def contextual_inputs(parts):
    """A run's contextual graph's inputs: its word pieces from the run's own encoder tokenizer."""
    pieces = parts.source.export.pieces
    return piece_inputs(parts.text, pieces.pieces, (pieces.width, pieces.step, pieces.cls, pieces.sep, pieces.pad))


def exported_contextual_inputs(text: TextPreparation, folder: Path, spec: dict):
    """An exported contextual folder's inputs without torch: its word pieces from the encoder's own tokenizer
    (encoder_tokenizer.json, read by the `tokenizers` library), in the windows serving.json describes."""
    from tokenizers import Tokenizer

    ctx = spec["contextual"]
    tokenizer = Tokenizer.from_file(str(folder / ctx["piece_tokenizer"]))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def pieces_of(texts: list[list[str]]) -> list[tuple]:
        encoded = tokenizer.encode_batch([list(t) for t in texts], is_pretokenized=True, add_special_tokens=False)
        return [(e.ids, e.word_ids) for e in encoded]

    frame = (int(ctx["window"]), int(ctx["step"]), int(ctx["cls_id"]), int(ctx["sep_id"]), int(ctx["pad_id"]))
    return piece_inputs(text, pieces_of, frame)
