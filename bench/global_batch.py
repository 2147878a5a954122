"""What a fixed global batch costs, split different ways: accumulation on one process, and
2-process DDP (gloo) at global batch 64 and 128 against one process, CNN on deepke-zh.

    python bench/global_batch.py --epochs 4 --repeats 2

(a) one process (all cores), global batch 64 as 1 x 64, 1 x 32 x 2 and 1 x 16 x 4;
(b) 2 processes x 1 thread x batch 32 with accumulation 1 and 2 (global 64 and 128) against one
    process x 2 threads at the same global batch: fewer all-reduces per example should lift
    CPU DDP without any collective of our own.
Runs of a group alternate ``--repeats`` times (a shared VM drifts 10-20%); each run's figure
is the median training sentences/s over its epochs after the first. Printed: every run, then
per configuration the median over repeats and its ratio to the group's baseline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from deepke_runs import DEFAULT_DATA, train_deepke

# (label, processes, threads per process, per-process batch, global batch)
ACCUMULATION = [("1 x 64", 1, 2, 64, 64), ("1 x 32 x 2", 1, 2, 32, 64), ("1 x 16 x 4", 1, 2, 16, 64)]
DDP = [("1 process, global 64", 1, 2, 64, 64), ("2 x 32 x 1, global 64", 2, 1, 32, 64),
       ("1 process, global 128", 1, 2, 128, 128), ("2 x 32 x 2, global 128", 2, 1, 32, 128)]


def train(args, workdir: Path, name: str, nproc: int, threads: int, batch: int, global_batch: int) -> dict:
    out = workdir / name.replace(" ", "_").replace(",", "")
    summary = train_deepke(args.data, out, workdir / "cache", nproc, threads, [
        "model.name=cnn", f"train.epochs={args.epochs}", f"train.batch_size={batch}",
        f"train.global_batch_size={global_batch}", "resume=never"])
    return {"sent_per_s": summary["train_sent_per_s_median"], "macro_f1": summary["test"]["macro_f1"],
            "accum": summary["accum_steps"]}


def run_group(title: str, configs: list, args, workdir: Path) -> None:
    print(f"\n{title}", flush=True)
    print(f"{'round':>5}  {'configuration':<24}{'accum':>6}{'train sent/s':>14}{'test macro-F1':>15}",
          flush=True)
    rates: dict[str, list[float]] = {c[0]: [] for c in configs}
    for i in range(1, args.repeats + 1):
        order = configs if i % 2 else configs[::-1]  # neither side always runs last
        for name, nproc, threads, batch, global_batch in order:
            r = train(args, workdir, f"{name}-{i}", nproc, threads, batch, global_batch)
            rates[name].append(r["sent_per_s"])
            print(f"{i:>5}  {name:<24}{r['accum']:>6}{r['sent_per_s']:>14.1f}{r['macro_f1']:>15.4f}",
                  flush=True)
    print(f"{'':>5}  {'configuration':<24}{'median sent/s':>20}{'ratio':>8}")
    base = None
    for name, *_ in configs:
        median = statistics.median(rates[name])
        if "process," in name or base is None:  # each group's one-process run is its baseline
            base = median
        print(f"{'':>5}  {name:<24}{median:>20.1f}{median / base:>8.2f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    print(f"CNN on {args.data}, {args.epochs} epochs a run, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="reltrain-gb-") as tmp:
        run_group("(a) accumulation: one process, global batch 64", ACCUMULATION, args, Path(tmp))
        run_group("(b) 2-process DDP (gloo) against one process at the same global batch", DDP,
                  args, Path(tmp))


if __name__ == "__main__":
    main()
