"""Extraction over a large corpus (task=extract): sentences a second and peak memory of
``reltrain predict MODEL corpus.txt`` run four ways (``--modes``): ``one`` process on every core
(``--workers 1``), the default (``workers``: one process per core, each predicting whole
chunks), ``devices`` (``--devices 2``: two ranks through torch.distributed) and ``bf16`` (the
default with ``--amp bf16``: on a CPU with bf16 arithmetic the BiLSTM takes half the time),
against jieba alone segmenting the same Chinese text on one core just before each.

    python bench/extract_corpus.py                                  # trains its own DuIE model
    python bench/extract_corpus.py --zh-model runs/duie --lm-model runs/conll04
    python bench/extract_corpus.py --rows 20000 100000              # memory flat as rows grow?

The Chinese corpus repeats the texts of DuIE's train and valid files (``--duie``) to ``--rows``
lines of raw text, one sentence a line. Without ``--zh-model`` a model is trained for one epoch
on the first ``--train-rows`` DuIE sentences with configs/duie.yaml: the rate depends on how
many mentions a model answers (its pairs are scored), so a trained model is the fair one;
pass your own to time it. ``--lm-model`` (a CoNLL04 MiniLM model, configs/conll04-minilm.yaml)
adds the English rate on CoNLL04's texts repeated to ``--lm-rows`` lines. Every predict runs in
a fresh process, reading, encoding, scoring and writing included.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepke_runs import ROOT

SHARED = ROOT.parent / "shared" / "data"
MODES = {"one": ["--workers", "1"], "workers": [], "devices": ["--devices", "2"],
         "bf16": ["--amp", "bf16"]}


def texts(path: Path) -> list[str]:
    """The sentences of a DuIE file (JSON lines) or a SpERT file (a JSON array of tokens)."""
    raw = path.read_text(encoding="utf-8")
    if raw.lstrip().startswith("["):
        return [" ".join(row["tokens"]) for row in json.loads(raw)]
    return [json.loads(line)["text"] for line in raw.splitlines() if line.strip()]


def write_corpus(sentences: list[str], rows: int, path: Path) -> list[str]:
    out = [sentences[i % len(sentences)] for i in range(rows)]
    path.write_text("".join(s.replace("\n", " ") + "\n" for s in out), encoding="utf-8")
    return out


def jieba_rate(sentences: list[str]) -> float:
    """Sentences a second of jieba.lcut (HMM on) alone, on one core."""
    import jieba

    jieba.setLogLevel(60)
    jieba.initialize()
    start = time.perf_counter()
    for s in sentences:
        jieba.lcut(s)
    return len(sentences) / (time.perf_counter() - start)


def train_duie(work: Path, duie: Path, rows: int) -> Path:
    subset = work / "duie-train.jsonl"
    lines = (duie / "train.json").read_text(encoding="utf-8").splitlines()[:rows]
    subset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = work / "run-duie"
    proc = subprocess.run([sys.executable, "-m", "reltrain", "train", "--config",
                           str(ROOT / "configs" / "duie.yaml"), f"data.train={subset}",
                           f"data.valid={duie / 'valid.json'}", "train.epochs=1",
                           "log.progress=false", f"output_dir={run}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("training the DuIE model failed")
    return run


def predict(model: Path, corpus: Path, out: Path, extra: list[str]) -> tuple[float, float, float]:
    """(sentences/s, peak RSS MB of the main process, of the largest child) of one predict."""
    code = ("import resource, sys, time\nfrom reltrain.cli import main\nt = time.perf_counter()\n"
            "rc = main(sys.argv[1:])\nprint('SECONDS', time.perf_counter() - t)\n"
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
            "print('CHILD', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "predict", str(model), str(corpus),
                           "--output", str(out), "--progress", "false", *extra],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("predict failed")
    values = dict(line.split() for line in proc.stdout.splitlines()
                  if line.startswith(("SECONDS", "RSS", "CHILD")))
    lines = sum(1 for _ in open(out, encoding="utf-8"))
    return lines / float(values["SECONDS"]), int(values["RSS"]) / 1024, int(values["CHILD"]) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duie", default=str(SHARED / "duie"))
    p.add_argument("--conll04", default=str(SHARED / "conll04"))
    p.add_argument("--rows", type=int, nargs="+", default=[100000])
    p.add_argument("--zh-model", help="a DuIE extraction model (default: train one, one epoch)")
    p.add_argument("--train-rows", type=int, default=2000)
    p.add_argument("--lm-model", help="a CoNLL04 MiniLM extraction model (default: none)")
    p.add_argument("--lm-rows", type=int, default=2000)
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = p.parse_args()
    duie = Path(args.duie)
    with tempfile.TemporaryDirectory(prefix="reltrain-extract-") as tmp:
        work = Path(tmp)
        zh_model = Path(args.zh_model) if args.zh_model else train_duie(work, duie, args.train_rows)
        zh = texts(duie / "train.json") + texts(duie / "valid.json")
        print(f"{os.cpu_count()} cores; modes: " + "; ".join(
            f"{m} = predict {' '.join(a) or '(default)'}" for m, a in MODES.items()), flush=True)
        print(f"{'corpus':<9}{'rows':>8}{'mode':>9}{'sent/s':>9}{'jieba/s':>9}{'vs jieba':>10}"
              f"{'main MB':>9}{'child MB':>10}", flush=True)
        jobs = [("duie", zh_model, n, True) for n in args.rows]
        if args.lm_model:
            jobs.append(("conll04", Path(args.lm_model), args.lm_rows, False))
        for name, model, rows, chinese in jobs:
            corpus = work / f"{name}-{rows}.txt"
            source = zh if chinese else texts(Path(args.conll04) / "train.json")
            sentences = write_corpus(source, rows, corpus)
            for mode in args.modes:
                # jieba just before each predict: this machine's speed drifts by 10-40% within
                # minutes, so a ratio compares two runs a few seconds apart
                base = jieba_rate(sentences) if chinese else None
                rate, rss, child = predict(model, corpus, work / "out.jsonl", MODES[mode])
                ratio, base_col = ((f"{rate / base:>10.2f}", f"{base:>9.0f}") if base
                                   else (f"{'-':>10}", f"{'-':>9}"))
                print(f"{name:<9}{rows:>8}{mode:>9}{rate:>9.0f}{base_col}{ratio}{rss:>9.0f}"
                      f"{child:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
