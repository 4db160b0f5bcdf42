"""`load`: a `Predictor` from any form a trained model is saved in, on the backend asked for.

    a run directory               outputs/runs/wikiqa/coda/<time>        (its checkpoints/best.ckpt)
    its checkpoints/ folder       outputs/runs/wikiqa/coda/<time>/checkpoints
    a checkpoint file             .../checkpoints/last.ckpt
    a shared model folder         written by matching-export format=hub (safetensors, never unpickled)
    a hub repository id           owner/name of such a folder (downloaded once into the hub's cache)
    an exported ONNX folder       written by matching-export format=onnx (or its model.onnx): ONNX Runtime only

`backend`: torch (PyTorch eager), onnx (ONNX Runtime, CPU) or auto (onnx for an exported ONNX folder, else torch).
A run or a shared folder asked for onnx is exported once into a cache folder beside its weights' hash
(`$MATCHING_ONNX_CACHE`, default ~/.cache/matching/onnx/<sha256 of the weights>/), `quantize=int8` then quantizes it
once. An exported ONNX folder loads with neither torch nor Hydra imported: what its text preparation needs is in
its serving.json and vocab.txt.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matching.errors import RunError
from matching.inference.onnx_backend import QUANTIZE, OnnxBackend, cache_root
from matching.inference.predictor import Predictor
from matching.saved import SAVED_FORMS
from matching.saved.shared_reading import REQUIRED, download, read_shared

log = logging.getLogger(__name__)

#: A Hugging Face hub repository id: `owner/name` (what `load` downloads when no such path exists here).
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _torch_runtime():
    from matching.inference.torch_backend import TorchBackend  # here: an ONNX Runtime predictor needs no torch

    return TorchBackend


#: The runtimes a trained model runs on: each a Backend (matching.inference.predictor) class whose `from_trained`
#: loads a trained model onto it (exporting and quantizing what it needs). A new runtime is one module and one row.
RUNTIMES: dict[str, Callable[[], Any]] = {"torch": _torch_runtime, "onnx": lambda: OnnxBackend}
BACKENDS = ("auto", *RUNTIMES)


def exported_form(folder: Path) -> str | None:
    """Which exported form the local `folder` is: "onnx" (an exported ONNX folder, or its .onnx file), "shared" (a
    shared model folder), or None (a run directory, a checkpoint, or nothing saved)."""
    if folder.is_file() and folder.suffix == ".onnx":
        return "onnx"
    if folder.is_dir() and (folder / "model.onnx").is_file() and (folder / "serving.json").is_file():
        return "onnx"
    if folder.is_dir() and all((folder / name).is_file() for name in REQUIRED):
        return "shared"
    return None


def locate(path: str | os.PathLike, revision: str | None = None) -> tuple[str, Path]:
    """Which saved form `path` is: ("run", its checkpoint file), ("shared", the folder) or ("onnx", the .onnx
    file); a hub id is downloaded first. Nothing is loaded yet."""
    folder = Path(path).expanduser()
    if not folder.exists() and REPO_ID.match(str(path)) and not str(path).startswith("."):
        return "shared", download(str(path), revision)
    exported = exported_form(folder)
    if exported == "onnx":
        return "onnx", folder if folder.is_file() else folder / "model.onnx"
    if exported == "shared":
        return "shared", folder
    if not folder.exists() and folder.suffix == ".ckpt":  # a checkpoint by name: say which its folder has
        from matching.saved.run_folder import check_checkpoint

        check_checkpoint(folder)
    if not folder.exists():
        raise RunError(f"no run directory, checkpoint or shared model folder at {folder}; give {SAVED_FORMS}")
    from matching.saved.run_folder import find_checkpoint

    return "run", find_checkpoint(folder)


def saved_config(path: str | os.PathLike):
    """The config a command composes its own under for the model at `path` (the run's saved config; a shared
    folder's; an exported ONNX folder's config.yaml, or none)."""
    from omegaconf import OmegaConf

    from matching.saved.earlier_versions import upgraded
    from matching.saved.run_folder import run_config

    form, where = locate(path)
    if form == "run":
        return run_config(where)
    config = where.parent / "config.yaml" if form == "onnx" else where / "config.yaml"
    if not config.is_file():
        return OmegaConf.create()
    try:
        return upgraded(OmegaConf.load(config))
    except Exception as err:
        raise RunError(f"cannot read {config} ({type(err).__name__}: {err})") from None


def load(
    path: str | os.PathLike,
    *,
    backend: str = "auto",
    quantize: str | None = None,
    reduce_range: bool | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    revision: str | None = None,
    overrides: dict[str, Any] | None = None,
    config: Any = None,
    threads: int = 0,
    encoder_backend: str = "torch",
) -> Predictor:
    """The `Predictor` of the model at `path` (see the module docstring). `device`: cpu, cuda[:N] or auto (torch
    only); `dtype`: fp32, bf16 or auto, default the run's own (torch only); `overrides`: dotted config keys, e.g.
    `{"data.batch_tokens": 4096}`; `config`: the run's config as a command composed it (else the saved one);
    `threads`: intra-op threads of every call (0: chosen per call, matching.inference.threads); `quantize`: int8
    (ONNX Runtime; `reduce_range`: None picks it from the CPU); `encoder_backend`: onnx runs a contextual model's
    frozen encoder on ONNX Runtime for new text, the model on PyTorch (matching.inference.onnx_encoder)."""
    if encoder_backend not in ("torch", "onnx"):
        raise RunError(f"encoder_backend must be torch or onnx, got {encoder_backend!r}")
    if backend not in BACKENDS:
        raise RunError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if quantize not in QUANTIZE:
        raise RunError(f"quantize must be int8 or none, got {quantize!r}")
    if quantize and backend == "torch":
        raise RunError("quantize=int8 runs on ONNX Runtime: give backend=onnx (or leave backend=auto)")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
        raise RunError(f"threads must be a whole number >= 0 (0: chosen per call), got {threads!r}")
    if dtype is not None:  # before anything is read or downloaded
        from matching.model.precision import check

        check(dtype)
    form, where = locate(path, revision)
    if form == "onnx":
        if backend == "torch":
            raise RunError(
                f"{where.parent} is an exported ONNX model: it runs on ONNX Runtime only (backend=onnx). For "
                "PyTorch, load the run directory or shared folder it was exported from"
            )
        if dtype not in (None, "fp32") or device not in ("cpu", "auto"):
            raise RunError("an exported ONNX model runs in float32 on the CPU (or int8 with quantize=int8)")
        return from_export(where, quantize, reduce_range, overrides or {}, threads)
    backend = "onnx" if backend == "auto" and quantize else ("torch" if backend == "auto" else backend)
    predictor = from_weights(form, where, backend, quantize, reduce_range, device, dtype, overrides or {}, config,
                             threads)  # fmt: skip
    if encoder_backend == "onnx":
        from matching.inference.onnx_encoder import OnnxEncoder

        encoder = predictor.backend.text_states
        if encoder is None or predictor.backend.device != "cpu":
            raise RunError("encoder_backend=onnx runs a contextual model's encoder (frozen or fine-tuned) on ONNX "
                           "Runtime for new text, with the model on PyTorch on the CPU (backend=torch, device=cpu); "
                           "this model has no such encoder here")  # fmt: skip
        encoder.encode_new_text_with(OnnxEncoder(encoder, cache_root()))
    return predictor


# -- a run or a shared folder: the PyTorch model --------------------------------------------------------------------
def from_weights(form: str, where: Path, backend: str, quantize: str | None, reduce_range: bool | None, device: str,
                 dtype: str | None, overrides: dict, config: Any, threads: int) -> Predictor:  # fmt: skip
    from matching.inference.torch_backend import device_name
    from matching.model import precision
    from matching.model.assembly import trained_model
    from matching.saved.run_folder import load_run

    device = device_name(device)
    settings = dict(overrides)
    if dtype is not None:
        settings["dtype"] = precision.check(dtype)
    if form == "run":
        parts = load_run(where, config, settings)
    else:
        cfg, weights_file, vocab, weights, meta = read_shared(where, settings, config)
        parts = trained_model(cfg, where, weights_file, vocab, weights, meta)
    cfg, run_dir, weights_file = parts.cfg, parts.run_dir, parts.weights_file
    columns = {k: None if v is None else str(v) for k, v in (cfg.task.get("columns") or {}).items()}
    common = dict(labels=list(parts.task.labels), kind=parts.kind, task=parts.task.name, columns=columns,
                  origin=run_dir if form == "shared" else where, config=cfg, null_token=bool(parts.model.null_token),
                  reads_every_word=parts.source.reads_every_word)  # fmt: skip
    about = {"run_dir": run_dir, "weights": weights_file, "trained_dtype": str(cfg.get("dtype", "fp32"))}
    runtime = RUNTIMES[backend]().from_trained(parts, device=device, threads=threads, quantize=quantize,
                                                reduce_range=reduce_range)  # fmt: skip
    return Predictor(parts.text, runtime, dtype=runtime.arithmetic, about=about | runtime.about, **common)


# -- an exported ONNX folder: no torch --------------------------------------------------------------------------------
def from_export(graph: Path, quantize: str | None, reduce_range: bool | None, overrides: dict,
                threads: int) -> Predictor:  # fmt: skip
    from matching.saved.onnx_folder import read_exported

    spec, text = read_exported(graph, overrides)
    backend = OnnxBackend.from_folder(graph, text, spec, threads=threads, quantize=quantize, reduce_range=reduce_range)
    about = {"exported": spec.get("about") or {}, "checkpoint": spec.get("checkpoint"), "graph": backend.model_file,
             "checkpoint_sha256": spec.get("checkpoint_sha256"), "trained_dtype": spec.get("dtype")}  # fmt: skip
    return Predictor(text, backend, labels=list(spec["labels"]), kind=spec["kind"], task=spec["task"],
                     columns=spec.get("columns") or {}, dtype=backend.arithmetic, origin=graph.parent, about=about,
                     null_token=bool((spec.get("about") or {}).get("null_token")),
                     reads_every_word=bool(spec.get("contextual")))  # fmt: skip
