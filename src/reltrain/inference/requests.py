"""The body of ``POST /predict``, parsed, bounded and checked before the model sees it: every
problem is a ``BadRequest`` (4xx, with its field), and a limit applies before the work it bounds."""

from __future__ import annotations

from dataclasses import dataclass

from reltrain.data.rows import MAX_INT_DIGITS, parse_json, example, row_id
from reltrain.runtime.errors import DataError
from reltrain.data.schema import Annotated, EntitySentence

# The keys of each request shape; any other is refused by name (a typo such as tail_ofset
# would otherwise be ignored and the default used).
PAIR_KEYS = frozenset({"text", "head", "tail", "head_offset", "tail_offset", "relation", "id"})
ROW_KEYS = frozenset({"text", "token", "h", "t", "relation", "id"})
SENTENCE_KEYS = frozenset({"text", "entities", "id"})
ENTITY_KEYS = frozenset({"name", "pos", "type", "id"})


class BadRequest(Exception):
    def __init__(self, status: int, message: str, field_name: str | None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field_name


@dataclass
class Limits:
    max_items: int  # examples per request, each entity pair counting
    max_text_chars: int
    max_request_chars: int  # text read for the whole request: each pair reads its own


@dataclass
class Parsed:
    items: list  # Record or EntitySentence
    many: bool  # the body was a list (the answer is one too)
    examples: int  # what the model predicts: every pair of a sentence's entities


def _objects(body: bytes, limits: Limits, noun: str) -> tuple[list, bool]:
    """The body's JSON value as a list of what it holds, and whether it was a list (the answer
    then is one too); at least one and at most ``limits.max_items`` of them."""
    try:
        obj = parse_json(body.decode("utf-8"), "body")
    except UnicodeDecodeError:
        raise BadRequest(400, "the body is not UTF-8 text", "body") from None
    except DataError as exc:
        raise BadRequest(400, f"the body is not JSON text: {exc.reason}", "body") from None
    many = isinstance(obj, list)
    objs = obj if many else [obj]
    if not objs:
        raise BadRequest(422, f"an empty list: send at least one {noun}", "body")
    if len(objs) > limits.max_items:
        raise BadRequest(413, f"{len(objs)} {noun}s in one request; at most {limits.max_items}",
                         "body")
    return objs, many


def parse_items(body: bytes, limits: Limits) -> Parsed:
    """The examples of a request body; ``BadRequest`` naming the field for anything wrong."""
    objs, many = _objects(body, limits, "example")
    items, count, chars = [], 0, 0
    for i, one in enumerate(objs):
        where = f"[{i}]" if many else ""
        examples, length = _check_shape(one, where, limits)
        count, chars = count + examples, chars + examples * length
        if count > limits.max_items:
            raise BadRequest(413, f"more than {limits.max_items} examples (every pair of a "
                                  f"sentence's entities counts)", "body")
        # Each pair is tokenized and answered on its own, so a sentence of many entities reads
        # its text once per pair: that, not the body's size, is the work the request asks for.
        if chars > limits.max_request_chars:
            raise BadRequest(413, f"more than {limits.max_request_chars} characters of text to "
                                  f"read (each example, every entity pair, reads its whole text)",
                             "body")
        try:
            items.append(example(one, "request", None))
        except DataError as exc:
            name = f"{where}.{exc.field}" if exc.field else where
            raise BadRequest(422, exc.reason, name.lstrip(".") or "body") from None
    return Parsed(items, many, sum(_examples(item) for item in items))


TEXT_KEYS = frozenset({"text", "id"})


def parse_texts(body: bytes, limits: Limits) -> Parsed:
    """The sentences of a request to an extraction model: ``{"text", "id"?}`` or a list of them.
    Each sentence's pairs are at most the 30 best mentions' (evaluation/span_decode.py), so the
    sentence count bounds the pairs before any is built."""

    objs, many = _objects(body, limits, "sentence")
    items, chars = [], 0
    for i, one in enumerate(objs):
        where = f"[{i}]" if many else ""
        if not isinstance(one, dict):
            raise BadRequest(422, f"expected a JSON object, got {type(one).__name__}",
                             where or "body")
        unknown = sorted(k for k in one if k not in TEXT_KEYS)
        if unknown:
            raise BadRequest(422, f"unknown key '{unknown[0][:60]}'; an extraction model takes "
                                  f"text and id", f"{where}.{unknown[0][:60]}".lstrip("."))
        text = one.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest(422, "expected a non-empty string", f"{where}.text".lstrip("."))
        if len(text) > limits.max_text_chars:
            raise BadRequest(422, f"text of {len(text)} characters; at most "
                                  f"{limits.max_text_chars}", f"{where}.text".lstrip("."))
        chars += len(text)
        if chars > limits.max_request_chars:
            raise BadRequest(413, f"more than {limits.max_request_chars} characters of text",
                             "body")
        try:
            ident = row_id("request", None, one.get("id"))
        except DataError as exc:
            raise BadRequest(422, exc.reason, f"{where}.id".lstrip(".")) from None
        items.append(Annotated(text, (), (), "request", id=ident))
    return Parsed(items, many, len(items))


def text_schema(limits: Limits) -> dict:
    """POST /predict's body for an extraction model."""
    one = {"title": "text", "type": "object", "additionalProperties": False, "required": ["text"],
           "description": "a sentence: its entities and the relations among them are answered",
           "properties": {"text": {"type": "string", "minLength": 1,
                                   "maxLength": limits.max_text_chars, "pattern": r"\S"},
                          "id": {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 200},
                                           {"type": "integer"}]}}}
    return {"oneOf": [one, {"type": "array", "items": one, "minItems": 1,
                            "maxItems": limits.max_items}]}


def _check_shape(one: object, where: str, limits: Limits) -> tuple[int, int]:
    """Keys and lengths of one example, before it is built; the examples it asks for (at most:
    pairs of one span with itself are dropped later) and the characters each reads."""
    def field(name: str) -> str:
        return f"{where}.{name}".lstrip(".")

    if not isinstance(one, dict):
        raise BadRequest(422, f"expected a JSON object, got {type(one).__name__}", where or "body")
    keys = (SENTENCE_KEYS if "entities" in one else ROW_KEYS if ("h" in one or "token" in one)
            else PAIR_KEYS)
    unknown = sorted(k for k in one if k not in keys)
    if unknown:
        raise BadRequest(422, f"unknown key '{unknown[0][:60]}'; this request shape takes "
                              f"{', '.join(sorted(keys))}", field(unknown[0][:60]))
    text, tokens = one.get("text"), one.get("token")
    length = (len(text) if isinstance(text, str) else
              sum(len(t) + 1 for t in tokens if isinstance(t, str)) if isinstance(tokens, list) else 0)
    if length > limits.max_text_chars:
        name = "text" if isinstance(text, str) else "token"
        raise BadRequest(422, f"text of {length} characters; at most {limits.max_text_chars}",
                         field(name))
    for role in ("h", "t"):
        _check_entity(one.get(role), field(role))
    entities = one.get("entities")
    if not isinstance(entities, list):
        return 1, length
    pairs = len(entities) * (len(entities) - 1)
    if pairs <= limits.max_items:  # else refused by the caller, before any entity is looked at
        for i, entity in enumerate(entities):
            _check_entity(entity, field(f"entities[{i}]"))
    return pairs, length


def _check_entity(entity: object, name: str) -> None:
    if isinstance(entity, dict):
        unknown = sorted(k for k in entity if k not in ENTITY_KEYS)
        if unknown:
            raise BadRequest(422, f"unknown key '{unknown[0][:60]}'; an entity takes "
                                  f"{', '.join(sorted(ENTITY_KEYS))}", f"{name}.{unknown[0][:60]}")


def _examples(item) -> int:
    return len(item.pairs()) if isinstance(item, EntitySentence) else 1


def request_schema(limits: Limits) -> dict:
    """POST /predict's body in the OpenAPI schema: one example or a list, with the bounds the
    server holds it to. What JSON Schema cannot say is answered 422 too: an entity string that
    does not occur in the text, offsets that do not hold it, two spans alike, more entity pairs
    than --max-items or more text to read than --max-request-chars."""
    # Text with a character that is not white space, as the readers require.
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_text_chars,
            "pattern": r"\S"}
    label = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"}
    # Numbers of at most MAX_INT_DIGITS digits: parse_json refuses longer ones anywhere.
    index = {"type": "integer", "minimum": 0, "maximum": MAX_INTEGER}
    entity = {"type": "object", "additionalProperties": False, "required": ["pos"],
              "properties": {"name": {"type": "string", "maxLength": limits.max_text_chars},
                             "pos": {"type": "array", "items": index, "minItems": 2,
                                     "maxItems": 2,
                                     "description": "[start, end): character offsets (token "
                                                    "positions with 'token')"},
                             "type": {"type": "string", "maxLength": 200},
                             "id": {"type": "string", "maxLength": 200}}}
    ident = {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
                       {"type": "integer", "minimum": -MAX_INTEGER, "maximum": MAX_INTEGER}],
             "description": "the example's own id, echoed in its answer"}
    # A sentence of n entities asks for n (n - 1) pairs.
    most_entities = max(2, int((1 + (1 + 4 * limits.max_items) ** 0.5) / 2))
    shapes = [
        {"title": "pair", "type": "object", "additionalProperties": False,
         "required": ["text", "head", "tail"],
         "description": "a sentence and two entity strings (first occurrence, or at the offsets)",
         "properties": {"text": text, "head": text, "tail": text, "head_offset": index,
                        "tail_offset": index,
                        "relation": {**label, "description": "gold label, echoed"}, "id": ident}},
        {"title": "row", "type": "object", "additionalProperties": False, "required": ["h", "t"],
         "description": "the JSON-lines shape: 'text' (or 'token', a list of words) with h and t",
         "properties": {"text": text,
                        "token": {"type": "array", "minItems": 1,
                                  "items": {"type": "string", "pattern": r"^\S+$"}},
                        "h": entity, "t": entity, "relation": label, "id": ident}},
        {"title": "sentence", "type": "object", "additionalProperties": False,
         "required": ["text", "entities"],
         "description": "a sentence with entities: every ordered pair is predicted",
         "properties": {"text": text, "id": ident,
                        "entities": {"type": "array", "items": entity, "minItems": 2,
                                     "maxItems": most_entities}}},
    ]
    return {"oneOf": [*shapes, {"type": "array", "items": {"oneOf": shapes}, "minItems": 1,
                                "maxItems": limits.max_items}]}


MAX_INTEGER = 10 ** MAX_INT_DIGITS - 1
