"""Alignment heat-maps and histograms write valid PNGs with the matrices each aligner uses."""

import json
import struct

import pytest

from matching.matcher import Matcher
from matching.results.split_matrices import split_matrices
from matching.saved.run_folder import load_run
from matching.visualize import main


def _png_size(path):
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", data[16:24])


def test_heatmap_for_coda_shows_affinity_gate_and_m(wikiqa_run, tmp_path, capsys):
    run, _ = wikiqa_run
    out = tmp_path / "pair.png"
    code = main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=how big is the moon",
                 "b=The Moon is the fifth largest natural satellite.", f"out={out}"])  # fmt: skip
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    width, height = _png_size(out)
    assert width > 300 and height > 200
    aligned = Matcher.load(run).align("how big is the moon", "the moon is large .")
    tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
    assert set(matrices) == {"affinity", "gate", "M"}
    assert matrices["M"].shape == (len(tokens_a), len(tokens_b)) == (5, 5)


def test_heatmap_for_softmax_labels_tokens_with_null(make_cfg, tmp_path):
    from matching.training.run import train

    cfg = make_cfg("trainer.max_epochs=1", "model.null_token=true", "intra=softmax")
    train(cfg)
    aligned = Matcher.load(cfg.paths.output_dir).align("A dog runs.", "An animal moves")
    tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
    assert tokens_a[0] == tokens_b[0] == "<null>" and tokens_a[1:] == ["a", "dog", "runs", "."]
    assert {"softmax_a", "softmax_b", "intra_a/softmax_a"} <= set(matrices)
    assert matrices["softmax_a"].sum(1) == pytest.approx([1.0] * len(tokens_a), abs=1e-5)
    out = tmp_path / "intra.png"
    assert main([f"ckpt={cfg.paths.output_dir}/checkpoints/best.ckpt", "a=A dog runs.", "b=An animal moves",
                 "show_intra=true", f"out={out}"]) == 0  # fmt: skip
    _png_size(out)


def test_histogram_mode_over_the_dev_set(wikiqa_run, tmp_path, capsys):
    run, _ = wikiqa_run
    values = split_matrices(load_run(run / "checkpoints" / "best.ckpt")).values
    assert set(values) == {"affinity", "gate", "M"}
    assert len(values["M"]) == len(values["gate"]) > 100
    assert values["M"].min() >= -1 and values["M"].max() <= 1
    out = tmp_path / "hist.png"
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=histogram", f"out={out}"]) == 0
    _png_size(out)
    summary = json.loads(out.with_suffix(".json").read_text())
    m = values["M"]
    assert summary["M"]["negative"] == pytest.approx(float((m < 0).mean()))
    assert summary["M"]["cells"] == len(m) and summary["M"]["min"] == pytest.approx(float(m.min()))
    assert 0 < summary["M"]["negative"] < 1  # the default CoDA subtracts as well as adds, on real text
    assert summary["M"]["attends_to_nothing"] == 0  # tanh(E) ⊙ sigmoid(N) is never exactly 0 on real text
    assert "attends_to_nothing" not in summary["gate"]  # a gate weighs nothing
    printed = capsys.readouterr().out
    assert "negative" in printed and "learned:" not in printed  # CoDA learns no scalar of its weights


def test_a_token_receives_nothing_when_all_its_weights_over_real_tokens_are_zero():
    import numpy as np
    import torch

    from matching.results.split_matrices import SplitMatrices, receive_nothing, weighed_lines

    m = torch.tensor([[[0.0, 0.0, 0.7], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]])  # the last token of each side padding
    mask_a, mask_b = torch.tensor([[True, True, False]]), torch.tensor([[True, True, False]])
    assert receive_nothing(m, mask_a, mask_b, 2).tolist() == [True, False]  # row 0's only weight is on padding
    assert receive_nothing(m, mask_a, mask_b, 1).tolist() == [False, True]  # column 1 is 0 on both real rows
    assert weighed_lines("M") == (2, 1) and weighed_lines("softpick_a") == (2,) and weighed_lines("softpick_b") == (1,)
    assert weighed_lines("affinity") == weighed_lines("gate") == ()
    summary = SplitMatrices({"softpick_a": np.array([0.0, 0.7])}, {"softpick_a": np.array([True, False])}).summary()
    assert summary["softpick_a"]["attends_to_nothing"] == 0.5 and summary["softpick_a"]["negative"] == 0


def test_usage_errors(wikiqa_run, capsys):
    run, _ = wikiqa_run
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=only one side"]) == 2
    assert "needs both texts" in capsys.readouterr().err
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=pie"]) == 2
    assert "mode must be heatmap or histogram" in capsys.readouterr().err


def _figure_texts(monkeypatch):
    """Every text drawn in the next figures visualize saves (titles, axis labels, tick labels)."""
    import matplotlib.text

    from matching.results import alignment_figures as visualize

    texts: list[str] = []
    save = visualize._save

    def recording(fig, out, title):
        result = save(fig, out, title)  # draws the title first
        texts.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text())
        return result

    monkeypatch.setattr(visualize, "_save", recording)
    return texts


def test_a_heatmap_says_which_text_is_where_what_each_matrix_is_and_what_was_predicted(
    wikiqa_run, snli_run, tmp_path, monkeypatch
):
    texts = _figure_texts(monkeypatch)
    run, _ = wikiqa_run
    a, b = "how big is the moon", "The Moon is the fifth largest natural satellite."
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"a={a}", f"b={b}", f"out={tmp_path / 'c.png'}"]) == 0
    assert f"a: {a}" in "\n".join(texts) and f"b: {b}" in "\n".join(texts)
    assert {"a (first text)", "b (second text)"} <= set(texts)
    assert {"tanh(E) (affinity)", "sigmoid(N − mean N) (gate)", "M = affinity × gate"} <= set(texts)
    answer = Matcher.load(run).predict((a, b))
    assert any(f"P(match) = {answer['p_match']:.3f}" in t for t in texts)  # a ranking model: P(match), score

    texts.clear()
    run, _ = snli_run
    a, b = "A man plays a guitar.", "A person makes music."
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"a={a}", f"b={b}", f"out={tmp_path / 's.png'}"]) == 0
    answer = Matcher.load(run).predict((a, b))
    label, p = answer["label"], answer["probs"][answer["label"]]
    assert any(t.startswith(f"predicted: {label} ({label} {p:.2f}") for t in "\n".join(texts).splitlines())
    captions = "\n".join(texts).replace("\n", " ")
    assert "softmax_a: weights aligning each a token to b (each row sums to 1)" in captions
    assert "softmax_b: weights aligning each b token to a (each column sums to 1)" in captions


def test_matrix_descriptions_follow_the_config():
    from matching.model.matrices import matrix_title

    coda = {"aligner": {"phi_e": "sigmoid", "phi_n": "arctan", "gate": "scale", "center_e": True}}
    assert matrix_title("affinity", coda) == "sigmoid(E − mean E) (affinity)"
    assert matrix_title("gate", coda) == "2·arctan(N) (gate)"
    assert matrix_title("gate", {"aligner": {"gate": "none"}}) == "sigmoid(N) (gate)"
    assert matrix_title("intra_b/affinity", {"intra": {"phi_e": "tanh"}}) == "intra b: tanh(E) (affinity)"
    assert (
        matrix_title("intra_a/softmax_b", {})
        == "intra a: softmax_b: weights of each a token over a itself (each column sums to 1)"
    )
    assert matrix_title("uniform", {}) == "uniform"  # an aligner of one's own: its matrix's name
    assert matrix_title("sigmoid_a", {"aligner": {}}) == (
        "sigmoid_a: weights aligning each a token to b (σ(E − log n); each cell on its own, not normalised)"
    )
    assert "σ(E);" in matrix_title("sigmoid_b", {"aligner": {"length_bias": False}})
    assert matrix_title("intra_a/cog_b", {}) == (
        "intra a: cog_b: weights of each a token over a itself (sign(E)·softmax(|E|); signed; the |weights| of each "
        "column sum to 1)"
    )


def test_histograms_label_their_axes(wikiqa_run, tmp_path, monkeypatch, capsys):
    from matching.model.aligners import CoDAAligner

    texts = _figure_texts(monkeypatch)
    monkeypatch.setattr(CoDAAligner, "learned_constants", lambda self: {"λ": -0.25, "s": 1.5})  # as differential's
    run, _ = wikiqa_run
    out = tmp_path / "hist.png"
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=histogram", "max_pairs=50", f"out={out}"]) == 0
    assert {"value of a cell", "cells (log scale)"} <= set(texts)
    assert any(t.startswith("tanh(E) (affinity)") for t in texts)
    assert "learned: λ = -0.25, s = 1.5" in capsys.readouterr().out  # the aligner's learned scalars, after the table


def test_value_range_is_what_each_matrix_can_take_by_its_formula():
    """What the server's page draws on a diverging scale (a range below 0) or a sequential one."""
    from matching.model.matrices import value_range

    assert value_range("softmax_a", {}) == value_range("intra_b/conflict_b", {}) == [0.0, 1.0]
    assert value_range("affinity", {"aligner": {}}) == [-1.0, 1.0]  # CoDA's defaults: tanh(E), sigmoid(N - mean N)
    assert value_range("gate", {"aligner": {}}) == [0.0, 1.0]
    assert value_range("M", {"aligner": {}}) == [-1.0, 1.0]
    scaled = {"aligner": {"phi_e": "sigmoid", "phi_n": "tanh", "gate": "scale"}}
    assert value_range("gate", scaled) == [-2.0, 2.0] and value_range("M", scaled) == [-2.0, 2.0]
    assert value_range("M", {"aligner": {"phi_e": "sigmoid"}}) == [0.0, 1.0]  # M >= 0: no subtraction possible
    assert value_range("uniform", {}) is None  # an aligner of one's own
    assert value_range("cog_a", {}) == value_range("intra_a/differential_b", {}) == [-1.0, 1.0]  # signed
    assert value_range("softpick_b", {}) == value_range("sigmoid_a", {}) == value_range("ssmax_a", {}) == [0.0, 1.0]


def test_compare_draws_several_runs_heatmaps_of_one_pair_side_by_side(snli_run, make_cfg, tmp_path, monkeypatch):
    from matching.training.run import train

    cfg = make_cfg("trainer.max_epochs=1", "aligner=attention", "aligner.distribution=sparsemax", "aligner.heads=4")
    train(cfg)
    texts = _figure_texts(monkeypatch)
    run, _ = snli_run
    a, b = "A man plays a guitar.", "A person makes music."
    out = tmp_path / "side.png"
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"a={a}", f"b={b}", f"out={out}",
                 f"compare=[{cfg.paths.output_dir}]"]) == 0  # fmt: skip
    drawn = " ".join(texts).replace("\n", " ")  # captions are wrapped to their panels' width
    assert "snli · 2 runs" in drawn and f"a: {a}" in drawn
    attention = "attention (sparsemax of dot scores, 4 heads), seed 1"
    for path, name in ((run, "softmax F=parikh, seed 1"), (cfg.paths.output_dir, attention)):
        answer = Matcher.load(path).predict((a, b))
        label, p = answer["label"], answer["probs"][answer["label"]]
        assert f"{name}: predicted: {label} ({label} {p:.2f}" in drawn  # each row names its run and its prediction
    assert "sparsemax of dot scores; 4 heads, mean" in drawn
    single = tmp_path / "single.png"
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"a={a}", f"b={b}", f"out={single}"]) == 0
    assert _png_size(out)[1] > 1.6 * _png_size(single)[1]  # two rows of panels, not one


def test_compare_needs_heatmap_mode(wikiqa_run, capsys):
    run, _ = wikiqa_run
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=histogram", f"compare=[{run}]"]) == 2
    assert "compare= draws several runs' heat-maps of one pair: it needs mode=heatmap" in capsys.readouterr().err


def test_one_scale_rule_for_the_figures_and_the_page():
    """CoDA's tanh(E) and M can be negative by their formula: drawn on a diverging scale around 0 even where one
    pair's cells are all positive (a sequential 0..1 scale would leave its negative cells blank on another pair);
    softmax weights on [0, 1]; a matrix of unknown formula by its cells (page.js scaleOf keeps the same rule)."""
    from pathlib import Path

    import numpy as np

    from matching.model.matrices import color_scale, value_range

    positive = np.array([[0.2, 0.6], [0.1, 0.9]])
    coda = {"aligner": {"phi_e": "tanh", "phi_n": "sigmoid", "gate": "center"}}
    assert color_scale(positive, value_range("affinity", coda)) == (True, -0.9, 0.9)
    assert color_scale(positive, value_range("M", coda)) == (True, -0.9, 0.9)
    assert color_scale(positive, value_range("softmax_a", {})) == (False, 0.0, 1.0)
    assert color_scale(positive, None) == (False, 0.0, 1.0)
    assert color_scale(positive - 0.5, None) == (True, -0.4, 0.4)
    page = (Path(__file__).resolve().parents[1] / "matching" / "serving" / "page" / "page.js").read_text()
    assert "const signed = range ? range[0] < 0 : (lo < 0 || hi > 1);" in page  # the same rule there


def test_every_label_of_a_heatmap_lies_inside_the_image(wikiqa_run, snli_run, tmp_path, monkeypatch):
    """The tokens along the bottom (drawn upright), the axis labels, the panels' captions and the title are all
    within the saved image, for one run and for two runs side by side: `tight_layout` put a heat-map's long
    bottom tokens and its 'b (second text)' below the image's edge."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from matching.results import alignment_figures as visualize

    save, outside = visualize._save, []

    def checking(fig, out, title):
        result = save(fig, out, title)
        renderer = FigureCanvasAgg(fig).get_renderer()
        texts = list(fig.texts)  # the suptitle
        for ax in (ax for ax in fig.axes if ax.images):
            texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]
        for text in texts:
            box = text.get_window_extent(renderer)
            if text.get_text() and not (
                box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1
            ):
                outside.append((out.name, text.get_text()))
        return result

    monkeypatch.setattr(visualize, "_save", checking)
    run, _ = wikiqa_run
    a, b = "how big is the moon", "Its diameter, measured at the equator, is approximately 3,474 kilometres."
    ckpt = f"ckpt={run / 'checkpoints' / 'best.ckpt'}"
    assert main([ckpt, f"a={a}", f"b={b}", f"out={tmp_path / 'one.png'}"]) == 0
    assert main([ckpt, f"a={a}", f"b={b}", f"out={tmp_path / 'two.png'}", f"compare=[{snli_run[0]}]"]) == 0
    assert outside == []
