"""`matching-serve-onnx ckpt=<exported ONNX folder> [port=8000] [host=...] [quantize=int8] [threads=0] ...`: an exported
model (`matching-export format=onnx`) served on ONNX Runtime alone, on a machine with neither torch, Lightning nor
Hydra (the `serve-onnx` extra; docs/how-to/serving.md): the same endpoints, page, batching and limits as
`matching-serve`, without /align. Its keys are conf/serve.yaml's own, given as key=value, read without Hydra.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from matching.errors import RunError
from matching.serving.server import run_server

USAGE = """Usage: matching-serve-onnx ckpt=<exported ONNX folder> [port=8000] [host=127.0.0.1] [quantize=int8]
    [threads=0] [max_batch_size=32] [batch_timeout=0.0] [timeout=30] [limits.max_pairs=256] ...

Serves a model exported with matching-export format=onnx on ONNX Runtime alone (no torch, Lightning or Hydra needed):
the page at /, POST /classify and /rank, GET /health and /info; /align needs the PyTorch model (matching-serve).
Keys: some of matching-serve's (conf/serve.yaml says what each does), as key=value; --help lists them."""
#: The keys `matching-serve-onnx` takes: some of conf/serve.yaml's (the run's config is not there to override).
EXPORTED_KEYS = ("ckpt", "host", "port", "workers", "allowed_hosts", "cors_origins", "threads", "max_batch_size",
                 "batch_timeout", "timeout", "log_level", "access_log", "limits", "quantize")  # fmt: skip


def usage() -> str:
    """What --help prints: USAGE, then the keys it takes (EXPORTED_KEYS) with their defaults, and no other key of
    conf/serve.yaml (backend, compare, engine, ... are matching-serve's alone)."""
    from matching.files import config_dir

    defaults = OmegaConf.load(config_dir() / "serve.yaml")
    keys = OmegaConf.masked_copy(defaults, list(EXPORTED_KEYS))
    keys.limits.max_text_tokens = "the model's max_length (its serving.json), else 512"
    return f"{USAGE}\n\n== Options ==\n{OmegaConf.to_yaml(keys).rstrip()}"


def main(argv: Sequence[str] | None = None) -> int:
    """`matching-serve-onnx ckpt=<exported ONNX folder> [port=8000] [host=...] [quantize=int8] [threads=0] ...`:
    the server on ONNX Runtime alone, for a machine with neither torch nor Hydra (the `serve-onnx` extra): the
    same endpoints, page, batching and limits as `matching-serve`, without /align (the exported graph returns the
    logits only). Keys are conf/serve.yaml's, given as key=value."""
    from matching.errors import UserError, environment_error, report_bug, report_error
    from matching.files import config_dir

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(usage())
        return 0
    try:
        given = OmegaConf.from_dotlist(args)
        unknown = [key for key in given if key not in EXPORTED_KEYS]
        if unknown or any("=" not in a for a in args):
            raise RunError(f"matching-serve-onnx takes key=value arguments among {', '.join(EXPORTED_KEYS)}; got "
                           f"{' '.join(args)}")  # fmt: skip
        if "ckpt" not in given:
            raise RunError("missing ckpt=<a folder written by matching-export format=onnx>")
        from matching.inference import locate

        if locate(str(given.ckpt))[0] != "onnx":
            raise RunError(
                f"ckpt={given.ckpt} is a trained run or a shared folder, not an exported ONNX model: export it where "
                "the run is (matching-export ckpt=<run> format=onnx out=<folder>) and serve that folder here, or "
                "serve the run itself with matching-serve ckpt=<run> backend=onnx"
            )
        defaults = OmegaConf.load(config_dir() / "serve.yaml")
        for key in ("defaults", "hydra", "compare"):
            defaults.pop(key, None)
        spec = Path(str(given.ckpt)).expanduser() / "serving.json"
        max_length = json.loads(spec.read_text())["max_length"] if spec.is_file() else None
        defaults.limits.max_text_tokens = max_length or 512
        cfg = OmegaConf.merge(defaults, given, {"backend": "onnx", "accelerator": "cpu", "compare": []})
        run_server(cfg)
    except UserError as err:
        return report_error(err)
    except OSError as err:  # the user's paths or machine (a missing folder, permissions, a full disk)
        mistake = environment_error(err)
        return report_bug(err) if mistake is None else report_error(mistake)
    except Exception as err:
        return report_bug(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
