"""What the README publishes of the SciTail study (conf/study/scitail.yaml, whose `published` names this renderer): ours
on the full corpus, to set beside the CoDA paper's Table 3 row, rendered from the study's page in docs/studies/scitail
(matching.results.publish)."""

from __future__ import annotations

from pathlib import Path

from matching.results.publish import interval_cell, mean_cell, verdict_cell
from matching.results.study_table import study_rows

#: The study's tasks as the table's rows say them, in order.
TASKS = {"scitail": "static MiniLM vectors", "scitail_encoder": "frozen MiniLM encoder"}
#: Its families as the table's columns show them, in order.
FAMILIES = ("softmax", "coda", "coda_centred")


def table(folder: Path) -> str:
    """Ours on dev per task: each family's mean ± std (seeds so far), CoDA against DecompAtt (the study's declared
    primary comparison) with its 95 % interval and verdict; a task without runs says so. The paper's test figures are
    the README's sentence above it (conf/task/scitail.yaml keeps them): this block is the page's numbers alone."""
    rows = {(r["task"], r["family"]): r for r in study_rows(folder) if r["split"] == "dev" and r["metric"] == "acc"}
    head = ("| SciTail dev acc | DecompAtt (softmax, F = Parikh's) | CoDA (F = none) | CoDA, centred | "
            "CoDA − DecompAtt [95 % CI] | verdict |")  # fmt: skip
    lines = [head, "|---" * 6 + "|"]
    for task, title in TASKS.items():
        cells = [mean_cell(rows.get((task, family)), counted=True) for family in FAMILIES]
        if all(cell == "–" for cell in cells):
            lines.append(f"| {title} | not run yet | – | – | – | – |")
            continue
        coda = rows.get((task, "coda"))
        versus = [interval_cell(coda, "softmax"), verdict_cell(coda, "softmax")] if coda else ["–", "–"]
        lines.append(f"| {title} | " + " | ".join(cells + versus) + " |")
    return "\n".join(lines)
