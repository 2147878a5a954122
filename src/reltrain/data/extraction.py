"""The formats of the extraction task (task=extract), recognised by content: SpERT's JSON array,
PURE / DyGIE JSON lines, DuIE JSON lines, reltrain's own JSON lines, and raw text (one sentence a
line, or JSON lines with ``text``). Each row becomes ``Annotated`` sentences with character
offsets; every bad row is ``file:line: field: problem``, and every count a row could make
unbounded (mentions, relations, occurrences of a string) has a limit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import NamedTuple

from reltrain.data import formats
from reltrain.data.readers import peek, read_lines
from reltrain.data.rows import (index_value, name_value, parse_json, row_id, text_value,
                                tokens_value)
from reltrain.data.schema import Annotated, Link, Span
from reltrain.runtime.errors import DataError, UserError

# A sentence's candidate pairs grow with the square of its mentions: these bound the work one
# row can ask for (and are far above CoNLL04's, DuIE's and SciERC's largest sentences).
MAX_ENTITIES = 200
MAX_RELATIONS = 2000
MAX_MENTIONS = 50  # occurrences of one DuIE string in its text
MAX_CHARS = 20_000

KINDS = {"spert": "SpERT's JSON array", "pure": "PURE / DyGIE JSON lines",
         "duie": "DuIE JSON lines", "reltrain": "reltrain's JSON lines",
         "text": "raw text (one sentence a line, or JSON lines with 'text': the first line "
                 "says which, for the whole file)"}


class Parsed(NamedTuple):
    """The sentences of one row (a PURE document holds several), and what a string format could
    not place: entity strings that never occur in their text, compound objects (DuIE's
    ``inWork`` and the like, of which the ``@value`` is kept)."""

    sentences: list[Annotated]
    unmatched: int = 0
    compound: int = 0


def detect(path: str, encoding: str = "utf-8") -> str:
    """The extraction format of a file, from its first non-blank line (a key of ``KINDS``)."""
    stripped = _first_line(path, encoding)
    if stripped.startswith("["):
        return "spert"
    if not stripped.startswith("{"):
        return "text"
    try:
        obj = parse_json(stripped, path, 1)
    except DataError:
        return "reltrain"  # its first line then says what is wrong with it
    keys = set(obj) if isinstance(obj, dict) else set()
    if "sentences" in keys:
        return "pure"
    if "spo_list" in keys:
        return "duie"
    if keys & {"entities", "relations"}:
        return "reltrain"
    return "text"


def iter_annotated(path: str, encoding: str = "utf-8", labels: bool = True,
                   kind: str | None = None) -> Iterator[tuple[int, Callable[[], Parsed]]]:
    """(line, build) for each row; ``build()`` parses it or raises its DataError. ``labels``
    False reads only the text (prediction on a gold file)."""
    path = str(path)
    kind = kind or detect(path, encoding)
    lines = read_lines(path, encoding)
    if kind == "spert":
        return formats.tacred_rows(path, lines, partial(_spert_row, labels=labels))
    if kind == "text":  # plain lines unless the first is a JSON object: a sentence may begin "{"
        lines, first = peek(lines)
        kind = "text" if first.lstrip("\ufeff").lstrip().startswith("{") else "lines"
    return _line_rows(path, lines, kind, labels)


def _first_line(path: str, encoding: str) -> str:
    """The file's first non-blank line, without a BOM and the white space around it."""
    first = next((line for line in read_lines(path, encoding) if line.strip()), "")
    return first.lstrip("\ufeff").strip()


def _pairs_file(path: str, encoding: str) -> bool:
    """Whether the first row is a JSON object of one given pair (classification's shape)."""
    try:
        obj = parse_json(_first_line(path, encoding), path, 1)
    except DataError:
        return False
    return isinstance(obj, dict) and ({"h", "t"} <= obj.keys() or {"head", "tail"} <= obj.keys())


def _line_rows(path, lines, kind, labels) -> Iterator[tuple[int, Callable[[], Parsed]]]:
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            yield number, partial(_line, raw.rstrip("\r\n"), path, number, kind, labels)


def _line(raw: str, path: str, line: int, kind: str, labels: bool) -> Parsed:
    if kind == "lines":
        return Parsed([Annotated(text_value(raw.strip(), path, line, None, MAX_CHARS), (), (), path)])
    obj = parse_json(raw, path, line)
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    ident = row_id(path, line, obj.get("id"))
    if kind == "pure":
        return _pure_row(obj, path, line, labels)
    if kind == "duie":
        return _duie_row(obj, path, line, labels, ident)
    text = text_value(obj.get("text"), path, line, "text", MAX_CHARS)
    if kind == "text" or not labels:
        return Parsed([Annotated(text, (), (), path, id=ident)])
    spans = []
    for i, ent in enumerate(_list(obj, "entities", path, line, MAX_ENTITIES)):
        where = f"entities[{i}]"
        if not isinstance(ent, dict):
            raise DataError(path, line, where, "expected an object with start, end and type")
        start, end = index_value(ent.get("start"), path, line, f"{where}.start"), \
            index_value(ent.get("end"), path, line, f"{where}.end")
        _check_span(start, end, len(text), path, line, where, "characters")
        spans.append(Span(start, end, name_value(ent.get("type"), path, line, f"{where}.type")))
    links = _links(obj, path, line, len(spans))
    return Parsed([_sentence(text, spans, links, path, line, None, ident)])


def _spert_row(obj: object, path: str, line: int, labels: bool) -> Parsed:
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    tokens = tokens_value(obj.get("tokens"), path, line, "tokens", MAX_CHARS)
    ident = row_id(path, line, obj.get("orig_id", obj.get("id")))
    starts = _starts(tokens)
    text = " ".join(tokens)
    if not labels:
        return Parsed([Annotated(text, (), (), path, tokens, ident)])
    spans = []
    for i, ent in enumerate(_list(obj, "entities", path, line, MAX_ENTITIES)):
        where = f"entities[{i}]"
        if not isinstance(ent, dict):
            raise DataError(path, line, where, "expected an object with type, start and end")
        start, end = index_value(ent.get("start"), path, line, f"{where}.start"), \
            index_value(ent.get("end"), path, line, f"{where}.end")
        _check_span(start, end, len(tokens), path, line, where, "tokens")
        spans.append(Span(starts[start], starts[end - 1] + len(tokens[end - 1]),
                          name_value(ent.get("type"), path, line, f"{where}.type")))
    links = _links(obj, path, line, len(spans))
    return Parsed([_sentence(text, spans, links, path, line, tokens, ident)])


def _pure_row(obj: dict, path: str, line: int, labels: bool) -> Parsed:
    """A document: its sentences' tokens, ``ner`` spans and ``relations``, inclusive token
    positions counted over the whole document."""
    sentences = obj.get("sentences")
    if not isinstance(sentences, list) or not sentences or len(sentences) > 10_000:
        raise DataError(path, line, "sentences", "expected a non-empty list of token lists")
    doc = obj.get("doc_key")
    ner = obj.get("ner", [[] for _ in sentences]) if labels else [[] for _ in sentences]
    rels = obj.get("relations", [[] for _ in sentences]) if labels else [[] for _ in sentences]
    for key, value in (("ner", ner), ("relations", rels)):
        if not isinstance(value, list) or len(value) != len(sentences):
            raise DataError(path, line, key, f"expected one list per sentence ({len(sentences)})")
    out, offset = [], 0
    for k, raw_tokens in enumerate(sentences):
        tokens = tokens_value(raw_tokens, path, line, f"sentences[{k}]", MAX_CHARS)
        starts, spans, at = _starts(tokens), [], {}
        if not isinstance(ner[k], list) or len(ner[k]) > MAX_ENTITIES:
            raise DataError(path, line, f"ner[{k}]", f"expected a list of at most {MAX_ENTITIES} "
                                                     f"[start, end, type]")
        for i, item in enumerate(ner[k]):
            where = f"ner[{k}][{i}]"
            s, e, kind = _triple(item, path, line, where, 3)
            s, e = s - offset, e - offset + 1
            _check_span(s, e, len(tokens), path, line, where, "tokens of its sentence")
            at.setdefault((s, e), len(spans))
            spans.append(Span(starts[s], starts[e - 1] + len(tokens[e - 1]),
                              name_value(kind, path, line, where)))
        if not isinstance(rels[k], list) or len(rels[k]) > MAX_RELATIONS:
            raise DataError(path, line, f"relations[{k}]", f"expected a list of at most "
                                                           f"{MAX_RELATIONS} relations")
        links = []
        for i, item in enumerate(rels[k]):
            where = f"relations[{k}][{i}]"
            s1, e1, s2, e2, label = _triple(item, path, line, where, 5)
            ends = [(s1 - offset, e1 - offset + 1), (s2 - offset, e2 - offset + 1)]
            missing = [pos for pos in ends if pos not in at]
            if missing:
                raise DataError(path, line, where, f"[{missing[0][0] + offset}, "
                                f"{missing[0][1] + offset - 1}] is not a span of ner[{k}]")
            links.append(Link(at[ends[0]], at[ends[1]], name_value(label, path, line, where)))
        ident = f"{doc}/{k}" if isinstance(doc, (str, int)) and not isinstance(doc, bool) else None
        out.append(_sentence(" ".join(tokens), spans, links, path, line, tokens, ident))
        offset += len(tokens)
    return Parsed(out)


def _duie_row(obj: dict, path: str, line: int, labels: bool, ident) -> Parsed:
    """Entities as strings: every occurrence of a string in the text is a mention of it, and a
    triple links every mention of its subject with every mention of its object."""
    text = text_value(obj.get("text"), path, line, "text", MAX_CHARS)
    if not labels:
        return Parsed([Annotated(text, (), (), path, id=ident, strings=True)])
    spans: dict[tuple, int] = {}
    links, unmatched, compound = set(), 0, 0
    for i, spo in enumerate(_list(obj, "spo_list", path, line, MAX_RELATIONS)):
        where = f"spo_list[{i}]"
        if not isinstance(spo, dict):
            raise DataError(path, line, where, "expected an object with subject, predicate, object")
        obj_value, obj_type = spo.get("object"), spo.get("object_type")
        if isinstance(obj_value, dict):
            compound += len(obj_value) > 1
            obj_value = obj_value.get("@value")
        if isinstance(obj_type, dict):
            obj_type = obj_type.get("@value")
        predicate = name_value(spo.get("predicate"), path, line, f"{where}.predicate")
        ends = []
        for role, value, kind in (("subject", spo.get("subject"), spo.get("subject_type")),
                                  ("object", obj_value, obj_type)):
            value = name_value(value, path, line, f"{where}.{role}", strip=False)
            kind = name_value(kind, path, line, f"{where}.{role}_type")
            found = _occurrences(text, value, path, line, f"{where}.{role}")
            ends.append([spans.setdefault((s, s + len(value), kind), len(spans)) for s in found])
        if not ends[0] or not ends[1]:
            unmatched += 1
            continue
        links.update(Link(h, t, predicate) for h in ends[0] for t in ends[1] if h != t)
    if len(spans) > MAX_ENTITIES:
        raise DataError(path, line, "spo_list", f"{len(spans)} entity mentions, more than the "
                                                f"{MAX_ENTITIES} a sentence may have")
    entities = [Span(*key) for key in spans]
    return Parsed([Annotated(text, tuple(entities), tuple(sorted(links, key=_link_order)), path,
                             id=ident, strings=True)], unmatched, compound)


def _occurrences(text: str, value: str, path, line, where) -> list[int]:
    found, at = [], text.find(value)
    while at >= 0:
        found.append(at)
        if len(found) > MAX_MENTIONS:
            raise DataError(path, line, where, f"'{value[:40]}' occurs more than {MAX_MENTIONS} "
                                               f"times in its text")
        at = text.find(value, at + 1)
    return found


def _sentence(text, spans, links, path, line, tokens, ident) -> Annotated:
    """One sentence, its repeated mentions and relations counted once."""
    index, entities, remap = {}, [], []
    for span in spans:
        remap.append(index.setdefault(span, len(entities)))
        if remap[-1] == len(entities):
            entities.append(span)
    unique = {Link(remap[k.head], remap[k.tail], k.type) for k in links}
    if any(k.head == k.tail for k in unique):
        raise DataError(path, line, "relations", "a relation from an entity to itself")
    return Annotated(text, tuple(entities), tuple(sorted(unique, key=_link_order)), path,
                     tuple(tokens) if tokens else None, ident)


def _link_order(link: Link) -> tuple:
    return link.head, link.tail, link.type


def _links(obj: dict, path, line, n: int) -> list[Link]:
    links = []
    for i, rel in enumerate(_list(obj, "relations", path, line, MAX_RELATIONS)):
        where = f"relations[{i}]"
        if not isinstance(rel, dict):
            raise DataError(path, line, where, "expected an object with head, tail and type")
        ends = [index_value(rel.get(k), path, line, f"{where}.{k}") for k in ("head", "tail")]
        for key, value in zip(("head", "tail"), ends):
            if value >= n:
                raise DataError(path, line, f"{where}.{key}", f"{value} is not an index of "
                                                              f"entities ({n} of them)")
        links.append(Link(*ends, name_value(rel.get("type"), path, line, f"{where}.type")))
    return links


def _list(obj: dict, key: str, path, line, limit: int) -> list:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise DataError(path, line, key, "expected a list")
    if len(value) > limit:
        raise DataError(path, line, key, f"{len(value)} items, more than the {limit} a sentence "
                                         f"may have")
    return value


def _starts(tokens: tuple[str, ...]) -> list[int]:
    """Each token's first character in ``" ".join(tokens)``."""
    starts, at = [], 0
    for token in tokens:
        starts.append(at)
        at += len(token) + 1
    return starts


def _check_span(start: int, end: int, size: int, path, line, where, unit: str) -> None:
    if start < 0 or end <= start:
        raise DataError(path, line, where, f"expected 0 <= start < end, got [{start}, {end})")
    if end > size:
        raise DataError(path, line, where, f"[{start}, {end}) lies outside the sentence ({size} "
                                           f"{unit})")


def _triple(item, path, line, where, n: int) -> list:
    if not isinstance(item, list) or len(item) != n:
        raise DataError(path, line, where, f"expected a list of {n} items")
    for i, value in enumerate(item[:n - 1]):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DataError(path, line, f"{where}[{i}]", "expected a non-negative token position")
    return item


def read_annotated(path: str, encoding: str = "utf-8", labels: bool = True,
                   skipped: list[str] | None = None) -> list[Annotated]:
    """Every sentence of a file; the first bad row is the error, or with ``skipped`` (a list)
    each bad row's ``file:line: field: why`` goes there and the row is left out."""
    kind = detect(path, encoding)
    if labels and kind == "text":  # scored or trained as gold, it would be a sentence of nothing
        hint = ("its rows give one pair each (h and t, or head and tail): a file of task=classify"
                if _pairs_file(path, encoding) else "give a labelled file: " + ", ".join(
                    KINDS[k] for k in ("spert", "pure", "duie", "reltrain")))
        raise UserError(f"{path}: read as raw text (one sentence a line, or JSON lines with "
                        f"'text' alone), it holds no gold entities or relations; {hint}")
    sentences = []
    for _, build in iter_annotated(path, encoding, labels, kind):
        try:
            sentences.extend(build().sentences)
        except DataError as exc:
            if skipped is None:
                raise
            skipped.append(str(exc))
    if not sentences:
        raise UserError(f"{path}: no sentences"
                        + (f" ({len(skipped)} bad row(s) skipped)" if skipped else ""))
    return sentences
