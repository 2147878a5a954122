"""Test macro-F1 of the CNN for several ``data.min_freq`` / ``data.max_vocab`` settings and seeds:
the measurement behind their defaults.

    python bench/vocab_defaults.py                               # deepke-zh, 10 epochs
    python bench/vocab_defaults.py --rows 100000 --epochs 1      # bench/scale.py's corpus

``--rows N`` trains on bench/scale.py's synthetic corpus of N rows (deepke-zh's training rows
with numbered suffixes, so the vocabulary grows with it); validation and test are deepke-zh's own
in both cases. The checkpoint scored on test is the one chosen on valid.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, train_deepke  # noqa: E402
from scale import make_corpus  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default="1:0,2:0,3:0,2:3000,2:1000",
                    help="min_freq:max_vocab pairs (max_vocab 0: no cap)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--rows", type=int, default=0, help="the synthetic corpus of this many rows")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write every run's figures to this file")
    args = ap.parse_args()
    data = Path(args.data).resolve()
    settings = [tuple(int(x) for x in s.split(":")) for s in args.settings.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    with tempfile.TemporaryDirectory(prefix="reltrain-vocab-") as tmp:
        tmp = Path(tmp)
        train = [f"data.train={data / 'train.csv'}"]
        if args.rows:
            make_corpus(data, args.rows, tmp / "train.csv")
            train = [f"data.train={tmp / 'train.csv'}"]
        for min_freq, max_vocab in settings:
            for seed in seeds:
                out = tmp / f"run-{min_freq}-{max_vocab}-{seed}"
                summary = train_deepke(data, out, tmp / "cache", 1, args.threads, [
                    "model.name=cnn", f"train.epochs={args.epochs}", f"train.seed={seed}", *train,
                    f"data.min_freq={min_freq}", f"data.max_vocab={max_vocab}"])
                runs.append({"min_freq": min_freq, "max_vocab": max_vocab, "seed": seed,
                             "vocab": summary["data"]["vocab_size"],
                             "test_macro_f1": summary["test"]["macro_f1"],
                             "best_epoch": summary["best"]["epoch"]})
                print(json.dumps(runs[-1]), flush=True)
    corpus = f"synthetic {args.rows:,} rows" if args.rows else "deepke-zh train (3,000 rows)"
    print(f"\nCNN, {corpus}, {args.epochs} epoch(s), seeds {args.seeds}; test macro-F1 of the "
          f"checkpoint chosen on valid")
    print(f"{'min_freq':>8} {'max_vocab':>9} {'vocab':>7} {'macro-F1 mean':>13} {'sd':>6} "
          f"{'min':>6} {'max':>6}")
    for min_freq, max_vocab in settings:
        mine = [r for r in runs if (r["min_freq"], r["max_vocab"]) == (min_freq, max_vocab)]
        f1 = [r["test_macro_f1"] for r in mine]
        sd = statistics.stdev(f1) if len(f1) > 1 else 0.0
        print(f"{min_freq:>8} {max_vocab:>9} {mine[0]['vocab']:>7,} {statistics.mean(f1):>13.4f} "
              f"{sd:>6.4f} {min(f1):>6.4f} {max(f1):>6.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
