"""Sparse against dense embedding updates (``train.sparse_embeddings``): CNN training speed at two
vocabulary sizes on the same rows, and test F1 over several seeds.

    python bench/sparse_embeddings.py                        # speed: 20,000 rows; F1: seeds 1-3
    python bench/sparse_embeddings.py --rows 20000 --f1-seeds 0

Speed: deepke-zh's training rows repeated to ``--rows`` rows, each with ``--rare`` words of its
own appended (one occurrence each), so ``data.min_freq=1`` keeps ~``rows x rare`` more words than
``data.min_freq=2`` on exactly the same text and tokens; one epoch each, train sent/s from
metrics.jsonl. The baseline in the same run is the small vocabulary; the figure is the ratio.
F1: deepke-zh (10 epochs) and the large corpus (``--large-epochs``) for each seed, dense and
sparse; the test scores of the checkpoint chosen on valid (deepke-zh's valid and test in both).
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


def run(data: Path, tmp: Path, name: str, threads: int, overrides: list[str]) -> dict:
    out = tmp / name
    summary = train_deepke(data, out, tmp / "cache", 1, threads, ["model.name=cnn", *overrides])
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"name": name, "vocab": summary["data"]["vocab_size"],
            "train_sent_per_s": statistics.mean(r["train_sent_per_s"] for r in history),
            "test": summary["test"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--rare", type=int, default=10, help="words of its own on each row")
    ap.add_argument("--speed-epochs", type=int, default=1)
    ap.add_argument("--f1-seeds", default="1,2,3", help="0: no F1 runs")
    ap.add_argument("--large-epochs", type=int, default=2)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write every run's figures to this file")
    args = ap.parse_args()
    data = Path(args.data).resolve()
    runs = []
    with tempfile.TemporaryDirectory(prefix="reltrain-sparse-") as tmp:
        tmp = Path(tmp)
        # jieba keeps a run of letters and digits as one word: each of these is one token
        make_corpus(data, args.rows, tmp / "corpus.csv",
                    lambda i: " ".join(f"w{i:06d}x{j}" for j in range(args.rare)))
        large = [f"data.train={tmp / 'corpus.csv'}"]
        print(f"speed: {args.rows:,} rows, {args.speed_epochs} epoch(s), {args.threads} threads")
        print(f"{'updates':>8} {'min_freq':>8} {'vocab':>8} {'train sent/s':>12} {'vs min_freq=2':>13}")
        for sparse in ("false", "true"):
            small = None
            for min_freq in (2, 1):
                r = run(data, tmp, f"speed-{sparse}-{min_freq}", args.threads, [
                    *large, f"train.epochs={args.speed_epochs}", f"data.min_freq={min_freq}",
                    f"train.sparse_embeddings={sparse}"])
                small = small or r["train_sent_per_s"]
                runs.append({**r, "kind": "speed", "sparse": sparse, "min_freq": min_freq})
                print(f"{'sparse' if sparse == 'true' else 'dense':>8} {min_freq:>8} "
                      f"{r['vocab']:>8,} {r['train_sent_per_s']:>12.0f} "
                      f"{r['train_sent_per_s'] / small:>13.2f}", flush=True)
        seeds = [int(s) for s in args.f1_seeds.split(",") if int(s)]
        corpora = {"deepke-zh": ["train.epochs=10"],
                   f"{args.rows:,} rows": [*large, f"train.epochs={args.large_epochs}",
                                           "data.min_freq=1"]}
        for corpus, overrides in corpora.items() if seeds else ():
            print(f"\ntest F1, {corpus}, seeds {args.f1_seeds}")
            print(f"{'updates':>8} {'macro-F1 mean':>13} {'sd':>6} {'positive micro-F1':>17} "
                  f"{'sd':>6} {'train sent/s':>12}")
            for sparse in ("false", "true"):
                mine = [run(data, tmp, f"f1-{corpus[:4]}-{sparse}-{seed}", args.threads,
                            [*overrides, f"train.seed={seed}", f"train.sparse_embeddings={sparse}"])
                        for seed in seeds]
                runs += [{**r, "kind": "f1", "corpus": corpus, "sparse": sparse} for r in mine]
                macro = [r["test"]["macro_f1"] for r in mine]
                pos = [r["test"].get("positive_micro_f1", float("nan")) for r in mine]
                sd = (lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0)
                print(f"{'sparse' if sparse == 'true' else 'dense':>8} {statistics.mean(macro):>13.4f} "
                      f"{sd(macro):>6.4f} {statistics.mean(pos):>17.4f} {sd(pos):>6.4f} "
                      f"{statistics.mean(r['train_sent_per_s'] for r in mine):>12.0f}", flush=True)
                print("   per seed macro-F1: " + ", ".join(f"{x:.4f}" for x in macro))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
