"""Fault tolerance: exact resume, preemption, elastic restarts after SIGKILL, bad files."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from reltrain.artifacts.save import write_checkpoint
from reltrain.artifacts.training_state import load_training_state
from reltrain.training.resume import read_checkpoint
from reltrain.cli import main
from reltrain.runtime.errors import UserError

from conftest import cli_error, data_overrides, run, torchrun as torchrun_n, training_of, weights_of

pytestmark = pytest.mark.slow

BASE = ["log.progress=false", "train.batch_size=16", "model.cnn.num_filters=32"]

# Runs reltrain train, but the worker kills or signals itself once, at a chosen step.
INTERRUPTING = """
import os, signal, sys
from pathlib import Path
from reltrain.cli import main
from reltrain.training.trainer import Trainer

rank, at, sig, marker = os.environ.get("RANK", "0"), int(os.environ["AT_STEP"]), \\
    getattr(signal, os.environ["SIGNAL"]), Path(os.environ["MARKER"])
real = Trainer._run_step

def run_step(self, batch, step):
    if rank == os.environ.get("SIGNAL_RANK", "0") and step == at and not marker.exists():
        marker.write_text("done")
        os.kill(os.getpid(), sig)
    return real(self, batch, step)

Trainer._run_step = run_step
sys.exit(main(["train", *sys.argv[1:]]))
"""


def weights(run_dir: Path) -> dict:
    return weights_of(run_dir / "checkpoints/last")


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert sa["test"] == sb["test"] and sa["best"] == sb["best"]
    strip = lambda r: {k: v for k, v in r.items() if "seconds" not in k and "per_s" not in k}  # noqa: E731
    la, lb = ([strip(json.loads(x)) for x in (d / "metrics.jsonl").read_text().splitlines()]
              for d in (a, b))
    assert la == lb


@pytest.fixture(scope="module")
def reference(small_en, tmp_path_factory) -> Path:
    """Three epochs in one go."""
    out = tmp_path_factory.mktemp("ref") / "run"
    assert main(["train", *data_overrides(small_en), *BASE, "train.epochs=3", f"output_dir={out}"]) == 0
    return out


def test_stop_and_resume_equals_one_go(reference, small_en, tmp_path):
    out = tmp_path / "run"
    assert main(["train", *data_overrides(small_en), *BASE, "train.epochs=1", f"output_dir={out}"]) == 0
    assert main(["train", *data_overrides(small_en), *BASE, "train.epochs=3", f"output_dir={out}"]) == 0
    assert_same_run(reference, out)


def test_a_run_without_a_validation_split_resumes_too(small_en, tmp_path, capsys):
    """Its best epoch is the latest, with no metric: a state the checkpoint check once refused, so
    such a run started afresh instead of resuming."""
    files = {k: v for k, v in small_en.items() if k != "valid"}
    out = tmp_path / "run"
    args = ["train", *data_overrides(files), *BASE, f"output_dir={out}"]
    assert main([*args, "train.epochs=1"]) == 0
    capsys.readouterr()
    assert main([*args, "train.epochs=2"]) == 0
    err = capsys.readouterr().err
    assert "resuming from" in err and "afresh" not in err
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in history] == [1, 2]


def test_a_resumed_runs_weights_are_in_the_model_before_it_is_wrapped(small_en, tmp_path, monkeypatch):
    """Build, load, then wrap (DDP starts every rank from the weights it is given)."""
    from reltrain.runtime import distributed as D

    out = tmp_path / "run"
    args = ["train", *data_overrides(small_en), *BASE, f"output_dir={out}"]
    assert main([*args, "train.epochs=1"]) == 0
    saved = weights(out)
    seen, real = [], D.wrap
    monkeypatch.setattr(D, "wrap", lambda model, *a, **k: seen.append(
        {k: v.clone() for k, v in model.state_dict().items()}) or real(model, *a, **k))
    assert main([*args, "train.epochs=2"]) == 0
    assert len(seen) == 1 and all(torch.equal(seen[0][k], saved[k]) for k in saved)


def test_sigterm_saves_mid_epoch_and_the_same_command_resumes(reference, small_en, tmp_path):
    script = tmp_path / "interrupting.py"
    script.write_text(INTERRUPTING)
    out = tmp_path / "run"
    cmd = [sys.executable, str(script), *data_overrides(small_en), *BASE, "train.epochs=3",
           f"output_dir={out}"]
    env = {"AT_STEP": "20", "SIGNAL": "SIGTERM", "MARKER": str(tmp_path / "marker")}
    first = run(cmd, env)
    assert first.returncode == 143, first.stderr[-2000:]
    assert "to resume: reltrain train" in first.stderr and f"output_dir={out}" in first.stderr
    saved = training_of(out / "checkpoints/last")["state"]
    # signalled during step 20; the stop is agreed during the next step: saved after step 22
    assert saved["step"] == 22 and saved["epoch"] == 2 and saved["batch_in_epoch"] == 7
    second = run(cmd, env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming from" in second.stderr
    assert_same_run(reference, out)


def torchrun(args, env=None, restarts=0, timeout=300):
    return torchrun_n(2, *args, extra_env=env, restarts=restarts, timeout=timeout)


@pytest.fixture(scope="module")
def ddp_reference(small_en, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddpref") / "run"
    result = torchrun(["-m", "reltrain", "train", *data_overrides(small_en), *BASE,
                       "train.batch_size=8", "train.epochs=3", f"output_dir={out}"])
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_sigkilled_worker_is_restarted_by_torchrun_and_ends_the_same(ddp_reference, small_en, tmp_path):
    script = tmp_path / "interrupting.py"
    script.write_text(INTERRUPTING)
    out = tmp_path / "run"
    env = {"AT_STEP": "22", "SIGNAL": "SIGKILL", "SIGNAL_RANK": "1", "MARKER": str(tmp_path / "m")}
    result = torchrun([str(script), *data_overrides(small_en), *BASE, "train.batch_size=8",
                       "train.epochs=3", "ckpt.every_steps=5", f"output_dir={out}"], env, restarts=1)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "m").exists()  # the kill happened (during epoch 2: 15 steps per epoch)
    assert "resuming from" in result.stderr
    assert_same_run(ddp_reference, out)


def test_sigterm_on_one_rank_stops_all_consistently(ddp_reference, small_en, tmp_path):
    script = tmp_path / "interrupting.py"
    script.write_text(INTERRUPTING)
    out = tmp_path / "run"
    args = [str(script), *data_overrides(small_en), *BASE, "train.batch_size=8", "train.epochs=3",
            f"output_dir={out}"]
    env = {"AT_STEP": "17", "SIGNAL": "SIGTERM", "SIGNAL_RANK": "1", "MARKER": str(tmp_path / "m")}
    first = torchrun(args, env)
    assert first.returncode != 0
    # signalled during step 17; under DDP the ranks vote every 8 steps: after 24, read after 25
    assert training_of(out / "checkpoints/last")["state"]["step"] == 25
    second = torchrun(args, env)
    assert second.returncode == 0, second.stderr[-3000:]
    assert_same_run(ddp_reference, out)


def test_corrupted_latest_checkpoint_falls_back_to_the_previous(reference, small_en, tmp_path):
    out = tmp_path / "run"
    args = ["-m", "reltrain", "train", *data_overrides(small_en), *BASE, f"output_dir={out}"]
    assert run([sys.executable, *args, "train.epochs=2"]).returncode == 0
    last = out / "checkpoints/last"
    state = last / "training_state.pt"
    state.write_bytes(state.read_bytes()[:1000])  # truncated (also its hard-linked ckpt-*)
    explicit = run([sys.executable, "-m", "reltrain", "train", *data_overrides(small_en), *BASE,
                    f"resume={last}", f"output_dir={tmp_path / 'other'}"])
    assert explicit.returncode == 2, explicit.stderr[-2000:]
    assert "training_state.pt: not a readable reltrain training state" in explicit.stderr
    resumed = run([sys.executable, *args, "train.epochs=3"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "trying the previous checkpoint" in resumed.stderr
    assert "ckpt-00000015 (epoch 2" in resumed.stderr  # the end of epoch 1: 15 steps
    assert_same_run(reference, out)


def test_checkpoint_of_another_model_is_a_clear_error(reference, small_en, tmp_path):
    result = run([sys.executable, "-m", "reltrain", "train", *data_overrides(small_en), *BASE,
                  "model.name=pcnn", f"resume={reference / 'checkpoints/last'}",
                  f"output_dir={tmp_path}"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "does not match this run: model.name was 'cnn', now 'pcnn'" in result.stderr


def _tampered(payload: dict, how: str) -> None:
    rank = payload["rank_states"][0]
    changes = {
        "epoch a string": lambda: payload["state"].update(epoch="3"),
        "step negative": lambda: payload["state"].update(step=-1),
        "a state key missing": lambda: payload["state"].pop("bad_epochs"),
        "best of an unknown metric": lambda: payload["state"].update(best={"metric": "x", "value": 1.0, "epoch": 1}),
        "no rank states": lambda: payload.update(rank_states=[]),
        "python RNG cut short": lambda: rank["rng"]["python"][1].pop(),
        "numpy RNG keys a list": lambda: rank["rng"]["numpy"].update(keys=[0] * 624),
        "torch RNG of floats": lambda: rank["rng"].update(torch=torch.zeros(5)),
        "progress a string": lambda: rank["progress"].update(examples="many"),
        "optimizer missing": lambda: payload.pop("optimizer"),
        "world size zero": lambda: payload.update(world_size=0),
        "optimizer of another model": lambda: payload["optimizer"]["param_groups"][0].update(params=[0]),
        "global batch missing": lambda: payload.pop("global_batch_size"),
        "sparse optimizer state missing": lambda: payload["optimizer"].pop("sparse"),
    }
    changes[how]()


@pytest.mark.parametrize("how", ["epoch a string", "step negative", "a state key missing",
                                 "best of an unknown metric", "no rank states",
                                 "python RNG cut short", "numpy RNG keys a list",
                                 "torch RNG of floats", "progress a string", "optimizer missing",
                                 "world size zero", "optimizer of another model",
                                 "global batch missing", "sparse optimizer state missing"])
def test_a_tampered_training_state_is_one_line(reference, small_en, tmp_path, capsys, how):
    """resume=PATH may name a stranger's file: every field a restore reads is checked first."""
    payload = training_of(reference / "checkpoints/last")
    _tampered(payload, how)
    path = shutil.copytree(reference / "checkpoints/last", tmp_path / "tampered")
    torch.save(payload, path / "training_state.pt")
    line = cli_error(capsys, "train", *data_overrides(small_en), *BASE, "train.epochs=4",
                     f"resume={path}", f"output_dir={tmp_path / 'run'}")
    assert "tampered: " in line and ("not a resumable checkpoint" in line
                                        or "state does not fit this run" in line), line


def test_only_weights_only_loading(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    path = tmp_path / "training_state.pt"
    torch.save({"format": "reltrain-training-state", "version": 1, "x": Evil()}, path)
    with pytest.raises(UserError, match="training_state.pt: not a readable reltrain training state"):
        load_training_state(path)


def test_a_compressed_member_is_refused_before_reading(reference, small_en, tmp_path, capsys):
    path = shutil.copytree(reference / "checkpoints/last", tmp_path / "packed")
    state = path / "training_state.pt"
    with zipfile.ZipFile(reference / "checkpoints/last/training_state.pt") as src, \
            zipfile.ZipFile(state, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename))
    line = cli_error(capsys, "train", *data_overrides(small_en), *BASE, f"resume={path}",
                     f"output_dir={tmp_path / 'run'}")
    assert "compressed member" in line


def test_unwritable_output_dir(small_en, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run([sys.executable, "-m", "reltrain", "train", *data_overrides(small_en), *BASE,
                  "train.epochs=1", f"output_dir={blocker / 'run'}"])
    assert result.returncode == 2 and "cannot write the run directory" in result.stderr


def test_full_disk_keeps_the_previous_checkpoint(reference, tmp_path, monkeypatch):
    last = shutil.copytree(reference / "checkpoints/last", tmp_path / "last")
    ck = read_checkpoint(last)
    before = {p.name: p.read_bytes() for p in last.iterdir()}

    def full_disk(obj, f, *a, **k):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(UserError, match="cannot write the checkpoint .*last: No space left on device"):
        write_checkpoint(last, ck.model, ck.training, {"epoch": 9})
    assert {p.name: p.read_bytes() for p in last.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]  # no temporary left behind
