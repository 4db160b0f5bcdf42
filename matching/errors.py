"""Whose error it is: a mistake a user can make, or a bug in matching.

A mistake a user can make (a missing or malformed file, a config value that cannot be used, input that cannot be
scored, an unusable checkpoint, a missing extra) raises a `UserError` whose message says what was wrong and what to
do. Every command prints it as one paragraph starting with `error:` and exits with status 2 (matching/cli.py).
Anything else that escapes a command is a bug in matching: the command shows the traceback, says that it is a bug
and where to report it, and exits with status 1.

The subclasses keep the built-in exception they refine (`ConfigError` is a `ValueError`, `MissingFileError` a
`FileNotFoundError`), so code that used matching as a library and caught those still does.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback

#: What the commands print under the traceback of a bug.
BUG_REPORT = (
    "This is a bug in matching, not a mistake of yours. Please report it to matching's maintainers (the project's "
    "issue tracker) with the traceback above, the command line, and the run's config.yaml if there is one. "
    "Files already written (checkpoints, metrics of finished epochs) are kept."
)


class UserError(Exception):
    """A mistake a user can make; the message says what was wrong and what to do, in one paragraph."""


class ConfigError(UserError, ValueError):
    """A config value (a command-line override, a YAML file of conf/, a run's saved config) that cannot be used; the
    message names the key and the values it may take."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder that the user named, or that a command needs, does not exist; the message says which and
    where it comes from."""


class DataFormatError(UserError, ValueError):
    """A file is malformed (a corpus, a vocabulary, an archive of vectors, input pairs). The message names the file,
    the 1-based line number where there is one, and what to do."""


class RunError(UserError, ValueError):
    """A trained model (a run directory, a checkpoint, a shared or exported folder) cannot be used, or not this
    way; the message says what is wrong and what to do."""


class UsageError(UserError, ValueError):
    """The command line cannot be used as given (a missing or repeated argument)."""


#: Operating-system errors that a user's paths and machine cause (a folder that does not exist, a file where a folder
#: should be, permissions, a full disk or quota, a read-only place): the user's to fix, not bugs of ours.
ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ENOENT",
        "ENOTDIR",
        "EISDIR",
        "EEXIST",
        "EACCES",
        "EPERM",
        "ENOSPC",
        "EDQUOT",
        "EROFS",
        "ENAMETOOLONG",
        "EMFILE",
        "ENFILE",
    )  # fmt: skip
    if hasattr(errno, name)
)

_ADVICE = {
    errno.ENOENT: "a folder on that path does not exist: create it, or choose another place",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another place",
    errno.EISDIR: "that path is a folder, where a file was meant: name a file",
    errno.EEXIST: "something is already there (a file where a folder was meant?): choose another place",
    errno.EACCES: "you may not read or write there: check its permissions, or choose another place",
    errno.EPERM: "the system does not allow it there: check its permissions, or choose another place",
    errno.ENOSPC: "the disk is full: free some space, or write elsewhere",
    errno.EROFS: "that file system is read-only: write elsewhere",
}


def environment_error(err: OSError) -> UserError | None:
    """An operating-system error caused by the user's paths or machine as a UserError (one paragraph naming the path
    and what to do), or None when it is not one of those (then it is a bug, shown with its traceback)."""
    if err.errno not in ENVIRONMENT_ERRNOS:
        return None
    paths = " -> ".join(str(p) for p in (err.filename, err.filename2) if p is not None)
    advice = _ADVICE.get(err.errno, "check the path and the machine's limits")
    where = f" at {paths}" if paths else ""
    return UserError(
        f"{err.strerror or err}{where}; {advice}. Nothing already written was removed (checkpoints and metrics of "
        "finished epochs are kept)"
    )


def report_error(err: BaseException) -> int:
    """Print a user's mistake as one paragraph on stderr; the exit status is 2."""
    if os.environ.get("MATCHING_DEBUG"):
        raise err
    print(f"error: {err}", file=sys.stderr)
    return 2


def report_bug(err: BaseException) -> int:
    """Print a bug of ours: its traceback, then a line that says it is a bug and where to report it; status 1."""
    traceback.print_exception(err, file=sys.stderr)
    print(f"\n{BUG_REPORT}", file=sys.stderr)
    return 1
