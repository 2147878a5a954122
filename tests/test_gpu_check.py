"""bench/gpu_check.py in smoke mode: the GPU script runs end to end on a CPU, so it cannot rot
before a GPU is lent."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, SHARED_DATA, run

pytestmark = pytest.mark.slow


def test_gpu_check_smoke_runs_every_check_and_writes_the_report(tiny_bert, tmp_path):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not here")
    out = tmp_path / "report"
    result = run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), str(out), "--smoke",
                  "--data", str(SHARED_DATA), "--lm", tiny_bert], timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert status == {"1 one GPU": "ok", "2 torchrun nproc 1": "ok", "3 DataParallel": "skipped",
                      "4 GPU checkpoint on CPU": "ok", "5 CPU ratio, utilisation": "ok",
                      "6 profiler": "ok"}
    checks = {c["name"]: c.get("result") for c in report["checks"]}
    one = checks["1 one GPU"]
    assert one["cnn-fp32"]["train_sent_per_s"] > 0 and one["lm-fp32"]["test_macro_f1"] >= 0
    assert one["lm-fp16"]["status"] == "skipped"
    # One process under torchrun trains exactly what one plain process trains.
    assert all(v["vs_single"]["identical"] for v in checks["2 torchrun nproc 1"].values())
    assert all(v["cpu_evaluate_equals_run"]["identical"]
               for v in checks["4 GPU checkpoint on CPU"].values())
    assert checks["5 CPU ratio, utilisation"]["lm_train_gflop_per_sentence"] > 0
    assert checks["6 profiler"]["steps"] >= 1 and (out / "profile_cnn.txt").stat().st_size > 0
    table = (out / "report.md").read_text()
    assert "| 1 one GPU | cnn-fp32 |" in table and "skipped: needs CUDA" in table
