"""CPU DDP weak scaling of the CNN: one process against N processes under torchrun, same run.

    python bench/ddp_scaling.py --epochs 6 --repeats 3 --nproc 2

Each process keeps the per-process batch (weak scaling: the global batch grows with N) and gets
``--threads`` CPU threads through OMP_NUM_THREADS (default 1), so N processes use N cores and
the 2 cores of a small machine are never oversubscribed.

A shared 2-core VM moves a single run's throughput by 10-20%, more than the effect measured, so
the 1-process and N-process runs alternate ``--repeats`` times (drift hits both sides alike) and
each side's throughput is the median over all its epochs after the first. Printed: every run
(training sentences/s as the median of its epochs after the first, peak RSS of rank 0, test
macro-F1), each run's efficiency against the 1-process run before it, and the pooled scaling
efficiency T_N / (N x T_1). The gradients are averaged by gloo's all-reduce (docs/distributed.md
says why one process with all the cores is the better use of a single CPU host).
"""

from __future__ import annotations

import argparse
import os
import json
import statistics
import tempfile
from pathlib import Path

from deepke_runs import DEFAULT_DATA, train_deepke


def train(nproc: int, args, workdir: Path, repeat: int) -> dict:
    out = workdir / f"np{nproc}-{repeat}"
    summary = train_deepke(args.data, out, workdir / "cache", nproc, args.threads, [
        f"model.name={args.model}", f"train.epochs={args.epochs}",
        f"train.batch_size={args.batch_size}"])
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"nproc": nproc, "sent_per_s": summary["train_sent_per_s_median"],
            "epoch_rates": [e["train_sent_per_s"] for e in epochs[1:]],
            "global_batch": summary["global_batch_size"], "test_macro_f1": summary["test"]["macro_f1"],
            "peak_rss_mb": summary["peak_rss_mb"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--model", default="cnn", choices=["cnn", "pcnn"])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3, help="alternating 1-process / N-process rounds")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS per process")
    args = p.parse_args()
    print(f"{args.model}, {args.epochs} epochs, batch {args.batch_size} per process, "
          f"{args.threads} thread(s) per process, {os.cpu_count()} cores", flush=True)
    print(f"{'run':>4}{'processes':>10}{'global batch':>14}{'train sent/s':>14}"
          f"{'peak RSS MB':>13}{'test macro-F1':>15}{'efficiency':>12}", flush=True)
    rates: dict[int, list[float]] = {1: [], args.nproc: []}
    with tempfile.TemporaryDirectory(prefix="reltrain-ddp-") as tmp:
        for i in range(1, args.repeats + 1):
            alone = train(1, args, Path(tmp), i)
            for r in (alone, train(args.nproc, args, Path(tmp), i)):
                rates[r["nproc"]].extend(r["epoch_rates"])
                eff = "" if r["nproc"] == 1 else f"{r['sent_per_s'] / (args.nproc * alone['sent_per_s']):>12.2f}"
                print(f"{i:>4}{r['nproc']:>10}{r['global_batch']:>14}{r['sent_per_s']:>14.1f}"
                      f"{r['peak_rss_mb']:>13.0f}{r['test_macro_f1']:>15.4f}{eff}", flush=True)
    t1, tn = statistics.median(rates[1]), statistics.median(rates[args.nproc])
    print(f"T1 {t1:.1f} sent/s, T{args.nproc} {tn:.1f} sent/s (medians over {len(rates[1])} and "
          f"{len(rates[args.nproc])} epochs); scaling efficiency T{args.nproc} / ({args.nproc} x T1) "
          f"= {tn / (args.nproc * t1):.2f}")

if __name__ == "__main__":
    main()
