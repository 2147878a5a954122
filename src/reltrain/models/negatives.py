"""Negative pairs in training (``extract.negatives``): a tagger's own mentions that are no gold
entity, paired with the sentence's other mentions and labelled with no relation. Trained on
the gold mentions' pairs alone, the pair classifier never saw a mention that relates to
nothing, yet in prediction it pairs whatever the model answers: on DuIE, which marks only the
entities of its triples, 734 of a model's 814 wrong triples held a string that is no gold
entity. Each is a function of the example and the weights alone, so a global batch's gradient
does not change with where its examples run. A span classifier's own entities as negatives
(tried on CoNLL04) cost it entities and relations: docs/extraction.md."""

from __future__ import annotations

import torch

from reltrain.models.tags import best_each, tagged_mentions


@torch.no_grad()
def negative_mentions(logits: torch.Tensor, unit_mask: torch.Tensor, span_batch: torch.Tensor,
                      spans: torch.Tensor, limit: int):
    """The tagger's mentions (decoded from its (B, U, 2E+1) logits as prediction decodes them)
    that are no gold span, at most ``limit`` an example (best first), appended to the
    batch's (N,) ``span_batch`` and (N, 2) ``spans`` (all gold); and their (P, 2) pairs."""
    owner, found, score, _ = tagged_mentions(logits.float(), unit_mask)
    u = unit_mask.size(1) + 1
    gold_keys = (span_batch * u + spans[:, 0]) * u + spans[:, 1]
    new = ~torch.isin((owner * u + found[:, 0]) * u + found[:, 1], gold_keys)
    keep = best_each(owner[new], score[new], limit, unit_mask.size(0))
    owner, found = owner[new][keep], found[new][keep]
    n = len(spans)
    every = torch.cat([span_batch, owner])
    gold = torch.arange(n, device=spans.device)
    pairs = _pairs(every, gold, torch.arange(n, n + len(owner), device=spans.device))
    return every, torch.cat([spans, found]), pairs


def _pairs(span_batch: torch.Tensor, gold: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """(P, 2) every ordered pair of one example's spans in which a ``new`` one takes part."""
    members = torch.cat([gold, new])
    same = span_batch[members][:, None] == span_batch[new][None, :]  # (G + X, X)
    x = torch.arange(len(new), device=new.device)
    same[len(gold) + x, x] = False
    any_span, tail = torch.nonzero(same, as_tuple=True)  # every pair whose tail is new
    head_gold, head = torch.nonzero(same[:len(gold)], as_tuple=True)  # a new head, a gold tail
    return torch.cat([torch.stack([members[any_span], new[tail]], 1),
                      torch.stack([new[head], gold[head_gold]], 1)])
