"""Length bucketing (``data.bucket``) against batches of random lengths: training speed of each
encoder on deepke-zh, the two settings alternating in fresh processes.

    python bench/bucketing.py                       # cnn, bilstm, transformer; 2 rounds
    python bench/bucketing.py --models cnn --rounds 3

Each run trains ``--epochs`` epochs (one process, ``--threads`` threads) and reports the median
of its epochs' train sent/s after the first (summary.json ``train_sent_per_s_median``). The
baseline in the same run is ``data.bucket=false``; the figure is the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, train_deepke  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn,bilstm,transformer")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    args = ap.parse_args()
    print(f"deepke-zh, {args.epochs} epochs a run, {args.threads} threads, "
          f"{args.rounds} round(s), train sent/s (median of epochs 2-{args.epochs})")
    print(f"{'model':>12} {'bucket=false':>24} {'bucket=true':>24} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="reltrain-bucket-") as tmp:
        tmp = Path(tmp)
        for model in args.models.split(","):
            speeds: dict[str, list[float]] = {"false": [], "true": []}
            for i in range(args.rounds):
                # Alternate which setting runs first, so a drift of the machine hits both.
                for bucket in ("false", "true") if i % 2 == 0 else ("true", "false"):
                    out = tmp / f"{model}-{bucket}-{i}"
                    summary = train_deepke(args.data, out, tmp / "cache", 1, args.threads, [
                        f"model.name={model}", f"train.epochs={args.epochs}",
                        f"data.bucket={bucket}", "train.early_stopping=0"])
                    speeds[bucket].append(summary["train_sent_per_s_median"])
            shown = {k: " / ".join(f"{v:.0f}" for v in vs) for k, vs in speeds.items()}
            ratio = statistics.mean(speeds["true"]) / statistics.mean(speeds["false"])
            print(f"{model:>12} {shown['false']:>24} {shown['true']:>24} {ratio:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
