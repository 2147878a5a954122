"""Peak memory (RSS) of the default CNN run on deepke-zh, and where it goes, beside `import torch`.

    python bench/memory.py                  # configs/deepke-zh-cnn.yaml, 10 epochs, fresh cache
    python bench/memory.py --epochs 3 --cached

Each run is a fresh process. The stages are read from /proc/self/status (VmRSS now, VmHWM the
peak so far) after each step of ``reltrain.commands.train`` and each epoch; the largest child's peak
(the tokenizing and plotting children) from RUSAGE_CHILDREN. The baseline, measured in the same
session, is a process that only imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, ROOT  # noqa: E402

DRIVER = r"""
import json, resource, sys
def status():
    d = dict(l.split(":", 1) for l in open("/proc/self/status") if l.startswith(("VmRSS", "VmHWM")))
    return {k: int(v.split()[0]) // 1024 for k, v in d.items()}
stages = []
def mark(name):
    stages.append({"stage": name, **status()})
mark("python")
import torch
mark("import torch")
import reltrain.commands.train as T
import reltrain.training.trainer as TR
mark("import reltrain.commands.train")
def after(owner, name, label):
    f = getattr(owner, name)
    def wrapped(*a, **k):
        out = f(*a, **k)
        mark(label(a, out) if callable(label) else label)
        return out
    setattr(owner, name, wrapped)
after(T, "prepare_run", "preprocessing (cache)")
after(T, "_build", "model, optimizer, loaders")
after(TR.Trainer, "_run_epoch", lambda a, out: f"epoch {out['epoch']} trained")
after(TR.Trainer, "_validate", "validated")
after(T, "_score_test", "test scored")
from reltrain.cli import main
code = main(sys.argv[1:])
mark("end")
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print("MEMORY " + json.dumps({"code": code, "stages": stages, "child_peak_mb": child,
                              "modules": sorted(m for m in sys.modules if "." not in m)}))
"""


def run(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=ROOT)
    line = [x for x in proc.stdout.splitlines() if x.startswith("MEMORY ")]
    if proc.returncode != 0 or not line:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit("the run failed")
    return json.loads(line[-1][len("MEMORY "):])


def baseline() -> int:
    code = "import torch, resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--cached", action="store_true", help="also a second run on the warm cache")
    args = ap.parse_args()
    torch_mb = baseline()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DEEPKE_ZH"] = str(Path(args.data).resolve())
        for name in ("fresh cache", "warm cache") if args.cached else ("fresh cache",):
            out = Path(tmp) / name.replace(" ", "-")
            r = run(["train", "--config", "configs/deepke-zh-cnn.yaml", f"output_dir={out}",
                     f"data.cache_dir={Path(tmp) / 'cache'}", f"train.epochs={args.epochs}",
                     "log.progress=false"])
            peak = r["stages"][-1]["VmHWM"]
            print(f"\n{name}: peak RSS {peak} MB = {peak / torch_mb:.2f} x `import torch` alone "
                  f"({torch_mb} MB); largest child (tokenizing) {r['child_peak_mb']} MB, "
                  f"mostly pages shared with the training process")
            previous = 0
            for s in r["stages"]:
                print(f"  {s['stage']:<28}{s['VmRSS']:>6} MB now {s['VmRSS'] - previous:>+6}"
                      f"   peak so far {s['VmHWM']:>5} MB")
                previous = s["VmRSS"]
            heavy = [m for m in ("jieba", "rjieba", "sklearn", "scipy", "matplotlib", "transformers")
                     if m in r["modules"]]
            print(f"  heavy modules in the training process: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    main()
