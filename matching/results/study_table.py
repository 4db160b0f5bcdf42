"""A study page's table as rows: docs/studies/<study>/study.csv, each row with the looks that decided its comparisons
(seeds.json), as the renderers of the published blocks and the quoted figures read it."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def study_rows(folder: Path) -> list[dict]:
    """The page's rows that have runs (a planned family with none is left out: "not run yet"); a study that added
    seeds until decided (seeds.json) gives each row the decisions of its comparisons, under `decisions`: the baseline
    (or twin) compared with -> the look that decided it (status, seeds a side, difference, Holm-adjusted p)."""
    path = folder / "study.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("n") not in ("", "0", None)]
    decided: dict[tuple[str, str], dict[str, dict]] = {}
    if (folder / "seeds.json").is_file():
        for d in json.loads((folder / "seeds.json").read_text(encoding="utf-8")).get("decisions", []):
            if d.get("looks"):
                look = {"status": d["status"], **d["looks"][-1]}
                decided.setdefault((d["task"], d["family"]), {})[d["baseline"]] = look
    for row in rows:
        row["decisions"] = decided.get((row["task"], row["family"]), {})
    return rows
