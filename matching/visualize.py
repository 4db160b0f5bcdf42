"""Alignment heat-maps and value histograms of a trained model.

    matching-visualize ckpt=<path> a="..." b="..." [out=file.png] [show_intra=false] [compare=[<run>,<run>]]
    matching-visualize ckpt=<path> mode=histogram [split=dev] [out=file.png] [max_pairs=2000]

Heat-map mode draws, for one pair, every matrix the aligner used, labelled with the tokens (the first text `a` down
the side, the second `b` along the bottom) and titled with what it is: softmax weights both ways (`softmax_a`
aligns each token of a to b, its rows sum to 1; `softmax_b` each token of b to a, its columns sum to 1); CoDA's
φ_E(E) (`affinity`, tanh(E) by default), the gate φ_N(N) and M; conflict's weights (and the intra-sentence matrices
with `show_intra=true`). The figure's title gives both texts and the prediction (label and probabilities, or
P(match) and the ranking score). `compare=` adds more runs (run directories or checkpoints), one row of heat-maps
each under the first, each row's first panel naming its run and its prediction: the same pair through several
aligners side by side (each run in its own saved config and dtype). Histogram mode collects the values of those
matrices over the real (non-padding) cells of a dev set, as in the CoDA paper's Figure 2, and prints (and writes
as JSON beside the PNG) each matrix's range, mean and share of negative cells: a CoDA model that never subtracts
shows 0 % negative M cells. Options are in conf/visualize.yaml; any key of the run's saved config can be
overridden too (e.g. `paths.data_dir=...`). The texts a= and b= are taken as typed (commas, apostrophes and
brackets included).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from matching.cli import command
from matching.errors import RunError
from matching.files import write_json
from matching.model.matrices import matrix_title
from matching.results.split_matrices import split_matrices
from matching.saved.run_folder import find_checkpoint, option_name

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


def visualize(cfg: DictConfig) -> Path:
    """The `visualize` command on a composed config (conf/visualize.yaml over the run's saved config)."""
    if cfg.mode not in ("heatmap", "histogram"):
        raise RunError(f"mode must be heatmap or histogram, got {cfg.mode!r}")
    if cfg.mode == "heatmap" and (cfg.a is None or cfg.b is None):
        raise RunError('heat-map mode needs both texts: a="..." b="..."')
    compare = list(cfg.get("compare") or [])
    if compare and cfg.mode != "heatmap":
        raise RunError("compare= draws several runs' heat-maps of one pair: it needs mode=heatmap")
    # Imported here, not at the top: a typo is answered before the model's modules load (under a second).
    from matching.inference import load
    from matching.matcher import Matcher
    from matching.results.alignment_figures import draw_histograms, heatmap

    others = tuple(Matcher.load(path, backend="torch") for path in compare)  # each run as it was saved
    if cfg.mode == "heatmap":
        matcher = Matcher(load(cfg.ckpt, backend="torch", config=cfg))
        out = Path(cfg.out or matcher.about["run_dir"] / ("alignments.png" if others else "alignment.png"))
        heatmap(matcher, str(cfg.a), str(cfg.b), out, cfg.show_intra, others)
    else:  # a split's matrices: the run's data module reads it
        from matching.saved.run_folder import load_run

        run = load_run(find_checkpoint(cfg.ckpt), cfg)
        matrices = split_matrices(run, str(cfg.split), int(cfg.max_pairs))
        values = matrices.values
        out = Path(cfg.out or run.run_dir / f"matrix_values_{cfg.split}.png")
        captions = {name: matrix_title(name, run.cfg) for name in values}
        aligner = option_name(run.cfg, "aligner")
        draw_histograms(values, out, title=f"{run.task.name} {cfg.split} · {aligner}", captions=captions)
        summary = matrices.summary()
        write_json(out.with_suffix(".json"), summary)
        print(f"{'matrix':<12} {'cells':>9} {'min':>7} {'p01':>7} {'median':>7} {'p99':>7} {'max':>7} {'negative':>9} "
              f"{'receive nothing':>16}")  # fmt: skip
        for name, s in summary.items():
            nothing = f"{100 * s['attends_to_nothing']:>15.1f}%" if "attends_to_nothing" in s else f"{'–':>16}"
            print(f"{name:<12} {s['cells']:>9,} {s['min']:>7.3f} {s['p01']:>7.3f} {s['median']:>7.3f} {s['p99']:>7.3f} "
                  f"{s['max']:>7.3f} {100 * s['negative']:>8.1f}% {nothing}")  # fmt: skip
        if learned := run.model.aligner.learned_constants():
            print("learned: " + ", ".join(f"{name} = {value:.4g}" for name, value in learned.items()))
        print(f"wrote {out.with_suffix('.json')}")
    print(f"wrote {out}")
    return out


main = command("visualize", visualize, uses_run=True, verbatim=("a", "b"))

if __name__ == "__main__":
    sys.exit(main())
