"""The span model's dropout over a batch's candidate spans, keyed once a span (before) against
once a sentence (``ExampleDropout(..., rows=)``, now): the same masks, the time of one training
step's forward and backward through it.

    python bench/span_dropout.py                       # CoNLL04's training sentences
    python bench/span_dropout.py --data ../shared/data/conll04/train.json --rounds 5

Batches of ``--batch`` sentences drawn from the file's word counts, every span of at most
``--width`` words (the CoNLL04 recipe's extract.max_width), each span's representation as wide
as the MiniLM recipe's (3 x 384 + 25). The baseline is the old call in the same run: the two
alternate on the same batches, one thread, and the figure is their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from reltrain.models.dropout import ExampleDropout, example_noise_seeds

ROOT = Path(__file__).resolve().parents[1]


def batches(lengths: list[int], batch: int, width: int, count: int, seed: int):
    """(rows, noise) of ``count`` batches: each span's sentence in the batch, and its seeds."""
    rng = torch.Generator().manual_seed(seed)
    for step in range(count):
        picked = torch.randint(len(lengths), (batch,), generator=rng).tolist()
        spans = [sum(max(lengths[i] - w + 1, 0) for w in range(1, width + 1)) for i in picked]
        rows = torch.repeat_interleave(torch.arange(batch), torch.tensor(spans))
        yield rows, example_noise_seeds(1, step, torch.tensor(picked))


def timed(drop: ExampleDropout, rows, noise, dim: int, shared: bool) -> float:
    x = torch.randn(len(rows), dim, requires_grad=True)
    start = time.perf_counter()
    out = drop(x, noise, rows=rows) if shared else drop(x, noise[rows])
    out.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/conll04/train.json"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=10)
    ap.add_argument("--dim", type=int, default=3 * 384 + 25)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    lengths = [len(s["tokens"]) for s in json.loads(Path(args.data).read_text())]
    drop = ExampleDropout(0.1, stream=11).train()
    rows, noise = next(batches(lengths, args.batch, args.width, 1, 0))
    x = torch.randn(len(rows), args.dim)
    assert torch.equal(drop(x, noise, rows=rows), drop(x, noise[rows])), "masks differ"
    print(f"{len(lengths)} sentences of {args.data}, batches of {args.batch}, spans of at most "
          f"{args.width} words, {args.dim} features; ms a step (forward and backward), one thread")
    ratios = []
    for r in range(args.rounds):
        each = {False: [], True: []}
        for rows, noise in batches(lengths, args.batch, args.width, args.steps, r):
            for shared in (False, True):
                each[shared].append(timed(drop, rows, noise, args.dim, shared))
        before, now = (1000 * statistics.median(each[s]) for s in (False, True))
        ratios.append(before / now)
        print(f"round {r + 1}: once a span {before:.1f} ms, once a sentence {now:.1f} ms, "
              f"x{before / now:.2f}")
    print(f"median ratio x{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
