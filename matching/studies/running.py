"""One `matching.study` process at a time in a study's folder. A second one (the same command launched again while the
first still runs, say from another terminal or a script that did not stop it) would train the same runs at the same
time into the same files: each run's checkpoints and CSV log written by both, its minutes counted under a doubled
load, and one of them failing when the other's log changed under it. The first holds `<study folder>/running.json`
(its process id, machine and start) while it runs; the second stops before anything, saying which process holds
the folder. A file left by a process that is gone (killed, or its machine restarted) is taken over, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from matching.errors import RunError

log = logging.getLogger(__name__)

#: The file that says which process runs the study in its folder.
RUNNING = "running.json"


def _holder(path: Path, tries: int = 1) -> dict | None:
    """The holder the file names; None when it is gone or unreadable after `tries` reads a tenth of a second apart
    (a holder writes it just after creating it: an empty file read at once may be one being written)."""
    for attempt in range(tries):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # removed meanwhile, being written, or left half written by a killed process
            if attempt + 1 < tries:
                time.sleep(0.1)
    return None


def _alive(holder: dict) -> bool:
    """Whether the holding process still runs; a process on another machine cannot be asked: taken as running."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def only_process(study_dir: Path) -> Iterator[None]:
    """Holds the study folder for this process within the block (see the module docstring); a RunError naming the
    other process when one runs the folder already."""
    study_dir.mkdir(parents=True, exist_ok=True)
    path = study_dir / RUNNING
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    while True:
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path, tries=10)
            if holder is not None and _alive(holder):
                elsewhere = holder.get("host") != me["host"]
                raise RunError(
                    f"{study_dir} is being run by another matching.study (process {holder.get('pid')} on "
                    f"{holder.get('host')}, since {holder.get('since')}): two would train the same runs into the same "
                    "files. Wait for it to finish, or stop it and run this command again (finished runs are skipped, "
                    "interrupted ones continue)" + (f"; if that process is gone, delete {path}" if elsewhere else "")
                ) from None
            log.warning("%s: taken over from process %s, which is no longer running", path, (holder or {}).get("pid"))
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        if (_holder(path) or {}).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)
