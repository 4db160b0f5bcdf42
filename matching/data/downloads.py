"""Files fetched from the Hugging Face hub when they are not on disk (word vectors; corpora go through `datasets`).

`huggingface_hub` shows a progress bar, resumes an interrupted download (`.incomplete` files under the target
folder) and checks the file against the hub's hash. Before anything is tried, a quick probe says whether the hub
can be reached at all, so an offline machine gets its message in a second or two, not after a minute of retries.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from matching.errors import UserError
from matching.extras import require

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


class OfflineError(UserError, OSError):
    """The hub cannot be reached (HF_HUB_OFFLINE is set, or no connection)."""


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def check_reachable() -> None:
    """Raise OfflineError unless the hub's host accepts a connection within PROBE_TIMEOUT_S."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise OfflineError("HF_HUB_OFFLINE is set")
    url = urlparse(hub_endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        raise OfflineError(f"cannot reach {url.hostname}: {err.strerror or err}") from err


def download_from_hub(repo_id: str, filename: str, folder: Path, repo_type: str | None = None) -> Path:
    """`filename` of the hub repository `repo_id`, downloaded into `folder` (resumed if a previous download was
    interrupted); returns its path."""
    check_reachable()
    hf_hub_download = require("huggingface_hub", "hub", "downloading from the Hugging Face hub").hf_hub_download

    log.info("downloading %s from the Hugging Face hub (%s) into %s", filename, repo_id, folder)
    return Path(hf_hub_download(repo_id, filename, repo_type=repo_type, local_dir=folder))
