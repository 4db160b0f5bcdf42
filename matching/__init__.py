"""matching: pairwise sentence matching with Decomposable Attention and pluggable aligners.

`from matching import Matcher` is the Python API (see matching/matcher.py and docs/python-api.md); it is imported
on first use, so that the commands that need no model (report) stay quick to start.
"""

__all__ = ["Matcher"]


def __getattr__(name: str):
    if name == "Matcher":
        from matching.matcher import Matcher

        return Matcher
    raise AttributeError(f"module 'matching' has no attribute {name!r}")
