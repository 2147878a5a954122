"""One model format: a checkpoint is the model folder an export writes, plus its training state;
one reader for both; a write killed between its renames is put right by the next run; the old
one-file layout is refused with one line."""

from __future__ import annotations

import json
import shutil

import pytest

import reltrain
from reltrain.artifacts.save import recover_checkpoints
from reltrain.cli import main

from conftest import data_overrides, run_cli, user_error, weights_of

pytestmark = pytest.mark.slow

ASK = ("--text", "alice was born in paris", "--head", "alice", "--tail", "paris")


@pytest.fixture(scope="module")
def run_dir(small_en, tmp_path_factory):
    out = tmp_path_factory.mktemp("format") / "run"
    assert main(["train", *data_overrides(small_en), "log.progress=false", "train.epochs=2",
                 "model.cnn.num_filters=16", f"output_dir={out}"]) == 0
    return out


def test_an_export_is_the_checkpoint_folder_without_its_training_state(run_dir, tmp_path):
    best = run_dir / "checkpoints" / "best"
    assert main(["export", str(best), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert {p.name for p in best.iterdir()} - {p.name for p in out.iterdir()} == {
        "training_state.pt", "epoch.json"}
    assert (out / "model.safetensors").read_bytes() == (best / "model.safetensors").read_bytes()
    assert (out / "vocab.json").read_bytes() == (best / "vocab.json").read_bytes()
    card = json.loads((out / "config.json").read_text())
    assert card["format"] == "reltrain-model" and card["metrics"]["test"]  # the run's test figures
    assert json.loads((best / "config.json").read_text())["metrics"]["test"] is None
    a, b = reltrain.load(best), reltrain.load(out)
    assert a.predict_text(*ASK[1::2]) == b.predict_text(*ASK[1::2])


def test_a_write_killed_between_its_renames_is_put_back(run_dir, tmp_path):
    checkpoints = shutil.copytree(run_dir / "checkpoints", tmp_path / "checkpoints")
    (checkpoints / "last").rename(checkpoints / "last.old.tmp")  # moved aside, successor lost
    (checkpoints / "best.tmp").mkdir()  # a folder half written
    (checkpoints / "best.tmp" / "config.json").write_text("{")
    recover_checkpoints(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir() if not p.name.startswith("ckpt-")) == [
        "best", "last"]
    for key, value in weights_of(checkpoints / "last").items():
        assert value.equal(weights_of(run_dir / "checkpoints" / "last")[key])


def test_a_resumed_run_recovers_a_folder_moved_aside(run_dir, small_en, tmp_path):
    copy = shutil.copytree(run_dir, tmp_path / "run")
    (copy / "checkpoints" / "last").rename(copy / "checkpoints" / "last.old.tmp")
    for numbered in (copy / "checkpoints").glob("ckpt-*"):
        shutil.rmtree(numbered)  # so only the recovered folder can resume the run
    assert main(["train", *data_overrides(small_en), "log.progress=false", "train.epochs=3",
                 "model.cnn.num_filters=16", f"output_dir={copy}"]) == 0
    assert "resuming from" in (copy / "train.log").read_text()
    assert json.loads((copy / "summary.json").read_text())["epochs_run"] == 3


def test_the_old_layout_is_one_line(run_dir, tmp_path):
    old = tmp_path / "old-run"
    (old / "checkpoints").mkdir(parents=True)
    (old / "checkpoints" / "best.pt").write_bytes(b"PK")
    for path in (old, old / "checkpoints" / "best.pt"):
        line = user_error(run_cli("predict", str(path), *ASK))
        assert "one .pt file per checkpoint was reltrain's old layout" in line, line
