"""Property test: whatever the bytes, a reader returns records or raises a clear UserError."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reltrain.data.readers import read_labels, read_records
from reltrain.runtime.errors import UserError

from conftest import EXAMPLE_DIR, ZH_HEADER, ZH_ROWS

VALID_CSV = ZH_HEADER + "".join(",".join(map(str, r)) + "\n" for r in ZH_ROWS)
VALID_JSONL = "\n".join((EXAMPLE_DIR / "train.jsonl").read_text().splitlines()[:4]) + "\n"
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def outcome(data: bytes, suffix: str, **kw) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"f{suffix}"
        path.write_bytes(data)
        try:
            result = read_records(path, **kw)
        except UserError as exc:
            assert str(exc) and "\n" not in str(exc)
            return
        for rec in result.records:  # whatever is accepted is consistent
            assert rec.text[rec.head.start:rec.head.end] == rec.head.name
            assert rec.text[rec.tail.start:rec.tail.end] == rec.tail.name
            assert (rec.head.start, rec.head.end) != (rec.tail.start, rec.tail.end)


@st.composite
def edited(draw, valid: str) -> bytes:
    """A valid file with a few random deletions, insertions and replacements."""
    data = bytearray(valid.encode())
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["delete", "insert", "replace"]))
        chunk = draw(st.binary(min_size=1, max_size=4) | st.sampled_from(
            [b",", b'"', b"\n", b"{", b"}", b"[", b"]", b"-1", b"999", b"\xff", b"\x00"]))
        if kind == "delete":
            del data[pos:pos + len(chunk)]
        elif kind == "insert":
            data[pos:pos] = chunk
        else:
            data[pos:pos + len(chunk)] = chunk
    return bytes(data)


@SETTINGS
@given(st.binary(max_size=400))
def test_random_bytes(data):
    for suffix in (".csv", ".jsonl"):
        outcome(data, suffix)
        outcome(data, suffix, skip_bad_rows=True, require_relation=False)


@SETTINGS
@given(edited(VALID_CSV), st.booleans())
def test_edited_csv(data, skip):
    outcome(data, ".csv", skip_bad_rows=skip, labels=["导演", "出生地", "连载网站"])


@SETTINGS
@given(edited(VALID_JSONL), st.booleans())
def test_edited_jsonl(data, skip):
    outcome(data, ".jsonl", skip_bad_rows=skip)


@SETTINGS
@given(st.binary(max_size=200))
def test_label_files(data):
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("relation.csv", "labels.txt"):
            path = Path(tmp) / name
            path.write_bytes(data)
            try:
                labels = read_labels(path)
            except UserError:
                continue
            assert len(labels) == len(set(labels))


# The extraction task's four gold formats, one valid row each (two for the line formats).
EXTRACTION = {
    "spert": '[{"tokens": ["Ann", "Lee", "works", "for", "Acme", "."], "entities": [{"type": '
             '"Peop", "start": 0, "end": 2}, {"type": "Org", "start": 4, "end": 5}], "relations": '
             '[{"type": "Work_For", "head": 0, "tail": 1}]}]\n',
    "pure": '{"doc_key": "d", "sentences": [["Ann", "Lee", "works", "for", "Acme", "."], ["Bo", '
            '"left", "."]], "ner": [[[0, 1, "PER"], [4, 4, "ORG"]], [[6, 6, "PER"]]], "relations": '
            '[[[0, 1, 4, 4, "WORKS"]], []]}\n',
    "duie": '{"text": "李明在北京工作。", "spo_list": [{"subject": "李明", "subject_type": "人物", '
            '"predicate": "工作地", "object": {"@value": "北京"}, "object_type": {"@value": "地点"}}]}\n'
            '{"text": "王芳出生于上海。", "spo_list": [{"subject": "王芳", "subject_type": "人物", '
            '"predicate": "出生地", "object": "上海", "object_type": "地点"}]}\n',
    "reltrain": '{"text": "Ann Lee works for Acme .", "entities": [{"start": 0, "end": 7, "type": '
                '"Peop"}, {"start": 18, "end": 22, "type": "Org"}], "relations": [{"head": 0, '
                '"tail": 1, "type": "Work_For"}]}\n{"text": "Bo left .", "entities": [], '
                '"relations": []}\n',
}


def extraction_outcome(data: bytes, skip: bool) -> None:
    """Sentences whose every span lies in its text and every relation joins two of its
    entities, or one clear line; never another exception."""
    from reltrain.data.extraction import read_annotated

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.json"
        path.write_bytes(data)
        try:
            sentences = read_annotated(str(path), skipped=[] if skip else None)
        except UserError as exc:
            assert str(exc) and "\n" not in str(exc)
            return
        for s in sentences:
            assert all(0 <= e.start < e.end <= len(s.text) for e in s.entities)
            assert all(r.head != r.tail and max(r.head, r.tail) < len(s.entities)
                       for r in s.relations)


@SETTINGS
@given(st.sampled_from(sorted(EXTRACTION)).flatmap(lambda kind: edited(EXTRACTION[kind])),
       st.booleans())
def test_edited_extraction_files(data, skip):
    extraction_outcome(data, skip)


def test_the_extraction_samples_are_valid():
    from reltrain.data.extraction import detect, read_annotated

    with tempfile.TemporaryDirectory() as tmp:
        for kind, text in EXTRACTION.items():
            path = Path(tmp) / f"{kind}.json"
            path.write_text(text, encoding="utf-8")
            assert detect(str(path)) == kind
            sentences = read_annotated(str(path))
            assert sum(len(s.relations) for s in sentences) == (2 if kind == "duie" else 1)
