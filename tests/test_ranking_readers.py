"""Ranking-corpus readers (WikiQA, TrecQA tokens and Jacana XML, Ubuntu CSV and TSV): fixtures in each real
format, grouping, gzip/CRLF handling, malformed-input errors, and counts on the shared real copies."""

from __future__ import annotations

import gzip
import logging
import shutil
from pathlib import Path

import pytest
import yaml

from matching.data.pairs import Pair
from matching.data.readers import read_trecqa_toks, read_trecqa_xml, read_ubuntu_csv, read_ubuntu_tsv, read_wikiqa_tsv
from matching.errors import DataFormatError

FIXTURES = Path(__file__).parent / "fixtures"
REAL = Path("/work/shared/data")
TRECQA_FILES = ("a.toks", "b.toks", "sim.txt", "id.txt")
WIKIQA_HEADER = "QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel"
UBUNTU_EVAL_HEADER = "Context,Ground Truth Utterance," + ",".join(f"Distractor_{i}" for i in range(9))


def _stats(pairs: list[Pair]) -> tuple[int, int, int, int]:
    """(pairs, groups, groups with a positive, groups with both labels)."""
    groups: dict[str, set[str]] = {}
    for p in pairs:
        groups.setdefault(p.group, set()).add(p.label)
    return len(pairs), len(groups), sum("1" in v for v in groups.values()), sum(len(v) == 2 for v in groups.values())


def _labels_by_group(pairs: list[Pair]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = {}
    for p in pairs:
        groups.setdefault(p.group, set()).add(p.label)
    return groups


def _check_pairs(pairs: list[Pair]) -> None:
    seen: list[str] = []
    for p in pairs:
        assert isinstance(p, Pair)
        assert p.label in {"0", "1"}
        assert isinstance(p.group, str) and p.group
        assert p.a and p.b and p.a == p.a.strip() and p.b == p.b.strip()
        assert "\r" not in p.a + p.b
        if not seen or seen[-1] != p.group:
            assert p.group not in seen, f"group {p.group} is not contiguous"
            seen.append(p.group)


def _gzip_copy(src: Path, dst: Path) -> Path:
    with open(src, "rb") as f, gzip.open(dst, "wb") as g:
        shutil.copyfileobj(f, g)
    return dst


def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def _raises(reader, path: Path, line: int | None, *fragments: str, name: str | None = None) -> str:
    with pytest.raises(DataFormatError) as info:
        list(reader(path))
    msg = str(info.value)
    assert (name or path.name) in msg, msg
    if line is not None:
        assert f"line {line}:" in msg, msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


def _summary(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "matching.data.readers"]


def test_reader_options_name_the_reader_functions():
    from hydra.utils import get_method

    conf = Path(__file__).parents[1] / "conf" / "task" / "reader"
    options = {"wikiqa_tsv": read_wikiqa_tsv, "trecqa_toks": read_trecqa_toks, "trecqa_xml": read_trecqa_xml,
               "ubuntu_csv": read_ubuntu_csv, "ubuntu_tsv": read_ubuntu_tsv}  # fmt: skip
    for name, function in options.items():
        node = yaml.safe_load((conf / f"{name}.yaml").read_text())
        assert get_method(node["_target_"]) is function and node["_partial_"] is True


# ------------------------------------------------------------------------------------------------ WikiQA

# split: (pairs, groups, groups with a correct answer, groups with both labels)
WIKIQA = {"train": (23, 6, 6, 6), "dev": (14, 5, 4, 3), "test": (14, 5, 4, 3)}


@pytest.mark.parametrize("split", sorted(WIKIQA))
def test_wikiqa_fixture(split):
    path = FIXTURES / f"wikiqa/WikiQA-{split}.tsv"
    raw = path.read_bytes()
    assert raw.startswith(WIKIQA_HEADER.encode() + b"\r\n")  # the real header, CRLF
    assert raw.count(b"\r\n") == raw.count(b"\n")
    pairs = list(read_wikiqa_tsv(path))
    _check_pairs(pairs)
    assert _stats(pairs) == WIKIQA[split]
    assert all(p.group.startswith("Q") for p in pairs)
    if split != "train":  # an unanswered question and an all-correct one, as in the real dev/test
        labels = _labels_by_group(pairs).values()
        assert {"0"} in labels and {"1"} in labels


def test_wikiqa_first_pair_and_non_ascii():
    pairs = list(read_wikiqa_tsv(FIXTURES / "wikiqa/WikiQA-dev.tsv"))
    assert pairs[0].a == "how big is bmc software in houston, tx"
    assert pairs[0].group == "Q11"
    assert any("—" in p.b for p in pairs)  # an em dash kept as is


def test_wikiqa_crlf_lf_and_gzip_agree(tmp_path):
    src = FIXTURES / "wikiqa/WikiQA-train.tsv"
    lf = tmp_path / "lf.tsv"
    lf.write_bytes(src.read_bytes().replace(b"\r\n", b"\n"))
    gz = _gzip_copy(src, tmp_path / "WikiQA-train.tsv.gz")
    expected = list(read_wikiqa_tsv(src))
    assert list(read_wikiqa_tsv(lf)) == expected
    assert list(read_wikiqa_tsv(gz)) == expected
    assert list(read_wikiqa_tsv(tmp_path / "WikiQA-train.tsv")) == expected  # plain name finds the .gz


def test_wikiqa_summary_line(caplog):
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        list(read_wikiqa_tsv(FIXTURES / "wikiqa/WikiQA-dev.tsv"))
    (msg,) = _summary(caplog)
    assert "read 14 pairs in 5 groups" in msg and "3 groups with both labels" in msg
    assert "WikiQA-dev.tsv" in msg and "dropped 0" in msg


def test_wikiqa_wrong_header(tmp_path):
    lines = (FIXTURES / "wikiqa/WikiQA-dev.tsv").read_text(encoding="utf-8").splitlines()
    _raises(read_wikiqa_tsv, _write(tmp_path / "WikiQA-dev.tsv", "\n".join(lines[1:]) + "\n"), 1, "header")


def test_wikiqa_wrong_column_count(tmp_path):
    lines = (FIXTURES / "wikiqa/WikiQA-dev.tsv").read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace("\t", " ", 1)
    path = _write(tmp_path / "WikiQA-dev.tsv", "\n".join(lines) + "\n", "\r\n")
    _raises(read_wikiqa_tsv, path, 4, "found 6", "expected 7")


def test_wikiqa_bad_label(tmp_path):
    lines = (FIXTURES / "wikiqa/WikiQA-dev.tsv").read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2][:-1] + "yes"
    _raises(read_wikiqa_tsv, _write(tmp_path / "WikiQA-dev.tsv", "\n".join(lines) + "\n"), 3, "'yes'")


def test_wikiqa_question_split_over_two_places(tmp_path):
    lines = (FIXTURES / "wikiqa/WikiQA-dev.tsv").read_text(encoding="utf-8").splitlines()
    path = _write(tmp_path / "WikiQA-dev.tsv", "\n".join([*lines, lines[1]]) + "\n")
    _raises(read_wikiqa_tsv, path, len(lines) + 1, "'Q11'", "consecutive")


# ---------------------------------------------------------------------------------------- TrecQA tokens

# split: (pairs, groups, positives, groups with both labels)
TRECQA = {
    "train": (24, 5, 7, 5),
    "train-all": (31, 7, 10, 7),
    "clean-dev": (12, 3, 6, 3),
    "raw-dev": (23, 5, 9, 3),
    "clean-test": (21, 3, 8, 3),
    "raw-test": (26, 5, 10, 3),
}


@pytest.mark.parametrize("split", list(TRECQA))
def test_trecqa_toks_fixture(split):
    pairs = list(read_trecqa_toks(FIXTURES / "trecqa" / split))
    _check_pairs(pairs)
    n, groups, _, both = _stats(pairs)
    assert (n, groups, sum(p.label == "1" for p in pairs), both) == TRECQA[split]
    ids = (FIXTURES / "trecqa" / split / "id.txt").read_text().split()
    assert [p.group for p in pairs] == ids


@pytest.mark.parametrize("part", ["dev", "test"])
def test_trecqa_clean_is_raw_without_single_label_questions(part):
    raw = list(read_trecqa_toks(FIXTURES / f"trecqa/raw-{part}"))
    clean = list(read_trecqa_toks(FIXTURES / f"trecqa/clean-{part}"))
    labels = _labels_by_group(raw)
    assert {"0"} in labels.values() and {"1"} in labels.values()  # raw keeps both kinds...
    content = [(p.a, p.b, p.label, p.group) for p in raw if len(labels[p.group]) == 2]  # line numbers differ
    assert [(p.a, p.b, p.label, p.group) for p in clean] == content  # ...which clean drops


def test_trecqa_first_pair():
    first = next(read_trecqa_toks(FIXTURES / "trecqa/raw-dev"))
    assert first.a == "what ethnic group / race are crip members ?"
    assert first.label == "0" and first.group == "1.4"


def _copy_split(tmp_path: Path, split: str = "raw-dev") -> Path:
    dst = tmp_path / split
    shutil.copytree(FIXTURES / "trecqa" / split, dst)
    return dst


def test_trecqa_gzipped_b_toks(tmp_path):
    folder = _copy_split(tmp_path)
    _gzip_copy(folder / "b.toks", folder / "b.toks.gz")
    (folder / "b.toks").unlink()
    assert list(read_trecqa_toks(folder)) == list(read_trecqa_toks(FIXTURES / "trecqa/raw-dev"))


def test_trecqa_all_gzipped_and_crlf(tmp_path):
    folder = _copy_split(tmp_path)
    for name in TRECQA_FILES:
        data = (folder / name).read_bytes().replace(b"\n", b"\r\n")
        (folder / name).unlink()
        with gzip.open(folder / (name + ".gz"), "wb") as g:
            g.write(data)
    assert list(read_trecqa_toks(folder)) == list(read_trecqa_toks(FIXTURES / "trecqa/raw-dev"))


def test_trecqa_float_sim_values(tmp_path):
    folder = _copy_split(tmp_path)
    sims = (folder / "sim.txt").read_text().split()
    (folder / "sim.txt").write_text("".join(f"{s}.0\n" for s in sims))
    assert list(read_trecqa_toks(folder)) == list(read_trecqa_toks(FIXTURES / "trecqa/raw-dev"))


def test_trecqa_bad_sim_value(tmp_path):
    folder = _copy_split(tmp_path)
    sims = (folder / "sim.txt").read_text().split()
    sims[4] = "2"
    (folder / "sim.txt").write_text("".join(s + "\n" for s in sims))
    _raises(read_trecqa_toks, folder, 5, "'2'", name="sim.txt")


def test_trecqa_line_count_mismatch(tmp_path):
    folder = _copy_split(tmp_path)
    lines = (folder / "b.toks").read_text().splitlines()
    (folder / "b.toks").write_text("".join(line + "\n" for line in lines[:-2]))
    msg = _raises(read_trecqa_toks, folder, None, "a.toks 23", "b.toks 21", "sim.txt 23", "id.txt 23", name="raw-dev")
    assert str(folder) in msg


def test_trecqa_missing_file(tmp_path):
    folder = _copy_split(tmp_path)
    (folder / "sim.txt").unlink()
    with pytest.raises(FileNotFoundError) as info:
        read_trecqa_toks(folder)
    msg = str(info.value)
    assert str(folder) in msg and "lacks sim.txt" in msg
    assert all(name in msg for name in TRECQA_FILES)


def test_trecqa_missing_folder(tmp_path):
    folder = tmp_path / "trecqa" / "raw-test"
    with pytest.raises(FileNotFoundError) as info:
        read_trecqa_toks(folder)
    msg = str(info.value)
    assert str(folder) in msg and all(name in msg for name in TRECQA_FILES)


def test_trecqa_question_id_reused(tmp_path):
    folder = _copy_split(tmp_path)
    ids = (folder / "id.txt").read_text().split()
    ids[-1] = "1.4"  # the first question's id again, after others
    (folder / "id.txt").write_text("".join(i + "\n" for i in ids))
    _raises(read_trecqa_toks, folder, len(ids), "'1.4'", name="id.txt")


# ------------------------------------------------------------------------------------------- TrecQA XML


def test_trecqa_xml_fixtures(caplog):
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        train = list(read_trecqa_xml(FIXTURES / "trecqa/xml/train.xml"))
        dev = list(read_trecqa_xml(FIXTURES / "trecqa/xml/dev.xml"))
    _check_pairs(train)
    _check_pairs(dev)
    assert _stats(train) == (9, 2, 2, 2)  # the third QApairs (id 94) has a question but no candidates
    assert _stats(dev) == (8, 3, 3, 2)
    assert [p.group for p in dev] == ["2.4"] * 4 + ["4.5"] * 2 + ["14.4"] * 2
    assert [p.label for p in dev[:4]] == ["1", "0", "0", "0"]
    train_msg, dev_msg = _summary(caplog)
    assert "read 9 pairs in 2 groups" in train_msg and "dropped 1" in train_msg and "no candidates" in train_msg
    assert "read 8 pairs in 3 groups" in dev_msg and "dropped 0" in dev_msg


def test_trecqa_xml_tokens_joined_and_annotation_lines_ignored():
    pairs = list(read_trecqa_xml(FIXTURES / "trecqa/xml/train.xml"))
    assert pairs[0].a == (
        "What is the name of the rare neurological disease with symptoms such as : involuntary movements "
        "-LRB- tics -RRB- , swearing , and incoherent vocalizations -LRB- grunts , shouts , etc. -RRB- ?"
    )
    for p in pairs:
        assert "\t" not in p.a + p.b and "  " not in p.a + p.b
        assert " NNP " not in f" {p.a} {p.b} " and "PMOD" not in p.a + p.b


def test_trecqa_xml_matches_tokens_format():
    xml = [p for p in read_trecqa_xml(FIXTURES / "trecqa/xml/dev.xml") if p.group in {"2.4", "4.5"}]
    toks = [p for p in read_trecqa_toks(FIXTURES / "trecqa/raw-dev") if p.group in {"2.4", "4.5"}]
    assert len(xml) == 6
    assert [Pair(p.a.lower(), p.b.lower(), p.label, p.group) for p in xml] == toks  # tokens are lowercased XML


def test_trecqa_xml_gzip_and_crlf(tmp_path):
    src = FIXTURES / "trecqa/xml/dev.xml"
    crlf = tmp_path / "dev.xml"
    crlf.write_bytes(src.read_bytes().replace(b"\n", b"\r\n"))
    gz = _gzip_copy(src, tmp_path / "dev.xml.gz")
    expected = list(read_trecqa_xml(src))
    assert list(read_trecqa_xml(crlf)) == expected
    assert list(read_trecqa_xml(gz)) == expected


def _xml_lines() -> list[str]:
    return (FIXTURES / "trecqa/xml/dev.xml").read_text(encoding="utf-8").splitlines()


def test_trecqa_xml_candidate_before_question(tmp_path):
    lines = _xml_lines()
    q = lines.index("<question>")
    end = lines.index("</question>")
    lines[q : end + 1] = []  # the first QApairs loses its question
    path = _write(tmp_path / "dev.xml", "\n".join(lines) + "\n")
    _raises(read_trecqa_xml, path, 2, "<positive> before the <question>")


def test_trecqa_xml_block_without_token_line(tmp_path):
    lines = _xml_lines()
    i = lines.index("<negative>")
    end = lines.index("</negative>", i)
    lines[i + 1 : end] = []
    path = _write(tmp_path / "dev.xml", "\n".join(lines) + "\n")
    _raises(read_trecqa_xml, path, i + 1, "no token line")


def test_trecqa_xml_unclosed_block(tmp_path):
    lines = _xml_lines()
    i = lines.index("</negative>")
    del lines[i]
    path = _write(tmp_path / "dev.xml", "\n".join(lines) + "\n")
    _raises(read_trecqa_xml, path, i + 1, "not closed")


def test_trecqa_xml_truncated(tmp_path):
    lines = _xml_lines()
    path = _write(tmp_path / "dev.xml", "\n".join(lines[:30]) + "\n")
    with pytest.raises(DataFormatError, match=r"dev\.xml, line \d+: .*truncated"):
        list(read_trecqa_xml(path))


def test_trecqa_xml_stray_text(tmp_path):
    lines = _xml_lines()
    lines.insert(0, "garbage")
    _raises(read_trecqa_xml, _write(tmp_path / "dev.xml", "\n".join(lines) + "\n"), 1, "'garbage'")


def test_trecqa_xml_html_characters_not_escaped(tmp_path):
    lines = _xml_lines()
    i = lines.index("<question>")
    lines[i + 1] = "Is\t3\t<\t4\t&\t5\t>\t2\t?"
    pairs = list(read_trecqa_xml(_write(tmp_path / "dev.xml", "\n".join(lines) + "\n")))
    assert pairs[0].a == "Is 3 < 4 & 5 > 2 ?"


# ----------------------------------------------------------------------------------------- Ubuntu CSV

# split: (pairs, groups, positives)
UBUNTU = {"train": (12, 12, 6), "valid": (30, 3, 3), "test": (30, 3, 3)}


@pytest.mark.parametrize("split", list(UBUNTU))
def test_ubuntu_csv_fixture(split):
    pairs = list(read_ubuntu_csv(FIXTURES / f"ubuntu/{split}.csv"))
    _check_pairs(pairs)
    n, groups, _, _ = _stats(pairs)
    assert (n, groups, sum(p.label == "1" for p in pairs)) == UBUNTU[split]
    for p in pairs:
        assert "__eou__" in p.a and p.a.endswith("__eot__")
    if split == "train":
        assert [p.group for p in pairs] == [str(i) for i in range(1, 13)]
    else:
        for g in range(3):
            block = pairs[10 * g : 10 * g + 10]
            assert [p.label for p in block] == ["1"] + ["0"] * 9
            assert {p.group for p in block} == {str(g + 1)} and len({p.a for p in block}) == 1


def test_ubuntu_csv_quotes_commas_and_newlines():
    pairs = list(read_ubuntu_csv(FIXTURES / "ubuntu/train.csv"))
    assert pairs[2].b == 'try sudo apt-get clean , then run "sudo apt-get update" again __eou__'
    multi = pairs[6].a
    assert multi.startswith("i pasted my fstab line :\nUUID=1234-abcd /media/data vfat defaults 0 0\nbut it")
    assert pairs[6].label == "1"
    valid = list(read_ubuntu_csv(FIXTURES / "ubuntu/valid.csv"))
    assert 'check dmesg , it says "usb disconnect" , right ? __eou__' in {p.b for p in valid}


def test_ubuntu_csv_gzip_lf_and_integer_labels(tmp_path):
    src = FIXTURES / "ubuntu/train.csv"
    expected = list(read_ubuntu_csv(src))
    assert b"\r\n" in src.read_bytes()
    lf = tmp_path / "lf.csv"
    lf.write_bytes(src.read_bytes().replace(b"\r\n", b"\n"))
    assert list(read_ubuntu_csv(lf)) == expected
    assert list(read_ubuntu_csv(_gzip_copy(src, tmp_path / "train.csv.gz"))) == expected
    ints = tmp_path / "ints.csv"
    ints.write_bytes(src.read_bytes().replace(b",1.0\r\n", b",1\r\n").replace(b",0.0\r\n", b",0\r\n"))
    assert ints.read_bytes() != src.read_bytes()
    assert list(read_ubuntu_csv(ints)) == expected
    for split in ("valid", "test"):
        s = FIXTURES / f"ubuntu/{split}.csv"
        assert list(read_ubuntu_csv(_gzip_copy(s, tmp_path / f"{split}.csv.gz"))) == list(read_ubuntu_csv(s))


def test_ubuntu_csv_unknown_header(tmp_path):
    path = _write(tmp_path / "train.csv", "context,response,label\nhi __eou__ __eot__,hello __eou__,1.0\n")
    _raises(read_ubuntu_csv, path, 1, "Context,Utterance,Label", UBUNTU_EVAL_HEADER)


def test_ubuntu_csv_wrong_field_count_reports_record_start(tmp_path):
    text = (FIXTURES / "ubuntu/valid.csv").read_bytes().decode("utf-8")
    lines = text.split("\r\n")
    lines[2] = lines[2].rsplit(",", 1)[0]  # the second data row loses its last distractor
    path = _write(tmp_path / "valid.csv", "\r\n".join(lines))
    _raises(read_ubuntu_csv, path, 3, "found 10", "expected 11")


def test_ubuntu_csv_bad_label_after_multiline_record(tmp_path):
    lines = (FIXTURES / "ubuntu/train.csv").read_bytes().decode("utf-8").split("\n")  # physical lines
    # Physical line 11 is the row right after the three-line record on lines 8-10.
    assert lines[7].startswith('"i pasted my fstab line :') and lines[10].endswith(",0.0\r")
    lines[10] = lines[10][:-4] + "0.5\r"
    path = tmp_path / "train.csv"
    path.write_bytes("\n".join(lines).encode("utf-8"))
    _raises(read_ubuntu_csv, path, 11, "'0.5'")


# ----------------------------------------------------------------------------------------- Ubuntu TSV

# split: (pairs, groups, positives)
UBUNTU_TSV = {"train": (10, 5, 5), "valid": (20, 2, 2), "test": (20, 2, 2)}


@pytest.mark.parametrize("split", list(UBUNTU_TSV))
def test_ubuntu_tsv_fixture(split):
    pairs = list(read_ubuntu_tsv(FIXTURES / f"ubuntu_tsv/{split}.txt"))
    _check_pairs(pairs)
    n, groups, _, _ = _stats(pairs)
    assert (n, groups, sum(p.label == "1" for p in pairs)) == UBUNTU_TSV[split]
    size = 2 if split == "train" else 10
    for g in range(groups):
        block = pairs[size * g : size * g + size]
        assert [p.label for p in block] == ["1"] + ["0"] * (size - 1)
        assert {p.group for p in block} == {str(g + 1)}


def test_ubuntu_tsv_context_turn_markers():
    pairs = list(read_ubuntu_tsv(FIXTURES / "ubuntu_tsv/valid.txt"))
    assert pairs[0].a == (
        "my sound is gone after the kernel update __eot__ do you see the card in alsamixer ? __eot__ "
        "it says no mixer elems __eot__"
    )
    assert pairs[0].b == "boot the old kernel from the grub menu and see if sound comes back"
    assert pairs[10].a == "how do i make a script run at startup ? __eot__"


def test_ubuntu_tsv_gzip_and_crlf(tmp_path):
    src = FIXTURES / "ubuntu_tsv/test.txt"
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(src.read_bytes().replace(b"\n", b"\r\n"))
    expected = list(read_ubuntu_tsv(src))
    assert list(read_ubuntu_tsv(crlf)) == expected
    assert list(read_ubuntu_tsv(_gzip_copy(src, tmp_path / "test.txt.gz"))) == expected


def test_ubuntu_tsv_too_few_fields(tmp_path):
    lines = (FIXTURES / "ubuntu_tsv/train.txt").read_text(encoding="utf-8").splitlines()
    lines[3] = "0\tjust one field"
    _raises(read_ubuntu_tsv, _write(tmp_path / "train.txt", "\n".join(lines) + "\n"), 4, "found 2", "at least 3")


def test_ubuntu_tsv_bad_label(tmp_path):
    lines = (FIXTURES / "ubuntu_tsv/train.txt").read_text(encoding="utf-8").splitlines()
    lines[1] = "x" + lines[1][1:]
    _raises(read_ubuntu_tsv, _write(tmp_path / "train.txt", "\n".join(lines) + "\n"), 2, "'x'")


# ------------------------------------------------------------------------------------------ real data

REAL_WIKIQA_DEV = REAL / "wikiqa/WikiQA-dev.tsv.gz"
REAL_WIKIQA_TRAIN = REAL / "wikiqa/WikiQA-train.tsv.gz"
REAL_TRECQA = REAL / "trecqa"


def _has(path: Path) -> bool:
    return path.exists()


@pytest.mark.skipif(not _has(REAL_WIKIQA_DEV), reason="shared WikiQA dev copy not present")
def test_real_wikiqa_dev():
    pairs = list(read_wikiqa_tsv(REAL_WIKIQA_DEV))
    assert _stats(pairs) == (2733, 296, 126, 122)


@pytest.mark.skipif(not _has(REAL_WIKIQA_TRAIN), reason="shared WikiQA train copy not present")
def test_real_wikiqa_train():
    assert _stats(list(read_wikiqa_tsv(REAL_WIKIQA_TRAIN))) == (20360, 2118, 873, 857)


@pytest.mark.skipif(not _has(REAL_TRECQA / "train/a.toks"), reason="shared TrecQA train copy not present")
def test_real_trecqa_train():
    # docs/results/index.md's "94 questions" counts the QApairs of train.xml; one of them (id 94) has no candidates,
    # so the token format, one line per pair, holds 93 question ids.
    assert _stats(list(read_trecqa_toks(REAL_TRECQA / "train"))) == (4718, 93, 83, 78)


@pytest.mark.skipif(not _has(REAL_TRECQA / "clean-dev/a.toks"), reason="shared TrecQA clean-dev copy not present")
def test_real_trecqa_clean_dev():
    assert _stats(list(read_trecqa_toks(REAL_TRECQA / "clean-dev"))) == (1117, 65, 65, 65)


@pytest.mark.skipif(not _has(REAL_TRECQA / "raw-dev/a.toks"), reason="shared TrecQA raw-dev copy not present")
def test_real_trecqa_raw_dev():
    # 82 questions in dev.xml; one (id 15.3) has no candidates, so 81 ids have pairs.
    assert _stats(list(read_trecqa_toks(REAL_TRECQA / "raw-dev"))) == (1148, 81, 78, 65)


@pytest.mark.skipif(
    not (_has(REAL_TRECQA / "xml/dev.xml") and _has(REAL_TRECQA / "raw-dev/a.toks")),
    reason="shared TrecQA dev copies not present",
)
def test_real_trecqa_xml_dev_matches_raw_dev(caplog):
    with caplog.at_level(logging.INFO, logger="matching.data.readers"):
        xml = list(read_trecqa_xml(REAL_TRECQA / "xml/dev.xml"))
    assert (REAL_TRECQA / "xml/dev.xml").read_text().count("<QApairs id=") == 82
    assert "dropped 1" in _summary(caplog)[0]  # QApairs 15.3: a question without candidates
    toks = list(read_trecqa_toks(REAL_TRECQA / "raw-dev"))
    assert _stats(xml) == _stats(toks) == (1148, 81, 78, 65)
    # Same questions, candidates, labels and order; the token files are the lowercased XML tokens.
    assert [Pair(p.a.lower(), p.b.lower(), p.label, p.group) for p in xml] == toks


@pytest.mark.skipif(
    not (_has(REAL_TRECQA / "xml/train.xml") and _has(REAL_TRECQA / "train/a.toks")),
    reason="shared TrecQA train copies not present",
)
def test_real_trecqa_xml_train_matches_tokens():
    xml = list(read_trecqa_xml(REAL_TRECQA / "xml/train.xml"))
    assert (REAL_TRECQA / "xml/train.xml").read_text().count("<QApairs id=") == 94
    toks = list(read_trecqa_toks(REAL_TRECQA / "train"))
    assert [(p.group, p.label) for p in xml] == [(p.group, p.label) for p in toks]
    assert _stats(xml) == (4718, 93, 83, 78)
