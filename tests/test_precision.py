"""train.amp / --amp: which precision runs, why, and that evaluation and prediction use it too."""

import json

import numpy as np
import pytest
import torch

import reltrain
from reltrain.runtime import precision as P
from reltrain.cli import main
from reltrain.data.readers import read_records
from reltrain.runtime.errors import UserError

from conftest import data_overrides, scores

CPU = torch.device("cpu")


@pytest.mark.parametrize("native", [True, False])
def test_auto_on_a_cpu_uses_bf16_for_a_pretrained_encoder_only_with_bf16_hardware(monkeypatch, native):
    monkeypatch.setattr(P, "native_bf16_cpu", lambda: native)
    lm = P.resolve("auto", CPU, pretrained=True)
    assert lm.dtype == (torch.bfloat16 if native else None)
    assert ("in hardware" if native else "no bf16 arithmetic") in lm.reason
    own = P.resolve("auto", CPU, pretrained=False)
    assert own.dtype is None and own.name == "fp32" and "own encoders" in own.reason
    forced = P.resolve("bf16", CPU, pretrained=False)
    assert forced.dtype == torch.bfloat16 and (("emulated" in forced.reason) != native)


def test_off_and_fp16():
    assert P.resolve("off", CPU, True).dtype is None
    with pytest.raises(UserError, match="fp16 needs CUDA"):
        P.resolve("fp16", CPU, True)
    with pytest.raises(UserError, match="amp must be one of"):
        P.resolve("fp8", CPU, True)


def test_a_bf16_run_trains_evaluates_and_predicts_in_bf16(small_en, tmp_path):
    run_dir = tmp_path / "run"
    small = ["model.word_dim=16", "model.pos_dim=4", "model.cnn.num_filters=8", "model.cnn.kernel_sizes=[3]"]
    assert main(["train", *data_overrides(small_en), f"output_dir={run_dir}", "train.epochs=2",
                 "log.progress=false", "train.amp=bf16", *small]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["precision"] == "bf16"
    assert "precision bf16 (amp=bf16" in (run_dir / "train.log").read_text()
    best = run_dir / "checkpoints" / "best"
    labels = reltrain.load(best).labels
    records = read_records(small_en["test"], labels).records
    as_trained = scores(reltrain.load(best, amp="bf16"), records)
    in_fp32 = scores(reltrain.load(best, amp="off"), records)
    # bf16 keeps 8 bits of mantissa: the same model, visibly other probabilities.
    assert 1e-5 < np.abs(as_trained - in_fp32).max() < 0.1
    gold = np.array([labels.index(r.relation) for r in records])
    assert summary["test"]["accuracy"] == pytest.approx(float((as_trained.argmax(1) == gold).mean()))
