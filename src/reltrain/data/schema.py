"""The one record type that flows through preprocess, train, evaluate and predict."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from reltrain.runtime.errors import UserError


# The names data sets give their "no relation" class (TACRED, SemEval, DeepKE, NYT, Chinese sets),
# compared ignoring case: ``eval.negative_label=auto`` takes the one label of these names.
NEGATIVE_NAMES = ("no_relation", "na", "none", "other", "others", "无关系", "无")


def negative_index(setting: str, labels: list[str]) -> int | None:
    """The index of the negative relation: ``auto`` finds the one label with a negative name
    (none if there is none or more than one), ``none`` has none, else the label of that name."""
    if setting == "none":
        return None
    if setting == "auto":
        found = [i for i, name in enumerate(labels) if name.lower() in NEGATIVE_NAMES]
        return found[0] if len(found) == 1 else None
    if setting not in labels:
        shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
        raise UserError(f"eval.negative_label '{setting[:80]}' is not a relation of this data "
                        f"({shown}); give one of them, auto or none")
    return labels.index(setting)


def relation_names(relation: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """A record's relations as a tuple: one, several (a list in the row) or none."""
    if relation is None:
        return ()
    return (relation,) if isinstance(relation, str) else relation


def label_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a relation's name, or None: a control or format character (a
    newline, a bidi override) would turn a one-line message, a log table or a model card into
    something else."""
    for ch in name:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"a relation name holds the control character U+{ord(ch):04X}"
    return None


@dataclass(frozen=True)
class Entity:
    """An entity mention by character offsets into the sentence; ``end`` is exclusive."""

    name: str
    start: int
    end: int
    type: str = ""


@dataclass(frozen=True)
class Record:
    """One labelled (or, for prediction, unlabelled) sentence with a head and a tail entity;
    ``tokens`` only for pre-tokenised input (the text is then the tokens joined by spaces)."""

    text: str
    head: Entity
    tail: Entity
    relation: str | tuple[str, ...] | None  # a tuple: the row gave a list (model.multi_label)
    source: str
    tokens: tuple[str, ...] | None = None
    id: str | int | None = None  # the input's own id (TACRED's, a row's "id"), echoed in answers


@dataclass(frozen=True)
class EntitySentence:
    """A sentence with its entities but no chosen pair (prediction input): every ordered pair
    of distinct entities is a question, in the order of ``pairs()``."""

    text: str
    entities: tuple[Entity, ...]
    source: str
    id: str | int | None = None

    def pairs(self) -> list[Record]:
        """(e_i, e_j) for i, then j, in the given order, i != j, as records."""
        return [Record(self.text, h, t, None, self.source, id=self.id)
                for i, h in enumerate(self.entities) for j, t in enumerate(self.entities)
                if i != j and (h.start, h.end) != (t.start, t.end)]


# The extraction task (task=extract): a sentence with every entity mention and the relations
# among them, as the four gold formats give them (data/extraction.py) and as a model answers.

@dataclass(frozen=True)
class Span:
    """An entity mention by character offsets into the sentence (``end`` exclusive); mentions
    of one sentence may nest or overlap where the format allows."""

    start: int
    end: int
    type: str


@dataclass(frozen=True)
class Link:
    """A relation from ``entities[head]`` to ``entities[tail]`` of its sentence."""

    head: int
    tail: int
    type: str


@dataclass(frozen=True)
class Annotated:
    """A sentence with its entities and relations (none of either for raw text to predict on);
    ``tokens`` where the input gave them (``text`` is then the tokens joined by single spaces);
    ``strings``: the format named entities by their strings (DuIE), so ``triples_f1`` applies."""

    text: str
    entities: tuple[Span, ...]
    relations: tuple[Link, ...]
    source: str
    tokens: tuple[str, ...] | None = None
    id: str | int | None = None
    strings: bool = False
