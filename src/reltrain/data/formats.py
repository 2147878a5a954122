"""The benchmarks' own files: TACRED's JSON array (TACRED, TACRev, Re-TACRED) and text with inline
entity tags (``<e1>...</e1>``, ``<e2>...</e2>``: SemEval-2010 Task 8's numbered file, or a CSV
or JSONL field). Each row becomes the one record type, with the entities at the same characters
as the CSV and JSONL readers would put them; every bad row is ``file:line: field: problem``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from functools import partial

from reltrain.data.schema import Entity, Record
from reltrain.runtime.errors import DataError

_TAG = re.compile(r"</?e[12]>")
NUMBERED = re.compile(r'^\s*(\d+)\t"?(.*?)"?\s*$')  # SemEval: 8001<TAB>"The <e1>...</e1> ..."


def has_tags(text: str) -> bool:
    return "<e1>" in text and "<e2>" in text


def tagged_record(text: str, relation: str | None, path: str, line: int,
                  field_name: str | None = None, finish=None) -> Record:
    """The record of a sentence with ``<e1>head</e1>`` and ``<e2>tail</e2>``: the tags removed,
    the spans on the characters they enclosed (head is e1, tail e2; SemEval's direction is part
    of its label, e.g. ``Cause-Effect(e2,e1)``)."""
    spans, plain, at = {}, [], 0
    for match in _TAG.finditer(text):
        plain.append(text[at:match.start()])
        at = match.end()
        tag = match.group()
        name = tag.strip("</>")
        position = sum(len(p) for p in plain)
        if tag.startswith("</"):
            if name not in spans or spans[name][1] is not None:
                raise DataError(path, line, field_name, f"{tag} without its opening tag")
            spans[name] = (spans[name][0], position)
        else:
            if name in spans:
                raise DataError(path, line, field_name, f"<{name}> appears twice")
            spans[name] = (position, None)
    plain.append(text[at:])
    sentence = "".join(plain)
    for name in ("e1", "e2"):
        if name not in spans or spans[name][1] is None:
            raise DataError(path, line, field_name, f"expected one <{name}>...</{name}> around an "
                                                    f"entity")
    entities = {}
    for name, (start, end) in spans.items():
        # The tags may enclose spaces: the entity is the text between them, trimmed.
        while start < end and sentence[start].isspace():
            start += 1
        while end > start and sentence[end - 1].isspace():
            end -= 1
        if start == end:
            raise DataError(path, line, field_name, f"<{name}> encloses no text")
        entities[name] = Entity(sentence[start:end], start, end)
    if not sentence.strip():
        raise DataError(path, line, field_name, "empty sentence")
    return finish(path, line, sentence, entities["e1"], entities["e2"], relation)


def semeval_rows(path: str, lines: Iterator[str], finish, relation_of) -> Iterator:
    """(line, build) per example of SemEval-2010 Task 8's file: a numbered sentence, then its label
    on the next line (absent in a test file without answers) and an optional ``Comment:``."""
    pending = None  # (line, sentence, number) waiting for its label
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("Comment:"):
            continue
        numbered = NUMBERED.match(raw)
        if numbered and _TAG.search(numbered.group(2)):
            if pending:
                yield pending[0], _build(path, pending, None, finish, relation_of)
            pending = (number, numbered.group(2), numbered.group(1))
        elif pending:
            yield pending[0], _build(path, pending, text, finish, relation_of)
            pending = None
        else:
            yield number, partial(fail, DataError(
                path, number, None, "expected a numbered sentence with <e1> and <e2> tags "
                                    "(SemEval-2010 Task 8's format)"))
    if pending:
        yield pending[0], _build(path, pending, None, finish, relation_of)


def _build(path, pending, label, finish, relation_of) -> Callable[[], Record]:
    line, sentence, number = pending  # the sentence's number is its id, as the scorer's key
    return partial(_tagged, sentence, label, path, line, partial(finish, id=number), relation_of)


def _tagged(sentence, label, path, line, finish, relation_of) -> Record:
    return tagged_record(sentence, relation_of(path, line, label), path, line, "sentence", finish)


def fail(exc: Exception):
    """Raises ``exc``: a row's ``build`` (with ``partial``) for a row known bad when read."""
    raise exc


def tacred_rows(path: str, chunks: Iterator[str], record_of) -> Iterator:
    """(line, build) per object of a JSON array, read a line at a time: TACRED's files hold one
    array of 10^5 objects, written one field a line, which need not be in memory at once."""
    decoder, buffer, line, at = json.JSONDecoder(), "", 1, 0
    chunks = iter(chunks)
    started = False

    def more() -> bool:
        nonlocal buffer
        piece = next(chunks, None)
        if piece is None:
            return False
        buffer += piece
        return True

    ended = False
    while True:
        while True:  # past whitespace, the separators, and the array's own brackets
            while at < len(buffer) and (buffer[at] in " \t\r\n,"
                                        or (buffer[at] == "[" and not started)
                                        or (buffer[at] == "]" and started and not ended)):
                if buffer[at] == "\n":
                    line += 1
                started, ended = started or buffer[at] == "[", ended or buffer[at] == "]"
                at += 1
            if at < len(buffer) or not more():
                break
        if at >= len(buffer):
            return
        if not started or ended:
            raise DataError(path, line, None, "expected one JSON array of objects (TACRED's format)")
        while True:
            try:
                obj, end = decoder.raw_decode(buffer, at)
                break
            except json.JSONDecodeError as exc:
                if more():
                    continue
                raise DataError(path, line, None, f"invalid JSON: {exc.msg}") from None
            except RecursionError:
                raise DataError(path, line, None, "invalid JSON: nested too deeply") from None
        yield line, partial(record_of, obj, path, line)
        line += buffer.count("\n", at, end)
        buffer, at = buffer[end:], 0


def tacred_object(obj: object, path: str, line: int, require_relation: bool, json_record) -> Record:
    """A TACRED object as the JSONL shape: ``token`` (or ``tokens``), inclusive
    ``subj_start``/``subj_end``/``obj_start``/``obj_end``, ``subj_type``/``obj_type``."""
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    tokens = obj.get("token", obj.get("tokens"))
    row = {"token": tokens}
    for role, key in (("subj", "h"), ("obj", "t")):
        start, end = obj.get(f"{role}_start"), obj.get(f"{role}_end")
        for name, value in ((f"{role}_start", start), (f"{role}_end", end)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DataError(path, line, name, "expected a non-negative token index")
        if end < start:
            raise DataError(path, line, f"{role}_end", f"{end} is before {role}_start {start}")
        entity = {"pos": [start, end + 1]}  # TACRED's end is inclusive
        if isinstance(obj.get(f"{role}_type"), str):
            entity["type"] = obj[f"{role}_type"]
        row[key] = entity
    for key in ("relation", "id"):
        if key in obj:
            row[key] = obj[key]
    return json_record(row, path, line, require_relation)
