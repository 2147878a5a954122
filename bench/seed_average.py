"""Whether CoNLL04's entities are held back by the variance between runs: the entity figure of
span models (runs of one recipe at several seeds) whose span class probabilities are averaged,
then decoded flat as one model decodes (a mention that overlaps a better-scoring one is
dropped), beside each model's own. One model alone reproduces its validation figure.

    python bench/seed_average.py runs/conll04 runs/conll04-s2 runs/conll04-s3 \
        --gold ../shared/data/conll04/valid.json

One process, the first model's precision; nothing is timed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from itertools import combinations

import torch

import reltrain
from reltrain.data.extraction import read_annotated
from reltrain.data.schema import Span
from reltrain.evaluation.extraction import extraction_metrics
from reltrain.evaluation.span_decode import MAX_MENTIONS, _without_overlaps


@torch.no_grad()
def entities(models: list, sentences: list, batch: int = 32) -> list:
    """The sentences with the entities of the models' averaged span probabilities."""
    out = []
    for i in range(0, len(sentences), batch):
        chunk = sentences[i:i + batch]
        probs = 0
        for m in models:
            data = m.dataset(chunk)
            b = data.batch(range(len(chunk)))
            with m.precision.autocast(torch.device("cpu")):
                states = m.model.units(b.ids, b.mask, b.first, b.unit_mask, shapes=b.shapes)
                logits = m.model.span_logits(states, b.span_batch, b.spans)
            probs = probs + torch.softmax(logits.float(), -1)
        score, kind = probs.max(-1)
        for j, example in enumerate(data.examples):
            found = torch.nonzero((b.span_batch == j) & (kind > 0)).flatten()
            found = found[torch.argsort(score[found], descending=True, stable=True)]
            spans = []
            for k in _without_overlaps(found, b.spans, MAX_MENTIONS).tolist():
                start, end = b.spans[k].tolist()
                spans.append(Span(int(example.units[start, 0]), int(example.units[end - 1, 1]),
                                  models[0].entity_types[int(kind[k]) - 1]))
            out.append(replace(chunk[j], entities=tuple(sorted(spans, key=lambda x: (x.start, x.end)))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="span models (run directories or folders) "
                                                  "of one recipe, trained on the same data")
    parser.add_argument("--gold", required=True, help="a gold file (any extraction format)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    models = [reltrain.load(path) for path in args.models]
    if any(m.model.tags for m in models) or len({tuple(m.entity_types) for m in models}) > 1:
        raise SystemExit("span models (extract.mentions=spans) of the same entity types only")
    gold = read_annotated(args.gold)
    unlabelled = [replace(s, entities=(), relations=()) for s in gold]
    for size in range(1, len(models) + 1):
        for group in combinations(range(len(models)), size):
            answers = entities([models[k] for k in group], unlabelled)
            f1 = extraction_metrics(gold, answers, frozenset())["entities_f1"]
            print(f"{' + '.join(args.models[k] for k in group):<70} entities_f1 {f1:.4f}")


if __name__ == "__main__":
    main()
