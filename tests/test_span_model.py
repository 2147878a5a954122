"""The span model of the extraction task: its range max is the plain max, its loss is the same
however a batch is split, and trained on a few sentences it answers them back (entities, and two
relations on one pair)."""

from __future__ import annotations

import numpy as np
import torch

from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.spans import SpanEncoder, candidate_spans, collate_spans
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.evaluation.extraction import extraction_metrics
from reltrain.evaluation.span_decode import decode
from reltrain.models.spans import RangeMax, SpanRelationModel, WordEncoder, span_loss

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


def encoder(data) -> tuple[SpanEncoder, Vocab]:
    tokenizer = Tokenizer("word")
    vocab = Vocab.build([[p[0] for p in tokenizer.pieces(s.text, set())] for s in data], 1)
    return SpanEncoder(tokenizer, TYPES, RELATIONS, 3, 100, to_ids=vocab.encode), vocab


def test_range_max_is_the_plain_max():
    torch.manual_seed(0)
    h, mask = torch.randn(3, 13, 5), torch.ones(3, 13, dtype=torch.bool)
    mask[1, 9:] = False
    rows = [(b, s, e) for b in range(3) for s in range(14) for e in range(s, 14)
            if e <= (9 if b == 1 else 13) and s <= e]
    b, s, e = (torch.tensor(x) for x in zip(*rows))
    expected = torch.stack([h[i, j:k].amax(0) if k > j else torch.zeros(5) for i, j, k in rows])
    assert torch.equal(RangeMax(h, mask)(b, s, e), expected)
    assert candidate_spans(4, 2).tolist() == [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3], [2, 4], [3, 4]]


def test_the_loss_of_a_batch_is_the_sum_of_its_parts():
    data = sentences()
    enc, vocab = encoder(data)
    examples = [enc(s) for s in data]
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 8, 8, 1, 0.0), 8, len(TYPES), len(RELATIONS), 3)

    def loss(idx):
        batch = collate_spans([examples[i] for i in idx], idx, 0, len(RELATIONS))
        return span_loss(*model(**batch.inputs()), batch, len(data))

    whole, parts = loss([0, 1, 2, 3]), loss([0, 2]) + loss([1, 3])
    torch.testing.assert_close(whole, parts, rtol=1e-6, atol=1e-7)


def test_trained_on_a_few_sentences_it_answers_them_back():
    data = sentences()
    enc, vocab = encoder(data)
    examples = [enc(s) for s in data]
    assert examples[1].pair_labels.sum() == 2 and all(x.lost == 0 for x in examples)
    torch.manual_seed(0)
    model = SpanRelationModel(WordEncoder(len(vocab), 16, 32, 1, 0.0), 32, len(TYPES),
                              len(RELATIONS), 3, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    batch = collate_spans(examples, list(range(len(data))), 0, len(RELATIONS))
    for _ in range(150):
        optimizer.zero_grad()
        span_loss(*model(**batch.inputs()), batch, len(data)).backward()
        optimizer.step()
    model.eval()
    answers = decode(model, batch, examples, data, TYPES, RELATIONS, np.full(len(RELATIONS), 0.5))
    metrics = extraction_metrics(data, [a.sentence for a in answers])
    assert metrics["entities_f1"] == 1.0 and metrics["relations_strict_f1"] == 1.0
    second = answers[1]
    assert {r.type for r in second.sentence.relations} == {"Kill", "Work_For"}
    assert all(0.5 <= p <= 1 for p in second.relation_scores + second.entity_scores)
