"""From the span model's scores to answers: every candidate span whose best class is an entity
type is a mention (nested and overlapping ones too), at most ``MAX_MENTIONS`` a sentence by
score; every ordered pair of them is scored, and each relation whose probability reaches its
threshold is an answer (several on one pair, or none)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.spans import SpanBatch, SpanExample

MAX_MENTIONS = 30  # mentions scored as pairs per sentence: its pairs grow with the square


class Answer(NamedTuple):
    sentence: Annotated  # the input's text and id with the predicted entities and relations
    entity_scores: list[float]
    relation_scores: list[float]


@torch.no_grad()
def decode(model, batch: SpanBatch, examples: list[SpanExample], sentences: list[Annotated],
           entity_types: list[str], relations: list[str], thresholds: np.ndarray,
           precision=None) -> list[Answer]:
    """The answers of one batch, in its order."""
    from reltrain.runtime.precision import FP32

    device = batch.ids.device
    with (precision or FP32).autocast(device):
        states = model.units(batch.ids, batch.mask, batch.first, batch.unit_mask)
        reps, table = model.span_reps(states, batch.unit_mask, batch.span_batch, batch.spans)
        probs = torch.softmax(model.span_classifier(reps).float(), -1)
    score, kind = probs.max(-1)
    chosen = []  # per example: indices into the batch's spans
    for b in range(len(examples)):
        mine = torch.nonzero((batch.span_batch == b) & (kind > 0)).flatten()
        order = torch.argsort(score[mine], descending=True, stable=True)[:MAX_MENTIONS]
        chosen.append(torch.sort(mine[order]).values)
    pairs = [torch.cartesian_prod(c, c) for c in chosen if len(c) > 1]
    pairs = torch.cat(pairs) if pairs else torch.zeros(0, 2, dtype=torch.long, device=device)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    with (precision or FP32).autocast(device):
        pair_probs = torch.sigmoid(model.pair_logits(reps, table, batch.span_batch, batch.spans,
                                                     pairs).float())
    return _answers(batch, examples, sentences, chosen, score, kind, pairs, pair_probs,
                    entity_types, relations, thresholds)


def _answers(batch, examples, sentences, chosen, score, kind, pairs, pair_probs, entity_types,
             relations, thresholds) -> list[Answer]:
    spans, score, kind = batch.spans.cpu().numpy(), score.cpu().numpy(), kind.cpu().numpy()
    pairs, pair_probs = pairs.cpu().numpy(), pair_probs.cpu().numpy()
    owner = batch.span_batch.cpu().numpy()
    hits = pair_probs >= thresholds[None, :]
    out = []
    for b, (example, sentence) in enumerate(zip(examples, sentences)):
        index = {int(k): i for i, k in enumerate(chosen[b].cpu().numpy())}
        entities = tuple(Span(int(example.units[spans[k, 0], 0]), int(example.units[spans[k, 1] - 1, 1]),
                              entity_types[kind[k] - 1]) for k in index)
        ent_scores = [float(score[k]) for k in index]
        links, link_scores = [], []
        for m in np.nonzero(owner[pairs[:, 0]] == b)[0] if len(pairs) else ():
            for r in np.nonzero(hits[m])[0]:
                links.append(Link(index[int(pairs[m, 0])], index[int(pairs[m, 1])], relations[r]))
                link_scores.append(float(pair_probs[m, r]))
        answer = Annotated(sentence.text, entities, tuple(links), sentence.source, sentence.tokens,
                           sentence.id, sentence.strings)
        out.append(Answer(answer, ent_scores, link_scores))
    return out


def gathered_answers(model, dataset, batch_size: int, ctx, precision=None,
                     progress: bool = False, desc: str = "eval") -> list[Answer]:
    """Every sentence's answer in the split's order, on every rank: under DDP each rank decodes
    every W-th of the same length-sorted batches and the answers are gathered, so they are one
    process's exactly. ``model`` unwrapped."""
    from tqdm.auto import tqdm

    from reltrain.data.dataset import eval_batches

    batches = eval_batches(dataset.lengths, batch_size)
    mine = batches[ctx.rank::ctx.world_size] if ctx.distributed else batches
    was_training = model.training
    model.eval()
    local = []
    for indices in tqdm(mine, desc=desc, disable=not progress, unit="batch", leave=False):
        batch = dataset.batch(indices).to(ctx.device)
        answers = decode(model, batch, [dataset.examples[i] for i in indices],
                         [dataset.sentences[i] for i in indices], dataset.entity_types,
                         dataset.relation_names, dataset.thresholds, precision)
        local.extend(zip((int(i) for i in indices), answers))
    model.train(was_training)
    parts = ctx.all_gather_objects(local) if ctx.distributed else [local]
    ordered = sorted((pair for part in parts for pair in part), key=lambda pair: pair[0])
    assert [i for i, _ in ordered] == list(range(len(dataset))), "a sentence went missing"
    return [answer for _, answer in ordered]


def evaluate_spans(model, dataset, batch_size: int, ctx, progress: bool = False,
                   desc: str = "eval", precision=None) -> tuple[dict, list[Answer]]:
    """The extraction scores of ``model`` on a gold split, identical on every rank."""
    from reltrain.evaluation.extraction import extraction_metrics

    answers = gathered_answers(model, dataset, batch_size, ctx, precision, progress, desc)
    metrics = extraction_metrics(dataset.sentences, [a.sentence for a in answers],
                                 dataset.symmetric)
    return metrics, answers
