"""Prediction over a large Chinese corpus against jieba alone, and peak memory by corpus size.

    python bench/predict_corpus.py --rows 20000 60000

Trains a CNN on deepke-zh for one epoch (or takes ``--checkpoint``), writes CSV corpora of the
given sizes by repeating deepke-zh's rows, then for each size times ``reltrain predict CORPUS
--output ...`` in a fresh process (tokenization, prediction and writing included) and reads its
peak RSS. The baseline, in the same run: jieba alone segmenting the same sentences on one core
(``jieba.lcut``, HMM on as reltrain uses it). Printed: sentences/s of each, their ratio, peak
RSS per size (the main process, and the largest of the worker processes that predict).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "deepke-zh"


def train_checkpoint(data: Path, work: Path) -> Path:
    out = work / "run"
    subprocess.run([sys.executable, "-m", "reltrain", "train", f"data.train={data / 'train.csv'}",
                    f"data.valid={data / 'valid.csv'}", f"data.labels={data / 'relation.csv'}",
                    "data.language=zh", "train.epochs=1", "log.progress=false", "log.plots=false",
                    f"data.cache_dir={work / 'cache'}", f"output_dir={out}"],
                   check=True, capture_output=True)
    return out / "checkpoints" / "best.pt"


def write_corpus(data: Path, rows: int, path: Path) -> list[str]:
    with open(data / "train.csv", encoding="utf-8", newline="") as f:
        source = list(csv.DictReader(f))
    sentences = []
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence", "head", "head_offset", "tail", "tail_offset"])
        for i in range(rows):
            r = source[i % len(source)]
            writer.writerow([r["sentence"], r["head"], r["head_offset"], r["tail"], r["tail_offset"]])
            sentences.append(r["sentence"])
    return sentences


def jieba_rate(sentences: list[str]) -> float:
    import jieba

    jieba.initialize()
    start = time.perf_counter()
    for s in sentences:
        jieba.lcut(s)
    return len(sentences) / (time.perf_counter() - start)


def predict(checkpoint: Path, corpus: Path, out: Path) -> tuple[float, float, float]:
    """(sentences/s, peak RSS MB, largest worker's peak RSS MB) of one ``reltrain predict``."""
    code = ("import resource, sys, time\nfrom reltrain.cli import main\nt = time.perf_counter()\n"
            "rc = main(sys.argv[1:])\nprint('SECONDS', time.perf_counter() - t)\n"
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
            "print('WORKER', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "predict", str(checkpoint), str(corpus),
                           "--output", str(out), "--progress", "false"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("predict failed")
    values = dict(line.split() for line in proc.stdout.splitlines() if line.startswith(("SECONDS", "RSS", "WORKER")))
    rows = sum(1 for _ in open(out, encoding="utf-8"))
    return rows / float(values["SECONDS"]), int(values["RSS"]) / 1024, int(values["WORKER"]) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--rows", type=int, nargs="+", default=[20000, 60000])
    p.add_argument("--checkpoint", help="a CNN checkpoint trained on Chinese text (default: train one)")
    args = p.parse_args()
    data = Path(args.data)
    with tempfile.TemporaryDirectory(prefix="reltrain-predict-") as tmp:
        work = Path(tmp)
        checkpoint = Path(args.checkpoint) if args.checkpoint else train_checkpoint(data, work)
        print(f"checkpoint {checkpoint}; {os.cpu_count()} cores", flush=True)
        print(f"{'rows':>8}{'predict sent/s':>16}{'jieba sent/s':>14}{'ratio':>8}{'peak RSS MB':>13}{'worker MB':>11}",
              flush=True)
        for rows in args.rows:
            corpus = work / f"corpus-{rows}.csv"
            sentences = write_corpus(data, rows, corpus)
            rate, rss, worker = predict(checkpoint, corpus, work / f"out-{rows}.jsonl")
            base = jieba_rate(sentences)
            print(f"{rows:>8}{rate:>16.0f}{base:>14.0f}{rate / base:>8.2f}{rss:>13.0f}{worker:>11.0f}", flush=True)


if __name__ == "__main__":
    main()
