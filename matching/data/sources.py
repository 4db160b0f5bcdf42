"""Where a split comes from: a local file in its original format, or the Hugging Face hub as a fallback.

A task config names, per split, a `path` (relative to `paths.data_dir`, or absolute; plain or `.gz`) and an
optional `start`/`stop` slice over the pairs read. When the file is missing and the task has a `hub` entry,
the split is fetched with `datasets` (when the machine is online) into the cache folder.
"""

from __future__ import annotations

import logging
import os
from itertools import islice
from pathlib import Path

from matching.data.downloads import check_reachable
from matching.data.readers import Pair
from matching.data.tasks import Task
from matching.errors import UserError
from matching.extras import require
from matching.files import existing

log = logging.getLogger(__name__)


class CorpusNotFoundError(UserError, FileNotFoundError):
    """A split could be found neither locally nor on the hub; the message says how to get it."""


def resolve_path(path: str | os.PathLike, data_dir: str | os.PathLike) -> Path:
    path = Path(os.path.expanduser(str(path)))
    return path if path.is_absolute() else Path(data_dir) / path


def read_split(task: Task, split: str, data_dir: str | os.PathLike, cache_dir: str | os.PathLike) -> list[Pair]:
    """All pairs of `split` for `task`: read by the task's reader, or from its hub dataset."""
    spec = task.splits[split]
    path = resolve_path(spec.path, data_dir)
    if existing(path) is not None:
        log.info("reading %s %s from %s", task.name, split, path)
        pairs = task.reader(path)
    else:
        pairs = _read_hub(task, split, path, cache_dir)
    return list(islice(pairs, spec.start, spec.stop))


def _read_hub(task: Task, split: str, path: Path, cache_dir: str | os.PathLike):
    hub = task.hub
    how = task.download
    if not hub or split not in hub.get("splits", {}):
        raise CorpusNotFoundError(
            f"{task.name} {split} split not found: no file at {path} (nor {path}.gz).\n"
            f"{how}\nPoint at your copy with paths.data_dir=<folder> (or MATCHING_DATA_DIR), or at this one file "
            f"with task.splits.{split}.path=<file>."
        )
    try:
        datasets = require("datasets", "hub", f"fetching {task.name} from the Hugging Face hub")
        check_reachable()  # offline: fail in seconds, not after datasets' retries
        log.info("%s not found locally; loading %s from the Hugging Face hub (%s)", path, split, hub["name"])
        ds = datasets.load_dataset(
            hub["name"], hub.get("config"), split=hub["splits"][split], cache_dir=str(Path(cache_dir) / "hub")
        )
    except Exception as err:  # offline, hub down, dataset renamed: all end the same way for the user
        raise CorpusNotFoundError(
            f"{task.name} {split} split not found: no file at {path} (nor {path}.gz), and loading "
            f"{hub['name']} from the Hugging Face hub failed ({err}).\n{how}\n"
            f"Or point at your copy with paths.data_dir=<folder> (or MATCHING_DATA_DIR), or at this one file with "
            f"task.splits.{split}.path=<file>."
        ) from err
    fields = hub["fields"]
    label_feature = ds.features[fields["label"]]
    names = getattr(label_feature, "names", None)  # ClassLabel: ints -> names; -1 means "no gold label"
    dropped = 0
    for row in ds:
        label = row[fields["label"]]
        if names is not None:
            if label is None or label < 0:
                dropped += 1
                continue
            label = names[label]
        label = str(label).strip()
        if not label or label == "-":
            dropped += 1
            continue
        group = str(row[fields["group"]]) if fields.get("group") else None
        yield Pair(str(row[fields["a"]]).strip(), str(row[fields["b"]]).strip(), label, group)
    if dropped:
        log.info("%s %s (hub): dropped %d rows without a gold label", task.name, split, dropped)
