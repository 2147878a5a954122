"""Prediction of an extraction model trained on sentences (CoNLL04's, DuIE's and PURE's examples
are; ``extract.sentences``) reads a text sentence by sentence: the text is cut where
data/sentences.py says a sentence begins, each sentence is answered alone, and the answers are
put together with offsets into the whole text, so no relation is answered between two
sentences (CoNLL04's validation sentences joined ten to a text and read whole lost a third of
their strict relations F1: docs/extraction.md). A sentence (or a text read whole) longer than
the model reads at once (``data.max_len`` units, or subwords for a pretrained encoder) is read
in overlapping windows: each answers for the entities that begin in its own part (up to the
middle of its overlap with the next), and a relation found by two windows counts once, at its
higher score."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.sentences import sentence_starts
from reltrain.data.spans import SpanEncoder, SpanExample
from reltrain.evaluation.span_decode import Answer

OVERLAP = 4  # a window's last quarter is read again by the next


class Window(NamedTuple):
    offset: int  # the window's first character in the whole text
    own: tuple[int, int]  # the characters of the whole text whose entities it answers for
    sentence: Annotated  # the window's text (and tokens), offsets its own
    example: SpanExample


def windows(encoder: SpanEncoder, sentence: Annotated,
            language: str | None) -> tuple[list[Window], bool]:
    """The windows of ``sentence`` (itself alone where the model reads it all and it is one
    sentence, or ``language`` None: read whole), and whether a part of it is longer than the
    model reads at once."""
    text = sentence.text
    starts = sentence_starts(text, language) if language else []
    if not starts:  # a text of several sentences is encoded sentence by sentence only
        example = encoder(sentence, labelled=False)
        if not _unread(text, example):
            return [Window(0, (0, len(text)), sentence, example)], False
    units = encoder.units(sentence, set(), every=True)
    out, lo, long = [], 0, False
    for hi in _unit_ends(units, starts):
        parts = _sentence_windows(encoder, sentence, units, lo, hi)
        out, lo, long = out + parts, hi, long or len(parts) > 1
    return out, long


def _unit_ends(units: list[tuple[str, int, int]], starts: list[int]) -> list[int]:
    """The unit after each sentence's last one, from where the sentences begin."""
    ends, k = [], 0
    for start in starts:
        while k < len(units) and units[k][1] < start:
            k += 1
        if 0 < k < len(units) and (not ends or ends[-1] < k):
            ends.append(k)
    return [*ends, len(units)] if units else []


def _sentence_windows(encoder, sentence, units, lo: int, hi: int) -> list[Window]:
    """The windows of units [lo, hi), one where the model reads them all."""
    out, start, own = [], lo, units[lo][1]
    while True:
        offset, stop = units[start][1], min(start + encoder.max_units, hi)
        tokens = sentence.tokens[start:stop] if sentence.tokens else None
        part = replace(sentence, text=sentence.text[offset:units[stop - 1][2]], tokens=tokens)
        example = encoder(part, labelled=False)
        read = len(example.first)
        if start + read >= hi or not read:
            return [*out, Window(offset, (own, units[hi - 1][2]), part, example)]
        following = start + max(read - read // OVERLAP, 1)
        middle = units[(following + start + read) // 2][1]
        out.append(Window(offset, (own, middle), part, example))
        start, own = following, middle


def _unread(text: str, example: SpanExample) -> bool:
    """Whether text is left past the last unit the example reads."""
    return bool(text[example.units[-1, 1] if len(example.units) else 0:].strip())


def merged(sentence: Annotated, parts: list[Window], answers: list[Answer],
           symmetric: frozenset[str] = frozenset()) -> Answer:
    """One answer over the whole of ``sentence`` from its windows' answers."""
    if len(parts) == 1:
        return answers[0]
    entities, scores, index = [], [], {}
    for part, answer in zip(parts, answers):
        for span, score in zip(answer.sentence.entities, answer.entity_scores):
            span = Span(span.start + part.offset, span.end + part.offset, span.type)
            if part.own[0] <= span.start < part.own[1] and span not in index:
                index[span] = len(entities)
                entities.append(span)
                scores.append(score)
    found: dict[tuple, tuple[Link, float]] = {}
    for part, answer in zip(parts, answers):
        local = answer.sentence.entities
        for link, p in zip(answer.sentence.relations, answer.relation_scores):
            ends = [index.get(Span(e.start + part.offset, e.end + part.offset, e.type))
                    for e in (local[link.head], local[link.tail])]
            if None in ends:
                continue
            key = (*sorted(ends), link.type) if link.type in symmetric else (*ends, link.type)
            if key not in found or p > found[key][1]:
                found[key] = (Link(ends[0], ends[1], link.type), p)
    whole = replace(sentence, entities=tuple(entities),
                    relations=tuple(link for link, _ in found.values()))
    return Answer(whole, scores, [p for _, p in found.values()])
