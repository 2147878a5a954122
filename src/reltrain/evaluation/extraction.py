"""The scores of the extraction task, micro over a whole set (as SpERT, PURE and DuIE count them):
``entities_f1`` (span and type exact), ``relations_strict_f1`` (both spans, both types and the
relation: SpERT's "with NER", PURE's "Rel+"), ``relations_boundaries_f1`` (both spans and the
relation) and, where entities were strings (DuIE), ``triples_f1`` over (subject text,
predicate, object text) sets per sentence; each with P and R, per entity type and per relation.
A relation the types file marks symmetric counts in either order. Each item counts once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from reltrain.data.schema import Annotated
from reltrain.evaluation.metrics import display_width, pad

SCORES = ("entities", "relations_strict", "relations_boundaries", "triples")


def strict_item(sentence: Annotated, link, symmetric: frozenset[str] = frozenset()) -> tuple:
    """A relation as ``relations_strict`` counts it: (relation, both ends' spans and types)."""
    head, tail = sentence.entities[link.head], sentence.entities[link.tail]
    ends = [((head.start, head.end), head.type), ((tail.start, tail.end), tail.type)]
    if link.type in symmetric:
        ends.sort()
    return link.type, tuple(ends)


def sentence_items(sentence: Annotated, symmetric: frozenset[str] = frozenset()) -> dict[str, set]:
    """The sets one sentence is scored by: each item is (kind, what), its kind the entity type
    or the relation."""
    ents = sentence.entities
    items: dict[str, set] = {"entities": {(e.type, (e.start, e.end)) for e in ents},
                             "relations_strict": set(), "relations_boundaries": set(),
                             "triples": set()}
    for link in sentence.relations:
        _, ends = item = strict_item(sentence, link, symmetric)
        items["relations_strict"].add(item)
        items["relations_boundaries"].add((link.type, (ends[0][0], ends[1][0])))
        items["triples"].add(triple_item(sentence, link, symmetric))
    return items


class ExtractionCounts:
    """True positives, predictions and gold items per score and kind, summed over sentences; the
    counts of several processes add up (``merge``), so a sharded evaluation scores exactly."""

    def __init__(self):
        self.counts: dict[str, Counter] = {name: Counter() for name in SCORES}

    def add(self, gold: Annotated, predicted: Annotated, symmetric: frozenset[str] = frozenset()):
        want, got = sentence_items(gold, symmetric), sentence_items(predicted, symmetric)
        for name in SCORES:
            for kind, _ in want[name]:
                self.counts[name][("gold", kind)] += 1
            for kind, _ in got[name]:
                self.counts[name][("pred", kind)] += 1
            for kind, _ in want[name] & got[name]:
                self.counts[name][("tp", kind)] += 1
        return self

    def merge(self, others: Iterable["ExtractionCounts"]) -> "ExtractionCounts":
        for other in others:
            for name in SCORES:
                self.counts[name].update(other.counts[name])
        return self

    def metrics(self, strings: bool = False) -> dict:
        """``{score}_f1``, ``_precision``, ``_recall`` and ``_support`` for each score (``triples``
        only with ``strings``), and ``per_entity_type`` / ``per_relation`` (strict)."""
        out: dict = {}
        for name in SCORES if strings else SCORES[:3]:
            total = {k: sum(v for (what, _), v in self.counts[name].items() if what == k)
                     for k in ("tp", "pred", "gold")}
            out.update({f"{name}_{k}": v for k, v in _prf(**total).items()})
        out["per_entity_type"] = self._per_kind("entities")
        out["per_relation"] = self._per_kind("relations_strict")
        return out

    def _per_kind(self, name: str) -> dict:
        kinds = sorted({kind for _, kind in self.counts[name]})
        return {kind: _prf(*(self.counts[name][(k, kind)] for k in ("tp", "pred", "gold")))
                for kind in kinds}


def _prf(tp: int, pred: int, gold: int) -> dict:
    precision = tp / pred if pred else 0.0
    recall = tp / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"f1": f1, "precision": precision, "recall": recall, "support": gold}


def triple_item(sentence: Annotated, link, symmetric: frozenset[str] = frozenset()) -> tuple:
    """A relation as ``triples`` counts it: (relation, the two ends' texts)."""
    texts = [sentence.text[e.start:e.end] for e in (sentence.entities[link.head],
                                                    sentence.entities[link.tail])]
    return link.type, tuple(sorted(texts)) if link.type in symmetric else tuple(texts)


def tune_thresholds(gold: list[Annotated], predicted: list[Annotated], scores: list[list[float]],
                    relations: list[str], grid, symmetric: frozenset[str] = frozenset()):
    """Each relation's threshold from ``grid`` with the best F1 of that relation over the set
    (``predicted``: answers at the grid's lowest threshold, ``scores`` their relations'
    probabilities): strict F1, or the triples' where the gold names entities by strings (DuIE,
    selected by triples_f1); ties go to the threshold nearest 0.5, a relation without gold keeps
    0.5."""
    item_of = triple_item if any(s.strings for s in gold) else strict_item
    grid = np.asarray(grid, dtype=np.float32)
    tp = {r: np.zeros(len(grid)) for r in relations}
    pred = {r: np.zeros(len(grid)) for r in relations}
    support = dict.fromkeys(relations, 0)
    for want, got, probs in zip(gold, predicted, scores):
        wanted = {item_of(want, link, symmetric) for link in want.relations}
        for kind, _ in wanted:
            support[kind] = support.get(kind, 0) + 1
        best: dict = {}  # an item answered twice counts once, at its higher score
        for link, p in zip(got.relations, probs):
            item = item_of(got, link, symmetric)
            best[item] = max(best.get(item, 0.0), p)
        for (kind, ends), p in best.items():
            if kind in pred:
                reached = grid <= p
                pred[kind] += reached
                if (kind, ends) in wanted:
                    tp[kind] += reached
    out = np.full(len(relations), 0.5, dtype=np.float32)
    for i, r in enumerate(relations):
        if support.get(r, 0):
            f1 = 2 * tp[r] / np.maximum(pred[r] + support[r], 1)
            order = np.lexsort((np.abs(grid - 0.5), -np.round(f1, 9)))
            out[i] = grid[order[0]]
    return out


def extraction_metrics(gold: list[Annotated], predicted: list[Annotated],
                       symmetric: frozenset[str] = frozenset()) -> dict:
    """The scores of ``predicted`` against ``gold``, sentence by sentence in the same order."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} answers")
    counts = ExtractionCounts()
    for want, got in zip(gold, predicted):
        counts.add(want, got, symmetric)
    metrics = counts.metrics(strings=any(s.strings for s in gold))
    metrics["num_sentences"] = len(gold)
    return metrics


def format_extraction(metrics: dict) -> str:
    """The log's table: each entity type and relation (strict), then the totals."""
    rows = [("entity " + k, v) for k, v in metrics["per_entity_type"].items()]
    rows += [("relation " + k, v) for k, v in metrics["per_relation"].items()]
    totals = [name for name in SCORES if f"{name}_f1" in metrics]
    width = max(display_width(n) for n in [name for name, _ in rows] + totals) + 2
    out = [f"{pad('', width)}{'P':>8}{'R':>8}{'F1':>8}{'n':>7}"]
    for name, m in rows + [(t, {k: metrics[f"{t}_{k}"] for k in ("precision", "recall", "f1",
                                                                  "support")}) for t in totals]:
        out.append(f"{pad(name, width)}{m['precision']:>8.4f}{m['recall']:>8.4f}{m['f1']:>8.4f}"
                   f"{m['support']:>7}")
    return "\n".join(out)


def extraction_headline(metrics: dict) -> str:
    parts = [f"entities F1 {metrics['entities_f1']:.4f}",
             f"relations strict F1 {metrics['relations_strict_f1']:.4f}",
             f"boundaries F1 {metrics['relations_boundaries_f1']:.4f}"]
    if "triples_f1" in metrics:
        parts.append(f"triples F1 {metrics['triples_f1']:.4f}")
    return "  ".join(parts)
