"""CSV / JSONL readers and label files. Offsets are the truth; every problem names file:line:field."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from functools import partial
from itertools import chain
from typing import Callable, Iterator

from reltrain.data import formats
from reltrain.data.rows import (DIGITS, MAX_INT_DIGITS, entity_at, json_record, offset_value,
                                parse_json, record_of, relation_name, row_id)
from reltrain.data.schema import EntitySentence, Record, label_name_problem, relation_names
from reltrain.runtime.errors import DataError, UserError

CSV_COLUMNS = ("sentence", "relation", "head", "head_offset", "tail", "tail_offset")


@dataclass
class ReadResult:
    records: list[Record]
    skipped: list[str] = field(default_factory=list)  # one "file:line: why" per skipped row


STDIN = "-"  # a DATA argument that means standard input


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file in ``encoding`` (UTF-8: a BOM is allowed); bytes it cannot decode are a
    user error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode(_codec(encoding))
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(str(path), line, None, _not_text(raw[exc.start], encoding)) from None
    if not text.strip():
        raise DataError(str(path), None, None, "empty file: no rows")
    return text


def read_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[str]:
    """The file's lines in ``encoding``, read as needed (UTF-8: a BOM is allowed); bytes it
    cannot decode and an empty file are user errors where they occur. Lines end at "\n" only."""
    if str(path) == STDIN:
        f = open(sys.stdin.fileno(), "rb", closefd=False)
    else:
        try:
            f = open(path, "rb")
        except IsADirectoryError:
            raise UserError(f"{path}: is a directory; give a data file") from None
        except OSError as exc:
            raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    content = False
    with f:
        for line in _decoded_lines(f, path, encoding):
            content = content or bool(line.strip())
            yield line
    if not content:
        raise DataError(str(path), None, None, "empty file: no rows")


def _decoded_lines(f, path, encoding: str) -> Iterator[str]:
    if _codec(encoding) == "utf-8-sig":  # the common case, split as bytes: exact lines and bytes
        for number, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(str(path), number, None, _not_text(raw[exc.start], encoding)) from None
        return
    # UTF-16's "\n" is two bytes: split after decoding. An error is found a block ahead of the
    # line being read, so its line number is where decoding stopped.
    number = 0
    text = io.TextIOWrapper(f, encoding=encoding, newline="\n")
    try:
        for number, line in enumerate(text, start=1):
            yield line.lstrip("\ufeff") if number == 1 else line
    except UnicodeDecodeError as exc:
        raise DataError(str(path), number + 1, None,
                        _not_text(exc.object[exc.start], encoding)) from None
    finally:
        text.detach()


def _codec(encoding: str) -> str:
    """The codec for ``encoding``: UTF-8 reads with its BOM allowed, as Excel writes it."""
    import codecs

    name = codecs.lookup(encoding).name
    return "utf-8-sig" if name in ("utf-8", "utf-8-sig") else name


def _not_text(byte: int, encoding: str) -> str:
    name = _codec(encoding).replace("-sig", "").upper()
    return (f"not {name} text (byte 0x{byte:02x}); save the file as UTF-8, or name its encoding "
            f"with data.encoding (--encoding for predict, evaluate and inspect), e.g. gbk, "
            f"gb18030 or utf-16, what Excel on Chinese Windows writes")


def read_records(path: str | Path, labels: list[str] | None = None, *,
                 require_relation: bool = True, skip_bad_rows: bool = False,
                 encoding: str = "utf-8") -> ReadResult:
    """Read a .csv or .jsonl file into validated records; a relation outside ``labels`` is an error;
    ``skip_bad_rows`` keeps a bad row's reason in ``ReadResult.skipped`` instead."""
    path = str(path)
    result = ReadResult(records=[])
    for _, item in iter_records(path, labels, require_relation=require_relation, encoding=encoding):
        if isinstance(item, DataError):
            if not skip_bad_rows:
                raise item
            result.skipped.append(str(item))
            continue
        result.records.append(item)
    if not result.records:
        raise DataError(path, None, None,
                        "no usable rows" + (f" ({len(result.skipped)} skipped)" if result.skipped else ""))
    return result


def iter_records(path: str | Path, labels: list[str] | None = None, *,
                 require_relation: bool = True, entity_lists: bool = False,
                 encoding: str = "utf-8") -> Iterator[tuple[int, Record | EntitySentence | DataError]]:
    """(line, record) or (line, the row's error) for each row, read lazily; errors of the whole file
    are raised. ``entity_lists``: JSONL rows may give ``"entities"`` instead of ``h`` and ``t``."""
    path = str(path)
    known = set(labels) if labels is not None else None
    for line, build in iter_rows(path, require_relation=require_relation, entity_lists=entity_lists,
                                 encoding=encoding):
        yield line, parse_row(build, known, labels, path, line)


def parse_row(build: Callable, known: set | None, labels: list[str] | None, path: str,
              line: int) -> Record | EntitySentence | DataError:
    """What ``build()`` makes of a row, or the row's error; a relation outside the label set
    (``known``, None: any) is one too."""
    try:
        record = build()
    except DataError as exc:
        return exc
    if known is None or record.relation is None:
        return record
    for name in relation_names(record.relation):
        if name not in known:
            return DataError(path, line, "relation", f"unknown relation '{name}' (not in "
                             f"the label set: {_preview(labels)})")
    return record


def iter_rows(path: str | Path, *, require_relation: bool = True, entity_lists: bool = False,
              encoding: str = "utf-8") -> Iterator[tuple[int, Callable[[], Record | EntitySentence]]]:
    """(line, build) for each row; ``build()`` parses the row or raises its DataError, and it
    pickles, so prediction workers can do the parsing. ``encoding``: the file's (data.encoding)."""
    path = str(path)
    lines = read_lines(path, encoding)
    if path == STDIN:  # no name to go by: JSON lines if the first row is an object, else CSV
        lines, first = peek(lines)
        if first.lstrip().startswith("{"):
            return _jsonl_rows(path, require_relation, entity_lists, lines)
        return _csv_rows(path, require_relation, lines)
    kind = _detect(path, read_lines(path, encoding))
    if kind == "tacred":
        return formats.tacred_rows(path, lines, partial(
            _tacred_record, require_relation=require_relation))
    if kind == "semeval":
        return formats.semeval_rows(path, lines, record_of, partial(
            relation_name, require_relation=require_relation))
    if kind == "csv":
        return _csv_rows(path, require_relation, lines)
    return _jsonl_rows(path, require_relation, entity_lists, lines)


def peek(lines: Iterator[str]) -> tuple[Iterator[str], str]:
    """The lines, whole, and the first that is not blank ("" if none)."""
    head = []
    for line in lines:
        head.append(line)
        if line.strip():
            return chain(head, lines), line
    return iter(head), ""


FORMATS = ("CSV with a header (sentence,relation,head,head_offset,tail,tail_offset, or "
           "sentence,relation with <e1>/<e2> tags), JSON lines, TACRED's JSON array, or "
           "SemEval's numbered sentences with <e1>/<e2> tags")


def _detect(path: str, lines: Iterator[str]) -> str:
    """The format of a file, from its first non-blank line; its name only where the content
    does not tell (a CSV header, or plain lines)."""
    first = next((line for line in lines if line.strip()), "")
    stripped = first.lstrip("\ufeff").lstrip()
    if stripped.startswith("["):
        return "tacred"
    if stripped.startswith("{"):
        return "jsonl"
    numbered = formats.NUMBERED.match(first)
    if numbered and formats.has_tags(numbered.group(2)):
        return "semeval"
    suffix = Path(path).suffix.lower()
    if suffix == ".csv" or ("," in first and suffix not in (".jsonl", ".json", ".txt")):
        return "csv"
    if suffix in (".jsonl", ".json", ".txt"):
        return "jsonl"  # each line then says what is wrong with it
    raise UserError(f"{path}: not a format reltrain reads; expected {FORMATS}")


def _tacred_record(obj, path, line, require_relation) -> Record:
    return formats.tacred_object(obj, path, line, require_relation, json_record)


def _preview(labels: list[str], limit: int = 8) -> str:
    shown = ", ".join(labels[:limit])
    return shown + (f", ... ({len(labels)} in all)" if len(labels) > limit else "")


def _csv_rows(path: str, require_relation: bool, lines: Iterator[str]) -> Iterator:
    """(line, build) per row; ``build()`` makes the record or raises the row's DataError."""
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as exc:
        raise DataError(path, 1, None, f"bad CSV header: {exc}") from None
    tagged = "head" not in header and "sentence" in header  # the entities tagged in the text
    columns = ("sentence", "relation") if tagged else CSV_COLUMNS
    required = [c for c in columns if require_relation or c != "relation"]
    missing = [c for c in required if c not in header]
    if missing:
        # A stray quote can swallow the whole file into one header field: shown escaped and cut.
        unknown = [json.dumps(h, ensure_ascii=False)[1:-1][:60] for h in header
                   if h not in CSV_COLUMNS and h not in ("head_type", "tail_type")]
        hint = f"; unexpected column(s): {', '.join(unknown)}" if unknown else ""
        raise DataError(path, 1, None, f"missing column(s) {', '.join(missing)}; expected "
                        f"{','.join(CSV_COLUMNS)}{hint}")
    if len(set(header)) != len(header):
        dupes = [h for h, n in Counter(header).items() if n > 1]
        raise DataError(path, 1, None, f"duplicate column(s): {', '.join(dupes)}")
    col = {name: i for i, name in enumerate(header)}
    line = 2
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            err = DataError(path, line, None, f"bad CSV: {exc}")
            start, line = line, reader.line_num + 1
            yield start, partial(formats.fail, err)
            continue
        start, line = line, reader.line_num + 1
        if not values or all(not v.strip() for v in values):
            continue
        yield start, partial(_csv_record, path, start, header, col, values, require_relation,
                             tagged)


def _csv_record(path, line, header, col, values, require_relation, tagged=False) -> Record:
    if len(values) != len(header):
        raise DataError(path, line, None,
                        f"{len(values)} fields but the header has {len(header)} (check quoting)")
    get = lambda name: values[col[name]] if name in col else ""  # noqa: E731
    text = get("sentence")
    if not text.strip():
        raise DataError(path, line, "sentence", "empty sentence")
    finish = partial(record_of, id=row_id(path, line, get("id").strip() or None))
    if tagged:
        relation = relation_name(path, line, get("relation"), require_relation)
        return formats.tagged_record(text, relation, path, line, "sentence", finish)
    head = entity_at(path, line, text, "head", get("head"), offset_value(path, line, "head_offset",
                                                                   get("head_offset")),
                   get("head_type").strip())
    tail = entity_at(path, line, text, "tail", get("tail"), offset_value(path, line, "tail_offset",
                                                                   get("tail_offset")),
                   get("tail_type").strip())
    relation = relation_name(path, line, get("relation"), require_relation)
    return finish(path, line, text, head, tail, relation)


def _jsonl_rows(path: str, require_relation: bool, entity_lists: bool,
                lines: Iterator[str]) -> Iterator:
    # Lines end at "\n" only: str.splitlines() also breaks at U+2028, which JSON strings may hold.
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            yield number, partial(_jsonl_record, path, number, raw, require_relation, entity_lists)


def _jsonl_record(path, line, raw, require_relation, entity_lists=False) -> Record | EntitySentence:
    if not raw.lstrip().startswith(("{", "[")):  # a plain sentence, as a .txt file often holds
        raise DataError(path, line, None, 'not a JSON object: each line is one example such as '
                        '{"text": "...", "h": {"pos": [start, end]}, "t": {"pos": [start, end]}}'
                        ' (or a .csv file with a header); one plain sentence goes as --text with '
                        '--head and --tail')
    return json_record(parse_json(raw, path, line), path, line, require_relation, entity_lists)


def read_labels(path: str | Path, encoding: str = "utf-8") -> list[str]:
    """``relation.csv`` (head_type,tail_type,relation,index), ordered by index; or one per line."""
    path = str(path)
    text = read_text(path, encoding)
    first = text.splitlines()[0]
    if Path(path).suffix.lower() == ".csv" and "relation" in [c.strip() for c in first.split(",")]:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        by_index: dict[int, str] = {}
        for number, row in enumerate(rows, start=2):
            name = (row.get("relation") or "").strip()
            raw_index = (row.get("index") or "").strip()
            if not name:
                raise DataError(path, number, "relation", "missing relation")
            if label_name_problem(name):
                raise DataError(path, number, "relation", label_name_problem(name))
            if raw_index and not DIGITS.fullmatch(raw_index):
                raise DataError(path, number, "index", f"expected a non-negative integer of at most "
                                     f"{MAX_INT_DIGITS} digits, got '{raw_index[:40]}'")
            index = int(raw_index) if raw_index else len(by_index)
            if index in by_index:
                raise DataError(path, number, "index", f"index {index} used twice")
            by_index[index] = name
        labels = [by_index[i] for i in sorted(by_index)]
    else:
        labels = [ln.strip() for ln in text.splitlines() if ln.strip()]
        for name in labels:
            if label_name_problem(name):
                raise DataError(path, None, None, label_name_problem(name))
    dupes = [name for name, n in Counter(labels).items() if n > 1]
    if dupes:
        raise DataError(path, None, None, f"relation(s) listed twice: {', '.join(dupes)}")
    return labels
