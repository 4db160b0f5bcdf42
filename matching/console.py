"""What a command prints on the console and what only its log file keeps. A training run's console (conf/hydra/
job_logging/train.yaml) shows its warnings and errors and the few lines logged with `extra=CONSOLE` (its start,
one line an epoch, its result); its train.log keeps every line. Every room logs through this, so it stands with the
base modules (errors, files)."""

from __future__ import annotations

import logging

#: The `extra` of a log record meant for the console too.
CONSOLE = {"console": True}


class ConsoleLines(logging.Filter):
    """The console's filter: warnings, errors and the records logged with `extra=CONSOLE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or bool(getattr(record, "console", False))


def lines_once() -> None:
    """Lightning prints its messages through console handlers of its own (`INFO: Seed set to 1`) besides the
    command's logging, so every one came twice; they go, and its records reach the console once, through the
    command's handlers (a training run's: `ConsoleLines`, which keeps its warnings). Called when a run starts, after
    Lightning is imported (it adds them at import)."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(handler)
        logger.propagate = True
