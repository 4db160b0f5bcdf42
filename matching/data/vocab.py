"""Tokenisation (Hugging Face `tokenizers`) and the word vocabulary with Parikh's hashed OOV buckets.

Token ids: 0 padding, 1 NULL, 2 … 2+B−1 the B OOV buckets, then the words of the training split in order of
first appearance. A word outside the vocabulary hashes (CRC-32, stable across runs and machines) to one of the
buckets. Training words without a pretrained vector get their bucket's random vector as their (frozen) row, so
they behave exactly like hashed OOV words while keeping their own id.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import normalizers, pre_tokenizers

from matching.errors import ConfigError, DataFormatError
from matching.files import write_text_atomic

log = logging.getLogger(__name__)

PAD, NULL = "<pad>", "<null>"
PAD_ID, NULL_ID = 0, 1  # the id layout (module docstring): padding first, then NULL


class Tokenizer:
    """Lower-casing (optional), split on whitespace, and every punctuation character as its own token.

    `keep_tokens` (e.g. Ubuntu's turn markers `__eou__`, `__eot__`) are kept whole as single tokens.
    """

    def __init__(self, lowercase: bool = True, keep_tokens: Sequence[str] = ()):
        self.lowercase, self.keep_tokens = lowercase, list(keep_tokens)
        self._keep = re.compile("(" + "|".join(map(re.escape, keep_tokens)) + ")") if keep_tokens else None
        steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
        self.normalizer = normalizers.Sequence(steps)
        self.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated")]
        )

    def _split(self, text: str) -> list[str]:
        return [w for w, _ in self.pre_tokenizer.pre_tokenize_str(self.normalizer.normalize_str(text))]

    def __call__(self, text: str) -> list[str]:
        if self._keep is None:
            return self._split(text)
        tokens: list[str] = []
        for i, piece in enumerate(self._keep.split(text)):  # odd pieces are the kept tokens themselves
            if i % 2:
                tokens.append(piece)
            elif piece.strip():
                tokens += self._split(piece)
        return tokens


def hf_tokenizer(tokenizer: Tokenizer, vocab: Vocabulary):
    """The same tokenisation as a Hugging Face `tokenizers.Tokenizer` (saved as tokenizer.json for clients in any
    language): NFKC (+ lower-casing), whitespace split, punctuation isolated, the kept tokens whole, and a
    word-level model over the vocabulary. A word outside the vocabulary comes out as `<oov0>`; its id is
    2 + crc32(word) % buckets instead, the word being the normalised text at the token's offsets
    (see `Vocabulary.bucket`)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models

    hf = HFTokenizer(models.WordLevel(dict(vocab.index), unk_token=f"<oov{0}>"))
    hf.normalizer = tokenizer.normalizer
    hf.pre_tokenizer = tokenizer.pre_tokenizer
    kept = [t for t in tokenizer.keep_tokens if t in vocab.index]  # others hash like any unknown word
    if kept:
        hf.add_special_tokens(kept)
    return hf


class Vocabulary:
    """Word ↔ id mapping with special ids and OOV hashing; saved as one token per line."""

    def __init__(self, words: Sequence[str], oov_buckets: int = 100):
        if oov_buckets < 1:
            raise ConfigError(f"oov_buckets must be at least 1, got {oov_buckets}")
        self.oov_buckets = oov_buckets
        self.first_word_id = 2 + oov_buckets
        specials = [PAD, NULL] + [f"<oov{i}>" for i in range(oov_buckets)]
        self.tokens: list[str] = specials + list(words)
        self.index = {w: i for i, w in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise ValueError("vocabulary words must be unique and must not clash with special tokens")
        assert self.index[PAD] == PAD_ID and self.index[NULL] == NULL_ID

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], oov_buckets: int = 100, min_count: int = 1) -> Vocabulary:
        """Words of the (tokenised) training sentences, in order of first appearance."""
        counts: dict[str, int] = {}
        for tokens in sentences:
            for w in tokens:
                counts[w] = counts.get(w, 0) + 1
        return cls([w for w, c in counts.items() if c >= min_count], oov_buckets)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def words(self) -> list[str]:
        return self.tokens[self.first_word_id :]

    def bucket(self, word: str) -> int:
        return 2 + zlib.crc32(word.encode("utf-8")) % self.oov_buckets

    def encode(self, tokens: Sequence[str]) -> np.ndarray:
        get, bucket = self.index.get, self.bucket
        return np.fromiter((get(w) or bucket(w) for w in tokens), dtype=np.int32, count=len(tokens))

    def embedding_matrix(self, vectors: np.ndarray | None, found: np.ndarray | None, dim: int, seed: int) -> np.ndarray:
        """(V, dim) float32: pretrained rows where found, otherwise the word's bucket vector; N(0,1) random rows
        for NULL and the buckets (all rows random when `vectors` is None: trainable random embeddings)."""
        rng = np.random.default_rng(seed)
        matrix = rng.standard_normal((len(self), dim), dtype=np.float32)
        matrix[PAD_ID] = 0.0
        if vectors is None:
            return matrix
        if vectors.shape != (len(self.words), dim):
            raise ValueError(f"expected a ({len(self.words)}, {dim}) matrix of vectors, got {vectors.shape}")
        words = np.arange(self.first_word_id, len(self))
        missing = words[~found]
        matrix[words[found]] = vectors[found]
        matrix[missing] = matrix[[self.bucket(self.tokens[i]) for i in missing]]
        return matrix

    def save(self, path: str | os.PathLike) -> None:
        write_text_atomic(path, f"#oov_buckets={self.oov_buckets}\n" + "\n".join(self.words) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if not lines or not lines[0].startswith("#oov_buckets="):
            raise DataFormatError(f"{path} is not a vocabulary written by matching (first line must be #oov_buckets=N)")
        return cls([w for w in lines[1:] if w], int(lines[0].split("=", 1)[1]))
