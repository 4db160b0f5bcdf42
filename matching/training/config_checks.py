"""The checks of a training config that run before any data is read: each `_target_` node's values against what
its class or function takes, the arithmetic, that the loss and distillation fit the task, and that the optimiser
builds. (A loss checks its own settings when it is built, with the training split's label counts:
matching.training.losses.)"""

from __future__ import annotations

import inspect
import json

import torch
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from matching.errors import ConfigError
from matching.model.embeddings import EmbeddingSource
from matching.model.precision import check
from matching.training.losses import Distillation, loss_class

#: The `_target_` nodes of a training config whose values are checked against what their targets take.
CHECKED_NODES = ("task", "data", "embeddings", "model", "aligner", "intra", "optim", "loss", "system", "callbacks",
                 "logger", "trainer")  # fmt: skip


def check_arguments(node: DictConfig, key: str) -> None:
    """A `_target_` node's values that cannot be what its class or function takes (a word where a number is
    expected, a number where a flag is, a key it does not have) raise RunError naming `key.name`; nested nodes,
    and the nodes of a group without a `_target_` of its own (callbacks), are checked too. Arguments are
    type-checked where their annotation (or default) says bool, int or float."""
    if "_target_" not in node:  # a group of nodes (e.g. callbacks): check each one that builds something
        for name, child in node.items():
            if isinstance(child, DictConfig):
                check_arguments(child, f"{key}.{name}")
        return
    target = get_object(node._target_)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name in node:
        if name.startswith("_") and name.endswith("_"):
            continue
        value = node[name]
        if isinstance(value, DictConfig):
            check_arguments(value, f"{key}.{name}")
            continue
        if name not in params and not takes_any:
            raise ConfigError(
                f"{key}.{name}: {node._target_} takes no argument {name!r}; its arguments: {sorted(params)}"
            )
        kind = _expected_kind(params[name]) if name in params else None
        if value is None or kind is None:
            continue
        ok = {"bool": lambda v: isinstance(v, bool),
              "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}[kind](value)  # fmt: skip
        if not ok:
            what = {"bool": "true or false", "int": "a whole number", "number": "a number"}[kind]
            default = params[name].default
            shown = "" if default is inspect.Parameter.empty else f" (the default is {json.dumps(default)})"
            raise ConfigError(f"{key}.{name}={value!r}: expected {what}{shown}")


_KINDS = {"bool": "bool", "int": "int", "float": "number", "int | float": "number", "float | int": "number"}


def _expected_kind(param: inspect.Parameter) -> str | None:
    """ "bool", "int", "number" or None (anything else, or not known) for a parameter, from its annotation (as
    written, e.g. "int", "Optional[int]", "float | Tensor"), else from the type of its default."""
    annotation = param.annotation
    if annotation is not inspect.Parameter.empty:
        if isinstance(annotation, type):
            text = annotation.__name__
        else:
            text = annotation if isinstance(annotation, str) else repr(annotation).replace("typing.", "")
        text = text.replace("NoneType", "None").replace("Optional[", "Union[None, ").replace("torch.Tensor", "Tensor")
        if text.startswith("Union[") and text.endswith("]"):
            text = " | ".join(t.strip() for t in text[6:-1].split(",") if t.strip() != "None")
        text = " | ".join(t for t in (x.strip() for x in text.split("|")) if t not in ("None", "Tensor"))
        return _KINDS.get(text)
    default = param.default
    if isinstance(default, bool):
        return "bool"
    return "number" if isinstance(default, (int, float)) else None  # torch's int defaults take floats too


def check_config(cfg: DictConfig) -> None:
    """Everything that can be checked before any data is read: the types of the components' arguments, and that
    the optimiser builds."""
    for key in CHECKED_NODES:
        node = cfg.get(key)
        if isinstance(node, DictConfig):
            check_arguments(node, key)
    check_loss(cfg)
    if cfg.get("capture"):
        check_capture(cfg)
    try:
        instantiate(cfg.optim)([torch.nn.Parameter(torch.zeros(1))])
    except (TypeError, ValueError) as err:
        raise ConfigError(
            f"optim: the optimiser cannot be built from {OmegaConf.to_container(cfg.optim)} ({err})"
        ) from None
    check(cfg.get("dtype", "fp32"))


def check_loss(cfg: DictConfig) -> None:
    """A loss that compares the candidates of one query (loss=pairwise, loss=listwise; distill.loss=margin_mse or
    listwise_kl) needs a ranking task; the distillation's settings are checked (matching.training.losses.distilled)."""
    task_kind = str((cfg.get("task") or {}).get("kind") or "classify")
    loss = loss_class(cfg.loss)
    if loss.compares_candidates and task_kind != "rank":
        raise ConfigError(
            f"the loss {loss.__name__} ({cfg.loss._target_}) compares the candidates of one query: it needs a ranking "
            "task (task.kind=rank, e.g. task=wikiqa or task=pairs_rank); a classification task trains with "
            "loss=pointwise"
        )
    distillation = Distillation.of(cfg, task_kind)
    if distillation is not None and distillation.compares_candidates and task_kind != "rank":
        raise ConfigError(
            f"distill.loss={distillation.loss} compares the candidates of one query: it needs a ranking task; a "
            "classification task distils with distill.loss=kl (or auto)"
        )


def check_capture(cfg: DictConfig) -> None:
    """`capture=true` replays the whole step as one CUDA graph per batch shape (matching.training.replay): what
    Lightning would otherwise do inside the step cannot be part of it."""
    trainer = cfg.get("trainer") or {}
    refused = []
    if trainer.get("gradient_clip_val"):
        refused.append(f"trainer.gradient_clip_val={trainer.get('gradient_clip_val')} (Lightning clips between the "
                       f"backward pass and the update, which are one graph here)")  # fmt: skip
    devices, nodes = trainer.get("devices", 1), int(trainer.get("num_nodes") or 1)
    several = (
        devices == -1
        or (isinstance(devices, int) and devices > 1)
        or (isinstance(devices, ListConfig | list) and len(devices) > 1)
    )
    if several or nodes > 1:
        refused.append(f"trainer.devices={devices} trainer.num_nodes={nodes} (several processes: their gradients are "
                       f"averaged during the backward pass, which this replay does not capture; one GPU per run, "
                       f"several runs at once, fills a machine: docs/results/performance.md)")  # fmt: skip
    if int(trainer.get("accumulate_grad_batches") or 1) != 1:
        refused.append(f"trainer.accumulate_grad_batches={trainer.get('accumulate_grad_batches')}")
    if str(trainer.get("precision")) in ("16-mixed", "16"):
        refused.append(f"trainer.precision={trainer.get('precision')} (its loss scaler reads the gradients on the "
                       f"host every step; bf16-mixed needs none)")  # fmt: skip
    if cfg.get("compile") and str(cfg.get("compile_mode") or "default") == "reduce-overhead":
        refused.append("compile_mode=reduce-overhead (CUDA graphs of the model's own, inside the step's "
                       "graph; compile=true with compile_mode=default fuses the kernels that the capture "
                       "records)")  # fmt: skip
    source = (cfg.get("embeddings") or {}).get("_target_")
    if source and get_object(str(source)).collate is not EmbeddingSource.collate:
        refused.append(f"embeddings={source.rpartition('.')[2]} (the step gathers the batch's word ids on the device; "
                       f"this source adds an encoder's inputs to each batch outside the step, which a replay "
                       f"cannot)")  # fmt: skip
    if refused:
        raise ConfigError(
            "capture=true replays the whole training step as one CUDA graph, which cannot be combined with "
            + "; ".join(refused)
            + ": leave that setting out, or train with capture=false"
        )
