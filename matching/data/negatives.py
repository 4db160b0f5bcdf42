"""Negatives mined from the corpus, for a ranking task whose file holds only (query, relevant text) pairs
(`task.negatives`, conf/task/pairs_positives.yaml; docs/how-to/ranking.md).

For each query (a group: the group column, else the query's text), the candidates are the split's other second
texts (and the lines of `corpus`, a file of extra texts, when given), never one of the query's positives: texts are
compared normalised (NFKC, lower case, runs of white space as one space, trimmed). Each candidate gets a score:

- `bm25`: Okapi BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N − df + 0.5) / (df + 0.5))) of the query's words against
  the candidate's, over the candidate texts (words: lower-cased runs of letters and digits);
- `vectors`: the cosine of the mean pretrained word vectors of the two texts (the run's static embeddings,
  `embeddings=glove` or `minilm`; words without a vector are left out);
- `ckpt`: a trained run's ranking score (the match margin) over the BM25 top `pool` candidates (a second round:
  the first model's hard negatives).

The candidates are ranked by score (ties: corpus order); those of ranks [`rank_min`, `rank_max`) (0-based, the
positives left out) are kept, and with a `margin` only those whose score is at most the query's lowest positive
score minus `margin` (unlabelled true answers tend to score as high as the positives: both settings keep them out).
Of those, `sampling: top` takes the first `k`, `random` draws `k` with the `seed` (the same negatives for the same
seed, split and settings). A query with fewer candidates gets what there is (counted in the log).

Training gets `k` negatives per query beside its file's own candidates. An evaluation split gets `eval_k` mined
candidates per query only when its file holds no negative at all (positives alone); a split with labelled
candidates (WikiQA's dev file) is used as it is. What was mined is cached in the run's folder
(`<run>/negatives/<split>.jsonl`: a first line with the settings and the source, then one line per mined pair with
its score and rank), reused while the settings and files are the same, and its size and source are logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from matching.data.cache import file_content
from matching.data.pairs import Pair
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import ConfigError, DataFormatError
from matching.files import write_text_atomic

log = logging.getLogger(__name__)

METHODS = ("bm25", "vectors", "ckpt")
SAMPLINGS = ("top", "random")
#: The folder of a run that holds its mined negatives.
FOLDER = "negatives"
_WORD = re.compile(r"\w+")


def normalized(text: str) -> str:
    """A text as mining compares it: NFKC, lower case, runs of white space as one space, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def words(text: str) -> list[str]:
    return _WORD.findall(normalized(text))


class BM25:
    """Okapi BM25 over `documents` (lists of words): `scores(query)` gives every document's score."""

    def __init__(self, documents: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.lengths = np.array([len(d) for d in documents], dtype=np.float64)
        self.average = float(self.lengths.mean()) if len(documents) and self.lengths.mean() > 0 else 1.0
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        columns: dict[str, tuple[list[int], list[int]]] = {}
        for i, document in enumerate(documents):
            for word, count in Counter(document).items():
                ids, counts = columns.setdefault(word, ([], []))
                ids.append(i)
                counts.append(count)
        n = len(documents)
        self.idf = {w: math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5)) for w, (ids, _) in columns.items()}
        self.postings = {w: (np.array(ids), np.array(counts, dtype=np.float64)) for w, (ids, counts) in columns.items()}
        self.norm = k1 * (1 - b + b * self.lengths / self.average)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        out = np.zeros(len(self.lengths))
        for word in set(query):
            if word in self.postings:
                ids, tf = self.postings[word]
                out[ids] += self.idf[word] * tf * (self.k1 + 1) / (tf + self.norm[ids])
        return out


@dataclass
class Negatives:
    """The settings of `task.negatives` (see the module docstring)."""

    method: str = "bm25"
    k: int = 4
    eval_k: int = 19
    rank_min: int = 0
    rank_max: int | None = 50
    margin: float | None = None
    sampling: str = "top"
    seed: int = 0
    ckpt: str | None = None
    pool: int = 100
    corpus: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"task.negatives.method must be one of {list(METHODS)}, got {self.method!r}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"task.negatives.sampling must be one of {list(SAMPLINGS)}, got {self.sampling!r}")
        for name in ("k", "eval_k", "pool"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"task.negatives.{name} must be a positive whole number, got {value!r}")
        if self.rank_min < 0 or (self.rank_max is not None and self.rank_max <= self.rank_min):
            raise ConfigError(
                f"task.negatives.rank_min={self.rank_min} and rank_max={self.rank_max} must give a range of ranks "
                "0 <= rank_min < rank_max (rank_max=null: to the end)"
            )
        if self.method == "ckpt" and not self.ckpt:
            raise ConfigError(
                "task.negatives.method=ckpt scores the candidates with a trained run: name it with "
                "task.negatives.ckpt=<run dir or checkpoint>"
            )

    def identity(self, corpus: Path | None, cache_dir: str | os.PathLike | None = None) -> dict[str, Any]:
        """What the mined pairs depend on besides the split's file (part of every cache key); `corpus`: where
        `self.corpus` was found. The checkpoint and the corpus are named by their content (a copy, moved or with new
        times, is the same; `cache_dir` remembers their sha256), as the corpus cache names a split's file."""
        settings = dict(self.__dict__)
        if self.ckpt:
            settings["ckpt"] = file_content(_checkpoint(self.ckpt), cache_dir) or self.ckpt
        if corpus is not None:
            settings["corpus"] = file_content(corpus, cache_dir) or str(corpus)
        return settings


def _checkpoint(path: str) -> Path:
    folder = Path(path).expanduser()
    return folder / "checkpoints" / "best.ckpt" if folder.is_dir() else folder


Scorer = Callable[[list[str], list[str]], np.ndarray]
"""(queries, candidate texts) -> (queries, candidates) scores, higher for a likelier match."""


def bm25_scorer(queries: list[str], texts: list[str]) -> np.ndarray:
    index = BM25([words(t) for t in texts])
    return np.stack([index.scores(words(q)) for q in queries]) if queries else np.zeros((0, len(texts)))


def vector_scorer(lookup: Callable[[list[str]], np.ndarray]) -> Scorer:
    """Cosine of mean word vectors; `lookup(texts)` gives each text's mean vector (zeros where none has one)."""

    def score(queries: list[str], texts: list[str]) -> np.ndarray:
        both = lookup(queries + texts)  # one pass over the vectors
        q, t = both[: len(queries)], both[len(queries) :]
        q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        t /= np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
        return q @ t.T

    return score


def model_scorer(logits: Callable[[list[Pair]], np.ndarray], pool: int) -> Scorer:
    """A trained run's match margins (`logits`: the run's (N, 2) logits of pairs) over each query's BM25 top `pool`
    candidates (the others score -inf)."""

    def score(queries: list[str], texts: list[str]) -> np.ndarray:
        first = bm25_scorer(queries, texts)
        out = np.full(first.shape, -np.inf)
        for i, query in enumerate(queries):
            top = np.argsort(-first[i], kind="stable")[:pool]
            margins = logits([Pair(query, texts[j], "", None, n + 1) for n, j in enumerate(top.tolist())])
            out[i, top] = margins[:, 1] - margins[:, 0]
        return out

    return score


def mine(
    pairs: Sequence[Pair],
    k: int,
    settings: Negatives,
    scorer: Scorer,
    negative_label: str,
    match_label: str,
    extra_texts: Sequence[str] = (),
    split: str = "train",
) -> list[dict[str, Any]]:
    """Mined negatives of every query of `pairs` (grouped by `group`, else by the first text): dicts with `group`,
    `a`, `b`, `label` (`negative_label`), `score` and `rank` (0-based among the query's non-positive candidates).
    The candidates are the distinct second texts of `pairs` and `extra_texts`; a query's positives (the pairs with
    `match_label`) and its file's own candidates are never drawn."""
    queries: dict[str, dict[str, Any]] = {}
    for p in pairs:
        key = p.group if p.group is not None else p.a
        query = queries.setdefault(key, {"a": p.a, "group": p.group, "taken": set(), "positives": []})
        query["taken"].add(normalized(p.b))
        if p.label == match_label:
            query["positives"].append(p.b)
    texts, kept = [], set()
    for text in [p.b for p in pairs] + [t for t in extra_texts if t.strip()]:
        if normalized(text) not in kept:  # one candidate per normalised text
            kept.add(normalized(text))
            texts.append(text)
    keys = list(queries)
    scores = scorer([queries[q]["a"] for q in keys], texts) if keys and texts else np.zeros((len(keys), 0))
    norm = [normalized(t) for t in texts]
    index = {n: i for i, n in enumerate(norm)}
    mined, short = [], 0
    for row, key in enumerate(keys):
        query = queries[key]
        score = scores[row]
        order = np.argsort(-score, kind="stable")
        candidates = [j for j in order.tolist() if norm[j] not in query["taken"] and np.isfinite(score[j])]
        ranked = list(enumerate(candidates))[settings.rank_min : settings.rank_max]
        if settings.margin is not None:
            positive_scores = [score[index[normalized(b)]] for b in query["positives"] if normalized(b) in index]
            if positive_scores:
                bound = min(positive_scores) - settings.margin
                ranked = [(r, j) for r, j in ranked if score[j] <= bound]
        if settings.sampling == "random" and len(ranked) > k:
            digest = hashlib.sha256(f"{settings.seed}\t{split}\t{key}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            ranked = [ranked[i] for i in sorted(rng.choice(len(ranked), k, replace=False).tolist())]
        chosen = ranked[:k]
        short += len(chosen) < k
        for rank, j in chosen:
            mined.append({"group": query["group"], "a": query["a"], "b": texts[j], "label": negative_label,
                          "score": float(score[j]), "rank": rank})  # fmt: skip
    if short:
        log.info("%s: %d of %d queries got fewer than %d mined negatives (too few candidates in the range)",
                 split, short, len(keys), k)  # fmt: skip
    return mined


class MeanWordVectors:
    """Each text's mean static word vector, for `method=vectors`: the words of `texts` (split by `tokenizer`) looked up
    in the run's pretrained vectors (`vectors`: a source with `extra_words` and `matrix`, as
    matching.model.embeddings.PretrainedVectors; words without a vector are left out, zeros when none has one)."""

    def __init__(self, vectors: Any, tokenizer: Tokenizer, oov_buckets: int, seed: int,
                 cache_dir: str | os.PathLike | None):  # fmt: skip
        self.vectors, self.tokenizer, self.oov_buckets = vectors, tokenizer, oov_buckets
        self.seed, self.cache_dir = seed, cache_dir

    def __call__(self, texts: list[str]) -> np.ndarray:
        tokens = [self.tokenizer(t) for t in texts]
        known = self.vectors.extra_words([], list(dict.fromkeys(w for ts in tokens for w in ts)))
        vocab = Vocabulary(known, self.oov_buckets)
        table = self.vectors.matrix(vocab, self.seed, self.cache_dir).float().numpy()
        means = np.zeros((len(texts), table.shape[1]))
        for i, ts in enumerate(tokens):
            ids = vocab.encode(ts)
            ids = ids[ids >= vocab.first_word_id]
            if len(ids):
                means[i] = table[ids].mean(0)
        return means


class NegativeMiner:
    """Completes the splits of a task with `task.negatives` (see the module docstring); `folder` (the run's) holds
    the cached mined pairs; `corpus`: where `settings.corpus` is; `cache_dir`: where the sha256 of the corpus and the
    checkpoint are remembered. `vectors_lookup`: each text's mean static word vector, for method=vectors;
    `trained_logits`: the logits of pairs under the run `settings.ckpt` names, for method=ckpt (given by the caller,
    which can load a run)."""

    def __init__(
        self,
        settings: Negatives,
        labels: Sequence[str],
        corpus: Path | None,
        folder: str | os.PathLike | None,
        vectors_lookup: Callable[[list[str]], np.ndarray] | None = None,
        trained_logits: Callable[[str], Callable[[list[Pair]], np.ndarray]] | None = None,
        cache_dir: str | os.PathLike | None = None,
    ):
        self.settings, self.labels, self.corpus, self.cache_dir = settings, list(labels), corpus, cache_dir
        self.folder = Path(folder) / FOLDER if folder is not None else None
        self.vectors_lookup, self.trained_logits = vectors_lookup, trained_logits
        self._scorer: Scorer | None = None

    def scorer(self) -> Scorer:
        if self._scorer is None:
            method = self.settings.method
            if method == "bm25":
                self._scorer = bm25_scorer
            elif method == "vectors":
                if self.vectors_lookup is None:
                    raise ConfigError(
                        "task.negatives.method=vectors compares static word vectors: choose embeddings=glove or "
                        "embeddings=minilm (or mine with task.negatives.method=bm25)"
                    )
                self._scorer = vector_scorer(self.vectors_lookup)
            else:
                if self.trained_logits is None:
                    raise ConfigError("task.negatives.method=ckpt needs a trained run to score with; none was given")
                self._scorer = model_scorer(self.trained_logits(str(self.settings.ckpt)), self.settings.pool)
        return self._scorer

    def extra_texts(self) -> list[str]:
        if not self.settings.corpus:
            return []
        path = self.corpus
        if path is None or not path.is_file():
            raise DataFormatError(
                f"task.negatives.corpus={self.settings.corpus}: no such file ({path}); give a text file with one "
                "candidate text a line, or leave it null to mine from the split's own texts"
            )
        return path.read_text(encoding="utf-8").splitlines()

    def complete(self, split: str, pairs: list[Pair], key: dict[str, Any]) -> list[Pair]:
        """`pairs` with the mined negatives of `split` added (train: always; another split: when its file has no
        negative). `key`: what the split's file is (part of the cache's key)."""
        match, negative = self.labels[1], self.labels[0]
        if split != "train" and any(p.label != match for p in pairs):
            log.info("%s has labelled candidates: ranked as they are, no negatives mined", split)
            return pairs
        k = self.settings.k if split == "train" else self.settings.eval_k
        identity = {"split": key, "k": k, "settings": self.settings.identity(self.corpus, self.cache_dir)}
        cached = self._load(split, identity)
        how = "from the cache" if cached is not None else "mined"
        if cached is None:
            cached = mine(pairs, k, self.settings, self.scorer(), negative, match, self.extra_texts(), split)
            self._save(split, identity, cached)
        extra = [Pair(m["a"], m["b"], m["label"], m["group"]) for m in cached]
        queries = len({p.group if p.group is not None else p.a for p in pairs})
        where = f" ({self.folder / f'{split}.jsonl'})" if self.folder is not None else ""
        log.info("%s: %d negatives %s by %s for %d queries, %s k=%d ranks [%d, %s)%s%s", split, len(extra), how,
                 self.settings.method, queries, self.settings.sampling, k, self.settings.rank_min,
                 self.settings.rank_max, f" margin {self.settings.margin}" if self.settings.margin is not None else "",
                 where)  # fmt: skip
        return list(pairs) + extra

    def _load(self, split: str, identity: dict[str, Any]) -> list[dict[str, Any]] | None:
        path = self.folder / f"{split}.jsonl" if self.folder is not None else None
        if path is None or not path.is_file():
            return None
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except (IndexError, json.JSONDecodeError):
            return None
        if header.get("identity") != json.loads(json.dumps(identity)):
            return None
        return [json.loads(line) for line in lines[1:]]

    def _save(self, split: str, identity: dict[str, Any], mined: list[dict[str, Any]]) -> None:
        if self.folder is None:
            return
        header = {"identity": identity, "source": self.settings.method, "pairs": len(mined)}
        text = "\n".join(json.dumps(x, ensure_ascii=False) for x in [header, *mined]) + "\n"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.folder / f"{split}.jsonl", text)
        except OSError as err:  # a read-only run folder (evaluating someone's run): mined again next time
            log.warning("could not keep the mined negatives in %s (%s)", self.folder, err)
