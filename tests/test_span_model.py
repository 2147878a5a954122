"""The span model of the extraction task: its range max is the plain max, its loss is the same
however a batch is split, and trained on a few sentences it answers them back (entities, and two
relations on one pair)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.extract_prepare import resolve_overlap
from reltrain.data.spans import (SpanDataset, SpanEncoder, candidate_spans, collate_spans,
                                 unit_shape)
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.evaluation.extraction import extraction_metrics, tune_thresholds
from reltrain.evaluation.span_decode import MAX_MENTIONS, _pairs_within, _without_overlaps, decode
from reltrain.models.negatives import negative_mentions
from reltrain.models.tags import best_tags, tagged_mentions
from reltrain.models.spans import (SHAPES, RangeMax, SpanRelationModel, WordEncoder, span_loss,
                                   take_rows)

TYPES, RELATIONS = ["Org", "Peop"], ["Kill", "Work_For"]


def sentences() -> list[Annotated]:
    def one(text, ents, links):
        spans = tuple(Span(text.index(name), text.index(name) + len(name), kind) for name, kind in ents)
        return Annotated(text, spans, tuple(Link(*k) for k in links), "t")
    return [one("Ann Lee works for Acme .", [("Ann Lee", "Peop"), ("Acme", "Org")], [(0, 1, "Work_For")]),
            one("Bo killed Cy at Zeta Corp .", [("Bo", "Peop"), ("Cy", "Peop"), ("Zeta Corp", "Org")],
                [(0, 1, "Kill"), (0, 1, "Work_For")]),  # two relations on one pair
            one("Nothing here .", [], []),
            one("Dee of Acme met Ann Lee .", [("Dee", "Peop"), ("Acme", "Org"), ("Ann Lee", "Peop")],
                [(0, 1, "Work_For")])]


def encoder(data, tags: bool = False, shapes: bool = False) -> tuple[SpanEncoder, Vocab]:
    tokenizer = Tokenizer("word")
    vocab = Vocab.build([[p[0] for p in tokenizer.pieces(s.text, set())] for s in data], 1)
    return SpanEncoder(tokenizer, TYPES, RELATIONS, 3, 100, to_ids=vocab.encode, tags=tags,
                       shapes=shapes), vocab


def test_a_unit_s_shape_is_what_lower_casing_loses():
    words = ["the", "John", "A", "IBM", "U.S.", "1990", "iPhone", ",", "北京"]
    assert [unit_shape(w) for w in words] == [1, 2, 2, 3, 3, 4, 5, 6, 6]
    assert max(unit_shape(w) for w in words) < SHAPES  # the model's embedding has a row each


def test_shapes_start_at_zero_and_then_tell_a_name_from_a_word():
    """extract.shapes: the batch carries each unit's shape (0 past its end); the model adds its
    embedding to the unit's state, nothing at first."""
    data = sentences()
    enc, vocab = encoder(data, shapes=True)
    batch = collate_spans([enc(s) for s in data], list(range(len(data))), 0, len(RELATIONS))
    assert batch.shapes[0].tolist() == [2, 2, 1, 1, 2, 6, 0]  # "Ann Lee works for Acme ." padded
    torch.manual_seed(0)
    plain = SpanRelationModel(WordEncoder(len(vocab), 8, 8, 1, 0.0), 8, len(TYPES), len(RELATIONS), 3)
    shaped = SpanRelationModel(WordEncoder(len(vocab), 8, 8, 1, 0.0), 8, len(TYPES), len(RELATIONS),
                               3, shapes=SHAPES)
    shaped.load_state_dict({**plain.state_dict(), "shape.weight": shaped.shape.weight})
    args = (batch.ids, batch.mask, batch.first, batch.unit_mask)
    with torch.no_grad():
        torch.testing.assert_close(shaped.units(*args, shapes=batch.shapes), plain.units(*args))
        torch.nn.init.normal_(shaped.shape.weight)
        states = shaped.units(*args, shapes=batch.shapes)
        assert not torch.allclose(states, plain.units(*args))
        assert not states[0, 6:].any()  # padding stays zero


@pytest.mark.parametrize("width", [8, 7])
def test_a_context_lstm_reads_each_sentence_within_its_length(width):
    """extract.context_layers: a sentence's units come out the same alone and beside a longer
    one (the BiLSTM never reads padding from either side), changed from the encoder's own, and
    zero past its end (an odd width too: the BiLSTM's output is one unit short)."""
    data = sentences()
    enc, vocab = encoder(data)
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 8, 8, 1, 0.0), width, len(TYPES),
                              len(RELATIONS), 3, context_layers=2).eval()
    if width == 7:  # the encoder's states narrowed to an odd width
        model.encoder.forward = lambda ids, mask, noise=None: WordEncoder.forward(
            model.encoder, ids, mask, noise)[..., :7]
        model.context = torch.nn.LSTM(7, 3, num_layers=2, batch_first=True, bidirectional=True)
    both = collate_spans([enc(data[2]), enc(data[1])], [0, 1], 0, len(RELATIONS))
    alone = collate_spans([enc(data[2])], [0], 0, len(RELATIONS))
    with torch.no_grad():
        padded = model.units(both.ids, both.mask, both.first, both.unit_mask)
        single = model.units(alone.ids, alone.mask, alone.first, alone.unit_mask)
        n = int(alone.unit_mask.sum())
        torch.testing.assert_close(padded[0, :n], single[0, :n])
        assert not padded[0, n:].any() and padded.size(-1) == width
        plain = model.encoder(alone.ids, alone.mask)
        assert not torch.allclose(single[0, :n], plain[0, :n])


def test_range_max_is_the_plain_max():
    torch.manual_seed(0)
    h = torch.randn(3, 13, 5)
    h[1, 9:] = 1e9  # example 1 ends at 9: what lies past it never enters a range of its own
    rows = [(b, s, e) for b in range(3) for s in range(14) for e in range(s, 14)
            if e <= (9 if b == 1 else 13) and s <= e]
    b, s, e = (torch.tensor(x) for x in zip(*rows))
    expected = torch.stack([h[i, j:k].amax(0) if k > j else torch.zeros(5) for i, j, k in rows])
    rows_all = rows
    assert torch.equal(RangeMax(h)(b, s, e), expected)
    # over the pieces between given edges: the same for every range between two of them
    edges = {0: [2, 5, 6, 13], 1: [0, 4, 9], 2: [3, 7, 8, 11]}
    rows = [(i, j, k) for i, j, k in rows if j in edges[i] and k in edges[i]]
    b, s, e = (torch.tensor(x) for x in zip(*rows))
    at = [(i, p) for i, ps in edges.items() for p in ps]
    pieces = RangeMax(h, tuple(torch.tensor(x) for x in zip(*at)))
    assert pieces.levels[0].shape == (3, 4, 5)  # example 0's four edges make four pieces
    assert torch.equal(pieces(b, s, e), torch.stack([expected[rows_all.index(r)] for r in rows]))
    assert candidate_spans(4, 2).tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3], [2, 4], [3, 4]]


def test_span_and_pair_scores_by_parts_are_the_classifiers_on_the_whole_input():
    data = sentences()
    enc, vocab = encoder(data)
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 8, 6, 1, 0.0), 6, len(TYPES),
                              len(RELATIONS), 3).eval()
    batch = collate_spans([enc(s) for s in data], list(range(len(data))), 0, len(RELATIONS))
    with torch.no_grad():
        states = model.units(batch.ids, batch.mask, batch.first, batch.unit_mask)
        reps, table = model.span_reps(states, batch.span_batch, batch.spans)
        expected = model.span_classifier(reps)
        got = model.span_logits(states, batch.span_batch, batch.spans)
        a, b = batch.pairs[:, 0], batch.pairs[:, 1]
        context = table(batch.span_batch[a], torch.minimum(batch.spans[a, 1], batch.spans[b, 1]),
                        torch.maximum(batch.spans[a, 0], batch.spans[b, 0]))
        pairs_expected = model.pair_classifier(torch.cat([reps[a], reps[b], context], -1))
        pairs_got = model.pair_logits(reps, table, batch.span_batch, batch.spans, batch.pairs)
    assert got.shape == expected.shape == (len(batch.spans), len(TYPES) + 1)
    assert set((batch.spans[:, 1] - batch.spans[:, 0]).tolist()) == {1, 2, 3}
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert pairs_got.shape == (len(batch.pairs), len(RELATIONS)) and len(batch.pairs) == 14
    torch.testing.assert_close(pairs_got, pairs_expected, rtol=1e-5, atol=1e-6)


def test_take_rows_is_the_gather_it_replaces_and_carries_its_gradient():
    torch.manual_seed(0)
    h = torch.randn(3, 7, 5, requires_grad=True)
    index = torch.randint(0, 7, (3, 4))  # repeats included, as padding's first units are
    expected = h.gather(1, index.unsqueeze(-1).expand(-1, -1, 5))
    torch.testing.assert_close(take_rows(h, index), expected, rtol=0, atol=0)
    weight = torch.randn(3, 4, 5)
    grad, = torch.autograd.grad((take_rows(h, index) * weight).sum(), h)
    torch.testing.assert_close(grad, torch.autograd.grad((expected * weight).sum(), h)[0])


def test_the_encoder_without_autograd_is_the_packed_one():
    torch.manual_seed(0)
    enc = WordEncoder(30, 8, 12, 1, 0.0)
    ids = torch.randint(1, 30, (4, 9))
    mask = torch.arange(9)[None] < torch.tensor([[9], [4], [1], [7]])
    ids = ids * mask
    packed = enc(ids, mask)  # with autograd: packed, as in training
    with torch.no_grad():  # padding aside: ``units`` zeroes it for every encoder
        torch.testing.assert_close(enc(ids, mask) * mask[..., None], packed.detach(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tags,negatives", [(False, 0), (True, 0), (True, 3)],
                         ids=["spans", "tags", "tags-negatives"])
def test_the_loss_of_a_batch_is_the_sum_of_its_parts(tags, negatives):
    data = sentences()
    enc, vocab = encoder(data, tags)
    examples = [enc(s) for s in data]
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 8, 8, 1, 0.0), 8, len(TYPES), len(RELATIONS), 3,
                              tags=tags, negatives=negatives)
    if negatives:  # the untrained tagger finds mentions that are no gold entity
        batch = collate_spans(examples, [0, 1, 2, 3], 0, len(RELATIONS))
        assert len(model(**batch.inputs(), noise=torch.arange(4))) == 3
    noise = torch.tensor([11, 12, 13, 14])  # each example's dropout seed, wherever it runs

    def loss(idx):
        batch = collate_spans([examples[i] for i in idx], idx, 0, len(RELATIONS))
        span_logits, pair_logits, *owner = model(**batch.inputs(), noise=noise[idx])
        return span_loss(span_logits, pair_logits, batch, len(data), 0.05, *owner)

    whole, parts = loss([0, 1, 2, 3]), loss([0, 2]) + loss([1, 3])
    torch.testing.assert_close(whole, parts, rtol=1e-6, atol=1e-7)


def test_a_tagger_s_mentions_are_its_runs_of_tags():
    # types 1 and 2: tag 1 / 3 a first unit, 2 / 4 a later one; 0 outside
    rows = [[1, 2, 2, 0, 3, 1, 2], [1, 2, 0, 0, 3, 4, 3]]
    logits = torch.nn.functional.one_hot(torch.tensor(rows), 5).float() * 10
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 6] = False  # padding is never a mention
    owner, spans, score, kind = tagged_mentions(logits, mask)
    assert owner.tolist() == [0, 0, 0, 1, 1]
    assert spans.tolist() == [[0, 3], [4, 5], [5, 7], [0, 2], [4, 6]]
    assert kind.tolist() == [1, 2, 1, 1, 2]
    assert all(0.99 < x <= 1 for x in score.tolist())
    empty = tagged_mentions(torch.zeros(1, 3, 5).index_fill_(2, torch.tensor([0]), 9.0),
                            torch.ones(1, 3, dtype=torch.bool))
    assert [len(x) for x in empty] == [0, 0, 0, 0]


def test_the_tagger_s_own_mentions_that_are_no_entity_make_negative_pairs():
    rows = [[1, 2, 2, 0, 3, 1, 2], [0, 0, 0, 0, 0, 0, 0]]
    logits = torch.nn.functional.one_hot(torch.tensor(rows), 5).float() * 10
    logits[0, 5, 1] = logits[0, 6, 2] = 20.0  # the mention at 5-7 scores above the one at 4-5
    mask = torch.ones(2, 7, dtype=torch.bool)
    span_batch, spans = torch.tensor([0, 0, 1]), torch.tensor([[0, 3], [1, 2], [2, 4]])
    every, all_spans, pairs = negative_mentions(logits, mask, span_batch, spans, 1)
    # 0-3 is gold; of 4-5 and 5-7 the limit keeps the better; example 1 tags nothing
    assert every.tolist() == [0, 0, 1, 0] and all_spans[3].tolist() == [5, 7]
    assert sorted(pairs.tolist()) == [[0, 3], [1, 3], [3, 0], [3, 1]]
    _, _, more = negative_mentions(logits, mask, span_batch, spans, 5)
    assert len(more) == 2 * 2 + 2 * 2 + 2  # each new one with both gold ones, and each other


def test_a_name_whose_units_disagree_is_decoded_whole():
    """Each unit's best tag alone would break the names: the first unit says type 1, the rest
    lean to type 2 (a later unit of 2 after a first of 1); a later unit after an outside one.
    The best sequence that obeys the rule keeps each name whole."""
    logits = torch.zeros(2, 3, 5)
    logits[0, 0, 1], logits[0, 0, 3] = 5.0, 3.0  # a first unit: type 1 (type 2 less so)
    logits[0, 1:, 4], logits[0, 1:, 2] = 5.0, 4.5  # later units: of type 2, nearly of 1
    logits[1, 0, 0] = logits[1, 2, 0] = 5.0  # outside, then a later unit, then outside
    logits[1, 1, 2], logits[1, 1, 1] = 5.0, 4.9
    owner, spans, _, kind = tagged_mentions(logits, torch.ones(2, 3, dtype=torch.bool))
    assert owner.tolist() == [0, 1] and spans.tolist() == [[0, 3], [1, 2]]
    assert kind.tolist() == [1, 1]


def test_the_tags_are_the_best_sequence_that_obeys_the_rule():
    from itertools import product

    def obeys(tags):  # a later unit of type t (tag 2t) only after a unit of type t
        return all(t == 0 or t % 2 or (p > 0 and (p + 1) // 2 == (t + 1) // 2)
                   for p, t in zip((0, *tags), tags))

    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        log_probs = torch.log_softmax(torch.randn(3, 5, 5, generator=gen) * 3, -1)
        lengths = torch.randint(1, 6, (3,), generator=gen).tolist()
        mask = torch.arange(5)[None] < torch.tensor(lengths)[:, None]
        got = best_tags(log_probs, mask)
        for row, n in enumerate(lengths):
            best = max((q for q in product(range(5), repeat=n) if obeys(q)),
                       key=lambda q: sum(log_probs[row, i, t].item() for i, t in enumerate(q)))
            assert got[row, :n].tolist() == list(best) and not got[row, n:].any()


def test_a_tagger_keeps_the_longest_of_overlapping_gold_mentions():
    text = "Acme Corp Paris office"
    nested = Annotated(text, (Span(0, 4, "Org"), Span(0, 9, "Org"), Span(10, 15, "Peop")), (), "t")
    enc, _ = encoder([nested], tags=True)
    example = enc(nested)
    assert example.tags.tolist() == [1, 2, 3, 0] and example.lost == 1
    assert example.spans.tolist() == [[0, 1], [0, 2], [2, 3]]  # every gold mention pairs
    assert enc(nested, labelled=False).spans.shape == (0, 2)


@pytest.mark.parametrize("tags", [False, True], ids=["spans", "tags"])
def test_trained_on_a_few_sentences_it_answers_them_back(tags):
    data = sentences()
    enc, vocab = encoder(data, tags)
    examples = [enc(s) for s in data]
    assert examples[1].pair_labels.sum() == 2 and all(x.lost == 0 for x in examples)
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 16, 32, 1, 0.0), 32, len(TYPES),
                              len(RELATIONS), 3, dropout=0.0, tags=tags)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    batch = collate_spans(examples, list(range(len(data))), 0, len(RELATIONS))
    for _ in range(150):
        optimizer.zero_grad()
        span_loss(*model(**batch.inputs()), batch, len(data)).backward()
        optimizer.step()
    model.eval()
    plain = [enc(s, labelled=False) for s in data]  # as prediction reads them
    dataset = SpanDataset(plain, data, 0, TYPES, RELATIONS, flat=True)
    answers = decode(model, dataset, list(range(len(data))), dataset.batch(range(len(data))))
    metrics = extraction_metrics(data, [a.sentence for a in answers])
    assert metrics["entities_f1"] == 1.0 and metrics["relations_strict_f1"] == 1.0
    second = answers[1]
    assert {r.type for r in second.sentence.relations} == {"Kill", "Work_For"}
    assert all(0.5 <= p <= 1 for p in second.relation_scores + second.entity_scores)


def test_flat_decoding_keeps_the_best_of_overlapping_mentions():
    spans = torch.tensor([[0, 2], [1, 3], [3, 4], [0, 1], [2, 4]])
    # best first: [1, 3) takes its place; [0, 2) and [2, 4) overlap it, [3, 4) and [0, 1) do not
    assert _without_overlaps(torch.tensor([1, 0, 4, 2, 3]), spans, 30).tolist() == [1, 2, 3]
    assert _without_overlaps(torch.tensor([1, 0, 4, 2, 3]), spans, 2).tolist() == [1, 2]
    assert _without_overlaps(torch.tensor([], dtype=torch.long), spans, 30).tolist() == []
    # a long text's thousands of entity spans: the walk ends with the limit's mentions kept
    many = torch.stack([torch.arange(20_000), torch.arange(1, 20_001)], 1)
    kept = _without_overlaps(torch.arange(20_000), many, MAX_MENTIONS)
    assert kept.tolist() == list(range(MAX_MENTIONS))
    flat = sentences()
    assert resolve_overlap("auto", flat) == "flat" and resolve_overlap("nested", flat) == "nested"
    text = "Acme Corp Paris office"
    nested = Annotated(text, (Span(0, 9, "Org"), Span(0, 4, "Org")), (), "t")
    assert resolve_overlap("auto", flat + [nested]) == "nested"  # one in five
    assert resolve_overlap("auto", flat + flat + [nested]) == "flat"  # one in nine


def test_the_pairs_of_each_sentence_s_mentions_are_every_ordered_two():
    counts = torch.tensor([2, 0, 1, 3])
    expected = []  # what a loop over the sentences gives: each one's mentions, offset
    at = 0
    for c in counts.tolist():
        local = torch.arange(at, at + c)
        expected += [(a, b) for a, b in torch.cartesian_prod(local, local).view(-1, 2).tolist()
                     if a != b]
        at += c
    assert _pairs_within(counts).tolist() == [list(p) for p in expected]
    assert _pairs_within(torch.tensor([0, 1])).shape == (0, 2)


def test_a_tagger_answers_the_best_mentions_of_a_sentence_up_to_the_cap():
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(9, 8, 8, 1, 0.0), 8, len(TYPES), len(RELATIONS), 3,
                              dropout=0.0, tags=True).eval()
    enc = SpanEncoder(Tokenizer("word"), TYPES, RELATIONS, 4, 200, to_ids=lambda t: [5] * len(t),
                      tags=True)
    many = Annotated(" ".join(["Smith"] * (MAX_MENTIONS + 10)), (), (), "t")
    data = [many, sentences()[0], many]
    with torch.no_grad():  # every unit the first unit of a mention, all scored alike
        model.tagger.weight.zero_()
        model.tagger.bias.copy_(torch.tensor([0.0, 5.0] + [-5.0] * (2 * len(TYPES) - 1)))
    dataset = SpanDataset([enc(s, labelled=False) for s in data], data, 0, TYPES, RELATIONS)
    answers = decode(model, dataset, [0, 1, 2], dataset.batch([0, 1, 2]))
    assert [len(a.sentence.entities) for a in answers] == [MAX_MENTIONS, 6, MAX_MENTIONS]
    assert all(len(a.sentence.entities) == len({(e.start, e.end) for e in a.sentence.entities})
               for a in answers)


def test_each_relation_gets_the_threshold_of_its_best_f1():
    gold = sentences()
    # answers: the gold entities with every gold relation at 0.6 and a wrong Work_For at 0.3 on
    # the first sentence; a Kill at 0.2 where only Work_For is gold on the last
    answers = [replace(gold[0], relations=gold[0].relations + (Link(1, 0, "Work_For"),)),
               gold[1], gold[2], replace(gold[3], relations=gold[3].relations + (Link(2, 0, "Kill"),))]
    scores = [[0.6, 0.3], [0.6, 0.6], [], [0.6, 0.2]]
    grid = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    chosen = tune_thresholds(gold, answers, scores, ["Kill", "Work_For", "Never"], grid)
    # Kill: right above 0.2 (0.3 to 0.6, nearest 0.5 wins); Work_For: above 0.3 likewise;
    # a relation no gold sentence has keeps 0.5
    assert chosen.tolist() == [0.5, 0.5, 0.5]
    scores = [[0.9, 0.3], [0.9, 0.9], [], [0.9, 0.2]]
    assert tune_thresholds(gold, answers, scores, ["Kill", "Work_For"], [0.1, 0.2, 0.3, 0.4]).tolist() \
        == pytest.approx([0.4, 0.4])  # a tie goes to the one nearest 0.5
    scores = [[0.25, 0.3], [0.25, 0.25], [], [0.25, 0.2]]  # every gold one below 0.3
    assert tune_thresholds(gold, answers, scores, ["Kill", "Work_For"], grid).tolist() \
        == pytest.approx([0.2, 0.2])


def test_the_same_batch_gives_the_same_gradient_on_every_backward_pass():
    """A unit is read for many spans and pairs; indexing's backward added those gradients with
    atomics in whatever order a CPU's threads met (two runs of one seed trained two models).
    Read as rows (``rows_at``), the gradient is the same, bit for bit, every time."""
    import hashlib

    data = sentences() * 24
    enc, vocab = encoder(data)
    batch = collate_spans([enc(s) for s in data], list(range(len(data))), 0, len(RELATIONS))
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 16, 128, 1, 0.0), 128, len(TYPES),
                              len(RELATIONS), 3)
    # a batch's spans in any order (the model's answers do not depend on it): each thread of
    # the backward pass then meets every unit, as the threads at a batch's middle example do
    order = torch.randperm(len(batch.spans), generator=torch.Generator().manual_seed(1))
    inputs = {**batch.inputs(), "span_batch": batch.span_batch[order], "spans": batch.spans[order],
              "pairs": torch.argsort(order)[batch.pairs]}
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the atomic adds are taken with more than one thread
    try:
        seen = set()
        for _ in range(40):
            model.zero_grad()
            span_logits, pair_logits = model(**inputs)
            (span_logits.square().sum() + pair_logits.square().sum()).backward()
            seen.add(hashlib.sha1(model.encoder.embed.word.weight.grad.numpy().tobytes()).hexdigest())
    finally:
        torch.set_num_threads(threads)
    assert len(batch.span_batch) * 128 > 32768  # past the size at which torch's adds go parallel
    assert len(seen) == 1, f"{len(seen)} different gradients in 40 passes"
