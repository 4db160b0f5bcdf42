"""How a generic task's runs are named: by their data, not by the config option that reads it.

`task=pairs` and `task=pairs_rank` read any table; their `task.name` is `${name_from_data:<option>}`, which this
module resolves: the training file's name without its extensions and split words (`claims_train.tsv` -> `claims`,
`/data/claims/train.jsonl.gz` -> `claims`), else the hub dataset's name and config (`nyu-mll/glue` + `rte` ->
`glue-rte`), else the option's own name. Runs then land in `outputs/runs/<task.name>/<aligner>/<time>` (train.yaml's
hydra.run.dir) and reports, model cards and the server call the task by it; `task.name=<name>` still wins.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: Extensions of the tables a generic task reads (taken off the file name, innermost last: `.tsv.gz`).
TABLE_EXTENSIONS = {".gz", ".tsv", ".csv", ".jsonl", ".json", ".ndjson", ".parquet", ".txt", ".arrow"}
#: Words that name a split rather than the data (taken out of the file name wherever they stand as a word).
SPLIT_WORDS = ("train", "training", "dev", "development", "val", "valid", "validation", "test", "testing", "eval")
_SPLIT = re.compile(rf"(?:^|(?<=[-_. ]))(?:{'|'.join(SPLIT_WORDS)})(?=$|[-_. ])", re.IGNORECASE)


def data_name(path: str) -> str:
    """The name of a table's data from its path: the file name less extensions and split words; the folder's name
    when nothing is left (`train.tsv` in `claims/`); "" when neither names anything."""
    for part in reversed(PurePath(path).parts):
        name = part
        while PurePath(name).suffix.lower() in TABLE_EXTENSIONS:
            name = name[: -len(PurePath(name).suffix)]
        name = _SPLIT.sub("", name).strip("-_. ")
        name = re.sub(r"[-_. ]{2,}", lambda m: m.group(0)[0], name)  # `claims__2024` after `claims_train_2024`
        name = re.sub(r"[^\w.-]+", "-", name).strip("-.")  # a folder name on every system
        if name:
            return name
    return ""


def hub_name(name: str | None, config: str | None) -> str:
    """`nyu-mll/glue` with config `rte` -> `glue-rte`; `someone/questions` -> `questions`."""
    if not name:
        return ""
    return "-".join(re.sub(r"[^\w.-]+", "-", str(p)).strip("-.") for p in (str(name).rsplit("/", 1)[-1], config) if p)


def name_from_data(fallback: str, *, _parent_: DictConfig) -> str:
    """The resolver behind `task.name: ${name_from_data:pairs}` (`_parent_`: the task node). The training split's
    path counts only when the user gave it: the default path is made from `task.name` itself."""
    path = _raw(_parent_, "splits", "train", "path")
    given = path is not None and "task.name" not in path
    if given and (name := data_name(str(_parent_.splits.train.path))):
        return name
    hub = _parent_.get("hub") or {}
    return hub_name(hub.get("name"), hub.get("config")) or fallback


def _raw(node: Any, *keys: str) -> str | None:
    """The value at `keys` as written (an interpolation unresolved), or None."""
    if not isinstance(node, DictConfig):
        return None
    value: Any = OmegaConf.to_container(node, resolve=False)
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return None if value is None else str(value)
