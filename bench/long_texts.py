"""An extraction model on texts of several sentences and on texts longer than it reads at once:
a gold file's consecutive sentences are joined, ``--sentences`` to a text (as a paragraph of raw
text arrives; 1: its texts as they are), and scored three ways against the same gold: each text
cut into sentences, each answered alone (what ``predict``, ``serve`` and ``reltrain.load`` do
since 2026-12-07), each text read whole (a sentence longer than the model reads in windows),
and each text read only as far as the model reads at once (what they did before). Also how
many relations were answered between two of the joined sentences (their gold has none).

    python bench/long_texts.py runs/conll04 ../shared/data/conll04/valid.json --sentences 10

One process, the model's own precision; nothing is timed.
"""

from __future__ import annotations

import argparse
from bisect import bisect_right
from dataclasses import replace

import torch

import reltrain
from reltrain.data.extraction import read_annotated
from reltrain.data.schema import Annotated, Link, Span
from reltrain.evaluation.extraction import extraction_metrics
from reltrain.evaluation.span_decode import gathered_answers
from reltrain.runtime.distributed import DistContext

FIGURES = ("entities_f1", "relations_strict_f1", "relations_strict_precision",
           "relations_strict_recall", "triples_f1")


def joined(group: list[Annotated]) -> tuple[Annotated, list[int]]:
    """The sentences as one text (a space between), their gold moved to its offsets, and where
    each sentence begins."""
    text, entities, relations, starts = "", [], [], []
    for s in group:
        at, first = len(text) + (1 if text else 0), len(entities)
        text += (" " if text else "") + s.text
        starts.append(at)
        entities += [Span(e.start + at, e.end + at, e.type) for e in s.entities]
        relations += [Link(r.head + first, r.tail + first, r.type) for r in s.relations]
    return Annotated(text, tuple(entities), tuple(relations), group[0].source,
                     strings=group[0].strings), starts


def across(answer: Annotated, starts: list[int]) -> int:
    """Relations answered between entities of two different sentences."""
    where = [bisect_right(starts, e.start) for e in answer.entities]
    return sum(where[r.head] != where[r.tail] for r in answer.relations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an extraction model folder or run directory")
    parser.add_argument("gold", help="a gold file of sentences (any extraction format)")
    parser.add_argument("--sentences", type=int, default=10, help="sentences joined to a text")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = reltrain.load(args.model)
    gold = [replace(s, tokens=None) for s in read_annotated(args.gold)]
    groups = [gold[i:i + args.sentences] for i in range(0, len(gold), args.sentences)]
    texts = [joined(g) for g in groups]
    whole = [t for t, _ in texts]
    bare = [replace(t, entities=(), relations=()) for t in whole]
    model.config.extract.sentences = "split"  # what the recipes' models resolve auto to
    model.windowed = 0
    split = [a.sentence for a in model.answers(bare)]
    read_in_windows = model.windowed
    model.config.extract.sentences = "whole"
    whole_read = [a.sentence for a in model.answers(bare)]
    first = [a.sentence for a in gathered_answers(model.model, model.dataset(bare), 128,
                                                  DistContext(device=model.device),
                                                  model.precision)]
    rows = [(name, extraction_metrics(whole, answers, model.symmetric),
             sum(across(a, s) for a, (_, s) in zip(answers, texts)))
            for name, answers in (("cut into sentences", split),
                                  ("whole, in windows", whole_read),
                                  ("whole, first window only", first))]
    print(f"{len(gold)} sentences of {args.gold} in {len(whole)} texts of up to "
          f"{args.sentences}; {read_in_windows} read in several parts "
          f"(data.max_len {model.config.data.max_len}); model {args.model}")
    shown = [f for f in FIGURES if f in rows[0][1]]
    print(f"{'input':<26}" + "".join(f"{f.replace('relations_', ''):>18}" for f in shown)
          + f"{'across sentences':>18}")
    for name, metrics, cross in rows:
        print(f"{name:<26}" + "".join(f"{metrics[f]:>18.4f}" for f in shown) + f"{cross:>18}")


if __name__ == "__main__":
    main()
