"""A contextual run's training cache (`StatesCache`, a part of matching.model.contextual.ContextualEncoder): every
distinct text of a split encoded once into a memory-mapped file under `paths.cache_dir/contextual/`, keyed by the
split (its content, slice and text settings) and by the encoder (resolved folder, sha256 of its weights, pooling,
positions, window stride), so that an epoch reads states instead of running the encoder:

- under a frozen encoder, each word's state (the mean of its pieces' last hidden states), in float16 (`SplitStates`);
- under an encoder whose top N layers are fine-tuned, the output of its frozen lower layers for every piece of every
  window, in float32 (`SplitPieceStates`): the trained layers then run from these on every batch, and the frozen
  ones never run again (they always run in eval mode, so their output for a text never changes). Without that cache
  (`embeddings.cache_frozen_layers=false`) a batch carries its texts' word pieces and the model runs the whole
  encoder: the same model to float rounding, several times slower."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from matching.data.encoding import EncodedSplit
from matching.files import file_sha256, write_atomic, write_npz_atomic
from matching.model.encoders import EncoderError, WordEncoder
from matching.model.pretrained_encoder import EXAMPLE_TEXTS, PretrainedEncoder
from matching.model.text_states import TextStates

log = logging.getLogger(__name__)


@dataclass
class SplitStates:
    """The word states of one split: `rows` (total words, dim) float16 memory-mapped, and per pair the first row
    of each text (`a_start`, `b_start`); text i of side a has len(split.a[i]) rows from a_start[i]."""

    rows: np.ndarray
    a_start: np.ndarray
    b_start: np.ndarray

    def gather(self, starts: np.ndarray, lengths: Sequence[int]) -> Tensor:
        """(len(starts), max length, dim) float16, zero-padded."""
        out = np.zeros((len(starts), max(lengths), self.rows.shape[1]), np.float16)
        for k, (s, n) in enumerate(zip(starts.tolist(), lengths, strict=True)):
            out[k, :n] = self.rows[s : s + n]
        return torch.from_numpy(out)


@dataclass
class SplitPieceStates:
    """The frozen lower layers' output of one split's windows: `rows` (total pieces, dim) float32 memory-mapped, one
    row per piece of each window ([CLS] and [SEP] included, no padding); `piece_word` (total pieces,) the word of
    each piece in its text (−1 for [CLS] and [SEP]); window w holds rows window_start[w] ... + window_length[w];
    distinct text t has windows text_window[t] ... + text_windows[t]; pair i's texts are a_text[i] and b_text[i]."""

    rows: np.ndarray
    piece_word: np.ndarray
    window_start: np.ndarray
    window_length: np.ndarray
    text_window: np.ndarray
    text_windows: np.ndarray
    a_text: np.ndarray
    b_text: np.ndarray

    def gather(self, texts: np.ndarray) -> dict[str, Tensor]:
        """The inputs of `WordEncoder` (`hidden` (R, P, dim) float32, `mask`, `word`, `row`) for the windows of
        `texts` (distinct text ids, one per row of a batch), padded to the longest window."""
        windows = [(t, w) for t, first, n in zip(range(len(texts)), self.text_window[texts].tolist(),
                                                 self.text_windows[texts].tolist(), strict=True)
                   for w in range(first, first + n)]  # fmt: skip
        lengths = self.window_length[[w for _, w in windows]]
        width = int(lengths.max())
        hidden = np.zeros((len(windows), width, self.rows.shape[1]), np.float32)
        word = np.full((len(windows), width), -1, np.int64)
        mask = np.zeros((len(windows), width), np.int64)
        for r, ((_, w), n) in enumerate(zip(windows, lengths.tolist(), strict=True)):
            start = int(self.window_start[w])
            hidden[r, :n] = self.rows[start : start + n]
            word[r, :n] = self.piece_word[start : start + n]
            mask[r, :n] = 1
        row = np.array([t for t, _ in windows], np.int64)
        return {"hidden": torch.from_numpy(hidden), "mask": torch.from_numpy(mask), "word": torch.from_numpy(word),
                "row": torch.from_numpy(row)}  # fmt: skip


def state_files(encoder: PretrainedEncoder, key: dict, folder: Path, name: str,
                lower_layers: int | None = None) -> tuple[Path, Path]:  # fmt: skip
    """The cache files (rows, index) of a split's states for `key` (the split's identity) and this encoder: its word
    states, or the output of its `lower_layers` frozen layers (`SplitPieceStates`)."""
    what = [key, encoder.identity()] + ([] if lower_layers is None else [{"lower_layers": lower_layers}])
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    kind = "" if lower_layers is None else f"-layer{lower_layers}"
    stem = folder / f"{key.get('task') or name}{kind}-{digest[:24]}"  # by content: any split of the same file finds it
    return stem.with_suffix(".states.npy"), stem.with_suffix(".index.npz")


def _read_cache(rows_file: Path, index_file: Path, name: str, dim: int, pairs: int | None,
                pair_key: str) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:  # fmt: skip
    """A cache's rows (memory-mapped) and index arrays, or None when absent, unreadable or not the split's."""
    if not (rows_file.exists() and index_file.exists()):
        return None
    try:
        with np.load(index_file) as z:
            index = {k: z[k] for k in z.files if k != "states_sha256"}
            stored = str(z["states_sha256"]) if "states_sha256" in z else None
        digest = stored or file_sha256(rows_file)  # a cache written before the fingerprint has none
        rows = np.load(rows_file, mmap_mode="r")
    except Exception as err:  # a damaged cache is rebuilt, never trusted
        log.warning("ignoring unreadable contextual cache %s (%s); rebuilding it", rows_file, err)
        return None
    fits = rows.ndim == 2 and rows.shape[1] == dim and pair_key in index
    if not fits or (pairs is not None and len(index[pair_key]) != pairs):
        log.warning("ignoring contextual cache %s: it does not match the split; rebuilding it", rows_file)
        return None
    if stored is None:
        try:  # kept beside it, so it is hashed once; a read-only cache is still used, hashed on every run
            write_npz_atomic(index_file, **index, states_sha256=np.array(digest))
        except OSError:
            pass
    log.info("%s: contextual states reused from the cache %s (%d rows, %.1f MB, sha256 %s)", name, rows_file,
             rows.shape[0], rows_file.stat().st_size / 1e6, digest[:16])  # fmt: skip
    return rows, index


def cached_states(encoder: PretrainedEncoder, key: dict, folder: Path, name: str, pairs: int | None = None,
                  check_only: bool = False, lower_layers: int | None = None
                  ) -> SplitStates | SplitPieceStates | bool | None:  # fmt: skip
    """A split's states from the cache (None when absent or unusable); `check_only`: whether they are there. The
    word states (`SplitStates`), or with `lower_layers` the output of that many frozen layers (`SplitPieceStates`)."""
    rows_file, index_file = state_files(encoder, key, folder, name, lower_layers)
    if check_only:
        return rows_file.exists() and index_file.exists()
    pair_key = "a_start" if lower_layers is None else "a_text"
    found = _read_cache(rows_file, index_file, name, encoder.dim, pairs, pair_key)
    if found is None:
        return None
    rows, index = found
    if lower_layers is None:
        return SplitStates(rows, index["a_start"], index["b_start"])
    return SplitPieceStates(rows, **index)


def distinct_texts(texts_a: Sequence[Sequence[str]], texts_b: Sequence[Sequence[str]]
                   ) -> tuple[list[tuple[str, ...]], np.ndarray, np.ndarray]:  # fmt: skip
    """A split's distinct texts (in order of first appearance) and each pair's text ids on either side."""
    index: dict[tuple[str, ...], int] = {}
    ids = [np.fromiter((index.setdefault(tuple(t), len(index)) for t in texts), np.int64, len(texts))
           for texts in (texts_a, texts_b)]  # fmt: skip
    return list(index), ids[0], ids[1]


def _write_rows(rows_file: Path, rows: int, dim: int, dtype, fill: Callable[[np.ndarray], None]) -> str:
    """Write a (rows, dim) memory-mapped file through `fill` (atomically); its sha256."""

    def write(tmp: Path) -> None:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(rows, dim))
        fill(out)
        out.flush()
        del out

    write_atomic(rows_file, write)
    # The states' fingerprint, logged by every run that builds or reuses them: a seed repeats its numbers bit for
    # bit only from identical states, so two machines compare this first (docs/how-to/data.md, "Contextual embedder").
    return file_sha256(rows_file)


def _encoded(encoder: PretrainedEncoder, folder: Path, created: bool, name: str, texts: int, rows: int,
             rows_file: Path, digest: str, started: float, what: str) -> None:  # fmt: skip
    encoder.pieces.report(name)
    # A new cache folder is said aloud (it may be ./data/cache in the user's own folder, tens of MB): where, and how
    # to put it elsewhere; later writes into it are the log's business.
    (log.warning if created else log.info)(
        "%s: encoded %d distinct texts (%d %s) in %.1f s; cached in %s (%.1f MB, sha256 %s)%s",
        name, texts, rows, what, time.perf_counter() - started, rows_file, rows_file.stat().st_size / 1e6,
        digest[:16],
        f"; a new cache folder, {folder.resolve()}: paths.cache_dir=<folder> (or MATCHING_CACHE_DIR) puts it "
        "elsewhere" if created else "",
    )  # fmt: skip


def encode_states(states: TextStates, key: dict, folder: Path, name: str, texts_a: Sequence[Sequence[str]],
                  texts_b: Sequence[Sequence[str]]) -> SplitStates:  # fmt: skip
    """Encode a split's texts (a list per side, the words exactly as the model sees them) by the frozen encoder of
    `states`, each distinct text once, with a progress bar, into a float16 memory-mapped file of the cache `folder`
    (see `state_files`); the rows are written as they are encoded, so memory stays bounded by one batch."""
    encoder = states.encoder
    rows_file, index_file = state_files(encoder, key, folder, name)
    started = time.perf_counter()
    unique, a_text, b_text = distinct_texts(texts_a, texts_b)
    lengths = np.fromiter(map(len, unique), np.int64, len(unique))
    starts = np.zeros(len(unique), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)

    def fill(rows: np.ndarray) -> None:
        order = np.argsort(lengths, kind="stable")  # similar lengths together: little padding
        with tqdm(total=len(unique), desc=f"encoding {name} with {Path(encoder.name).name}", unit=" texts") as bar:
            for k in range(0, len(order), states.batch_size):
                chunk = order[k : k + states.batch_size].tolist()
                for i, text in zip(chunk, states.encode_batch([unique[i] for i in chunk]), strict=True):
                    rows[starts[i] : starts[i] + lengths[i]] = text
                bar.update(len(chunk))

    digest = _write_rows(rows_file, int(lengths.sum()), encoder.dim, np.float16, fill)
    write_npz_atomic(index_file, a_start=starts[a_text], b_start=starts[b_text], states_sha256=np.array(digest))
    _encoded(encoder, folder, created, name, len(unique), int(lengths.sum()), rows_file, digest, started,
             "word states, float16")  # fmt: skip
    return SplitStates(np.load(rows_file, mmap_mode="r"), starts[a_text], starts[b_text])


def encode_piece_states(encoder: PretrainedEncoder, module: WordEncoder, batch_size: int, key: dict, folder: Path,
                        name: str, texts_a: Sequence[Sequence[str]], texts_b: Sequence[Sequence[str]]
                        ) -> SplitPieceStates:  # fmt: skip
    """Run a split's distinct texts (each once, in windows, with a progress bar) through the frozen lower layers of
    `module` (a `WordEncoder` with trainable top layers) into a float32 memory-mapped file of the cache `folder`
    (`SplitPieceStates`; float32, so that the trained layers see what the whole encoder would give them)."""
    lower = module.frozen_layers
    rows_file, index_file = state_files(encoder, key, folder, name, lower)
    started = time.perf_counter()
    unique, a_text, b_text = distinct_texts(texts_a, texts_b)
    order = np.argsort(np.fromiter(map(len, unique), np.int64, len(unique)), kind="stable")
    windows = encoder.pieces.window_lengths(unique)  # per text, its windows' lengths
    text_windows = np.fromiter(map(len, windows), np.int64, len(unique))
    text_window = np.zeros(len(unique), np.int64)  # windows numbered in the order the texts are encoded
    text_window[order[1:]] = np.cumsum(text_windows[order][:-1])
    window_length = np.zeros(int(text_windows.sum()), np.int64)
    for t, lengths in enumerate(windows):
        window_length[text_window[t] : text_window[t] + len(lengths)] = lengths
    window_start = np.zeros(len(window_length), np.int64)
    np.cumsum(window_length[:-1], out=window_start[1:])
    piece_word = np.full(int(window_length.sum()), -1, np.int32)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    device = next(module.parameters()).device

    def fill(rows: np.ndarray) -> None:
        desc = f"encoding {name} with {Path(encoder.name).name}'s {lower} frozen layers"
        with tqdm(total=len(unique), desc=desc, unit=" texts") as bar:
            for k in range(0, len(order), batch_size):
                chunk = order[k : k + batch_size]
                inputs = encoder.pieces([unique[i] for i in chunk.tolist()])
                hidden = module.lower_states(inputs["ids"].to(device), inputs["mask"].to(device)).float().cpu().numpy()
                first = int(text_window[chunk[0]])  # the chunk's windows are consecutive, in the same order
                for r, n in enumerate(inputs["mask"].sum(1).tolist()):
                    start = int(window_start[first + r])
                    if n != window_length[first + r]:
                        raise RuntimeError(f"window {first + r}: {n} pieces, {window_length[first + r]} counted")
                    rows[start : start + n] = hidden[r, :n]
                    piece_word[start : start + n] = inputs["word"][r, :n].numpy()
                bar.update(len(chunk))

    with torch.inference_mode():
        module.eval()
        digest = _write_rows(rows_file, len(piece_word), encoder.dim, np.float32, fill)
    index = {"piece_word": piece_word, "window_start": window_start, "window_length": window_length,
             "text_window": text_window, "text_windows": text_windows, "a_text": a_text, "b_text": b_text}  # fmt: skip
    write_npz_atomic(index_file, **index, states_sha256=np.array(digest))
    _encoded(encoder, folder, created, name, len(unique), len(piece_word), rows_file, digest, started,
             f"piece states of {len(window_length)} windows after {lower} frozen layers, float32")  # fmt: skip
    return SplitPieceStates(np.load(rows_file, mmap_mode="r"), **index)


class StatesCache:
    """A contextual run's training cache (see the module docstring): the splits' word states under a frozen encoder,
    encoded by `states` (the frozen encoder of new text: one module, loaded once); under a fine-tuned one, its frozen
    lower layers' output when `cache_frozen_layers`, else nothing (a batch carries its word pieces)."""

    def __init__(self, states: TextStates, cache_frozen_layers: bool):
        self.states, self.encoder = states, states.encoder
        self.cache_frozen_layers = cache_frozen_layers
        self._lower: WordEncoder | None = None  # the frozen lower layers that fill the fine-tuning cache

    @property
    def frozen_layers(self) -> int | None:
        """The number of frozen lower layers whose output is cached (fine-tuned, cached); None otherwise."""
        if not (self.encoder.trainable_layers and self.cache_frozen_layers):
            return None
        return self.encoder.layers - self.encoder.trainable_layers

    @property
    def lower_module(self) -> WordEncoder:
        """The encoder whose frozen lower layers fill the fine-tuning cache (loaded and checked on first use): its
        top layers, run from their output, must give the whole encoder's states, or the cache cannot stand in."""
        if self._lower is None:
            device = self.states.device
            module = self.encoder.word_encoder().to(device)
            inputs = self.encoder.pieces([(*a.split(), *b.split()) for a, b in EXAMPLE_TEXTS])
            gap = module.runs_from_lower_states(inputs["ids"].to(device), inputs["mask"].to(device))
            if gap > 1e-5:  # float rounding: 0 for MiniLM; a tiny random MPNet's position bias: 1.1e-4
                raise EncoderError(
                    f"{self.encoder.name}'s top {self.encoder.trainable_layers} layers, run from the output of the "
                    f"layers below them, do not give its own states (they differ by up to {gap:.3g}): its layers need "
                    "more than the hidden states and the mask. Fine-tune it without the cache: "
                    "embeddings.cache_frozen_layers=false"
                )
            self._lower = module
        return self._lower

    def holds(self, keys: Mapping[str, dict], cache_dir: Path) -> bool:
        """Whether every split of `keys` (each split's identity) is cached under `cache_dir`: never for a fine-tuned
        encoder without the cache (building what it needs takes the words)."""
        if self.encoder.trainable_layers and not self.cache_frozen_layers:
            return False
        folder, lower = cache_dir / "contextual", self.frozen_layers
        return all(cached_states(self.encoder, key, folder, label, check_only=True, lower_layers=lower)
                   for label, key in keys.items())  # fmt: skip

    def attach(self, splits: Mapping[str, EncodedSplit], keys: Mapping[str, dict], cache_dir: Path) -> None:
        """Frozen: each split gets its cached word states (encoded now where missing) and drops its words.
        Fine-tuned: each split gets its cached lower layers' output (encoded now where missing) and drops its words;
        without that cache the words stay and the model encodes every batch (say now what the windows will do)."""
        folder, lower = cache_dir / "contextual", self.frozen_layers
        for label, split in splits.items():
            if self.encoder.trainable_layers and lower is None:
                for side in split.words:
                    self.encoder.pieces.pieces(side)
                self.encoder.pieces.report(label)
                continue
            states = split.source_data
            if states is None:
                states = cached_states(self.encoder, keys[label], folder, label, len(split), lower_layers=lower)
            if states is None and lower is None:
                states = encode_states(self.states, keys[label], folder, label, *split.words)
            elif states is None:
                states = encode_piece_states(self.encoder, self.lower_module, self.states.batch_size, keys[label],
                                             folder, label, *split.words)  # fmt: skip
            split.words_taken(states)
        self._lower = None  # the cache is built: the model holds its own copy of the encoder

    def collate(self, split: EncodedSplit, indices: Sequence[int], host: np.ndarray, batch: dict[str, Any]) -> None:
        """The words' states from the split's cache (frozen), or for the fine-tuned encoder its frozen layers'
        output from the split's cache, or the words' pieces."""
        states: SplitStates | SplitPieceStates | None = split.source_data
        if isinstance(states, SplitPieceStates):
            batch["a_pieces"] = states.gather(states.a_text[host])
            batch["b_pieces"] = states.gather(states.b_text[host])
        elif states is not None:
            for side, start in (("a", states.a_start), ("b", states.b_start)):
                ids, lengths = batch[side], getattr(split.packed(), side).host_length[host]
                gathered = states.gather(start[host], lengths.tolist())
                batch[f"{side}_states"] = F.pad(gathered, (0, 0, 0, ids.shape[1] - gathered.shape[1]))
        elif split.words is not None:
            batch["a_pieces"] = self.encoder.pieces([split.words[0][i] for i in indices])
            batch["b_pieces"] = self.encoder.pieces([split.words[1][i] for i in indices])
