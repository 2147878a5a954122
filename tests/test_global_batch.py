"""The global batch is what the user fixes: any split of it over processes and accumulation
micro-batches trains the same model, and a run resumes on another number of processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from reltrain.cli import main
from reltrain.config.load import load_config
from reltrain.runtime.errors import UserError
from reltrain.training.batching import plan_batches

from conftest import (EXAMPLE_DIR, encoder_args, make_tiny_bert, ok, read_jsonl, run_cli, torchrun,
                      training_of, user_error, weights_of)

pytestmark = pytest.mark.slow

# (processes, per-process batch, accumulation): all global batch 64
SPLITS = [(1, 64, 1), (1, 16, 4), (2, 16, 2), (4, 16, 1)]
BASE = ["log.progress=false", "train.global_batch_size=64"]
# Dropout stays on (model.dropout=0.5 for cnn/bilstm): its masks follow the examples.

INTERRUPTING = """
import os, signal, sys
from pathlib import Path
from reltrain.cli import main
from reltrain.training.trainer import Trainer

real = Trainer._run_step

def run_step(self, step, number):
    if os.environ.get("RANK", "0") == "0" and number == int(os.environ["AT_STEP"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, step, number)

Trainer._run_step = run_step
sys.exit(main(["train", *sys.argv[1:]]))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[str]:
    """193 training rows: 3 full global batches of 64 and a last step of one example, which
    leaves every rank but one without an example (a stand-in joins the all-reduce)."""
    root = tmp_path_factory.mktemp("gb")
    files = {}
    for split, n in (("train", 193), ("valid", 80), ("test", 80)):
        lines = (EXAMPLE_DIR / f"{split}.jsonl").read_text().splitlines()[:n]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
        files[split] = root / f"{split}.jsonl"
    return [f"data.{k}={v}" for k, v in files.items()] + [f"data.labels={EXAMPLE_DIR / 'labels.txt'}"]


def train(world: int, batch: int, out: Path, *args: str) -> Path:
    full = ["train", *args, f"train.batch_size={batch}", f"output_dir={out}"]
    if world == 1:
        assert main(full) == 0
    else:
        ok(torchrun(world, "-m", "reltrain", *full))
    return out


def split_runs(tmp: Path, data: list[str], *extra: str) -> dict:
    return {(w, b, a): train(w, b, tmp / f"{w}x{b}x{a}", *data, *BASE, *extra)
            for w, b, a in SPLITS}


def assert_same_training(a: Path, b: Path) -> None:
    wa, wb = (weights_of(d / "checkpoints/last") for d in (a, b))
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=0, atol=1e-5, msg=key)
    for ra, rb in zip(read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")):
        assert ra["valid"] == rb["valid"] and ra["global_batch_size"] == rb["global_batch_size"] == 64
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], abs=1e-5)


@pytest.fixture(scope="module")
def cnn_runs(data, tmp_path_factory) -> dict:
    return split_runs(tmp_path_factory.mktemp("cnn"), data, "train.epochs=3", "model.cnn.num_filters=32")


def test_every_split_of_the_global_batch_trains_the_same_cnn(cnn_runs):
    reference = cnn_runs[SPLITS[0]]
    for split, run_dir in cnn_runs.items():
        assert_same_training(reference, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["world_size"], summary["batch_size"], summary["accum_steps"],
                summary["global_batch_size"]) == (*split, 64)
        assert summary["test"] == json.loads((reference / "summary.json").read_text())["test"]
    log = (cnn_runs[(2, 16, 2)] / "train.log").read_text()
    assert "global batch 64 = 2 process(es) x batch 16 x 2 micro-batch(es) per step" in log


@pytest.mark.parametrize("name", ["bilstm", "lm"])
def test_every_split_trains_the_same_bilstm_and_lm(name, data, tmp_path):
    # The pretrained encoder's own dropout draws from torch's RNG, not per example, so this
    # tiny BERT has it off; reltrain's dropout before the classifier stays on.
    bert = make_tiny_bert(tmp_path, internal_dropout=0.0) if name == "lm" else ""
    extra = ["model.dropout=0.3"] if name == "lm" else []
    runs = split_runs(tmp_path, data, "train.epochs=2", *encoder_args(name, bert), *extra)
    for run_dir in runs.values():
        assert_same_training(runs[SPLITS[0]], run_dir)


def test_class_weights_average_over_the_global_batch(data, tmp_path):
    one = train(1, 64, tmp_path / "one", *data, *BASE, "train.epochs=1", "train.class_weights=balanced")
    acc = train(1, 16, tmp_path / "acc", *data, *BASE, "train.epochs=1", "train.class_weights=balanced")
    assert_same_training(one, acc)


def test_a_run_killed_on_two_processes_resumes_exactly_on_one(cnn_runs, data, tmp_path):
    script = tmp_path / "killing.py"
    script.write_text(INTERRUPTING)
    out = tmp_path / "run"
    args = [*data, *BASE, "train.epochs=3", "model.cnn.num_filters=32", "train.batch_size=16",
            "ckpt.every_steps=3", f"output_dir={out}"]
    killed = torchrun(2, str(script), *args, extra_env={"AT_STEP": "7"})
    assert killed.returncode != 0
    saved = training_of(out / "checkpoints/last")
    assert (saved["state"]["step"], saved["state"]["batch_in_epoch"], saved["world_size"]) == (6, 2, 2)
    resumed = ok(run_cli("train", *args))  # one process: accumulation 4 instead of 2
    assert "resuming on 1 process(es) a run saved by 2" in resumed.stderr
    assert "global batch 64 = 1 process(es) x batch 16 x 4" in resumed.stderr
    assert_same_training(cnn_runs[(2, 16, 2)], out)
    reference = json.loads((cnn_runs[(2, 16, 2)] / "summary.json").read_text())
    assert json.loads((out / "summary.json").read_text())["test"] == reference["test"]


def test_a_global_batch_that_cannot_be_formed_is_one_line(data, tmp_path):
    line = user_error(run_cli("train", *data, *BASE, "train.batch_size=24", "train.epochs=1",
                              f"output_dir={tmp_path / 'a'}"))
    assert "set train.batch_size=16" in line
    out = tmp_path / "b"
    ok(run_cli("train", *data, "log.progress=false", "train.batch_size=16",
               "train.accum_steps=2", "train.epochs=1", f"output_dir={out}"))  # global 32
    line = user_error(run_cli("train", "devices=3", *data, "log.progress=false",
                              "train.batch_size=16", "train.epochs=2", f"output_dir={out}"))
    assert "global batch of 32" in line and "cannot be split over 3 processes" in line


def test_plan_batches():
    cfg = load_config(None, ["train.batch_size=8", "train.global_batch_size=64"]).train
    assert plan_batches(cfg, 2).accum_steps == 4 and plan_batches(cfg, 8).accum_steps == 1
    with pytest.raises(UserError, match="cannot be split over 3 processes"):
        plan_batches(cfg, 3)
    with pytest.raises(UserError, match="set train.batch_size=4"):
        plan_batches(cfg, 16)  # 64 / 16 = 4 per process, less than one batch of 8
    cfg = load_config(None, ["train.batch_size=8", "train.accum_steps=3"]).train
    assert plan_batches(cfg, 2).global_batch == 48
    assert plan_batches(cfg, 1, saved_global=48).accum_steps == 6  # resumed on fewer processes
    cfg = load_config(None, ["train.batch_size=8", "train.accum_steps=3",
                             "train.global_batch_size=64"]).train
    with pytest.raises(UserError, match="train.accum_steps=3 does not give"):
        plan_batches(cfg, 2)
