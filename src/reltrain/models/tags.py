"""A tagger's mentions (``extract.mentions=tags``) from its units' tag logits: what prediction
answers and what training takes its negative pairs from (``models.negatives``). Tags: 0
outside, 2t - 1 the first unit of a mention of type t, 2t a later unit."""

from __future__ import annotations

import numpy as np
import torch


def tagged_mentions(logits: torch.Tensor, unit_mask: torch.Tensor):
    """A tagger's mentions, (N,) example, (N, 2) unit span, (N,) score and (N,) type + 1, from
    its (B, U, 2E+1) logits: the tags are each sentence's most probable sequence in which a
    later unit of a type follows a unit of that type (``best_tags``); a mention is a first unit
    and the later units after it. Its score is its units' mean tag probability."""
    log_probs = torch.log_softmax(logits, -1)
    tag = best_tags(log_probs, unit_mask)
    probs = log_probs.gather(-1, tag.unsqueeze(-1)).squeeze(-1).exp()
    tag = tag.masked_fill(~unit_mask, 0)
    kind = (tag + 1) // 2
    begins = tag % 2 == 1  # the tags obey the rule: every later unit continues a mention
    width = tag.size(1)
    inside = torch.nonzero((tag > 0).flatten()).flatten()
    owner = torch.cumsum(begins.flatten(), 0)[inside] - 1  # the mention of each tagged unit
    starts = torch.nonzero(begins.flatten()).flatten()
    n = len(starts)
    last = torch.zeros(n, dtype=torch.long, device=tag.device).scatter_reduce_(
        0, owner, inside, "amax", include_self=False)
    score = torch.zeros(n, device=tag.device).index_add_(0, owner, probs.flatten()[inside])
    score = score / torch.bincount(owner, minlength=n).clamp(min=1)
    spans = torch.stack([starts % width, last % width + 1], 1)
    return starts // width, spans, score, kind.flatten()[starts]


def best_each(owner: torch.Tensor, score: torch.Tensor, limit: int, examples: int) -> torch.Tensor:
    """(K,) positions of the ``limit`` best-scoring items of each example (ties: the earlier),
    by example, then best first: for the whole batch at once, not a step per example."""
    order = torch.argsort(score, descending=True, stable=True)
    order = order[torch.argsort(owner[order], stable=True)]
    counts = torch.bincount(owner, minlength=examples)
    rank = torch.arange(len(order), device=owner.device) - (torch.cumsum(counts, 0) - counts)[owner[order]]
    return order[rank < limit]


def best_tags(log_probs: torch.Tensor, unit_mask: torch.Tensor) -> torch.Tensor:
    """(B, U) the most probable tags (Viterbi over the units' own log-probabilities, no learnt
    transitions) among the sequences where every later unit of type t (tag 2t) follows a unit
    of type t. The units' best tags one by one broke a name in pieces where its units disagreed
    on the type or a middle unit was outside: on DuIE over a third of the wrong triples held
    a one-character "mention" such as 乌 of 乌兰图雅 (8 of 3,862 gold mentions are one). A sentence
    whose best tags one by one already obey the rule keeps them (they are then the best
    sequence); the others are decoded together on the CPU, where a step is a few small array
    operations rather than a tensor kernel each."""
    tag = log_probs.argmax(-1).masked_fill(~unit_mask, 0)
    kind = (tag + 1) // 2
    before = torch.nn.functional.pad(kind, (1, 0))[:, :-1]
    broken = ((tag > 0) & (tag % 2 == 0) & (kind != before)).any(1)
    if not bool(broken.any()):
        return tag
    rows = torch.nonzero(broken).flatten()
    lengths = unit_mask[rows].sum(1)
    width = int(lengths.max())
    fixed = _viterbi(log_probs[rows, :width].float().cpu().numpy(), lengths.cpu().numpy())
    tag[rows, :width] = torch.from_numpy(fixed).to(tag.device)
    return tag


def _viterbi(lp: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``best_tags`` of (B, U, K) log-probabilities: for a first unit or outside, the best tag
    before is any tag's best; for a later unit of type t, the better of t's first and later."""
    b, u, k = lp.shape
    lp = lp.copy()
    pad = np.arange(u)[None, :] >= lengths[:, None]
    lp[pad] = -np.inf
    lp[pad, 0] = 0.0  # padding: outside at no cost, which any tag may precede
    score = lp[:, 0].copy()
    score[:, 2::2] = -np.inf  # no sentence begins with a later unit
    rows = np.arange(b)
    best_before = np.zeros((u, b), dtype=np.int64)
    from_first = np.zeros((u, b, (k - 1) // 2), dtype=bool)
    for i in range(1, u):
        best_before[i] = arg = score.argmax(1)
        firsts, laters = score[:, 1::2], score[:, 2::2]
        from_first[i] = first = firsts >= laters
        new = lp[:, i] + score[rows, arg][:, None]
        new[:, 2::2] = np.where(first, firsts, laters) + lp[:, i, 2::2]
        score = new
    tags = np.zeros((b, u), dtype=np.int64)
    at = score.argmax(1)
    for i in range(u - 1, 0, -1):
        tags[:, i] = at
        later = (at > 0) & (at % 2 == 0)
        came = np.where(from_first[i, rows, np.maximum(at // 2 - 1, 0)], at - 1, at)
        at = np.where(later, came, best_before[i])
    tags[:, 0] = at
    return tags
