"""The span model of the extraction task (SpERT's design, Eberts & Ulges 2020): one encoder reads
the sentence; every span of at most W units is classified as an entity type or none (its first
and last unit, their max pool and a width embedding); every ordered pair of entities is scored
for each relation with one sigmoid (the two spans and the max pool of the units between them),
so a pair may carry several relations or none. B batch, T tokens, U units, H width, N spans,
M pairs, E entity types, R relations."""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from reltrain.models.dropout import ExampleDropout
from reltrain.models.lm import quiet_transformers
from reltrain.models.negatives import negative_mentions


# index_reduce_ (``_pieces``: 3-10 times the speed of a table over every unit) says once that it
# is "beta"; a filter here rather than around each call, which would not be thread-safe (serve)
warnings.filterwarnings("ignore", r"index_reduce\(\) is in beta", UserWarning)

SHAPES = 7  # the shape embedding's rows: 0 padding, then data.spans.unit_shape's six


class RangeMax:
    """Max over any unit range [s, e) of each example in two lookups (a sparse table: the max
    of every 2^k units), so spans and the context between two spans cost no loop over them.
    ``edges``: (example, position) of every start and end a range will have, where they are
    known (prediction: the chosen mentions'); the table is then over the pieces between
    consecutive edges, each piece's max taken in one pass (a DuIE sentence of 67 units has
    about 10), not over every unit. The same maxima, exactly."""

    def __init__(self, h: torch.Tensor, edges: tuple[torch.Tensor, torch.Tensor] | None = None):
        # no mask for padding: a range [s, e) is read from the maxima of [s, s + 2^k) and
        # [e - 2^k, e), both inside it, so a unit past a sentence's end never enters one
        self.rank = None
        if edges is not None:
            h, self.rank = _pieces(h, *edges)
        self.levels = [h]
        width = 1
        while 2 * width <= h.size(1):
            prev = self.levels[-1]
            self.levels.append(torch.maximum(prev[:, :-width], prev[:, width:]))
            width *= 2

    def __call__(self, batch: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """(K, H) max of units [start, end) of example ``batch``; zeros where the range is empty."""
        if self.rank is not None:  # the pieces [start, end) covers (a range's edges are edges)
            start, end = self.rank[batch, start], self.rank[batch, end]
        empty = end <= start
        start, end = torch.where(empty, 0, start), torch.where(empty, 1, end)
        level = torch.floor(torch.log2((end - start).float())).long()
        out = torch.zeros(len(batch), self.levels[0].size(-1), dtype=self.levels[0].dtype,
                          device=start.device)
        for k in level.unique().tolist():
            pick = level == k
            table = self.levels[k]
            b, s, e = batch[pick], start[pick], end[pick]
            out[pick] = torch.maximum(rows_at(table, b, s), rows_at(table, b, e - (1 << k)))
        return torch.where(empty.unsqueeze(-1), torch.zeros_like(out), out)


def _pieces(h: torch.Tensor, batch: torch.Tensor, at: torch.Tensor):
    """(B, P, H) the max of each piece of units between consecutive ``at`` of each example (a
    piece from its edge to the next; units before the first edge are in none) and (B, U + 1)
    each position's piece: the edges before it."""
    b, u, width = h.shape
    edge = torch.zeros(b, u + 1, dtype=torch.bool, device=h.device)
    edge[batch, at] = True
    seen = torch.cumsum(edge, 1)
    count = int(seen[:, -1].max()) if b else 0
    owner = seen[:, :u] - 1  # each unit's piece; before the first edge a spare one, dropped
    owner = torch.where(owner < 0, count, owner) + torch.arange(b, device=h.device)[:, None] * (count + 1)
    table = h.new_full((b * (count + 1), width), float("-inf")).index_reduce_(
        0, owner.flatten(), h.reshape(-1, width), "amax")
    return table.view(b, count + 1, width)[:, :count], seen - edge.long()


def rows_at(h: torch.Tensor, batch: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """(K, H) ``h[batch, at]`` of ``h`` (B, T, H) as one ``index_select`` over the flattened
    rows. Training reads a unit for many spans: indexing's backward adds those gradients with
    atomics across a CPU's threads in a varying order (300 backward passes of a CoNLL04 batch's
    2,000 spans gave 127 different gradients, so two runs of one seed trained two models);
    ``index_select``'s adds them in index order."""
    return h.reshape(-1, h.size(-1)).index_select(0, batch * h.size(1) + at)


def take_rows(h: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, K, H) rows ``index`` (B, K) of each example of ``h`` (B, T, H): ``gather`` with an
    expanded index, as one ``index_select`` over the flattened rows, which copies whole rows
    (on a CPU 13-55 times faster than the gather, which took a seventh of a DuIE prediction)."""
    batch = torch.arange(h.size(0), device=index.device)[:, None].expand_as(index)
    return rows_at(h, batch.flatten(), index.flatten()).view(h.size(0), -1, h.size(-1))


class SpanRelationModel(nn.Module):
    def __init__(self, encoder: nn.Module, hidden: int, num_types: int, num_relations: int,
                 max_width: int, width_dim: int = 25, dropout: float = 0.1,
                 threshold: float = 0.5, tags: bool = False, shapes: int = 0,
                 negatives: int = 0, context_layers: int = 0):
        super().__init__()
        self.negatives = negatives  # training only: nothing of it is saved
        # Each relation's threshold: saved with the weights, so the checkpoint that validation
        # selected answers with the thresholds validation chose for it.
        self.register_buffer("thresholds", torch.full((num_relations,), threshold))
        self.encoder = encoder  # (ids, mask, noise) -> (B, T, hidden)
        if shapes:  # extract.shapes; zeros at first, so training starts from the encoder alone
            self.shape = nn.Embedding(shapes, hidden)
            nn.init.zeros_(self.shape.weight)
        if context_layers:  # its output added to the states: a word reads its neighbours again
            self.context = nn.LSTM(hidden, hidden // 2, num_layers=context_layers,
                                   batch_first=True, bidirectional=True)
        self.width = nn.Embedding(max_width + 1, width_dim)
        span_dim = 3 * hidden + width_dim
        self.span_dropout = ExampleDropout(dropout, stream=11)
        # extract.mentions: every candidate span classified (spans), or each unit tagged (tags:
        # outside, or the first or a later unit of a mention of each type)
        if tags:
            self.tagger = nn.Linear(hidden, 2 * num_types + 1)
        else:
            self.span_classifier = nn.Linear(span_dim, num_types + 1)
        self.pair_classifier = nn.Linear(2 * span_dim + hidden, num_relations)

    @property
    def embed(self) -> nn.Module:
        """The word embedding's home (``embed.word``) where the encoder is reltrain's own: the
        sparse-update code finds it here."""
        return self.encoder.embed

    def units(self, ids, mask, first, unit_mask, noise=None, shapes=None) -> torch.Tensor:
        states = self.encoder(ids, mask, noise)
        if not self.encoder.one_token_a_unit:  # each unit reads its first subword's state
            states = take_rows(states, first)  # (B, U, H)
        if hasattr(self, "shape"):
            states = states + self.shape(shapes)
        if hasattr(self, "context"):
            states = states + self._context(states, unit_mask)
        return states * unit_mask.unsqueeze(-1)

    def _context(self, states, unit_mask) -> torch.Tensor:
        """extract.context_layers: a BiLSTM over the units' states, each sentence read within
        its length (packed: padding never reaches a unit from either side)."""
        lengths = unit_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(states, lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self.context(packed)
        out = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=states.size(1))[0]
        return F.pad(out, (0, states.size(-1) - out.size(-1)))  # an odd width: one unit short

    def span_reps(self, states, span_batch, spans,
                  chosen: bool = False) -> tuple[torch.Tensor, RangeMax]:
        """``chosen``: the spans are the only ones whose pairs will be scored (prediction's
        mentions), so the table need only hold the pieces between their edges."""
        table = RangeMax(states, (span_batch.repeat(2), spans.T.flatten()) if chosen else None)
        start, end = spans[:, 0], spans[:, 1]
        pooled = table(span_batch, start, end)
        reps = torch.cat([rows_at(states, span_batch, start), rows_at(states, span_batch, end - 1),
                          pooled, self.width((end - start).clamp(max=self.width.num_embeddings - 1))],
                         -1)
        return reps, table

    def span_logits(self, states, span_batch, spans) -> torch.Tensor:
        """(N, E+1): ``span_classifier(span_reps(...))`` of the given spans without building
        their (N, 3H + width) representations, the cost of prediction (DuIE: 958 candidates a
        sentence, 15 times its units). The classifier is linear, so a span's logits are the sum
        of its parts' projections: the first and last units' made once per unit, the width's
        once per width, the max pool's once per unit and width (grown a unit at a time)."""
        b, u, h = states.shape
        w_ends, w_pool, w_width = self.span_classifier.weight.split(
            [2 * h, h, self.width.embedding_dim], -1)
        start, end = spans[:, 0], spans[:, 1]
        width = end - start
        widest = int(width.max()) if len(width) else 1
        pooled = [states]  # pooled[w - 1][:, s] = the max of units s .. s + w - 1
        for w in range(2, widest + 1):
            pooled.append(torch.cat([torch.maximum(pooled[-1][:, :u - w + 1], states[:, w - 1:]),
                                     states[:, :w - 1]], 1))  # (the tail is never a span)
        pool = F.linear(torch.stack(pooled, 1), w_pool)  # (B, W, U, E+1)
        ends = F.linear(states, torch.cat(w_ends.split(h, -1)))  # (B, U, 2 (E+1))
        c = pool.size(-1)
        return (pool[span_batch, width - 1, start].float()
                + ends[span_batch, start, :c].float() + ends[span_batch, end - 1, c:].float()
                + F.linear(self.width.weight, w_width, self.span_classifier.bias)[
                    width.clamp(max=self.width.num_embeddings - 1)].float())

    def pair_logits(self, reps, table: RangeMax, span_batch, spans, pairs) -> torch.Tensor:
        """``pair_classifier([head rep, tail rep, context])`` of each pair, by parts as
        ``span_logits``: each span of a pair is projected once as a head and once as a tail,
        not once for each of its pairs (with DuIE's tagger the (M, 2 x 793 + 256)
        concatenation and its product cost 12% of prediction); spans in no pair (a span
        model's other candidates in training) are not projected at all."""
        a, b = pairs[:, 0], pairs[:, 1]
        # the units strictly between the two spans, whichever comes first
        between_start = torch.minimum(spans[a, 1], spans[b, 1])
        between_end = torch.maximum(spans[a, 0], spans[b, 0])
        context = table(span_batch[a], between_start, between_end)
        d, r = reps.size(-1), self.pair_classifier.out_features
        w_head, w_tail, w_context = self.pair_classifier.weight.split(
            [d, d, context.size(-1)], -1)
        used, local = torch.unique(pairs, return_inverse=True)
        ends = F.linear(reps[used], torch.cat([w_head, w_tail]))  # (spans in a pair, 2R)
        return (ends.index_select(0, local[:, 0])[:, :r]
                + ends.index_select(0, local[:, 1])[:, r:]
                + F.linear(context, w_context, self.pair_classifier.bias))

    @property
    def tags(self) -> bool:
        return hasattr(self, "tagger")

    def forward(self, ids, mask, first, unit_mask, span_batch, spans, pairs, noise=None,
                shapes=None):
        """(entity logits, pair logits (M, R)) of the given spans and pairs: the entity logits
        are the spans' (N, E+1), or with a tagger the units' tags' (B, U, 2E+1). A tagger in
        training (``noise``) with ``negatives`` scores more pairs than given
        (``models.negatives``): the given ones first, and the example of every pair third."""
        states = self.units(ids, mask, first, unit_mask, noise, shapes)
        known = len(pairs)
        if self.tags:
            entity_logits = self.tagger(states if noise is None else self.span_dropout(states, noise))
            if noise is not None and self.negatives:
                span_batch, spans, more = negative_mentions(entity_logits, unit_mask, span_batch,
                                                            spans, self.negatives)
                pairs = torch.cat([pairs, more])
        reps, table = self.span_reps(states, span_batch, spans)
        if noise is not None:
            reps = self.span_dropout(reps, noise, rows=span_batch)
        if not self.tags:
            entity_logits = self.span_classifier(reps)
        pair_logits = self.pair_logits(reps, table, span_batch, spans, pairs)
        if len(pairs) == known:
            return entity_logits, pair_logits
        return entity_logits, pair_logits, span_batch[pairs[:, 0]]


def span_loss(span_logits, pair_logits, batch, normaliser: float,
              entity_weight: float = 0.05, pair_owner=None) -> torch.Tensor:
    """Each example's mean span cross-entropy, plus ``entity_weight`` times its mean over the
    entity spans alone (about 2% of the candidates: without it the model learns to answer "no
    entity"), plus its mean pair binary cross-entropy (summed over relations); summed over the
    batch and divided by ``normaliser`` (the global batch's examples), so a global batch's
    gradient is the same however it is split. ``pair_owner``: the example of each pair where the
    model scored more pairs than the batch gives (the batch's first, the others relating to
    nothing)."""
    n = len(batch.index)
    if span_logits.dim() == 3:  # a tagger's: each example's mean over its units
        per_unit = F.cross_entropy(span_logits.flatten(0, 1), batch.tags.flatten(),
                                   ignore_index=-100, reduction="none").view_as(batch.tags)
        tagged = (batch.tags != -100).sum(1).clamp(min=1)
        loss = (per_unit.sum(1) / tagged).sum()
    else:
        loss = _span_part(span_logits, batch, n, entity_weight)
    if len(pair_logits):
        labels, owner = batch.pair_labels, pair_owner
        if owner is None:
            owner = batch.span_batch[batch.pairs[:, 0]]
        else:
            labels = F.pad(labels, (0, 0, 0, len(pair_logits) - len(labels)))
        per_pair = F.binary_cross_entropy_with_logits(pair_logits, labels,
                                                      reduction="none").sum(-1)
        pairs_each = torch.zeros(n, device=per_pair.device).index_add_(0, owner, per_pair)
        loss = loss + (pairs_each / torch.bincount(owner, minlength=n).clamp(min=1)).sum()
    return loss / normaliser


def _span_part(span_logits, batch, n: int, entity_weight: float) -> torch.Tensor:
    per_span = F.cross_entropy(span_logits, batch.span_labels, reduction="none")
    loss = per_span.new_zeros(())
    every = torch.ones_like(batch.span_labels, dtype=torch.bool)
    for part, weight in ((every, 1.0), (batch.span_labels > 0, entity_weight)):
        owner = batch.span_batch[part]
        each = torch.zeros(n, device=per_span.device).index_add_(0, owner, per_span[part])
        loss = loss + weight * (each / torch.bincount(owner, minlength=n).clamp(min=1)).sum()
    return loss


class WordEncoder(nn.Module):
    """reltrain's own token encoder for spans: word (or character) embeddings and a BiLSTM."""

    one_token_a_unit = True  # its tokens are the units: no gather of each unit's first token

    def __init__(self, vocab_size: int, word_dim: int, hidden: int, layers: int, dropout: float):
        super().__init__()
        self.embed = nn.Module()  # where the sparse-update code finds it: model.embed.word
        self.embed.word = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.rnn = nn.LSTM(word_dim, hidden // 2, num_layers=layers, batch_first=True,
                           bidirectional=True)
        self.dropout = ExampleDropout(dropout, stream=3)
        self.hidden = hidden

    def forward(self, ids, mask, noise=None):
        if noise is None and not torch.is_grad_enabled() and self.rnn.num_layers == 1:
            return self._both_ways(ids, mask)
        x = self.dropout(self.embed.word(ids), noise)
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.size(1))
        return out

    def _both_ways(self, ids, mask) -> torch.Tensor:
        """The packed result (to rounding) without packing, which cost a quarter of the
        encoder's time in prediction: each direction runs over the padded batch, the backward
        one over each sentence reversed within its length, so padding never reaches a unit.
        Time first, the LSTM's own layout (its input and output are not transposed), and the
        embeddings cast to autocast's type once (not once a direction)."""
        rnn, (b, t), device = self.rnn, ids.shape, ids.device.type
        x = self.embed.word(ids.T)  # (T, B, D)
        if torch.is_autocast_enabled(device):  # the rows, not the table: a word vocabulary is large
            x = x.to(torch.get_autocast_dtype(device))
        lengths = mask.sum(1).clamp(min=1)
        at = torch.arange(t, device=ids.device)[:, None]
        back = torch.where(at < lengths, lengths - 1 - at, at)  # (T, B)
        start = x.new_zeros(1, b, rnn.hidden_size)

        def run(inputs, direction: str) -> torch.Tensor:
            params = [getattr(rnn, f"{name}_l0{direction}")
                      for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            return torch.lstm(inputs, (start, start), params, True, 1, 0.0, False, False, False)[0]

        def reverse(h: torch.Tensor) -> torch.Tensor:  # h[back[t, b], b] at [t, b]
            rows = (back * b + torch.arange(b, device=h.device)).flatten()
            return h.flatten(0, 1).index_select(0, rows).view(t, b, -1)

        forward, backward = run(x, ""), reverse(run(reverse(x), "_reverse"))
        # (B, T, 2H), its padding zeroed by ``units``
        return torch.cat([forward.transpose(0, 1), backward.transpose(0, 1)], -1)


class PretrainedEncoder(nn.Module):
    """A Hugging Face encoder's last hidden states (dropout inside it is its own)."""

    one_token_a_unit = False

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config  # models.model_hf_config reads it: a folder rebuilds from it
        self.hidden = model.config.hidden_size

    def forward(self, ids, mask, noise=None):
        return self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state


def build_span_model(model_cfg, extract_cfg, vocab_size: int, num_types: int,
                     num_relations: int, hf_config: dict | None = None) -> SpanRelationModel:
    """reltrain's BiLSTM over units, or (``model.name=lm``) a pretrained encoder: from
    ``model.lm.pretrained`` when training, from ``hf_config`` when loading a model folder."""
    if model_cfg.name == "lm":
        from transformers import AutoConfig, AutoModel

        with quiet_transformers():
            if hf_config is None:
                model = AutoModel.from_pretrained(model_cfg.lm.pretrained, local_files_only=True)
            else:
                config = dict(hf_config)
                model = AutoModel.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
        model = model.float()
        if getattr(model, "pooler", None) is not None:
            model.pooler = None  # unused: parameters without gradients would stall DDP
        encoder = PretrainedEncoder(model)
        dropout = model_cfg.lm.dropout
    else:
        encoder = WordEncoder(vocab_size, model_cfg.word_dim, extract_cfg.hidden, 1,
                              model_cfg.dropout)
        dropout = model_cfg.dropout
    return SpanRelationModel(encoder, encoder.hidden, num_types, num_relations,
                             extract_cfg.max_width, dropout=dropout,
                             threshold=extract_cfg.threshold,
                             tags=extract_cfg.mentions == "tags",
                             shapes=SHAPES if extract_cfg.shapes else 0,
                             negatives=extract_cfg.negatives,
                             context_layers=extract_cfg.context_layers)
