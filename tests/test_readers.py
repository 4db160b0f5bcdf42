"""Corpus readers: the fixtures in each real format, gzip/CRLF handling, and malformed-input errors."""

from __future__ import annotations

import gzip
import json
import logging
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from matching.data.corpus_files import open_text
from matching.data.pairs import Pair
from matching.data.readers import read_dnli, read_scitail_tsv, read_snli_jsonl
from matching.errors import DataFormatError

FIXTURES = Path(__file__).parent / "fixtures"
REAL_SNLI_DEV = Path("/work/shared/data/snli/snli_1.0_dev.jsonl.gz")

NLI_LABELS = {"entailment", "neutral", "contradiction"}
SCITAIL_LABELS = {"entails", "neutral"}
DNLI_LABELS = {"positive", "neutral", "negative"}

# (reader, fixture path, expected pairs after dropping "-", expected label set)
CASES = [
    (read_snli_jsonl, "snli/snli_1.0_train.jsonl", 12, NLI_LABELS),
    (read_snli_jsonl, "snli/snli_1.0_dev.jsonl", 9, NLI_LABELS),
    (read_snli_jsonl, "snli/snli_1.0_test.jsonl", 9, NLI_LABELS),
    (read_snli_jsonl, "mnli/multinli_1.0_train.jsonl", 12, NLI_LABELS),
    (read_snli_jsonl, "mnli/multinli_1.0_dev_matched.jsonl", 9, NLI_LABELS),
    (read_snli_jsonl, "mnli/multinli_1.0_dev_mismatched.jsonl", 9, NLI_LABELS),
    (read_scitail_tsv, "scitail/SciTailV1.1/tsv_format/scitail_1.0_train.tsv", 12, SCITAIL_LABELS),
    (read_scitail_tsv, "scitail/SciTailV1.1/tsv_format/scitail_1.0_dev.tsv", 6, SCITAIL_LABELS),
    (read_scitail_tsv, "scitail/SciTailV1.1/tsv_format/scitail_1.0_test.tsv", 6, SCITAIL_LABELS),
    (read_dnli, "dnli/dialogue_nli_train.jsonl", 12, DNLI_LABELS),
    (read_dnli, "dnli/dialogue_nli_dev.jsonl", 6, DNLI_LABELS),
    (read_dnli, "dnli/dialogue_nli_test.jsonl", 6, DNLI_LABELS),
]


def _ids(case: tuple) -> str:
    return Path(case[1]).name


def _gzip_copy(src: Path, dst: Path) -> Path:
    with open(src, "rb") as f, gzip.open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return dst


# ------------------------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("reader,rel,count,labels", CASES, ids=[_ids(c) for c in CASES])
def test_fixture_parses(reader, rel, count, labels):
    pairs = list(reader(FIXTURES / rel))
    assert len(pairs) == count
    assert {p.label for p in pairs} == labels  # every label of the corpus in every split
    for p in pairs:
        assert isinstance(p, Pair)
        assert p.a and p.b and p.a == p.a.strip() and p.b == p.b.strip()
        assert p.group is None


def test_snli_first_pair_and_dash_dropped(caplog):
    path = FIXTURES / "snli/snli_1.0_train.jsonl"
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        pairs = list(read_snli_jsonl(path))
    first = Pair("Two men on bicycles competing in a race.", "People are riding bikes.", "entailment")
    assert pairs[0] == first
    assert "-" not in {p.label for p in pairs}
    n_lines = sum(1 for line in path.read_text().splitlines() if line.strip())
    assert n_lines == len(pairs) + 1
    summary = [r.getMessage() for r in caplog.records if r.name == "matching.data.readers"]
    assert len(summary) == 1
    assert "read 12 pairs" in summary[0] and "snli_1.0_train.jsonl" in summary[0]
    assert "dropped 1" in summary[0] and '"-"' in summary[0]


def test_mnli_trailing_space_stripped_and_non_ascii_kept():
    pairs = list(read_snli_jsonl(FIXTURES / "mnli/multinli_1.0_train.jsonl"))
    assert pairs[0].b == "Training is the more expensive of the two parts."
    assert any("café" in p.a for p in pairs)


def test_reader_options():
    from hydra.utils import get_method

    conf = Path(__file__).parents[1] / "conf" / "task"
    targets = {p.stem: get_method(yaml.safe_load(p.read_text())["_target_"]) for p in (conf / "reader").glob("*.yaml")}
    assert {k: targets[k] for k in ("snli_jsonl", "scitail_tsv", "dnli_json")} == {
        "snli_jsonl": read_snli_jsonl,
        "scitail_tsv": read_scitail_tsv,
        "dnli_json": read_dnli,
    }
    named = {
        p.stem: next((d["reader"] for d in yaml.safe_load(p.read_text())["defaults"] if isinstance(d, dict)), None)
        for p in conf.glob("*.yaml")
    }
    inherited = {k for k, v in named.items() if v is None}  # a preset of another task (task=mrpc over task=pairs)
    assert inherited == {"pairs_rank", "pairs_positives", "mrpc", "qqp", "paws"}
    assert set(named.values()) - {None} <= targets.keys()  # every other task config names a reader option


# --------------------------------------------------------------------------------- gzip, CRLF, twins


@pytest.mark.parametrize("reader,rel,count,labels", CASES[::3], ids=[_ids(c) for c in CASES[::3]])
def test_gzip_copy_reads_identically(tmp_path, reader, rel, count, labels):
    src = FIXTURES / rel
    gz = _gzip_copy(src, tmp_path / (src.name + ".gz"))
    assert list(reader(gz)) == list(reader(src))


def test_asking_for_plain_name_finds_gz(tmp_path):
    src = FIXTURES / "snli/snli_1.0_dev.jsonl"
    _gzip_copy(src, tmp_path / "snli_1.0_dev.jsonl.gz")
    plain = tmp_path / "snli_1.0_dev.jsonl"
    with open_text(plain) as f:
        assert f.read() == src.read_text(encoding="utf-8")
    assert list(read_snli_jsonl(plain)) == list(read_snli_jsonl(src))


def test_asking_for_gz_name_finds_plain(tmp_path):
    src = FIXTURES / "snli/snli_1.0_dev.jsonl"
    shutil.copy(src, tmp_path / src.name)
    with open_text(tmp_path / (src.name + ".gz")) as f:
        assert f.read() == src.read_text(encoding="utf-8")


def test_gzip_without_gz_suffix_is_detected(tmp_path):
    src = FIXTURES / "snli/snli_1.0_dev.jsonl"
    disguised = _gzip_copy(src, tmp_path / src.name)
    assert list(read_snli_jsonl(disguised)) == list(read_snli_jsonl(src))


def test_open_text_universal_newlines(tmp_path):
    p = tmp_path / "crlf.txt"
    p.write_bytes(b"one\r\ntwo\r\n")
    with open_text(p) as f:
        assert f.read() == "one\ntwo\n"


@pytest.mark.parametrize("reader,rel,count,labels", CASES[::3], ids=[_ids(c) for c in CASES[::3]])
def test_crlf_line_endings(tmp_path, reader, rel, count, labels):
    src = FIXTURES / rel
    crlf = tmp_path / src.name
    crlf.write_bytes(src.read_bytes().replace(b"\n", b"\r\n"))
    assert list(reader(crlf)) == list(reader(src))


def test_blank_lines_and_bom_skipped(tmp_path):
    src = FIXTURES / "scitail/SciTailV1.1/tsv_format/scitail_1.0_dev.tsv"
    p = tmp_path / src.name
    p.write_bytes(b"\xef\xbb\xbf" + src.read_bytes().replace(b"\n", b"\n\n", 2) + b"\n  \n")
    assert list(read_scitail_tsv(p)) == list(read_scitail_tsv(src))


def test_empty_label_dropped(tmp_path, caplog):
    p = tmp_path / "scitail_1.0_dev.tsv"
    p.write_text("A cell.\tCells exist.\tentails\nA star.\tStars burn.\t\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        pairs = list(read_scitail_tsv(p))
    assert [p.label for p in pairs] == ["entails"]
    assert "empty label" in caplog.text


# ---------------------------------------------------------------------------------------- DNLI shapes


def test_dnli_array_and_json_lines_agree(tmp_path):
    train = FIXTURES / "dnli/dialogue_nli_train.jsonl"
    records = json.loads(train.read_text(encoding="utf-8"))
    assert isinstance(records, list)  # the fixture is in the release's single-array form

    as_lines = tmp_path / "lines.jsonl"
    as_lines.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    pretty = tmp_path / "pretty.jsonl"
    pretty.write_text("\n  " + json.dumps(records, indent=2) + "\n", encoding="utf-8")

    expected = list(read_dnli(train))
    assert list(read_dnli(as_lines)) == expected
    assert list(read_dnli(pretty)) == expected
    assert expected[0] == Pair("i work as a nurse at the local hospital .", "i am a nurse .", "positive")


def test_dnli_empty_array(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("[ ]\n", encoding="utf-8")
    assert list(read_dnli(p)) == []


# ------------------------------------------------------------------------------------ malformed input


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _snli_lines(n: int = 4) -> list[str]:
    return (FIXTURES / "snli/snli_1.0_dev.jsonl").read_text(encoding="utf-8").splitlines()[:n]


def _raises(reader, path: Path, line: int, *fragments: str) -> str:
    with pytest.raises(DataFormatError) as info:
        list(reader(path))
    msg = str(info.value)
    assert path.name in msg and f"line {line}" in msg, msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


def test_bad_json_line(tmp_path):
    lines = _snli_lines()
    lines[2] = lines[2][:50]  # cut mid-object
    _raises(read_snli_jsonl, _write_lines(tmp_path / "snli_1.0_dev.jsonl", lines), 3, "invalid JSON")


def test_missing_field_named(tmp_path):
    lines = _snli_lines()
    rec = json.loads(lines[1])
    del rec["gold_label"]
    lines[1] = json.dumps(rec)
    path = _write_lines(tmp_path / "snli_1.0_dev.jsonl", lines)
    _raises(read_snli_jsonl, path, 2, "'gold_label'")


def test_json_line_not_an_object(tmp_path):
    path = _write_lines(tmp_path / "x.jsonl", [*_snli_lines(2), "[1, 2]"])
    _raises(read_snli_jsonl, path, 3, "JSON object")


def test_wrong_tsv_column_count(tmp_path):
    path = _write_lines(
        tmp_path / "scitail_1.0_train.tsv",
        ["Ice floats.\tIce is less dense.\tentails", "Ice floats.\tIce is less dense.\tentails\textra"],
    )
    _raises(read_scitail_tsv, path, 2, "found 4", "expected 3")


def test_non_utf8_byte(tmp_path):
    encoded = [line.encode("utf-8") for line in _snli_lines()]
    encoded[1] = encoded[1].replace(b'"sentence2": "', b'"sentence2": "caf\xe9 ', 1)  # a Latin-1 byte
    path = tmp_path / "snli_1.0_dev.jsonl"
    path.write_bytes(b"\n".join(encoded) + b"\n")
    _raises(read_snli_jsonl, path, 2, "UTF-8")


def test_non_utf8_byte_in_dnli_array(tmp_path):
    train = FIXTURES / "dnli/dialogue_nli_train.jsonl"
    records = json.loads(train.read_text(encoding="utf-8"))
    text = json.dumps(records, indent=1).encode("utf-8")
    path = tmp_path / "dialogue_nli_train.jsonl"
    path.write_bytes(text.replace(b"nurse at", b"nurse \xff at", 1))
    _raises(read_dnli, path, text[: text.index(b"nurse at")].count(b"\n") + 1, "UTF-8")


def test_dnli_array_missing_field_reports_element_line(tmp_path):
    records = json.loads((FIXTURES / "dnli/dialogue_nli_train.jsonl").read_text(encoding="utf-8"))
    del records[3]["label"]
    path = tmp_path / "dialogue_nli_train.jsonl"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n", encoding="utf-8")
    _raises(read_dnli, path, 5, "'label'")  # element 3 (0-based) is on line 5


def test_dnli_truncated_array(tmp_path):
    text = (FIXTURES / "dnli/dialogue_nli_train.jsonl").read_text(encoding="utf-8")
    path = tmp_path / "dialogue_nli_train.jsonl"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    _raises(read_dnli, path, 1, "re-download")


@pytest.mark.parametrize("rel", ["mnli/multinli_1.0_train.jsonl", "snli/snli_1.0_train.jsonl"])
def test_truncated_gzip(tmp_path, rel):
    src = FIXTURES / rel
    data = _gzip_copy(src, tmp_path / "full.gz").read_bytes()
    cut = tmp_path / (src.name + ".gz")
    cut.write_bytes(data[: len(data) // 2])
    pattern = rf"{re.escape(cut.name)}, line \d+: .*truncated.*re-download"
    with pytest.raises(DataFormatError, match=pattern):
        list(read_snli_jsonl(cut))


def test_missing_file_names_paths(tmp_path):
    missing = tmp_path / "nowhere" / "snli_1.0_train.jsonl"
    for call in (open_text, read_snli_jsonl, read_scitail_tsv, read_dnli):
        with pytest.raises(FileNotFoundError) as info:
            call(missing)
        assert str(missing) in str(info.value) and str(missing) + ".gz" in str(info.value)


# ------------------------------------------------------------------------------------------ real data


@pytest.mark.skipif(not REAL_SNLI_DEV.exists(), reason="shared SNLI dev copy not present")
def test_real_snli_dev():
    pairs = list(read_snli_jsonl(REAL_SNLI_DEV))
    assert len(pairs) == 9842  # 10,000 lines minus 158 with gold_label "-"
    counts = Counter(p.label for p in pairs)
    assert set(counts) == NLI_LABELS
    assert pairs[0].a == "Two women are embracing while holding to go packages."


def test_scitail_lines_with_an_unbalanced_quote_are_read_line_by_line(tmp_path, caplog):
    """SciTail 1.1's training file has premises that begin with an unbalanced `"` (499 of them): a quote-aware
    reader merges such a line with the lines after it (some tools report 23,097 pairs instead of 23,596). Read line by
    line, each is its own pair, its quote kept as written, and the count says nothing was dropped."""
    p = tmp_path / "scitail_1.0_train.tsv"
    p.write_text('"Plants make food. They use light.\tPlants use light to make food.\tentails\n'
                 "Rocks are made of minerals.\tMinerals make up rocks.\tentails\n"
                 '"The heart pumps &quot;blood&quot;.\tThe lungs pump blood.\tneutral\n', encoding="utf-8")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        pairs = list(read_scitail_tsv(p))
    assert [pair.line for pair in pairs] == [1, 2, 3] and [pair.label for pair in pairs] == ["entails", "entails",
                                                                                            "neutral"]  # fmt: skip
    assert pairs[0].a.startswith('"Plants') and pairs[2].a == '"The heart pumps &quot;blood&quot;.'
    assert "read 3 pairs" in caplog.text and "dropped 0" in caplog.text
