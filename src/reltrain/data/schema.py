"""The one record type that flows through preprocess, train, evaluate and predict."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entity:
    """An entity mention by character offsets into the sentence; ``end`` is exclusive."""

    name: str
    start: int
    end: int
    type: str = ""


@dataclass(frozen=True)
class Record:
    """One labelled (or, for prediction, unlabelled) sentence with a head and a tail entity.

    ``tokens`` is set only for pre-tokenised input (OpenNRE's ``token`` format); the text is
    then the tokens joined by single spaces and the offsets point into that text.
    """

    text: str
    head: Entity
    tail: Entity
    relation: str | None
    source: str
    tokens: tuple[str, ...] | None = None
