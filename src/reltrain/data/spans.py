"""Sentences of the extraction task as the span model reads them (U units: words, or characters
for Chinese; S candidate spans of at most W units; P entity pairs; R relations). A unit is the
configured tokenizer's piece; a pretrained encoder reads subwords and each unit takes its first
subword's state. Every span of at most W units is a candidate; the pairs are every ordered pair
of gold entities in training (of predicted ones in prediction, models/spans.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from reltrain.data.schema import Annotated
from reltrain.data.tokenize import Tokenizer
from reltrain.data.dataset import Step, StepIndices


@dataclass
class SpanExample:
    ids: np.ndarray  # (T,) the encoder's token ids
    first: np.ndarray  # (U,) each unit's first token in ids
    units: np.ndarray  # (U, 2) character offsets of each unit, end exclusive
    spans: np.ndarray  # (S, 2) candidate unit spans, end exclusive
    span_labels: np.ndarray  # (S,) entity type + 1, 0 for none
    pairs: np.ndarray  # (P, 2) indices into spans: every ordered pair of gold entities
    pair_labels: np.ndarray  # (P, R) 1 where the relation holds
    lost: int = 0  # gold entities no candidate span is (off unit edges, wider than W, cut off)
    tags: np.ndarray | None = None  # (U,) with extract.mentions=tags: 0 outside, 2t-1 / 2t
    # the first / a later unit of a mention of type t (from 1); -100 where a sentence is unlabelled
    shapes: np.ndarray | None = None  # (U,) with extract.shapes: each unit's ``unit_shape``


class SpanEncoder:
    """Annotated sentences -> ``SpanExample``: units from ``tokenizer`` (or the sentence's own
    tokens), ids from ``to_ids`` (a vocabulary) or from ``lm`` (a pretrained tokenizer)."""

    def __init__(self, tokenizer: Tokenizer, entity_types: list[str], relations: list[str],
                 max_width: int, max_units: int, to_ids=None, lm=None, tags: bool = False,
                 symmetric: frozenset[str] = frozenset(), shapes: bool = False):
        self.tokenizer, self.to_ids, self.lm, self.shapes = tokenizer, to_ids, lm, shapes
        self.symmetric = symmetric  # relations labelled in both orders
        # tags: the units are tagged, and the only spans are the gold mentions (for their pairs)
        self.tags = tags
        self.types = {t: i + 1 for i, t in enumerate(entity_types)}
        self.relations = {r: i for i, r in enumerate(relations)}
        self.max_width, self.max_units = max_width, max_units
        # spans, span labels, pairs and pair labels of a sentence without any (never written)
        self._none = (np.zeros((0, 2), np.int64), np.zeros(0, np.int64),
                      np.zeros((0, 2), np.int64), np.zeros((0, len(relations)), np.float32))

    def units(self, sentence: Annotated, cuts: set[int],
              every: bool = False) -> list[tuple[str, int, int]]:
        """(text, start, end) of each unit the model reads, or with ``every`` of the whole
        text (prediction's windows, inference/windows.py)."""
        limit = None if every else self.max_units
        if sentence.tokens is not None:
            out, at = [], 0
            for token in sentence.tokens[:limit]:
                out.append((token, at, at + len(token)))
                at += len(token) + 1
            return out
        return self.tokenizer.pieces(sentence.text, cuts)[:limit]

    def __call__(self, sentence: Annotated, labelled: bool = True) -> SpanExample:
        cuts = {x for e in sentence.entities for x in (e.start, e.end)} if labelled else set()
        pieces = self.units(sentence, cuts)
        ids, first = self._ids(sentence.text, pieces)
        pieces = pieces[:len(first)]  # a pretrained encoder's positions may end before them
        _, starts, ends = zip(*pieces) if pieces else ((), (), ())  # in C, not a tuple a unit
        units = np.array((starts, ends), np.int64).T  # (a third of np.stack's time)
        shapes = (np.array([unit_shape(p[0]) for p in pieces], dtype=np.int64) if self.shapes
                  else None)
        if not (labelled and sentence.entities):
            if self.tags:  # every prediction comes here: the empty parts are made once
                spans, span_labels, pairs, pair_labels = self._none
                tags = np.full(len(units), 0 if labelled else -100, dtype=np.int64)
            else:
                spans, tags = candidate_spans(len(pieces), self.max_width), None
                span_labels, pairs, pair_labels = np.zeros(len(spans), np.int64), *self._none[2:]
            return SpanExample(ids, first, units, spans, span_labels, pairs, pair_labels, 0, tags,
                               shapes)
        starts = {s: i for i, (_, s, _) in enumerate(pieces)}
        ends = {e: i + 1 for i, (_, _, e) in enumerate(pieces)}
        if self.tags:
            spans = np.array(sorted({(starts[e.start], ends[e.end]) for e in sentence.entities
                                     if e.start in starts and e.end in ends}),
                             dtype=np.int64).reshape(-1, 2)
        else:
            spans = candidate_spans(len(pieces), self.max_width)
        # where each gold span sits among the spans
        at = {(s, e): k for k, (s, e) in enumerate(spans.tolist())}
        span_labels = np.zeros(len(spans), dtype=np.int64)
        gold, lost = [], 0
        for ent in sentence.entities if labelled else ():
            k = at.get((starts.get(ent.start, -1), ends.get(ent.end, -1)))
            if k is None or ent.type not in self.types:
                lost += 1
                gold.append(None)
                continue
            span_labels[k] = self.types[ent.type]  # two types on one span: the later one
            gold.append(k)
        found = [k for k in dict.fromkeys(g for g in gold if g is not None)]
        pairs = np.array([(a, b) for a in found for b in found if a != b],
                         dtype=np.int64).reshape(-1, 2)
        row = {(a, b): i for i, (a, b) in enumerate(pairs.tolist())}
        pair_labels = np.zeros((len(pairs), len(self.relations)), dtype=np.float32)
        for link in sentence.relations if labelled else ():
            ends = (gold[link.head], gold[link.tail])
            orders = (ends, ends[::-1]) if link.type in self.symmetric else (ends,)
            for i in (row.get(order) for order in orders):
                if i is not None and link.type in self.relations:
                    pair_labels[i, self.relations[link.type]] = 1.0
        tags = None
        if self.tags:
            tags, untagged = unit_tags(len(units), spans, span_labels)
            lost += untagged
        return SpanExample(ids, first, units, spans, span_labels, pairs, pair_labels, lost, tags,
                           shapes)

    def _ids(self, text: str, pieces) -> tuple[np.ndarray, np.ndarray]:
        if self.lm is None:
            ids = np.array(self.to_ids([p[0] for p in pieces]), dtype=np.int64)
            return ids, np.arange(len(pieces), dtype=np.int64)
        enc = self.lm.encode(text, add_special_tokens=False, return_offsets_mapping=True)
        owner = np.full(len(text) + 1, -1, dtype=np.int64)
        for i, (s, e) in enumerate(enc["offset_mapping"]):
            owner[s:e] = np.where(owner[s:e] < 0, i, owner[s:e])
        prefix, suffix = self.lm.prefix, self.lm.suffix
        kept = [int(owner[s]) for _, s, _ in pieces]
        # a unit no subword covers (the tokenizer dropped it) reads the state before it
        first = np.maximum.accumulate(np.array([max(k, 0) for k in kept] or [0], dtype=np.int64))
        first = first[first < self.max_units - len(prefix) - len(suffix)][:len(pieces)]
        last = int(first[-1]) + 1 if len(first) else 0
        ids = np.array(prefix + list(enc["input_ids"][:last]) + suffix, dtype=np.int64)
        return ids, first + len(prefix)


def unit_shape(text: str) -> int:
    """1 lower case, 2 capitalised, 3 capitals, 4 with a digit, 5 mixed case, 6 other
    (punctuation, or a script without case, such as Chinese)."""
    if any(c.isdigit() for c in text):
        return 4
    if not any(c.isalpha() and c.lower() != c.upper() for c in text):
        return 6
    if text.islower():
        return 1
    if text.isupper():
        return 3 if len(text) > 1 else 2
    return 2 if text[0].isupper() and text[1:].islower() else 5


def unit_tags(units: int, spans: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, int]:
    """(U,) each unit's tag from the typed gold spans (0 outside, 2t-1 the first unit of a
    mention of type t, 2t the rest), longest mention first where they overlap, and how many
    mentions could not be tagged (they overlap a longer one)."""
    tags, lost = np.zeros(units, dtype=np.int64), 0
    for k in sorted(range(len(spans)), key=lambda k: (spans[k, 0] - spans[k, 1], spans[k, 0])):
        s, e = spans[k]
        if labels[k] == 0 or tags[s:e].any():
            lost += labels[k] > 0
            continue
        tags[s], tags[s + 1:e] = 2 * labels[k] - 1, 2 * labels[k]
    return tags, int(lost)


def candidate_spans(units: int, max_width: int) -> np.ndarray:
    """(S, 2) every span of 1 to ``max_width`` units, by start then width."""
    starts = np.repeat(np.arange(units), max_width)
    widths = np.tile(np.arange(1, max_width + 1), units)
    keep = starts + widths <= units
    return np.stack([starts[keep], starts[keep] + widths[keep]], axis=1).astype(np.int64)


@dataclass
class SpanBatch:
    ids: torch.Tensor  # (B, T) 0 = padding
    mask: torch.Tensor  # (B, T)
    first: torch.Tensor  # (B, U)
    unit_mask: torch.Tensor  # (B, U)
    span_batch: torch.Tensor  # (N,) the example of each span
    spans: torch.Tensor  # (N, 2)
    span_labels: torch.Tensor  # (N,)
    pairs: torch.Tensor  # (M, 2) indices into the N spans
    pair_labels: torch.Tensor  # (M, R)
    index: torch.Tensor  # (B,) position of each example in its split
    tags: torch.Tensor  # (B, U) the units' tags (extract.mentions=tags), -100 where none
    shapes: torch.Tensor  # (B, U) the units' shapes (extract.shapes), 0 where none

    def inputs(self) -> dict[str, torch.Tensor]:
        return {"ids": self.ids, "mask": self.mask, "first": self.first,
                "unit_mask": self.unit_mask, "span_batch": self.span_batch, "spans": self.spans,
                "pairs": self.pairs, "shapes": self.shapes}

    def to(self, device, non_blocking: bool = False) -> "SpanBatch":
        return SpanBatch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                            for f in fields(self)})

    def __len__(self) -> int:
        return len(self.index)


def collate_spans(examples: list[SpanExample], index: list[int], pad_id: int,
                  relations: int) -> SpanBatch:
    b = len(examples)
    t = max([len(x.ids) for x in examples] + [1])
    u = max([len(x.first) for x in examples] + [1])
    ids = np.full((b, t), pad_id, dtype=np.int64)
    first = np.zeros((b, u), dtype=np.int64)
    for i, x in enumerate(examples):
        ids[i, :len(x.ids)] = x.ids
        first[i, :len(x.first)] = x.first
    lengths = np.array([len(x.ids) for x in examples])
    units = np.array([len(x.first) for x in examples])
    tags = np.full((b, u), -100, dtype=np.int64)
    shapes = np.zeros((b, u), dtype=np.int64)
    for i, x in enumerate(examples):
        if x.tags is not None:
            tags[i, :len(x.tags)] = x.tags
        if x.shapes is not None:
            shapes[i, :len(x.shapes)] = x.shapes
    offsets = np.cumsum([0] + [len(x.spans) for x in examples])[:-1]
    pairs = [x.pairs + off for x, off in zip(examples, offsets)]
    return SpanBatch(
        torch.from_numpy(ids), torch.from_numpy(np.arange(t)[None, :] < lengths[:, None]),
        torch.from_numpy(first), torch.from_numpy(np.arange(u)[None, :] < units[:, None]),
        torch.from_numpy(np.repeat(np.arange(b), [len(x.spans) for x in examples])),
        torch.from_numpy(cat([x.spans for x in examples], (0, 2), np.int64)),
        torch.from_numpy(cat([x.span_labels for x in examples], (0,), np.int64)),
        torch.from_numpy(cat(pairs, (0, 2), np.int64)),
        torch.from_numpy(cat([x.pair_labels for x in examples], (0, relations), np.float32)),
        torch.tensor(index, dtype=torch.int64), torch.from_numpy(tags), torch.from_numpy(shapes))


def cat(parts: list, shape: tuple, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(shape, dtype=dtype)


class SpanDataset:
    """The examples of one split for the trainer's sampler (``lengths``: units) and for scoring;
    ``sentences``: their gold (or unlabelled) ``Annotated``, in the same order."""

    task = "extract"

    def __init__(self, examples: list[SpanExample], sentences: list[Annotated], pad_id: int,
                 entity_types: list[str], relation_names: list[str], flat: bool = False,
                 symmetric: frozenset[str] = frozenset(), tune: bool = False):
        self.examples, self.sentences, self.pad_id = examples, sentences, pad_id
        self.entity_types, self.relation_names = entity_types, relation_names
        self.relations = len(relation_names)
        # flat: overlapping answers are dropped; tune: scoring this split chooses the model's
        # relation thresholds (the validation split, extract.tune_thresholds)
        self.flat, self.symmetric, self.tune = flat, symmetric, tune
        self.lengths = np.array([max(len(x.first), 1) for x in examples], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.examples)

    def batch(self, indices) -> SpanBatch:
        idx = [int(i) for i in indices]
        return collate_spans([self.examples[i] for i in idx], idx, self.pad_id, self.relations)

    def __getitems__(self, indices):
        if isinstance(indices, StepIndices):
            # the loss is per example: its normaliser is the global batch's size
            return Step([self.batch(m) for m in indices.micro],
                        torch.zeros(len(indices.global_index), dtype=torch.int64), indices.dummy)
        return self.batch(indices)


def lowercase_ids(vocab, tokens: list[str]) -> list[int]:
    return vocab.encode(list(map(str.lower, tokens)))
