"""Tokeniser, vocabulary, batching and data sources."""

import hashlib
import os
import shutil

import numpy as np
import pytest
import torch
from conftest import FIXTURE_VECTORS, FIXTURES

from matching.data.encoding import LabelError
from matching.data.readers import read_snli_jsonl
from matching.data.sources import CorpusNotFoundError
from matching.data.tasks import Task, split_prefix
from matching.data.vocab import NULL_ID, PAD_ID, Tokenizer, Vocabulary
from matching.model.pipeline import pad_batch
from matching.training.batching import BucketBatchSampler, PadCollator
from matching.training.build import build_datamodule
from matching.training.datamodule import DataSettings, PairDataModule


def test_tokenizer_lowercases_and_splits_punctuation():
    assert Tokenizer()("A man's dog, running!") == ["a", "man", "'", "s", "dog", ",", "running", "!"]
    assert Tokenizer(lowercase=False)("The Dog.") == ["The", "Dog", "."]


def test_vocabulary_ids_oov_hashing_and_roundtrip(tmp_path):
    vocab = Vocabulary.build([["a", "dog"], ["a", "cat"]], oov_buckets=10)
    assert vocab.words == ["a", "dog", "cat"]
    assert vocab.index["<pad>"] == PAD_ID and vocab.index["<null>"] == NULL_ID
    ids = vocab.encode(["a", "zebra", "zebra", "cat"])
    assert ids[0] == vocab.index["a"] and ids[3] == vocab.index["cat"]
    assert ids[1] == ids[2] and 2 <= ids[1] < 12  # an unseen word always hashes to the same bucket
    vocab.save(tmp_path / "vocab.txt")
    loaded = Vocabulary.load(tmp_path / "vocab.txt")
    assert loaded.tokens == vocab.tokens and loaded.oov_buckets == 10
    np.testing.assert_array_equal(loaded.encode(["zebra"]), vocab.encode(["zebra"]))


def test_vocabulary_load_rejects_other_files(tmp_path):
    (tmp_path / "v.txt").write_text("hello\nworld\n")
    with pytest.raises(ValueError, match="not a vocabulary written by matching"):
        Vocabulary.load(tmp_path / "v.txt")


def test_embedding_matrix_uses_bucket_vectors_for_words_without_vectors():
    vocab = Vocabulary(["a", "b"], oov_buckets=3)
    vectors = np.array([[1.0, 2.0], [0.0, 0.0]], dtype=np.float32)
    matrix = vocab.embedding_matrix(vectors, np.array([True, False]), dim=2, seed=0)
    np.testing.assert_array_equal(matrix[vocab.index["a"]], [1.0, 2.0])
    np.testing.assert_array_equal(matrix[vocab.index["b"]], matrix[vocab.bucket("b")])
    assert np.all(matrix[PAD_ID] == 0)


def test_bucket_sampler_covers_every_index_once_and_groups_lengths():
    lengths = np.random.default_rng(0).integers(2, 60, size=1000)
    sampler = BucketBatchSampler(lengths, batch_size=32, shuffle=True, seed=3, bucket_batches=10)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 32
    assert sorted(i for b in batches for i in b) == list(range(1000))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < 0.25 * np.ptp(lengths)  # length-bucketed: far less spread than random batches
    again = list(BucketBatchSampler(lengths, 32, shuffle=True, seed=3, bucket_batches=10))
    assert again == batches  # same seed and epoch: same order
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_eval_sampler_is_sorted_and_deterministic():
    lengths = np.array([5, 1, 3, 2, 4])
    assert list(BucketBatchSampler(lengths, 2, shuffle=False)) == [[1, 3], [2, 4], [0]]


def test_batches_are_padded_to_their_own_maximum(make_cfg):
    dm = build_datamodule(make_cfg())
    dm.setup("fit")
    for batch in dm.train_dataloader():
        lengths_a = (batch["a"] != PAD_ID).sum(1)
        assert batch["a"].shape[1] == lengths_a.max()
        assert batch["b"].shape[1] == (batch["b"] != PAD_ID).sum(1).max()
        assert batch["label"].dtype == torch.int64


def test_batches_gathered_from_the_packed_split_equal_padding_each_pair(make_cfg):
    dm = build_datamodule(make_cfg())
    dm.setup("fit")
    split = dm.splits["train"]
    indices = [5, 0, 11, 3, 9, len(split) - 1]  # the last pair: its padding lies past the end of the packed ids
    batch = PadCollator(split)(indices)
    assert torch.equal(batch["a"], pad_batch([split.a[i] for i in indices]))
    assert torch.equal(batch["b"], pad_batch([split.b[i] for i in indices]))
    rounded = PadCollator(split, pad_to=16)(indices)
    for side in "ab":
        width = batch[side].shape[1]
        assert rounded[side].shape[1] == 16 * -(-width // 16) and torch.equal(rounded[side][:, :width], batch[side])
        assert not rounded[side][:, width:].any()
    assert batch["label"].tolist() == split.labels[indices].tolist()
    assert batch["index"].tolist() == indices and batch["group"].tolist() == split.groups[indices].tolist()


def test_pad_to_rounds_batch_lengths_up_and_changes_nothing_else(make_cfg):
    dm = build_datamodule(make_cfg("compile=true"))  # data.pad_to: null means 8 when compiled
    assert dm.settings.pad_to == 8
    dm.setup("fit")
    plain = build_datamodule(make_cfg())
    plain.setup("fit")
    for rounded, exact in zip(dm.train_dataloader(), plain.train_dataloader(), strict=True):
        for side in "ab":
            assert rounded[side].shape[1] % 8 == 0 and rounded[side].shape[1] - exact[side].shape[1] < 8
            assert torch.equal(rounded[side][:, : exact[side].shape[1]], exact[side])
            assert not rounded[side][:, exact[side].shape[1] :].any()


def _words(dm, split):
    tok = Tokenizer()
    return {w for p in _pairs(dm, split) for w in tok(p[0]) + tok(p[1])}


def _vector_words(limit=None):
    lines = FIXTURE_VECTORS.read_text(encoding="utf-8").splitlines()[:limit]
    return {line.split(" ", 1)[0] for line in lines}


def test_vocabulary_is_the_training_words_and_every_other_word_with_a_vector(make_cfg):
    """Training words first; then words of dev and of the vectors file's first top_words lines, only those that
    have a vector (the others would only be copies of their OOV bucket)."""
    dm = build_datamodule(make_cfg("embeddings.top_words=10"))
    dm.setup("fit")
    train_words = _words(dm, "train")
    assert set(dm.vocab.words[: len(train_words)]) == train_words
    extra = dm.vocab.words[len(train_words) :]
    assert set(extra) == ((_words(dm, "dev") | _vector_words(10)) & _vector_words()) - train_words
    assert "mid" in extra and "opposite" not in dm.vocab.index  # dev words with and without a vector
    assert len(extra) == len(set(extra))


def test_random_embeddings_keep_the_training_words_only(make_cfg):
    dm = build_datamodule(make_cfg("embeddings=random"))
    dm.setup("fit")
    assert set(dm.vocab.words) == _words(dm, "train")


def _pairs(dm, split):
    from matching.data.sources import read_split

    return [(p.a, p.b) for p in read_split(dm.task, split, dm.settings.data_dir, dm.settings.cache_dir)]


def test_any_split_can_point_at_another_file_and_be_sliced(make_cfg, tmp_path):
    other = tmp_path / "elsewhere.jsonl"
    shutil.copy(make_cfg().paths.data_dir + "/snli/snli_1.0_train.jsonl", other)
    cfg = make_cfg(f"task.splits.dev.path={other}", "task.splits.dev.start=2", "task.splits.dev.stop=7")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    assert len(dm.splits["dev"]) == 5


def test_gzipped_corpus_is_read_when_the_plain_file_is_absent(make_cfg, tmp_path):
    import gzip

    src = make_cfg().paths.data_dir + "/scitail/SciTailV1.1/tsv_format/scitail_1.0_dev.tsv"
    target = tmp_path / "data" / "scitail" / "SciTailV1.1" / "tsv_format"
    target.mkdir(parents=True)
    with open(src, "rb") as f, gzip.open(target / "scitail_1.0_dev.tsv.gz", "wb") as g:
        g.write(f.read())
    cfg = make_cfg("task=scitail", f"task.splits.train.path={src}", f"paths.data_dir={tmp_path / 'data'}")
    dm = build_datamodule(cfg)
    dm.setup("validate")
    assert len(dm.splits["dev"]) == 6


def test_missing_corpus_without_hub_says_how_to_download(make_cfg, tmp_path):
    cfg = make_cfg("task=dnli", f"paths.data_dir={tmp_path}")
    with pytest.raises(CorpusNotFoundError) as err:
        build_datamodule(cfg).setup("fit")
    message = str(err.value)
    assert "dialogue_nli_train.jsonl" in message and "wellecks" in message and "paths.data_dir" in message


def test_missing_corpus_offline_reports_the_hub_failure(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = make_cfg("task=snli", f"paths.data_dir={tmp_path}")
    with pytest.raises(CorpusNotFoundError) as err:
        build_datamodule(cfg).setup("fit")
    message = str(err.value)
    assert "stanfordnlp/snli" in message and "snli_1.0_train.jsonl" in message and "snli_1.0.zip" in message


def test_label_outside_the_label_space_is_a_clear_error(make_cfg):
    cfg = make_cfg("task.labels=[entailment,contradiction]")
    with pytest.raises(LabelError, match="neutral"):
        build_datamodule(cfg).setup("fit")


def test_missing_vectors_say_how_to_get_glove_or_choose_random(make_cfg, tmp_path):
    """The vectors file is checked before any corpus is read (its words shape the vocabulary)."""
    cfg = make_cfg(f"embeddings.path={tmp_path / 'nope.txt'}")
    with pytest.raises(FileNotFoundError) as err:
        build_datamodule(cfg)
    assert "glove.840B.300d.zip" in str(err.value) and "embeddings=random" in str(err.value)


def test_split_prefixes():
    assert [split_prefix(s) for s in ["dev", "dev_mismatched", "test"]] == ["val", "val_mismatched", "test"]


def test_empty_split_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    task = Task(name="t", kind="classify", reader=read_snli_jsonl, labels=["entailment", "neutral"],
                splits={"train": {"path": str(empty)}}, eval_splits=[], test_splits=[])  # fmt: skip
    with pytest.raises(ValueError, match="train split is empty"):
        PairDataModule(task, DataSettings(tmp_path, tmp_path, batch_size=2)).setup("fit")


def test_prepared_splits_are_cached_and_reused(make_cfg, caplog, monkeypatch):
    first = build_datamodule(make_cfg())
    first.setup("fit")
    import matching.training.datamodule as dm_module

    def no_reading(*args, **kwargs):
        raise AssertionError("the corpus was read again instead of coming from the cache")

    monkeypatch.setattr(dm_module, "read_split", no_reading)
    second = build_datamodule(make_cfg())
    with caplog.at_level("INFO"):
        second.setup("fit")
    assert "loaded from cache" in caplog.text
    assert second.vocab.tokens == first.vocab.tokens
    for name in ("train", "dev"):
        a, b = first.splits[name], second.splits[name]
        assert [x.tolist() for x in a.a] == [x.tolist() for x in b.a] and [x.tolist() for x in a.b] == [
            x.tolist() for x in b.b
        ]
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.groups, b.groups)


def test_a_copied_corpus_finds_its_cache_and_a_changed_one_is_read_again(make_cfg, tmp_path, monkeypatch, caplog):
    build_datamodule(make_cfg()).setup("fit")
    copy = tmp_path / "copy"
    shutil.copytree(FIXTURES / "snli", copy / "snli", copy_function=shutil.copyfile)  # new files, new times
    for file in (copy / "snli").iterdir():
        os.utime(file, ns=(1, 1))  # and a time no cache was keyed by
    import matching.training.datamodule as dm_module

    calls = []
    real = dm_module.read_split
    monkeypatch.setattr(dm_module, "read_split", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    with caplog.at_level("INFO"):
        build_datamodule(make_cfg(f"paths.data_dir={copy}")).setup("fit")
    assert calls == [] and "loaded from cache" in caplog.text
    train = copy / "snli" / "snli_1.0_train.jsonl"
    train.write_text("".join(train.read_text().splitlines(keepends=True)[:-1]))  # one pair fewer
    build_datamodule(make_cfg(f"paths.data_dir={copy}")).setup("fit")
    assert "train" in calls


def test_a_files_sha256_is_read_once_and_remembered_by_path_size_and_time(tmp_path, monkeypatch):
    from matching.data import cache as corpus_cache

    data = tmp_path / "data.txt"
    data.write_text("a pair\n")
    first = corpus_cache.content_sha256(data, tmp_path / "cache")
    assert first == hashlib.sha256(b"a pair\n").hexdigest()
    monkeypatch.setattr(corpus_cache, "file_sha256", lambda path: pytest.fail("the file was read again"))
    assert corpus_cache.content_sha256(data, tmp_path / "cache") == first
    monkeypatch.undo()
    data.write_text("another pair\n")  # a new size and time: read again
    assert corpus_cache.content_sha256(data, tmp_path / "cache") == hashlib.sha256(b"another pair\n").hexdigest()
    assert corpus_cache.file_content(tmp_path / "absent.txt", tmp_path / "cache") is None
    copy = tmp_path / "copy.txt"
    copy.write_text("another pair\n")
    vectors = {"path": str(data), "size": 13, "mtime": 1, "format": "glove"}  # a source's identity, by its file
    assert (
        corpus_cache.by_content(vectors, None)
        == corpus_cache.by_content(vectors | {"path": str(copy)}, None)
        == {"format": "glove", "sha256": hashlib.sha256(b"another pair\n").hexdigest()}
    )
    assert corpus_cache.by_content({"option": "random"}, None) == {"option": "random"}


def test_cache_misses_when_the_settings_or_the_file_change(make_cfg, tmp_path, monkeypatch):
    build_datamodule(make_cfg()).setup("fit")
    import matching.training.datamodule as dm_module

    calls = []
    real = dm_module.read_split
    monkeypatch.setattr(dm_module, "read_split", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    build_datamodule(make_cfg("data.max_length=3")).setup("fit")
    assert "train" in calls
    calls.clear()
    build_datamodule(make_cfg("data.cache=false")).setup("fit")
    assert "train" in calls
