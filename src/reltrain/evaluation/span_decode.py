"""From the span model's scores to answers: every candidate span whose best class is an entity
type is a mention, at most ``MAX_MENTIONS`` a sentence by score; where the model decodes flat
(``extract.overlap``, resolved when it was trained), a mention that overlaps a better-scoring one
is dropped, else nested and overlapping ones are kept. Every ordered pair of mentions is scored, and
each relation whose probability reaches its threshold (the model's ``thresholds``) is an answer
(several on one pair, or none). Scoring the validation split may first choose those thresholds
(``extract.tune_thresholds``)."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import torch

from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.spans import SpanBatch
from reltrain.models.tags import best_each, tagged_mentions
from reltrain.runtime.precision import FP32
from reltrain.data.dataset import eval_batches
from reltrain.evaluation.extraction import extraction_metrics, tune_thresholds

MAX_MENTIONS = 30  # mentions scored as pairs per sentence: its pairs grow with the square
THRESHOLDS = np.round(np.arange(0.05, 0.951, 0.05), 2)  # what tuning chooses a relation's from


class Answer(NamedTuple):
    sentence: Annotated  # the input's text and id with the predicted entities and relations
    entity_scores: list[float]
    relation_scores: list[float]


@torch.no_grad()
def decode(model, dataset, indices, batch: SpanBatch, precision=None,
           floor: float | None = None) -> list[Answer]:
    """The answers of the sentences ``indices`` of ``dataset`` (a SpanDataset; ``batch``
    collated from them), in that order; ``floor``: every relation's threshold instead of the
    model's."""
    device = batch.ids.device
    with (precision or FP32).autocast(device):
        states = model.units(batch.ids, batch.mask, batch.first, batch.unit_mask,
                             shapes=batch.shapes)
        logits = (model.tagger(states) if model.tags
                  else model.span_logits(states, batch.span_batch, batch.spans))
    if model.tags:
        span_batch, spans, score, kind = tagged_mentions(logits.float(), batch.unit_mask)
    else:
        span_batch, spans = batch.span_batch, batch.spans
        score, kind = torch.softmax(logits.float(), -1).max(-1)
    examples = [dataset.examples[i] for i in indices]
    mentions = torch.nonzero(kind > 0).flatten()
    if dataset.flat and not model.tags:  # a tagger's mentions never overlap
        # the entity spans by example, best first within each: one sort for the batch
        mentions = mentions[torch.argsort(score[mentions], descending=True, stable=True)]
        mentions = mentions[torch.argsort(span_batch[mentions], stable=True)]
        counts = torch.bincount(span_batch[mentions], minlength=len(examples)).tolist()
        mentions = torch.cat([_without_overlaps(order, spans, MAX_MENTIONS)
                              for order in torch.split(mentions, counts)] or [mentions])
    else:
        mentions = mentions[best_each(span_batch[mentions], score[mentions], MAX_MENTIONS,
                                      len(examples))]
    # only the chosen mentions get representations, and the pairs index them; the spans are
    # in example order, so sorting them groups each example's, in span order
    kept = torch.sort(mentions).values
    kept_batch, kept_spans = span_batch[kept], spans[kept]
    counts = torch.bincount(kept_batch, minlength=len(examples))
    pairs = _pairs_within(counts)
    with (precision or FP32).autocast(device):
        reps, table = model.span_reps(states, kept_batch, kept_spans, chosen=True)
        pair_probs = torch.sigmoid(model.pair_logits(reps, table, kept_batch, kept_spans,
                                                     pairs).float())
    thresholds = (model.thresholds.float().cpu().numpy() if floor is None
                  else np.full(len(dataset.relation_names), floor, dtype=np.float32))
    return _answers(kept_spans, examples, [dataset.sentences[i] for i in indices],
                    counts.tolist(), score[kept], kind[kept], pairs, pair_probs,
                    dataset.entity_types, dataset.relation_names, thresholds, dataset.symmetric)


def _above(answer: Answer, at: dict[str, float]) -> Answer:
    """The answer with only the relations whose score reaches their relation's threshold."""
    keep = [i for i, (link, p) in enumerate(zip(answer.sentence.relations, answer.relation_scores))
            if p >= at[link.type]]
    sentence = replace(answer.sentence, relations=tuple(answer.sentence.relations[i] for i in keep))
    return Answer(sentence, answer.entity_scores, [answer.relation_scores[i] for i in keep])


def _firsts(counts: torch.Tensor) -> torch.Tensor:
    """Where each group of ``counts`` begins in their concatenation."""
    return torch.cumsum(counts, 0) - counts


def _pairs_within(counts: torch.Tensor) -> torch.Tensor:
    """(P, 2) every ordered pair of two different items within each group of ``counts``
    consecutive items (groups one after another, within a group by first item then second)."""
    squares = counts * counts
    owner = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), squares)
    local = torch.arange(len(owner), device=counts.device) - _firsts(squares)[owner]
    size, base = counts[owner], _firsts(counts)[owner]
    first, second = local // size, local % size
    keep = first != second
    return torch.stack([base[keep] + first[keep], base[keep] + second[keep]], 1)


def _without_overlaps(order: torch.Tensor, spans: torch.Tensor, limit: int) -> torch.Tensor:
    """The first ``limit`` spans of ``order`` (best first) that overlap no better one before them.
    Stopping there bounds the work on a long text with thousands of entity spans by ``limit``
    a span, not by the number kept."""
    taken, keep = [], []
    for k, (s, e) in zip(order.tolist(), spans[order].tolist()):
        if all(e <= ts or s >= te for ts, te in taken):
            taken.append((s, e))
            keep.append(k)
            if len(keep) == limit:
                break
    return order.new_tensor(keep, dtype=torch.long)


def _answers(spans, examples, sentences, counts, score, kind, pairs, pair_probs,
             entity_types, relations, thresholds, symmetric=frozenset()) -> list[Answer]:
    """Each example's ``Answer`` from its ``counts[b]`` mentions (``spans``, ``score``, ``kind``:
    the batch's mentions, example by example) and the pairs among them (``pairs`` index those
    mentions), each relation at its threshold. Python touches the mentions and the pairs'
    answered relations only, not every pair."""
    spans, score, kind = spans.cpu().numpy(), score.tolist(), kind.tolist()
    probs = pair_probs.cpu().numpy()
    pair_at, relation_at = np.nonzero(probs >= thresholds[None, :])  # by pair, then relation
    ends = pairs.cpu().numpy()[pair_at]
    offsets = np.cumsum([0] + counts)
    at = offsets.tolist()
    hits = [[] for _ in examples]  # each example's (head, tail, relation, probability)
    for (head, tail), r, p, b in zip(ends.tolist(), relation_at.tolist(),
                                     probs[pair_at, relation_at].tolist(),
                                     (np.searchsorted(offsets, ends[:, 0], "right") - 1).tolist()):
        hits[b].append((head - at[b], tail - at[b], r, p))
    out = []
    for b, (example, sentence) in enumerate(zip(examples, sentences)):
        lo, hi = at[b], at[b + 1]
        starts = example.units[spans[lo:hi, 0], 0].tolist()
        stops = example.units[spans[lo:hi, 1] - 1, 1].tolist()
        entities = tuple(Span(start, stop, entity_types[k - 1])
                         for start, stop, k in zip(starts, stops, kind[lo:hi]))
        found = {}  # a symmetric relation's pair once, in the order that scored higher
        for head, tail, r, p in hits[b]:
            key = (min(head, tail), max(head, tail), r) if relations[r] in symmetric else (head, tail, r)
            if key not in found or p > found[key][1]:
                found[key] = (Link(head, tail, relations[r]), p)
        answer = Annotated(sentence.text, entities, tuple(link for link, _ in found.values()),
                           sentence.source, sentence.tokens, sentence.id, sentence.strings)
        out.append(Answer(answer, score[lo:hi], [p for _, p in found.values()]))
    return out


def gathered_answers(model, dataset, batch_size: int, ctx, precision=None,
                     progress: bool = False, desc: str = "eval",
                     floor: float | None = None) -> list[Answer]:
    """Every sentence's answer in the split's order, on every rank: under DDP each rank decodes
    every W-th of the same length-sorted batches and the answers are gathered, so they are one
    process's exactly. ``model`` unwrapped."""
    from tqdm.auto import tqdm

    batches = eval_batches(dataset.lengths, batch_size)
    mine = batches[ctx.rank::ctx.world_size] if ctx.distributed else batches
    was_training = model.training
    model.eval()
    local = []
    for indices in tqdm(mine, desc=desc, disable=not progress, unit="batch", leave=False):
        batch = dataset.batch(indices).to(ctx.device)
        answers = decode(model, dataset, indices, batch, precision, floor)
        local.extend(zip((int(i) for i in indices), answers))
    model.train(was_training)
    parts = ctx.all_gather_objects(local) if ctx.distributed else [local]
    ordered = sorted((pair for part in parts for pair in part), key=lambda pair: pair[0])
    assert [i for i, _ in ordered] == list(range(len(dataset))), "a sentence went missing"
    return [answer for _, answer in ordered]


def evaluate_spans(model, dataset, batch_size: int, ctx, progress: bool = False,
                   desc: str = "eval", precision=None) -> tuple[dict, list[Answer]]:
    """The extraction scores of ``model`` on a gold split, identical on every rank; where the
    split is the one that tunes (validation), every relation's threshold is chosen first and
    kept in ``model.thresholds`` (the same on every rank: the answers are gathered)."""
    if dataset.tune:
        answers = gathered_answers(model, dataset, batch_size, ctx, precision, progress, desc,
                                   floor=float(THRESHOLDS[0]))
        chosen = tune_thresholds(dataset.sentences, [a.sentence for a in answers],
                                 [a.relation_scores for a in answers], dataset.relation_names,
                                 THRESHOLDS, dataset.symmetric)
        model.thresholds.copy_(torch.from_numpy(chosen))
        at = {name: float(t) for name, t in zip(dataset.relation_names, chosen)}
        answers = [_above(a, at) for a in answers]
    else:
        answers = gathered_answers(model, dataset, batch_size, ctx, precision, progress, desc)
    metrics = extraction_metrics(dataset.sentences, [a.sentence for a in answers],
                                 dataset.symmetric)
    return metrics, answers
