"""`Matcher`: a trained model for Python code, and the inference path of `predict`, `visualize` and `serve`.

    from matching import Matcher
    matcher = Matcher.load("outputs/runs/wikiqa/coda/<time>")   # a run directory, a checkpoint, a shared folder
    matcher.predict([("how big is the moon", "Its diameter is 3,474 km.")])   # or a hub repository "user/name"
    matcher.rank("how big is the moon", ["Paris is in France.", "Its diameter is 3,474 km."], top_k=1)
    matcher.align("how big is the moon", "Its diameter is 3,474 km.")

Pairs go in as tuples `(a, b)`, dicts (keyed by the run's own column names, e.g. `{"text_left": ..., "text_right":
...}` for a run trained with `task.columns.a=text_left`, or by the usual names `predict` reads: `a`/`b`,
`premise`/`hypothesis`, `question`/`answer`, ...) or `Pair`s; answers come out as plain Python (lists, dicts, floats)
and NumPy arrays. Every call runs the pairs in batches of similar length within the run's memory budget
(`data.batch_tokens`, `data.batch_cells`; see `TrainedRun.logits`), so long inputs and big lists are safe.
The reference, with every option and answer, is docs/python-api.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from matching import precision
from matching.data.pairs import Pair
from matching.data.pipeline import PreparedPairs
from matching.data.tables import pair_of_mapping
from matching.data.vocab import NULL
from matching.errors import DataFormatError
from matching.metrics import match_margin
from matching.runs import RunError, TrainedRun, configured, find_checkpoint, load_trained, saved_config

#: A Hugging Face hub repository id: `owner/name` (what `Matcher.load` downloads when no such path exists here).
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

PairLike = tuple | list | dict | Pair


def as_pairs(
    items: Iterable[PairLike], source: str = "pairs", columns: dict[str, str | None] | None = None
) -> list[Pair]:
    """New pairs from tuples `(a, b[, group])`, dicts (keyed by the run's own `columns` or the usual names, see
    matching.data.tables.pair_of_mapping) or `Pair`s; an item of another shape, a text that is not a string or an
    empty text is a DataFormatError naming the item (`pairs[i]`). A Pair keeps its line number (the commands' input
    files); the others have none, and later errors count pairs from 1."""
    pairs = []
    for index, item in enumerate(items):
        where = f"{source}[{index}]"
        if isinstance(item, Pair):
            pair = item
        elif isinstance(item, dict):
            pair = pair_of_mapping(item, where, columns)
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3) and all(isinstance(t, str) for t in item[:2]):
            pair = Pair(item[0], item[1], "", None if len(item) == 2 else str(item[2]))
        else:
            raise DataFormatError(
                f"{where}: expected a pair of texts, as a tuple (a, b), a dict {{'a': ..., 'b': ...}} or a Pair; "
                f"got {item!r:.80}"
            )
        if not pair.a.strip() or not pair.b.strip():
            side = "first" if not pair.a.strip() else "second"
            raise DataFormatError(f"{where}: the {side} text is empty; give both texts of the pair")
        pairs.append(pair)
    return pairs


def label_probabilities(logits: torch.Tensor, labels: Sequence[str]) -> list[tuple[str, dict[str, float]]]:
    """Each row of (N, C) logits as its most probable label and every label's probability (the softmax): the
    classification answer of `predict` and of the server."""
    answers = []
    for row in torch.softmax(logits, dim=-1).tolist():
        best = max(range(len(labels)), key=row.__getitem__)
        answers.append((labels[best], dict(zip(labels, row, strict=True))))
    return answers


class Matcher:
    """A trained model, ready to score new pairs (see the module docstring). Build one with `Matcher.load(path)`,
    or around a run a command has loaded: `Matcher(load_trained(ckpt, cfg))`. `run` is the TrainedRun (config,
    vocabulary, text preparation, model)."""

    def __init__(self, run: TrainedRun):
        self.run = run

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        device: str = "cpu",
        batch_tokens: int | None = None,
        batch_cells: int | None = None,
        dtype: str | None = None,
        revision: str | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> Matcher:
        """The model at `path`: a run directory (its checkpoints/best.ckpt), a checkpoint file, a shared model folder
        (`matching-export format=hub`) or a Hugging Face hub repository id `owner/name` of such a folder (downloaded
        at `revision`, once, into the hub's cache). `device`: cpu, cuda (or cuda:N) or auto (the GPU when there is
        one). `batch_tokens`, `batch_cells`: the memory budget of a batch (default: the run's `data.batch_tokens`,
        `data.batch_cells`). `dtype`: the arithmetic, "fp32", "bf16" (faster on CPUs with AMX or AVX512-BF16; logits
        within about 1 % of fp32's) or "auto"; default: the run's own `dtype` (see matching.precision).
        `overrides`: other keys of the run's config, e.g. `{"data.max_length": 128}`.
        Offline, a shared folder or a run directory needs nothing else; a shared folder is read from safetensors
        and YAML only, never unpickled."""
        from matching.serving import sharing  # safetensors and huggingface_hub only when a shared folder is used

        if dtype is not None:
            precision.check(dtype)  # before anything is read or downloaded
        settings = dict(overrides or {})
        for key, value in (("data.batch_tokens", batch_tokens), ("data.batch_cells", batch_cells), ("dtype", dtype)):
            if value is not None:
                settings[key] = value
        device = _device(device)
        folder = Path(path).expanduser()
        if not folder.exists() and REPO_ID.match(str(path)) and not str(path).startswith("."):
            folder = sharing.download(str(path), revision)
        if sharing.is_shared_folder(folder):
            run = sharing.load_shared(folder, settings, device)
        else:
            checkpoint = find_checkpoint(folder)
            cfg = saved_config(checkpoint)
            run = load_trained(checkpoint, configured(cfg, settings))
            run.source.on_device(device)
        if device != "cpu":
            run.system.to(device)
        return cls(run)

    # -- what the model is ---------------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """ "classify" or "rank" (a pointwise ranking model: labels no-match, match)."""
        return self.run.kind

    @property
    def labels(self) -> list[str]:
        return list(self.run.labels)

    @property
    def device(self) -> torch.device:
        return self.run.system.device

    def __repr__(self) -> str:
        return f"Matcher({self.run.task.name}, {self.kind}, labels={self.labels}, from {self.run.checkpoint})"

    # -- answers -------------------------------------------------------------------------------------------------
    def as_pairs(self, items: Iterable[PairLike], source: str = "pairs") -> list[Pair]:
        """`as_pairs` with this run's own column names (`task.columns`) for dicts."""
        return as_pairs(items, source, self.run.columns)

    def logits(self, pairs: Iterable[PairLike], source: str = "pairs") -> np.ndarray:
        """(N, classes) float32 logits of the pairs, in their order. `source` names the input in error messages."""
        return self.run.logits(self.as_pairs(pairs, source), source).numpy()  # float32

    def predict(self, pairs: Iterable[PairLike] | tuple[str, str], source: str = "pairs") -> list[dict] | dict:
        """One answer per pair, in their order: `{"label", "probs": {label: p}}` for a classification model,
        `{"score", "p_match"}` for a ranking model (score: logit[match] − logit[no match], which orders as P(match)
        but never saturates at 1.0). One pair `(a, b)` gives one answer."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(t, str) for t in pairs):
            return self.predict([pairs], source)[0]
        return self.answers(self.run.logits(self.as_pairs(pairs, source), source))

    def answers(self, logits: torch.Tensor) -> list[dict]:
        """`predict`'s answers from (N, classes) logits."""
        if self.kind == "classify":
            return [{"label": label, "probs": probs} for label, probs in label_probabilities(logits, self.labels)]
        scores, p_match = match_margin(logits).tolist(), torch.softmax(logits.float(), dim=-1)[:, 1].tolist()
        return [{"score": s, "p_match": p} for s, p in zip(scores, p_match, strict=True)]

    def rank(self, query: str, candidates: Sequence[str], top_k: int | None = None) -> list[dict]:
        """The candidates best first (ties: in the order given), each `{"index", "candidate", "score", "p_match"}`
        (`index`: its position in `candidates`); the first `top_k` only when given. Ranking models only."""
        if self.kind != "rank":
            raise RunError(
                f"this model classifies pairs into {self.labels} (task {self.run.task.name}); it does not rank. Use "
                "predict(pairs), or load a model trained on a ranking task (wikiqa, trecqa, ubuntu)"
            )
        if isinstance(candidates, str):
            raise DataFormatError("candidates must be a list of texts, not one string; wrap it: [candidate]")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise DataFormatError(f"top_k must be a positive whole number or None, got {top_k!r}")
        if not candidates:
            return []
        answers = self.predict([(query, c) for c in candidates], "candidates")
        return ranking(candidates, answers)[:top_k]

    def align(self, a: str, b: str) -> dict:
        """One pair's alignment: `{"a_tokens", "b_tokens", "matrices": {name: (len a, len b) array}, "label",
        "probs"}`: both sides' tokens as the model sees them ("<null>" first when it uses the NULL token), every
        matrix the aligner used (intra-sentence ones named "intra_a/..." and "intra_b/...", square), and the
        prediction (a ranking model's also with its `score` and `p_match`, as `predict` gives them). What
        `visualize` draws and the server's /align returns."""
        return self.alignment(self.run.text.prepare(self.as_pairs([(a, b)], "align")))

    def alignment(self, prepared: PreparedPairs) -> dict:
        """`align` of one pair already prepared by the run's text pipeline (the server checks it first)."""
        if not prepared.tokens.all():
            raise RunError("both texts need at least one token to draw an alignment")
        self.run.text.check(prepared, "input")
        out = self.run.predict(self.run.text.batch(prepared))
        tokens_a, tokens_b = prepared.words_a[0], prepared.words_b[0]
        if self.run.model.null_token:
            tokens_a, tokens_b = [NULL, *tokens_a], [NULL, *tokens_b]
        logits = out.logits.float().cpu()
        ((label, probs),) = label_probabilities(logits, self.labels)
        matrices = {name: m[0].float().cpu().numpy() for name, m in out.matrices.items()}
        answer = {"a_tokens": tokens_a, "b_tokens": tokens_b, "matrices": matrices, "label": label, "probs": probs}
        if self.kind == "rank":
            answer.update(self.answers(logits)[0])
        return answer


def ranking(candidates: Sequence[str], answers: Sequence[dict]) -> list[dict]:
    """Ranking answers (`{"score", "p_match"}` per candidate) as `rank` returns them: best first, ties in order."""
    order = sorted(range(len(candidates)), key=lambda i: (-answers[i]["score"], i))
    return [{"index": i, "candidate": candidates[i], **answers[i]} for i in order]


def _device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise RunError(f"device must be cpu, cuda, cuda:N, mps or auto, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RunError(f"device={device}, but torch sees no CUDA GPU here; use device='cpu' (or 'auto')")
    return device
