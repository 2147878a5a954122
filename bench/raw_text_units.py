"""An English extraction model on raw text against the same sentences given as tokens: its
gold file's sentences are scored from their own tokens (what training's validation measures),
then from their text alone (the tokens joined by spaces, as a user's raw text arrives), cut into
units by each English splitter in turn: ``word`` (at every punctuation mark: "U.S." is four
units) and ``treebank`` (what task=extract uses for English since 2026-12-07). Also the share of
sentences whose units are exactly their gold tokens, and each score again with every entity's
trailing periods left out on both sides (``periods``): CoNLL04 glues a sentence's final period to
its last token, so its gold entity is "Boise." where the text's units answer "Boise".

    python bench/raw_text_units.py runs/conll04 ../shared/data/conll04/valid.json

One process, the model's own precision; nothing is timed.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

import reltrain
from reltrain.data.extraction import read_annotated
from reltrain.data.schema import Span
from reltrain.data.tokenize import Tokenizer
from reltrain.evaluation.extraction import extraction_metrics

FIGURES = ("entities_f1", "relations_strict_f1", "relations_boundaries_f1")


def scores(model, gold: list, tokens: bool) -> tuple[dict, dict]:
    """The answers' figures as they are, and with trailing periods left out."""
    inputs = [replace(s, entities=(), relations=(), tokens=s.tokens if tokens else None)
              for s in gold]
    answers = [a.sentence for a in model.answers(inputs)]
    return (extraction_metrics(gold, answers, model.symmetric),
            extraction_metrics([unperiod(s) for s in gold], [unperiod(s) for s in answers],
                               model.symmetric))


def unperiod(sentence):
    """The sentence with each entity's trailing periods out of its span."""
    def cut(e):
        end = e.end
        while end - 1 > e.start and sentence.text[end - 1] == ".":
            end -= 1
        return Span(e.start, end, e.type)
    return replace(sentence, entities=tuple(cut(e) for e in sentence.entities))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an extraction model folder or run directory (English)")
    parser.add_argument("gold", help="a gold file with tokens (SpERT or PURE JSON)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = reltrain.load(args.model)
    gold = read_annotated(args.gold)
    if any(s.tokens is None for s in gold):
        raise SystemExit(f"{args.gold}: its sentences give no tokens to compare with")
    rows = [("its tokens", scores(model, gold, tokens=True), "")]
    for kind in ("word", "treebank"):
        model.encoder.tokenizer = Tokenizer(kind)
        same = sum([p[0] for p in model.encoder.tokenizer.pieces(s.text, set())] == list(s.tokens)
                   for s in gold)
        rows.append((f"raw text, {kind} units", scores(model, gold, tokens=False),
                     f"{same}/{len(gold)}"))
    print(f"{len(gold)} sentences of {args.gold}, model {args.model}")
    print(f"{'input':<24}" + "".join(f"{f:>26}" for f in FIGURES) + f"{'units = tokens':>16}")
    for name, (metrics, periods), same in rows:
        print(f"{name:<24}" + "".join(f"{metrics[f]:>26.4f}" for f in FIGURES) + f"{same:>16}")
        print(f"{'  periods':<24}" + "".join(f"{periods[f]:>26.4f}" for f in FIGURES))


if __name__ == "__main__":
    main()
