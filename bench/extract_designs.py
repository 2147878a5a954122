"""Two designs of task=extract side by side (issue 46): the span classifier (SpERT's: every
span of at most ``extract.max_width`` units is classified, ``extract.mentions=spans``) and the
tagger (each unit tagged as the first or a later unit of a mention of a type, or outside,
``extract.mentions=tags``). Both share the encoder and the pair classifier; each is trained by
the same command for the same epochs, and the table gives, per design, the training rate, the
validation figures of the epoch that selects, and the rate of ``reltrain predict`` (one process)
over the validation texts repeated to ``--rows`` lines, beside jieba alone on those lines on one
core (Chinese data only).

    python bench/extract_designs.py                               # DuIE, configs/duie.yaml, 3 epochs
    python bench/extract_designs.py --config configs/conll04-minilm.yaml --epochs 20 \\
        --set model.lm.pretrained=$M                               # CoNLL04 with MiniLM

Every run trains from scratch in a fresh process; nothing is cached between the two designs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepke_runs import ROOT
from extract_corpus import jieba_rate, predict, texts, write_corpus

DESIGNS = ("spans", "tags")
FIGURES = ("entities_f1", "relations_strict_f1", "triples_f1")


def train(config: str, design: str, epochs: int, extra: list[str], run: Path) -> tuple[dict, float]:
    """(the run's summary.json, its wall-clock seconds)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "reltrain", "train", "--config", config,
                           f"extract.mentions={design}", f"train.epochs={epochs}",
                           "log.progress=false", f"output_dir={run}", *extra],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"training extract.mentions={design} failed")
    return json.loads((run / "summary.json").read_text()), time.perf_counter() - start


def train_rate(run: Path) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    rates = [r["train_sent_per_s"] for r in rows if "train_sent_per_s" in r]
    return sum(rates) / len(rates) if rates else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "duie.yaml"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rows", type=int, default=20000, help="lines of the prediction corpus")
    p.add_argument("--set", nargs="*", default=[], help="more overrides for both runs")
    p.add_argument("--keep", help="a folder to keep both runs in (default: a temporary one)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="reltrain-designs-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(f"{args.config}, {args.epochs} epochs {' '.join(args.set)}".rstrip(), flush=True)
        print(f"{'design':<8}{'train s':>9}{'sent/s':>8}{'best ep':>8}"
              + "".join(f"{f.replace('_f1', ''):>17}" for f in FIGURES)
              + f"{'predict/s':>11}{'jieba/s':>9}{'vs jieba':>10}", flush=True)
        for design in DESIGNS:
            run = work / f"run-{design}"
            summary, seconds = train(args.config, design, args.epochs, args.set, run)
            valid = summary["best"]["valid"]
            source = Path(valid_file(run))
            sentences = write_corpus(texts(source), args.rows, work / "corpus.txt")
            chinese = any("\u4e00" <= ch <= "\u9fff" for ch in "".join(sentences[:50]))
            base = jieba_rate(sentences) if chinese else None
            rate, _, _ = predict(run, work / "corpus.txt", work / "out.jsonl", 1)
            figures = "".join(f"{valid[f]:>17.3f}" if f in valid else f"{'-':>17}"
                              for f in FIGURES)
            tail = (f"{base:>9.0f}{rate / base:>10.2f}" if base else f"{'-':>9}{'-':>10}")
            print(f"{design:<8}{seconds:>9.0f}{train_rate(run):>8.0f}"
                  f"{summary['best']['epoch']:>8}{figures}{rate:>11.0f}{tail}", flush=True)


def valid_file(run: Path) -> str:
    """The validation file the run read, from the config it saved."""
    import yaml

    return yaml.safe_load((run / "config.yaml").read_text())["data"]["valid"]


if __name__ == "__main__":
    main()
