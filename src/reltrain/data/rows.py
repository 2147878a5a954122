"""One row of any format made into a ``Record``: the checks every reader shares (an entity at
its character offset, the relation's name, two different spans), and the JSON shapes (the JSONL
row, a sentence with ``entities``, a text with entity strings), which the readers, the server
and the Python API take alike. Every problem is ``file:line: field: problem``."""

from __future__ import annotations

import json
import re
from functools import partial

from reltrain.data import formats
from reltrain.data.schema import Entity, EntitySentence, Record, label_name_problem
from reltrain.runtime.errors import DataError

# Offsets and indices: digits only (str.isdigit() also takes "²"), and at most 18 of them, so
# that int() never meets a number past its 4,300-digit limit.
DIGITS = re.compile(r"[0-9]{1,18}")
MAX_INT_DIGITS = 18
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def offset_value(path, line, field_name, value) -> int:
    value = value.strip()
    if not DIGITS.fullmatch(value):  # str.isdigit() also accepts '²', which int() rejects
        raise DataError(path, line, field_name,
                        f"expected a non-negative integer character offset of at most "
                        f"{MAX_INT_DIGITS} digits, got '{value[:40]}'")
    return int(value)


def entity_at(path, line, text, role, name, start, type_="") -> Entity:
    if not name.strip():
        raise DataError(path, line, role, "empty entity text")
    end = start + len(name)
    if end > len(text):
        raise DataError(path, line, f"{role}_offset",
                        f"{role} '{name}' at {start}..{end} lies outside the sentence "
                        f"(length {len(text)})")
    if text[start:end] != name:
        raise DataError(path, line, f"{role}_offset",
                        f"the text at {start}..{end} is '{text[start:end]}', not the {role} '{name}'")
    return Entity(name=name, start=start, end=end, type=type_)


def relation_name(path, line, value, require_relation) -> str | tuple[str, ...] | None:
    """The row's relation; a JSON list gives several (``model.multi_label``), in their order,
    each once: an empty list is a pair with none."""
    if isinstance(value, list):
        if len(value) > MAX_ROW_RELATIONS:
            raise DataError(path, line, "relation", f"{len(value)} relations; at most "
                                                    f"{MAX_ROW_RELATIONS} a row")
        names = [_one_relation(path, line, v) for v in value]
        return tuple(dict.fromkeys(names))
    if value is None or not str(value).strip():
        if require_relation:
            raise DataError(path, line, "relation", "missing relation")
        return None
    return _one_relation(path, line, value)


MAX_ROW_RELATIONS = 256


def _one_relation(path, line, value) -> str:
    if not isinstance(value, str):
        raise DataError(path, line, "relation", f"expected a string or a list of strings, got "
                                                f"{type(value).__name__}")
    return name_value(value, path, line, "relation")


def name_value(value, path, line, field, strip: bool = True) -> str:
    """A type's or a relation's name (stripped), or with ``strip`` False an entity string
    (DuIE's, found in its text as it is)."""
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, line, field, "expected a non-empty string")
    value = value.strip() if strip else value  # a name's edges are not part of it
    problem = label_name_problem(value)
    if problem:
        raise DataError(path, line, field, problem)
    return value


def text_value(value, path, line, field, limit: int | None = None) -> str:
    """A sentence: a string with more than white space, of at most ``limit`` characters."""
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, line, field, "expected a non-empty string")
    if limit is not None and len(value) > limit:
        raise DataError(path, line, field, f"{len(value)} characters, more than the "
                                           f"{limit} a sentence may have")
    return value


def tokens_value(value, path, line, field, limit: int | None = None) -> tuple[str, ...]:
    """A sentence's tokens: a non-empty list of strings without white space, at most ``limit``
    characters joined by spaces."""
    if (not isinstance(value, list) or not value
            or not all(isinstance(t, str) and t and not any(c.isspace() for c in t) for t in value)):
        raise DataError(path, line, field, "expected a non-empty list of tokens without spaces")
    if limit is not None and sum(len(t) + 1 for t in value) > limit:
        raise DataError(path, line, field, f"more than {limit} characters")
    return tuple(value)


def index_value(value, path, line, field) -> int:
    """A JSON integer at least 0 (not a bool, which JSON's true would be)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DataError(path, line, field, f"expected a non-negative integer, got {value!r:.40}")
    return value


def record_of(path, line, text, head, tail, relation, tokens=None, id=None) -> Record:
    if (head.start, head.end) == (tail.start, tail.end):
        raise DataError(path, line, "tail", f"head and tail are the same span {head.start}..{head.end}")
    return Record(text=text, head=head, tail=tail, relation=relation, source=f"{path}:{line}",
                  tokens=tokens, id=id)


MAX_ID_CHARS = 200


def row_id(path, line, value) -> str | int | None:
    """An example's own id (TACRED's ``id``, a row's ``id``, a CSV ``id`` column, SemEval's
    sentence number), echoed in its answer so that official scorers can match by id; None when
    it has none. A string of at most 200 characters without control characters, or an integer."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS:
        raise DataError(path, line, "id", f"expected an integer or a string of 1 to "
                                          f"{MAX_ID_CHARS} characters")
    if label_name_problem(value):
        raise DataError(path, line, "id", "an id holds a control character")
    return value


def parse_json(raw: str, path: str = "<input>", line: int | None = None):
    """A JSON value whose strings are all valid Unicode text: a lone surrogate escape
    (``"\\ud800"``) parses, but no UTF-8 output could hold it, so it is refused here."""
    try:
        obj = json.loads(raw, parse_int=_bounded_int)
    except _LongNumber as exc:
        raise DataError(path, line, None, f"invalid JSON: a number of {exc.args[0]} digits "
                                          f"(at most {MAX_INT_DIGITS})") from None
    except json.JSONDecodeError as exc:
        raise DataError(path, line, None, f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise DataError(path, line, None, "invalid JSON: nested too deeply") from None
    # Only an escape can bring a surrogate in (the UTF-8 decoding of the input refuses one).
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(path, line, None, "a string holds a lone surrogate escape (\\ud800 "
                                              "to \\udfff without its pair): not text") from None
    return obj


class _LongNumber(Exception):
    pass


def _bounded_int(text: str) -> int:
    # json's own int() would raise a bare ValueError past 4,300 digits; no field needs 19.
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _LongNumber(digits)
    return int(text)


# The keys of the extraction task's rows (reltrain's, DuIE's, PURE's) that no row of a pair has
EXTRACTION_KEYS = frozenset({"entities", "relations", "spo_list", "sentences", "ner"})


def json_record(obj, path: str = "<input>", line: int | None = None, require_relation: bool = False,
                entity_lists: bool = False) -> Record | EntitySentence:
    """One example from a parsed JSON object: the JSONL shape (``text`` or ``token``, ``h``,
    ``t``) or, with ``entity_lists``, ``{"text", "entities": [...]}``."""
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    if entity_lists and "entities" in obj:
        return entity_sentence(obj, path, line)
    if require_relation and "relation" not in obj and obj.keys() & EXTRACTION_KEYS:
        raise DataError(path, line, None, "a row of the extraction task (a sentence's entities and "
                                          "relations): its model is trained with task=extract")
    relation = relation_name(path, line, obj.get("relation"), require_relation)
    tokens, ident = None, row_id(path, line, obj.get("id"))
    if isinstance(obj.get("text"), str) and "h" not in obj and formats.has_tags(obj["text"]):
        return formats.tagged_record(obj["text"], relation, path, line, "text",
                                     partial(record_of, id=ident))
    if "text" in obj:
        text = text_value(obj["text"], path, line, "text")
    elif "token" in obj:
        tokens = tokens_value(obj["token"], path, line, "token")
        text = " ".join(tokens)
    else:
        raise DataError(path, line, None, "expected a 'text' or a 'token' field")
    head = _json_entity(path, line, obj, "h", text, tokens)
    tail = _json_entity(path, line, obj, "t", text, tokens)
    return record_of(path, line, text, head, tail, relation, tokens, ident)


def example(obj: object, path: str = "<input>", line: int | None = None) -> Record | EntitySentence:
    """One example to predict, in any of the three shapes (the JSONL row, a sentence with
    ``entities``, or ``{"text", "head", "tail"}`` with entity strings)."""
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    if "entities" in obj or "h" in obj or "token" in obj:
        return json_record(obj, path, line, entity_lists=True)
    return pair_record(obj, path, line)


def pair_record(obj: dict, path: str = "<input>", line: int | None = None) -> Record:
    """``{"text", "head", "tail"}`` with entity strings and optional ``head_offset`` /
    ``tail_offset`` (default: the first occurrence), as ``reltrain predict --text`` takes them."""
    text = text_value(obj.get("text"), path, line, "text")
    ends = []
    for role in ("head", "tail"):
        name, offset = obj.get(role), obj.get(f"{role}_offset")
        if not isinstance(name, str) or not name.strip():
            raise DataError(path, line, role, "expected a non-empty string")
        if offset is None:
            offset = text.find(name)
            if offset < 0:
                raise DataError(path, line, role, f"'{name}' does not occur in the text")
        elif not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise DataError(path, line, f"{role}_offset",
                            f"expected a non-negative integer character offset, got {offset!r}")
        ends.append(entity_at(path, line, text, role, name, offset))
    if ends[0] == ends[1]:
        raise DataError(path, line, "tail_offset", f"the head and the tail are the same span "
                        f"{ends[0].start}..{ends[0].end}: give an offset to tell them apart")
    relation = relation_name(path, line, obj.get("relation"), False)
    return record_of(path, line, text, ends[0], ends[1], relation, id=row_id(path, line, obj.get("id")))


def entity_sentence(obj: dict, path: str = "<input>", line: int | None = None) -> EntitySentence:
    """``{"text": ..., "entities": [{"name", "pos"}, ...]}`` (character offsets), validated."""
    text = text_value(obj.get("text"), path, line, "text")
    items = obj["entities"]
    if not isinstance(items, list) or len(items) < 2:
        raise DataError(path, line, "entities", "expected a list of at least two entities")
    entities = tuple(_json_entity(path, line, {f"entities[{i}]": item}, f"entities[{i}]", text, None)
                     for i, item in enumerate(items))
    return EntitySentence(text, entities, f"{path}:{line}", row_id(path, line, obj.get("id")))


def _folded(name: str) -> str:
    """A name without case and whitespace: OpenNRE never reads ``name`` (``pos`` is the truth),
    and wiki80 and FewRel lower-case it while the tokens keep their case."""
    return "".join(name.split()).casefold()


def _json_entity(path, line, obj, key, text, tokens) -> Entity:
    ent = obj.get(key)
    if not isinstance(ent, dict):
        raise DataError(path, line, key, "expected an object with 'pos' ([start, end])")
    pos = ent.get("pos")
    if (not isinstance(pos, list) or len(pos) != 2
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in pos)):
        raise DataError(path, line, f"{key}.pos", f"expected [start, end] integers, got {pos!r}")
    start, end = pos
    limit = len(tokens) if tokens is not None else len(text)
    unit = "tokens" if tokens is not None else "characters"
    if start < 0 or end <= start:
        raise DataError(path, line, f"{key}.pos", f"expected 0 <= start < end, got {pos}")
    if end > limit:
        raise DataError(path, line, f"{key}.pos",
                        f"{pos} lies outside the sentence ({limit} {unit})")
    if tokens is not None:  # token positions -> character offsets into " ".join(tokens)
        start_char = sum(len(t) + 1 for t in tokens[:start])
        start, end = start_char, start_char + len(" ".join(tokens[pos[0]:end]))
    span = text[start:end]
    name = ent.get("name", span)
    if not isinstance(name, str):
        raise DataError(path, line, f"{key}.name", "expected a string")
    if name != span and _folded(name) != _folded(span):
        raise DataError(path, line, f"{key}.pos", f"the text at {pos} is '{span}', not '{name}'")
    if not span.strip():
        raise DataError(path, line, f"{key}.pos", "the entity span is blank")
    type_ = ent.get("type", "")
    return Entity(name=span, start=start, end=end, type=type_ if isinstance(type_, str) else "")
