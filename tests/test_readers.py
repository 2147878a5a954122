import json

import pytest

from reltrain.data.readers import read_labels, read_records
from reltrain.runtime.errors import DataError, UserError

from conftest import ZH_ROWS, write_csv


def test_csv_reads_offsets_and_types(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("sentence,relation,head,head_offset,tail,tail_offset,head_type,tail_type\n"
                    "张玲导演说，张玲很满意《红楼》,导演,红楼,12,张玲,6,作品,人物\n", encoding="utf-8")
    rec = read_records(path).records[0]
    assert (rec.head.start, rec.head.end, rec.head.type) == (12, 14, "作品")
    assert (rec.tail.start, rec.tail.end, rec.tail.type) == (6, 8, "人物")  # the second 张玲
    assert rec.source.endswith("t.csv:2")


def test_jsonl_text_and_token_formats(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"text": "Ann met Bob .", "h": {"name": "Ann", "pos": [0, 3]},
             "t": {"name": "Bob", "pos": [8, 11]}, "relation": "met"},
            {"token": ["New", "York", "is", "in", "USA"], "h": {"name": "New York", "pos": [0, 2]},
             "t": {"name": "USA", "pos": [4, 5]}, "relation": "in"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    recs = read_records(path).records
    assert recs[1].text == "New York is in USA"
    assert recs[1].tokens == ("New", "York", "is", "in", "USA")
    assert (recs[1].head.start, recs[1].head.end) == (0, 8)
    assert (recs[1].tail.start, recs[1].tail.end) == (15, 18)


BAD_CSV = [
    # (rows, header, expected words in the message)
    ([("abc", "r", "a", "x", "c", 2)], None, ["head_offset", "non-negative integer", "'x'"]),
    ([("abc", "r", "a", -1, "c", 2)], None, ["head_offset", "'-1'"]),
    ([("abc", "r", "b", 0, "c", 2)], None, ["head_offset", "'a', not the head 'b'"]),
    ([("abc", "r", "a", 0, "cd", 2)], None, ["tail_offset", "outside the sentence"]),
    ([("abc", "r", "a", 0, "a", 0)], None, ["same span"]),
    ([("abc", "", "a", 0, "c", 2)], None, ["relation", "missing relation"]),
    ([("abc", "r", "a", 0, "c", 2, "extra")], None, ["7 fields", "header has 6"]),
    ([("abc", "r", "a", 0, "c", 2)], "sentense,relation,head,head_offset,tail,tail_offset\n",
     ["missing column(s) sentence", "unexpected column(s): sentense"]),
]


@pytest.mark.parametrize("rows,header,words", BAD_CSV)
def test_bad_csv_rows_name_file_line_and_field(tmp_path, rows, header, words):
    path = write_csv(tmp_path / "bad.csv", rows, header or
                     "sentence,relation,head,head_offset,tail,tail_offset\n")
    with pytest.raises(DataError) as err:
        read_records(path)
    message = str(err.value)
    assert "bad.csv:" in message and "\n" not in message
    for word in words:
        assert word in message


def test_unknown_relation_empty_file_and_encoding(tmp_path, zh_csv):
    with pytest.raises(DataError, match=r"zh.csv:2: field 'relation': unknown relation '导演'"):
        read_records(zh_csv, labels=["出生地", "连载网站"])
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty file"):
        read_records(empty)
    header_only = write_csv(tmp_path / "header.csv", [])
    with pytest.raises(DataError, match="no usable rows"):
        read_records(header_only)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("sentence,relation,head,head_offset,tail,tail_offset\n".encode()
                      + "café,r,c,0,é,3\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin.csv:2: not UTF-8"):
        read_records(latin)
    (tmp_path / "x.tsv").write_text("sentence\trelation\n")
    with pytest.raises(UserError, match="x.tsv: not a format reltrain reads; expected CSV"):
        read_records(tmp_path / "x.tsv")


def test_bad_jsonl(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "Ann met Bob", "h": {"pos": [0, 3]}, "t": {"pos": [8, 11]}, "relation": "r"}\n'
                    '{"text": "Ann met Bob", "h": {"pos": [0, 3]}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: invalid JSON"):
        read_records(path)
    path.write_text('{"text": "Ann met Bob", "h": {"pos": [0, 3]}, "t": {"pos": [8, 30]}, "relation": "r"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 't.pos': \[8, 30\] lies outside"):
        read_records(path)
    path.write_text('{"text": "Ann met Bob", "h": {"name": "Bob", "pos": [0, 3]}, "t": {"pos": [8, 11]}, "relation": "r"}\n')
    with pytest.raises(DataError, match=r"field 'h.pos': the text at \[0, 3\] is 'Ann', not 'Bob'"):
        read_records(path)
    # an extraction file given to a classifier: its task named, not "missing relation"
    for row in ({"text": "Ann met Bob", "entities": [], "relations": []},
                {"text": "Ann met Bob", "spo_list": []}):
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(DataError, match=r"bad.jsonl:1: a row of the extraction task .* "
                                            r"task=extract"):
            read_records(path)


def test_skip_bad_rows_reports_each(tmp_path):
    rows = list(ZH_ROWS) + [("abc", "导演", "b", 0, "c", 2), ("abc", "导演", "a", "x", "c", 2)]
    path = write_csv(tmp_path / "mixed.csv", rows)
    result = read_records(path, skip_bad_rows=True)
    assert len(result.records) == len(ZH_ROWS)
    assert len(result.skipped) == 2
    assert "mixed.csv:6" in result.skipped[0] and "mixed.csv:7" in result.skipped[1]


def test_label_files(tmp_path, zh_csv):
    rel = tmp_path / "relation.csv"
    rel.write_text("head_type,tail_type,relation,index\nNone,None,None,0\n人物,地点,出生地,2\n作品,人物,导演,1\n")
    assert read_labels(rel) == ["None", "导演", "出生地"]
    plain = tmp_path / "labels.txt"
    plain.write_text("b\na\n\n")
    assert read_labels(plain) == ["b", "a"]
    plain.write_text("b\na\nb\n")
    with pytest.raises(DataError, match="listed twice"):
        read_labels(plain)


def test_quoted_multiline_csv_counts_lines(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('sentence,relation,head,head_offset,tail,tail_offset\n'
                    '"a,b\nc",r,a,0,c,4\n'
                    'abc,r,a,0,q,2\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"q.csv:4: field 'tail_offset'"):
        read_records(path)
