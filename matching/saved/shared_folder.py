"""Shared model folders (`matching-export format=hub`): write one, upload it, download it, and load it safely.

A shared folder holds what a trained run needs for prediction, in formats that cannot run code when read:

    config.yaml        the run's config, reduced to what builds the model and prepares text (task, data,
                       embeddings, model, aligner, intra; plus the choices it was trained with)
    vocab.txt          the vocabulary (one word a line, after the OOV-bucket count)
    model.safetensors  every weight of the model, the frozen word-vectors table included (`embedding.weight`);
                       its metadata holds the task, labels, kind and what the embedding source records (an
                       encoder's identity)
    tokenizer.json     the tokenisation as a Hugging Face `tokenizers` file
    serving.json       labels, kind and every step of the text preparation (see matching.export)
    metrics.json       the run's dev metrics (when it has them)
    provenance.json    the data and embeddings it was trained on, by file name (or hub id) and sha256
    examples.json      a few dev pairs of a task without curated examples (the server's page shows them)
    README.md          the model card: task, aligner, dev metrics, the data, the training command, the vectors or
                       encoder; like every file here, it names no path of the training machine

Loading (`read_shared`) reads YAML, text and safetensors only, never a pickle, and builds nothing that the
config names unless it is one of matching's own model and text components (`SHARED_TARGETS`): a config.yaml from
someone else cannot make Hydra call an arbitrary function. What an embedding source loads from elsewhere (an
encoder) is not in the folder: the config names it by hub id and revision, and the weights are checked against the
sha256 recorded at training.

Write one with `matching-export ckpt=<run> format=hub out=DIR`; with `push_to_hub=true repo_id=<you>/<name>`
(`private=true` for a new private repository) it is also uploaded, which needs the `hub` extra and a login
(`hf auth login` or `HF_TOKEN`); a failed upload leaves the folder complete. The model card's training command is
the run's recorded Hydra overrides when it has them. Read one with `Matcher.load(DIR)`, or
`Matcher.load("<you>/<name>")` from the hub. A contextual run's folder names its encoder by its own
`embeddings.model` when that is a hub name; for a run trained from a local encoder folder, give the hub id and
revision of the same weights: `encoder=<owner/name> encoder_revision=<commit>`.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import shutil
from pathlib import Path, PurePath
from typing import Any

from omegaconf import DictConfig, OmegaConf

from matching.configs import CONF
from matching.data.tables import text_names
from matching.data.vocab import hf_tokenizer
from matching.errors import RunError
from matching.extras import require
from matching.files import write_atomic, write_json, write_text_atomic
from matching.model.assembly import TrainedModel
from matching.saved.examples import EXAMPLES, run_examples
from matching.saved.onnx_folder import serving_spec
from matching.saved.provenance import PROVENANCE, describe_data, read_provenance
from matching.saved.run_folder import option_name
from matching.saved.shared_reading import WEIGHTS

log = logging.getLogger(__name__)

#: The config nodes a shared folder keeps: what builds the model and prepares text, and the recorded choices.
KEPT = ("task", "data", "embeddings", "model", "aligner", "intra", "choices", "seed", "dtype")
# --- writing ----------------------------------------------------------------------------------------------------


def shared_config(run: TrainedModel, reference: dict | None = None) -> DictConfig:
    """The run's config for a shared folder: the KEPT nodes, with no path of the training machine in it (the
    embedding source's sharing part says how its node reads: `reference`, see SourceSharing.reference)."""
    cfg = OmegaConf.create({k: copy.deepcopy(run.cfg[k]) for k in KEPT if k in run.cfg})
    cfg.data.data_dir, cfg.data.cache_dir = "data", "data/cache"  # for evaluating on local corpora, if ever
    run.source.sharing.node(cfg.embeddings, reference)
    for name, split in (cfg.task.get("splits") or {}).items():  # an absolute split (a file of one's own, the
        if split is not None and Path(str(split.path)).is_absolute():  # demo's sample): by name only, as the vectors
            cfg.task.splits[name].path = Path(str(split.path)).name
    read = set((read_provenance(run.run_dir).get("data") or {}).keys())
    if read:  # the splits the run read (provenance.json); no other, such as a test split it never opened
        for name in [n for n in (cfg.task.get("splits") or {}) if n not in read]:
            cfg.task.splits[name] = None
        for key in ("eval_splits", "test_splits"):
            if key in cfg.task:
                cfg.task[key] = [n for n in cfg.task[key] if n in read]
    return cfg


def metadata(run: TrainedModel, reference: dict | None) -> dict[str, Any]:
    """What the checkpoint says about itself (MatchingSystem.on_save_checkpoint), for the safetensors header."""
    record = run.source.sharing.record(run.model.source_record, reference)
    return {"task": run.task.name, "labels": run.labels, "kind": run.kind, "encoder": record}


def write_folder(run: TrainedModel, out: Path, encoder: str | None = None, encoder_revision: str | None = None) -> Path:
    """Write the shared folder of a trained run into `out`; returns `out`."""
    safetensors = require("safetensors.torch", "hub", "writing a shared model folder (safetensors)")
    reference = run.source.sharing.reference(run.cfg.embeddings, encoder, encoder_revision)
    out.mkdir(parents=True, exist_ok=True)
    cfg = shared_config(run, reference)
    write_text_atomic(out / "config.yaml", OmegaConf.to_yaml(cfg))
    shutil.copyfile(run.run_dir / "vocab.txt", out / "vocab.txt")  # the mode of a new file (umask)
    tensors = {k: v.detach().cpu().contiguous() for k, v in run.model.state_dict().items()}
    meta = {"matching": json.dumps(metadata(run, reference)), "format": "pt"}
    write_atomic(out / WEIGHTS, lambda tmp: safetensors.save_file(tensors, str(tmp), metadata=meta))
    hf_tokenizer(run.text.tokenizer, run.vocab).save(str(out / "tokenizer.json"))

    write_json(out / "serving.json", serving_spec(run, "hub", WEIGHTS, reference))
    metrics = _metrics(run)
    if metrics:
        write_json(out / "metrics.json", metrics)
    # path-free by construction (matching.saved.provenance, matching.saved.examples)
    for kept in (PROVENANCE, EXAMPLES):
        if (run.run_dir / kept).is_file() and run.run_dir.resolve() != out.resolve():
            shutil.copyfile(run.run_dir / kept, out / kept)
    write_text_atomic(out / "README.md", model_card(run, metrics, reference))
    return out


def training_row(run: TrainedModel, metrics: dict, provenance: dict) -> str:
    """How long it trained and in what arithmetic: the epochs it ran (metrics.json), the best one, the most the
    config allowed, and what its `dtype` computed in on the training machine (provenance.json)."""
    parts = []
    if metrics.get("epochs") is not None:
        most = run.cfg.get("trainer", {}).get("max_epochs")
        best = f", the best checkpoint's epoch {int(metrics['best_epoch'])}" if metrics.get("best_epoch") else ""
        parts.append(f"{int(metrics['epochs'])} epochs" + (f" of at most {most}" if most else "") + best)
    arithmetic = provenance.get("arithmetic") or {}
    dtype = str(run.cfg.get("dtype", "fp32"))
    parts.append(f"`dtype={dtype}`" + (f": {arithmetic['computed_in']} where it was trained" if arithmetic else ""))
    return "; ".join(parts)


def _metrics(run: TrainedModel) -> dict[str, float]:
    file = run.run_dir / "metrics.json"
    return json.loads(file.read_text()) if file.is_file() else {}


def training_command(run: TrainedModel) -> tuple[str, bool]:
    """The command that trained the run, and whether it is the recorded one (Hydra's .hydra/overrides.yaml) or
    rebuilt from the config groups it chose."""
    recorded = run.run_dir / ".hydra" / "overrides.yaml"
    if recorded.is_file():
        overrides = [str(o) for o in OmegaConf.load(recorded)]
        overrides = [by_name(o) for o in overrides if not o.split("=")[0].startswith(("paths.", "hydra."))]
        return " ".join(["python -m matching.train", *overrides]), True
    chosen = {k: v for k, v in (run.cfg.get("choices") or {}).items() if "/" not in k and k != "paths"}
    listed = OmegaConf.to_container(OmegaConf.load(CONF / "train.yaml").defaults)
    defaults = {k: v for item in listed if isinstance(item, dict) for k, v in item.items()}
    first = [k for k in ("task", "aligner") if k in chosen]
    words = [f"{k}={chosen[k]}" for k in first] + [
        f"{k}={v}" for k, v in chosen.items() if k not in first and str(v) != str(defaults.get(k))
    ]
    return " ".join(["python -m matching.train", *words, f"seed={run.cfg.get('seed')}"]), False


#: An absolute path in an override's value (`/home/me/x.tsv`, `~/x.tsv`), not the `//` of a URL.
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:~?/)[^\s,\]'\"]*")


def by_name(override: str) -> str:
    """An override with each absolute path in its value replaced by the file's name (`task.splits.train.path=
    /home/me/claims_train.tsv` -> `task.splits.train.path=claims_train.tsv`): a model card names no path of the
    training machine."""
    key, eq, value = override.partition("=")
    return key + eq + _ABSOLUTE.sub(lambda m: PurePath(m.group()).name, value) if eq else override


def model_card(run: TrainedModel, metrics: dict[str, float], encoder: dict | None) -> str:
    """The folder's README.md: what the model is, how well it did on dev, how it was trained, how to load it."""
    task, kind = run.task.name, run.kind
    aligner = option_name(run.cfg, "aligner")
    intra = option_name(run.cfg, "intra") if run.cfg.get("intra") else "none"
    command, recorded = training_command(run)
    dev = {k: v for k, v in metrics.items() if k.startswith("val")}
    rows = "\n".join(f"| {k} | {v:.4f} |" for k, v in sorted(dev.items())) or "| (no metrics.json in the run) | |"
    params = sum(p.numel() for p in run.model.parameters())
    provenance = read_provenance(run.run_dir)
    vectors = run.source.sharing.card_line(encoder)
    used = provenance.get("embeddings") or {}
    if used.get("sha256"):
        vectors += f", sha256 `{used['sha256'][:16]}…`"
    data = "<br>".join(describe_data(provenance)) or "(not recorded: a run trained before provenance.json)"
    examples = run_examples(run.run_dir) or []
    own = run.cfg.task.get("columns") or {}  # the run's own names of its texts (claim, evidence), else a and b
    (a, b), label = text_names(own), own.get("label") or "label"
    head = (
        "| question | candidates (✓ correct) |\n|---|---|"
        if kind == "rank"
        else f"| {a} | {b} | {label} |\n|---|---|---|"
    )
    rows_of_examples = "\n".join(_example_row(e, run.labels[-1]) for e in examples)
    examples_part = f"\n## Examples from its dev data\n\n{head}\n{rows_of_examples}\n" if examples else ""
    note = ("Files are named without their folders; provenance.json gives their sha256." if recorded
            else "(rebuilt from the options the run chose; config.yaml holds every other setting)")  # fmt: skip
    what = "ranks candidates (pointwise, by P(match))" if kind == "rank" else f"classifies pairs into {run.labels}"
    tags = ["matching", "decomposable-attention", f"aligner-{aligner}", task]
    # library_name: the distribution's name, what pip installs (the import package is `matching`; `matching` on PyPI
    # is another project)
    front = {"library_name": "sentence-matching", "tags": tags, "pipeline_tag": "text-classification"}
    return f"""---
{OmegaConf.to_yaml(OmegaConf.create(front)).strip()}
---
# {task} · {aligner} · Decomposable Attention

A sentence-pair model trained with `matching` (Decomposable Attention, Parikh et al. 2016, with the
`{aligner}` aligner). It {what}.

| | |
|---|---|
| task | `{task}` ({kind}; labels {run.labels}) |
| aligner | `{aligner}` (intra-sentence attention: `{intra}`) |
| word representations | {vectors} |
| trained on | {data} |
| training | {training_row(run, metrics, provenance)} |
| parameters | {params:,} |

## Dev metrics (best checkpoint)

| metric | value |
|---|---|
{rows}

## How it was trained

```bash
{command}
```
{note}
{examples_part}
## Use it

```bash
pip install 'sentence-matching[hub]'   # imported as `matching`
```

```python
from matching import Matcher

matcher = Matcher.load("<this folder, or owner/name on the hub>")
matcher.predict([("first text", "second text")])
```

Loading reads `config.yaml`, `vocab.txt` and `model.safetensors` only: no pickle, and the config may name only
matching's own components, so loading this folder cannot run code. `tokenizer.json` and `serving.json` describe
the text preparation for clients that do not use `matching`.
"""


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _example_row(example: list | dict, match: str) -> str:
    """A row of the card's examples table: `[a, b, label]`, or `{query, candidates, labels}` of a ranking task
    (`match`: the label of a correct candidate)."""
    if isinstance(example, dict):
        labels = example.get("labels") or [None] * len(example["candidates"])
        pairs = zip(example["candidates"], labels, strict=True)
        marked = [("✓ " if label == match else "") + _cell(c) for c, label in pairs]
        return f"| {_cell(example['query'])} | {'<br>'.join(marked)} |"
    return f"| {_cell(example[0])} | {_cell(example[1])} | {_cell(example[2]) if len(example) > 2 else ''} |"


def push(folder: Path, repo_id: str, private: bool = False) -> str:
    """Upload a shared folder to the hub repository `repo_id` (created if needed); returns the commit's URL."""
    hub = require("huggingface_hub", "hub", "uploading to the Hugging Face hub")
    try:
        api = hub.HfApi()
        api.create_repo(repo_id, exist_ok=True, private=private)
        commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message="matching-export")
    except Exception as err:  # no login, no permission, offline: the same advice
        raise RunError(
            f"cannot upload {folder} to the hub repository {repo_id} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); log in first (hf auth login, or set HF_TOKEN) with a "
            f"token that may write to {repo_id.split('/')[0]}, and check the network. The folder itself is complete: "
            "upload it again with push_to_hub=true, or by hand."
        ) from None
    return str(getattr(commit, "commit_url", commit))
