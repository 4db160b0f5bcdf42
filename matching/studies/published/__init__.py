"""Each study's published rendering, beside the study: the renderers of the README's and docs' `<!-- results:... -->`
blocks that quote it. A study's spec (conf/study/<name>.yaml) names its renderers under `published`, and the figures
measured elsewhere name theirs in docs/figures/measured_elsewhere.yaml; `python -m matching.results.publish render`
reads those declarations and calls each renderer with the folder of its data (matching.results.publish)."""

from __future__ import annotations

from pathlib import Path

from matching.studies.spec import Primary, read_spec


def declared_primary(folder: Path) -> dict[str, Primary]:
    """The primary comparison, per task, that the spec of the study published in `folder` (docs/studies/<study>)
    declares: conf/study/<study>.yaml of the same clone, read by `read_spec` as the study itself reads it (one reader
    of `primary`). Empty when the study declares none or has no spec there."""
    import yaml

    spec = folder.parents[2] / "conf" / "study" / f"{folder.name}.yaml"
    if not spec.is_file():
        return {}
    return read_spec(yaml.safe_load(spec.read_text(encoding="utf-8"))).primary
