"""`matching-export ckpt=<path> format=onnx|torchscript|hub [out=<dir>]` (conf/export.yaml): a model to serve or share.

`format=onnx|torchscript` writes into `out` (default `<run dir>/export/`) the model (`model.onnx` or `model.pt`), a
copy of `vocab.txt`, `tokenizer.json` (the tokenisation as a Hugging Face `tokenizers` file, usable from Python,
Rust or JavaScript) and `serving.json` (labels, task kind, and every step of the text preparation: tokenizer, OOV
hashing, maximum length, trimming), so that a client needs nothing of this package. The exported model takes two
int64 tensors of token ids, a (batch, len_a) and b (batch, len_b), 0-padded on the right, with batch and both
lengths dynamic, and returns class probabilities `probs` and `logits` (batch, classes); a ranking model ranks
candidates by logits[:, 1] − logits[:, 0].
Export needs the `export` extra for ONNX: `pip install -e ".[export]"`.

`format=hub` writes a shared model folder (default `<run dir>/hub/`; see matching.saved.shared_folder): config,
vocabulary, weights as safetensors, tokenizer.json, serving.json and a model card, which `Matcher.load(folder)` loads
without unpickling anything; `push_to_hub=true repo_id=<owner/name>` uploads it to the Hugging Face hub. A run over an
encoder (`embeddings=minilm_contextual`) names it by hub id (`encoder=`, `encoder_revision=` when the run used a local
folder).
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.utils import get_object
from omegaconf import DictConfig

from matching.cli import command
from matching.errors import RunError
from matching.inference import REPO_ID
from matching.saved.run_folder import find_checkpoint


def export_command(cfg: DictConfig) -> Path:
    """The `export` command on a composed config (conf/export.yaml over the run's saved config)."""
    # Imported here, not at the top: torch and Lightning load only after Hydra has read the arguments, so that
    # a typo is answered in under a second (benchmarks/bench_cli_errors.py).
    from matching.saved.formats import check_format, export
    from matching.saved.run_folder import load_run
    from matching.saved.shared_folder import push

    fmt = cfg.format
    check_format(fmt, get_object(cfg.embeddings._target_), str(cfg.ckpt))  # before the run (an encoder) is loaded
    if cfg.push_to_hub and (fmt != "hub" or not cfg.repo_id or not REPO_ID.match(str(cfg.repo_id))):
        raise RunError(
            "push_to_hub=true uploads a shared folder: give format=hub and repo_id=<owner/name> (your user or "
            f"organisation on huggingface.co, then the model's name); got format={fmt} repo_id={cfg.repo_id}"
        )
    run = load_run(find_checkpoint(cfg.ckpt), cfg)
    out = Path(cfg.out or run.run_dir / ("hub" if fmt == "hub" else "export"))
    path = export(run, str(fmt), out, cfg.encoder, cfg.encoder_revision)
    if fmt == "hub":
        print(f"wrote the shared model folder {out} (config.yaml, vocab.txt, {path.name}, README.md, ...)")
        if cfg.push_to_hub:
            url = push(out, str(cfg.repo_id), bool(cfg.private))
            print(f"uploaded to https://huggingface.co/{cfg.repo_id} ({url})")
    else:
        print(f"wrote {path} (with vocab.txt, tokenizer.json and serving.json beside it)")
    return path


main = command("export", export_command, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
