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


class UsageError(UserError, ValueError):
    """The command line cannot be used as given (a missing or repeated argument)."""
