"""matching: pairwise sentence matching with Decomposable Attention and pluggable aligners.

`from matching import Matcher` is the Python API (see matching/matcher.py and docs/reference/python-api.md); it is
imported on first use, so that the commands that need no model (report) stay quick to start.
"""

from pathlib import Path

from omegaconf import OmegaConf

from matching.saved.earlier_versions import keep_old_import_paths
from matching.saved.run_names import name_from_data

__all__ = ["DEMO_DATA", "Matcher"]

DEMO_DATA = Path(__file__).resolve().parent / "demo_data"
"""The demo's sample (SNLI pairs, word vectors, new pairs), package data: found through the package, never the
working directory, so that `make demo` works from any folder and from an installed package. Configs name its files
as `${demo_data:<file>}` (conf/task/snli_sample.yaml); the resolver is registered on the package's import, so that
every way of composing a config (the commands, Hydra's compose API, a test) resolves it."""


OmegaConf.register_new_resolver("demo_data", lambda name="": str(DEMO_DATA / name), replace=True)
# A generic task's name from its data (`task=pairs` on claims_train.tsv: `claims`), for the same reason here.
OmegaConf.register_new_resolver("name_from_data", name_from_data, replace=True)
# Code written for the flat layout (`from matching.aligners import Aligner`) still imports, with a warning.
keep_old_import_paths()


def __getattr__(name: str):
    if name == "Matcher":
        from matching.matcher import Matcher

        return Matcher
    raise AttributeError(f"module 'matching' has no attribute {name!r}")
