"""Memory, disk and speed of preprocessing and training as the corpus grows, beside jieba's
one-core segmenting rate measured in the same run.

    python bench/scale.py --rows 30000,300000,1000000
    python bench/scale.py --rows 30000,300000 --no-train
    python bench/scale.py --rows 30000 --set data.min_freq=1   # every number a word: 50k words

The corpus of each size is deepke-zh's training rows over and over, each sentence with a
numbered suffix (``，编号000123``) so the vocabulary grows with it; validation is deepke-zh's own.
Every figure of a process tree is the sum of the resident memory of all its processes (the
command, the tokenizing child and its workers, the plot child), sampled every 0.2 s; ``anon`` is
its anonymous part, ``file`` the file-backed part (shared libraries and the cache's mapped pages,
which count as resident once read and which the kernel can drop and reread). Run it on
a quiet machine: a second job on the same cores makes every rate meaningless.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, ROOT  # noqa: E402

JIEBA_RATE = r"""
import csv, sys, time
import jieba
jieba.setLogLevel(60)
jieba.initialize()
rows = [r[0] for r in csv.reader(open(sys.argv[1], encoding="utf-8"))][1:int(sys.argv[2]) + 1]
start = time.perf_counter()
for text in rows:
    jieba.lcut(text)
print(len(rows) / (time.perf_counter() - start))
"""


def make_corpus(data: Path, rows: int, out: Path, suffix=lambda i: f"编号{i:06d}") -> None:
    """deepke-zh's training rows repeated to ``rows``, row i ending in ``suffix(i)``."""
    with open(data / "train.csv", encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header, source = next(reader), list(reader)
    with open(out, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for i in range(rows):
            text, *rest = source[i % len(source)]
            writer.writerow([f"{text}，{suffix(i)}", *rest])


def _tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [pid, *(p for c in children for p in _tree(int(c)))]


def _rss_mb(pid: int) -> tuple[float, float, float]:
    """Resident MB of one process: all of it, its anonymous part (what only swapping could take
    back) and its file-backed part (libraries and the mapped cache: page cache the kernel drops
    under pressure and rereads)."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return fields.get("VmRSS", 0.0), fields.get("RssAnon", 0.0), fields.get("RssFile", 0.0)


def measured(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, dict]:
    """Run ``cmd``; returns it, its wall time and the peaks of its process tree's summed resident
    memory in MB: ``rss`` (all), ``anon`` and ``file`` (each part's own peak)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    peak = {"rss": 0.0, "anon": 0.0, "file": 0.0}

    def sample() -> None:
        while proc.poll() is None:
            parts = [_rss_mb(p) for p in _tree(proc.pid)]
            for i, key in enumerate(peak):
                peak[key] = max(peak[key], sum(part[i] for part in parts))
            time.sleep(0.2)

    start = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    sampler.join()
    done = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if proc.returncode != 0:
        sys.stderr.write(err[-3000:])
        raise SystemExit(f"failed: {' '.join(cmd[:4])} ...")
    return done, seconds, peak


def disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def one_size(rows: int, data: Path, tmp: Path, train: bool, extra: list[str]) -> dict:
    corpus = tmp / f"train-{rows}.csv"
    make_corpus(data, rows, corpus)
    cache = tmp / f"cache-{rows}"
    options = [f"data.train={corpus}", f"data.valid={data / 'valid.csv'}",
               f"data.labels={data / 'relation.csv'}", "data.language=zh",
               f"data.cache_dir={cache}", "log.progress=false", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    pre, seconds, pre_rss = measured([sys.executable, "-m", "reltrain", "preprocess", *options],
                                     env=env, cwd=ROOT)
    entry = next(cache.iterdir())
    vocab = len(json.loads((entry / "vocab.json").read_text(encoding="utf-8")))
    jieba_rate = float(subprocess.run([sys.executable, "-c", JIEBA_RATE, str(corpus),
                                       str(min(rows, 20000))], capture_output=True, text=True,
                                      check=True).stdout)
    result = {"rows": rows, "vocab": vocab, "preprocess_s": seconds,
              "preprocess_rows_per_s": rows / seconds, "jieba_one_core_rows_per_s": jieba_rate,
              "preprocess_peak_rss_mb": pre_rss["rss"], "preprocess_peak_anon_mb": pre_rss["anon"],
              "cache_mb": disk_mb(entry)}
    if train:
        out = tmp / f"run-{rows}"
        _, seconds, rss = measured([sys.executable, "-m", "reltrain", "train", *options,
                                    "model.name=cnn", "train.epochs=1", f"output_dir={out}"], env=env, cwd=ROOT)
        summary = json.loads((out / "summary.json").read_text())
        result.update(train_sent_per_s=summary["train_sent_per_s_median"], train_s=seconds,
                      train_peak_rss_mb=rss["rss"], train_peak_anon_mb=rss["anon"],
                      train_peak_file_mb=rss["file"], train_peak_rss_self_mb=summary["peak_rss_mb"],
                      train_peak_rss_run_mb=summary["peak_rss_run_mb"])
    (corpus).unlink()
    return result


def _ratio(row: dict, first: dict, key: str) -> str:
    return f"{row[key]:>6.0f} ({row[key] / first[key]:.2f}x)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="30000,300000,1000000")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--no-train", action="store_true", help="preprocessing only")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a reltrain option for every run (repeatable)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="reltrain-scale-") as tmp:
        for rows in sizes:
            results.append(one_size(rows, Path(args.data).resolve(), Path(tmp), not args.no_train,
                                    args.set))
            print(json.dumps(results[-1]), flush=True)
    first = results[0]
    print(f"\n{os.cpu_count()} CPU(s); ratios against the {first['rows']:,}-row corpus")
    head = (f"{'rows':>10} {'vocab':>7} {'prep rows/s':>11} {'x jieba 1 core':>14} "
            f"{'prep RSS MB':>11} {'anon':>12} {'cache MB':>8}")
    if "train_sent_per_s" in first:
        head += f" {'train sent/s':>12} {'train RSS MB':>12} {'anon':>12} {'file':>5}"
    print(head)
    for r in results:
        line = (f"{r['rows']:>10,} {r['vocab']:>7,} {r['preprocess_rows_per_s']:>11,.0f} "
                f"{r['preprocess_rows_per_s'] / r['jieba_one_core_rows_per_s']:>13.2f}x "
                f"{_ratio(r, first, 'preprocess_peak_rss_mb')} {_ratio(r, first, 'preprocess_peak_anon_mb')}"
                f" {r['cache_mb']:>8.0f}")
        if "train_sent_per_s" in r:
            line += "".join(f" {_ratio(r, first, key)}" for key in
                            ("train_sent_per_s", "train_peak_rss_mb", "train_peak_anon_mb"))
            line += f" {r['train_peak_file_mb']:>5.0f}"
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
