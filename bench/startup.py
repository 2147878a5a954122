"""The start of ``reltrain predict MODEL --text ...`` against ``python -c "import torch"``: the
wall time of each in a fresh process, alternated, median of ``--repeats``.

    python bench/startup.py
    python bench/startup.py --repeats 9 --src /path/to/other/checkout/src   # another version

Trains a CNN for one epoch on deepke-zh (Chinese: jieba's dictionary is part of the start) and one
on the bundled English example, then times one sentence through each. ``--src`` puts another
checkout's ``src`` first on PYTHONPATH, to set two versions side by side on one machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, ROOT, train_deepke  # noqa: E402

SENTENCES = {"zh": ("张三出生于北京。", "张三", "北京"),
             "en": ("Alice Moreau was born in Dunmore .", "Alice Moreau", "Dunmore")}


def wall(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--src", help="another checkout's src folder to time instead of this one")
    args = ap.parse_args()
    if args.src:  # every process of the bench, the training ones too: their checkpoints must be
        # the layout of the version that reads them
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [args.src, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="reltrain-startup-") as tmp:
        tmp = Path(tmp)
        train_deepke(args.data, tmp / "zh", tmp / "cache", 1, 2, ["train.epochs=1"])
        example = ROOT / "src" / "reltrain" / "example_data"
        subprocess.run([sys.executable, "-m", "reltrain", "train", f"output_dir={tmp / 'en'}",
                        *(f"data.{s}={example / (s + '.jsonl')}" for s in ("train", "valid", "test")),
                        "train.epochs=1", "log.progress=false", f"data.cache_dir={tmp / 'cache'}"], check=True, capture_output=True,
                       env=env)
        cmds = {"import torch": [sys.executable, "-c", "import torch"]}
        for lang, (text, head, tail) in SENTENCES.items():
            cmds[f"predict --text ({lang} CNN)"] = [
                sys.executable, "-m", "reltrain", "predict", str(tmp / lang), "--text", text,
                "--head", head, "--tail", tail]
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(args.repeats):
            for name, cmd in cmds.items():
                times[name].append(wall(cmd, env))
    base = statistics.median(times["import torch"])
    print(f"{'command':<26}{'median s':>9}{'min s':>8}{'vs import torch':>17}")
    for name, values in times.items():
        print(f"{name:<26}{statistics.median(values):>9.2f}{min(values):>8.2f}"
              f"{statistics.median(values) / base:>17.2f}")


if __name__ == "__main__":
    main()
