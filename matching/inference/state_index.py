"""`StateIndex`: a contextual encoder's word states of known texts (a contextual model's candidates), kept so that
ranking a query against them runs the encoder on the query alone.

A contextual model (`embeddings=minilm_contextual`, its encoder frozen or fine-tuned) encodes each text on its own: a
text's states depend on its words and the encoder, never on the text it is paired with. So the states of a fixed set
of candidates can be computed once (`Matcher.index(candidates)`), kept in the precision the model reads them in
(float16 for a frozen encoder, as training's cache keeps them; float32 for a fine-tuned one), so that the answers
are the same with and without the index, and saved in a folder:

    index.json    what the states depend on (`key`: the encoder's weights sha256, its pooling, positions and window
                  stride; the text pipeline's lowercasing, kept tokens and max_length) and each text's words
    states.npy    (words of all texts, hidden size) float16 or float32, read memory-mapped
    offsets.npy   (texts + 1,) int64: text i's states are rows offsets[i]:offsets[i + 1]

Loading checks the key against the model's: states of another encoder or another text pipeline are refused, never
used. This module imports no torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from matching.errors import RunError

#: The index format's version (index.json); another version is refused with a way out.
FORMAT = 1


class StaleIndexError(RunError):
    """An index folder whose states were computed by another encoder or text pipeline than the model's."""


class StateIndex:
    """Word states (float16, or float32 of a fine-tuned encoder) of texts, looked up by the text's words as the
    model sees them (the folder's files: the module docstring). `key`: what the states depend on; `get(words)` is
    None for a text the index does not hold. Build one with `Matcher.index`, load one with `Matcher.use_index`."""

    def __init__(self, key: dict, texts: Sequence[Sequence[str]], states: np.ndarray, offsets: np.ndarray):
        if len(offsets) != len(texts) + 1 or offsets[-1] != len(states):
            raise RunError(f"an index's offsets ({len(offsets)}) do not match its texts ({len(texts)}) and states")
        self.key, self.states, self.offsets = dict(key), states, np.asarray(offsets, np.int64)
        self.texts = [tuple(t) for t in texts]
        self.rows = {t: i for i, t in enumerate(self.texts)}

    def __len__(self) -> int:
        return len(self.texts)

    def __repr__(self) -> str:
        return f"StateIndex({len(self)} texts, {len(self.states)} word states of {self.states.shape[1]})"

    def __contains__(self, words: Sequence[str]) -> bool:
        return tuple(words) in self.rows

    def get(self, words: Sequence[str]) -> np.ndarray | None:
        """(len(words), dim) states of a text the index holds, else None."""
        row = self.rows.get(tuple(words))
        if row is None:
            return None
        return self.states[self.offsets[row] : self.offsets[row + 1]]

    @classmethod
    def of(cls, key: dict, texts: Sequence[Sequence[str]], states: Iterable[np.ndarray],
           dtype: type = np.float16) -> StateIndex:  # fmt: skip
        """An index of `texts` with their `states` ((len(text), dim) each), kept as `dtype` (the encoder's
        `state_dtype`)."""
        states = [np.asarray(s, dtype) for s in states]
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum([len(s) for s in states], out=offsets[1:])
        dim = states[0].shape[1] if states else 0
        stacked = np.concatenate(states) if states else np.zeros((0, dim), dtype)
        return cls(key, texts, stacked, offsets)

    def save(self, folder: str | Path) -> Path:
        """Write the index into `folder` (created; files replaced), as the module docstring describes."""
        folder = Path(folder).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "states.npy", np.ascontiguousarray(self.states))
        np.save(folder / "offsets.npy", self.offsets)
        record = {"format": FORMAT, "key": self.key, "texts": [list(t) for t in self.texts]}
        (folder / "index.json").write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path, key: dict) -> StateIndex:
        """The index saved in `folder`, its states memory-mapped; a StaleIndexError when it was built for another
        `key` (another encoder or text pipeline than the model's), a RunError when it is not an index folder."""
        folder = Path(folder).expanduser()
        record_file = folder / "index.json"
        if not record_file.is_file():
            raise RunError(
                f"{folder} is not an index folder (no index.json); build one with Matcher.index(candidates, "
                "save_to=...) or matching-predict ... index=<new folder>"
            )
        try:
            record = json.loads(record_file.read_text(encoding="utf-8"))
            states = np.load(folder / "states.npy", mmap_mode="r")
            offsets = np.load(folder / "offsets.npy")
        except (OSError, ValueError) as err:
            why = f"{type(err).__name__}: {err}"
            raise RunError(f"the index in {folder} cannot be read ({why}); build it again") from None
        if record.get("format") != FORMAT:
            raise StaleIndexError(f"the index in {folder} has format {record.get('format')}, this version reads "
                                  f"{FORMAT}; build it again")  # fmt: skip
        if record.get("key") != key:
            differ = sorted(k for k in set(key) | set(record.get("key") or {}) if key.get(k) != record["key"].get(k))
            raise StaleIndexError(
                f"the index in {folder} holds states of another encoder or text pipeline than this model's (they "
                f"differ in {', '.join(differ)}); its states would give this model wrong answers. Build an index with "
                "this model (Matcher.index(candidates, save_to=...), or matching-predict ... index=<new folder>)"
            )
        return cls(key, record["texts"], states, offsets)
