"""An extraction answer as JSON (shared/DESIGN.md, "Relations from raw text"): the text, its
entities with character offsets (and token positions where the input gave tokens), the relations
between them by index, with scores where there are."""

from __future__ import annotations

from reltrain.data.schema import Annotated


def sentence_json(sentence: Annotated, scored=None) -> dict:
    """``scored``: an object with ``entity_scores`` and ``relation_scores`` (the model's)."""
    token_at = _token_positions(sentence)
    entities = []
    for i, e in enumerate(sentence.entities):
        item = {"start": e.start, "end": e.end, "text": sentence.text[e.start:e.end], "type": e.type}
        if token_at is not None:
            item["token_start"], item["token_end"] = token_at[0].get(e.start), token_at[1].get(e.end)
        if scored is not None:
            item["score"] = scored.entity_scores[i]
        entities.append(item)
    relations = []
    for i, r in enumerate(sentence.relations):
        item = {"head": r.head, "tail": r.tail, "type": r.type}
        if scored is not None:
            item["score"] = scored.relation_scores[i]
        relations.append(item)
    out = {"text": sentence.text, "entities": entities, "relations": relations}
    return out if sentence.id is None else {"id": sentence.id, **out}


def _token_positions(sentence: Annotated):
    if sentence.tokens is None:
        return None
    starts, ends, at = {}, {}, 0
    for i, token in enumerate(sentence.tokens):
        starts[at], ends[at + len(token)] = i, i + 1
        at += len(token) + 1
    return starts, ends
