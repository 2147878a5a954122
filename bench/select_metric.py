"""Which validation figure should pick checkpoints/best (``train.select_metric``)? Trains the CNN on
deepke-zh as it is and on a copy where five of its relations become the negative relation
``None`` (two thirds of the rows, as in TACRED-like data), with each selection and several seeds,
and prints the test figures of the selected checkpoint side by side.

    python bench/select_metric.py                          # seeds 1 2 3, 10 epochs
    python bench/select_metric.py --seeds 1 2 --select macro_f1 positive_micro_f1
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from deepke_runs import DEFAULT_DATA

NEGATIVE = ("出生地", "国籍", "毕业院校", "所属专辑", "连载网站")  # become "None"


def negative_heavy(source: Path, out: Path) -> Path:
    """deepke-zh with the relations of ``NEGATIVE`` relabelled ``None`` (its negative label)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        with open(source / f"{split}.csv", encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            if row["relation"] in NEGATIVE:
                row["relation"] = "None"
        with open(out / f"{split}.csv", "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    with open(source / "relation.csv", encoding="utf-8", newline="") as f:
        labels = [r for r in csv.DictReader(f) if r["relation"] not in NEGATIVE]
    with open(out / "relation.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(labels[0]))
        writer.writeheader()
        for i, row in enumerate(labels):
            writer.writerow({**row, "index": i})
    return out


def train(data: Path, select: str, seed: int, epochs: int, work: Path) -> dict:
    out = work / f"{data.name}-{select}-{seed}"
    cmd = [sys.executable, "-m", "reltrain", "train", f"data.train={data / 'train.csv'}",
           f"data.valid={data / 'valid.csv'}", f"data.test={data / 'test.csv'}",
           f"data.labels={data / 'relation.csv'}", "data.language=zh", f"train.epochs={epochs}",
           f"train.seed={seed}", f"train.select_metric={select}", "log.progress=false",
           f"data.cache_dir={work / 'cache'}", f"output_dir={out}"]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--select", nargs="+", default=["macro_f1", "micro_f1", "positive_micro_f1", "loss"])
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="reltrain-select-") as tmp:
        work = Path(tmp)
        sets = {"deepke-zh": args.data,
                "deepke-zh, 67% None": negative_heavy(args.data, work / "negative-heavy")}
        print(f"CNN, {args.epochs} epochs, seeds {args.seeds}; test figures of the checkpoint "
              f"each selection picks (mean and sd over the seeds)")
        print(f"{'data':<22}{'select_metric':<20}{'pos. micro-F1':>16}{'macro-F1':>16}"
              f"{'best epoch':>12}")
        for name, data in sets.items():
            for select in args.select:
                runs = [train(data, select, seed, args.epochs, work) for seed in args.seeds]
                pos = [r["test"].get("positive_micro_f1", r["test"]["micro_f1"]) for r in runs]
                macro = [r["test"]["macro_f1"] for r in runs]
                epochs = [r["best"]["epoch"] for r in runs]
                sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
                print(f"{name:<22}{select:<20}{statistics.mean(pos):>9.4f} ±{sd(pos):.4f}"
                      f"{statistics.mean(macro):>9.4f} ±{sd(macro):.4f}"
                      f"{' '.join(map(str, epochs)):>12}", flush=True)


if __name__ == "__main__":
    main()
