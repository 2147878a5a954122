"""Same seed, same model? Trains the same deepke-zh run in several fresh processes and counts the
distinct models (by a hash of ``checkpoints/last``'s weights), with each run's test macro-F1. One model is
the promise; a second one means something in training is not reproducible on this machine
(docs/benchmarks.md, "Same seed, same model", found one on an Intel Xeon).

    python bench/same_seed.py                                   # the CNN, seed 2, 6 runs
    python bench/same_seed.py --runs 4 model.name=bilstm train.epochs=3
    python bench/same_seed.py train.sparse_embeddings=false     # dense updates

Figures are only comparable within one machine (``lscpu``), so the script prints its CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, train_deepke  # noqa: E402


def weights_hash(checkpoint: Path) -> str:
    model = load_file(str(checkpoint / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(model):
        digest.update(name.encode() + model[name].numpy().tobytes())
    return digest.hexdigest()[:12]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("overrides", nargs="*", help="key=value for every run (model.name=cnn is the default)")
    args = ap.parse_args()
    print(f"{args.runs} fresh processes, seed {args.seed}, {args.threads} threads, {cpu_name()}, "
          f"torch {torch.__version__}; overrides: {' '.join(args.overrides) or 'none'}")
    seen: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="reltrain-same-seed-") as tmp:
        for run in range(1, args.runs + 1):
            out = Path(tmp) / f"run{run}"
            summary = train_deepke(args.data, out, Path(tmp) / "cache", 1, args.threads,
                                   ["model.name=cnn", f"train.seed={args.seed}", *args.overrides])
            model = weights_hash(out / "checkpoints" / "last")
            seen[model] += 1
            print(f"run {run}: test macro-F1 {summary['test']['macro_f1']:.4f}  weights {model}",
                  flush=True)
    verdict = "one model" if len(seen) == 1 else f"{len(seen)} DIFFERENT models"
    print(f"{verdict}: " + ", ".join(f"{h} x{n}" for h, n in seen.most_common()))
    if len(seen) > 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
