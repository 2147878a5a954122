"""What goes wrong around a run: interrupts, the devices=N parent, two runs in one directory,
resuming with changed options, a finished run started again."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from reltrain.training.run_dir import RunDirLock

from conftest import SCRATCH, WORKER_ENV, cli_error, data_overrides, ok, run, run_cli, user_error

pytestmark = pytest.mark.slow

BASE = ["log.progress=false", "train.batch_size=16", "model.cnn.num_filters=32"]


# A shell starts a foreground job with the stop signals at their defaults, even where the suite
# inherited them ignored (a script's background job ignores SIGINT, nohup SIGHUP), and reltrain
# leaves an ignored signal ignored: so the runs of these tests start with the defaults too.
_FOREGROUND = ("import os, signal, sys\n"
               "for s in (signal.SIGINT, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
               "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def start(args: list[str], tag: str, cwd: Path, log_path: Path) -> subprocess.Popen:
    """``python -m reltrain ARGS`` in a session of its own (as a shell runs a foreground job),
    its processes marked with ``tag`` in their environment so that orphans can be found."""
    env = {**os.environ, **WORKER_ENV, "RELTRAIN_TEST_TAG": tag}
    return subprocess.Popen([sys.executable, "-c", _FOREGROUND, "-m", "reltrain", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True,
                            start_new_session=True)


def tagged_processes(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"RELTRAIN_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_for(predicate, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def trained_an_epoch(run_dir: Path) -> bool:
    path = run_dir / "metrics.jsonl"
    return path.is_file() and bool(path.read_text().strip())


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_devices_parent_passes_signals_on_and_exits_with_the_workers_status(small_en, tmp_path, sig, code):
    tag = uuid.uuid4().hex
    stderr = tmp_path / "stderr.txt"
    proc = start(["train", "devices=2", *data_overrides(small_en), *BASE, "train.epochs=500"],
                 tag, tmp_path, stderr)
    wait_for(lambda: any(trained_an_epoch(d) for d in (tmp_path / "runs").glob("*")))
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the foreground process group
    else:
        proc.send_signal(sig)  # a scheduler or `kill` signals the reltrain process only
    assert proc.wait(timeout=120) == code
    wait_for(lambda: not tagged_processes(tag), timeout=30)  # no orphaned launcher or worker
    text = stderr.read_text()
    assert "Traceback" not in text and text.count("stopped by") == 1, text[-3000:]
    line = next(ln for ln in text.splitlines() if "stopped by" in ln)
    assert f"stopped by {sig.name}" in line and "to resume: reltrain train devices=2" in line
    run_dir = next((tmp_path / "runs").glob("*"))
    assert f"output_dir={run_dir.relative_to(tmp_path)}" in line
    assert (run_dir / "checkpoints" / "last" / "training_state.pt").is_file()


def test_interrupted_run_without_output_dir_prints_the_command_that_resumes(small_en, tmp_path):
    tag = uuid.uuid4().hex
    args = ["train", *data_overrides(small_en), *BASE, "train.epochs=500"]
    proc = start(args, tag, tmp_path, tmp_path / "stderr.txt")
    wait_for(lambda: any(trained_an_epoch(d) for d in (tmp_path / "runs").glob("*")))
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    text = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in text and text.count("stopped by SIGINT") == 1, text[-2000:]
    command = shlex.split(text.split("to resume: ", 1)[1].splitlines()[0])
    assert command[:2] == ["reltrain", "train"] and command[-1].startswith("output_dir=runs/")
    saved = json.loads((tmp_path / command[-1].split("=", 1)[1] / "checkpoints/last/epoch.json").read_text())
    # The printed command, shortened to end soon, continues the same run directory.
    resumed = ok(run([sys.executable, "-m", "reltrain", *command[1:], "train.epochs=" +
                      str(saved["epoch"] + 1)], cwd=tmp_path))
    assert "resuming from runs/" in resumed.stderr
    assert len(list((tmp_path / "runs").iterdir())) == 1


def test_a_second_run_into_a_locked_directory_is_refused(small_en, tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", *data_overrides(small_en), *BASE, "train.epochs=1", f"output_dir={run_dir}"]
    lock = RunDirLock(run_dir)
    lock.acquire()
    try:
        line = user_error(run_cli(*args))
        assert "is in use by another run (pid" in line and str(os.getpid()) in line
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # nothing written
    finally:
        lock.release()
    ok(run_cli(*args))


def test_the_lock_of_a_killed_run_is_not_stale(small_en, tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from reltrain.training.run_dir import RunDirLock\n"
                               f"RunDirLock({str(run_dir)!r}).acquire()\n"
                               "print('held', flush=True)\ntime.sleep(300)"],
                              stdout=subprocess.PIPE, text=True, cwd=SCRATCH)
    assert holder.stdout.readline().strip() == "held"
    args = ["train", *data_overrides(small_en), *BASE, "train.epochs=1", f"output_dir={run_dir}"]
    assert "in use by another run" in user_error(run_cli(*args))
    holder.kill()
    holder.wait()
    ok(run_cli(*args))


def test_resume_refuses_options_it_cannot_honour_and_applies_the_others(small_en, tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["train", *data_overrides(small_en), *BASE, f"output_dir={run_dir}"]
    ok(run_cli(*args, "train.epochs=1"))
    config = (run_dir / "config.yaml").read_text()
    for change in ("train.lr=0.01", "train.seed=7", "model.dropout=0.1", "data.max_len=50",
                   "train.global_batch_size=64"):
        line = cli_error(capsys, *args, "train.epochs=2", change)
        key, value = change.split("=")
        if key == "train.global_batch_size":
            assert "it trained with a global batch of 16, not train.global_batch_size=64" in line
        else:
            assert f"does not match this run: {key} was" in line and f"set {key}=" in line, line
        assert (run_dir / "config.yaml").read_text() == config  # still says what ran
    resumed = ok(run_cli(*args, "train.epochs=2", "train.eval_batch_size=7"))
    assert "train.epochs changed from 1 to 2" in resumed.stderr
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["epochs"] == 2
    again = ok(run_cli(*args, "train.epochs=2"))
    assert "resuming" not in again.stderr
    assert "is complete (2 epoch(s) trained" in again.stderr
    assert "re-scoring the best checkpoint" in again.stderr
    assert [json.loads(x)["epoch"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_an_error_every_rank_agrees_on_is_said_once(small_en, tmp_path):
    run_dir = tmp_path / "run"
    lock = RunDirLock(run_dir)
    lock.acquire()
    try:
        result = run_cli("train", "devices=2", *data_overrides(small_en), *BASE,
                         f"output_dir={run_dir}")
    finally:
        lock.release()
    assert "is in use by another run" in user_error(result)  # one line, exit 2, no traceback
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "broken"\n')
    result = run_cli("train", "devices=2", f"data.train={bad}", *BASE, f"output_dir={tmp_path / 'b'}")
    assert "bad.jsonl:1: invalid JSON" in user_error(result)


def test_default_run_directories_never_collide(tmp_path, monkeypatch):
    from reltrain.config.load import load_config
    from reltrain.training.run_dir import new_run_dir

    monkeypatch.chdir(tmp_path)
    cfg = load_config()
    first, second = new_run_dir(cfg), new_run_dir(cfg)  # within one second: same timestamp
    assert first != second and first.is_dir() and second.is_dir()


def test_a_metrics_line_cut_short_by_a_kill_does_not_stop_the_resume(small_en, tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", *data_overrides(small_en), *BASE, f"output_dir={run_dir}"]
    ok(run_cli(*args, "train.epochs=1"))
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"epoch": 2, "train_lo')  # killed mid-append
    resumed = ok(run_cli(*args, "train.epochs=2"))
    assert "skipping a damaged line" in resumed.stderr
    assert [json.loads(x)["epoch"] for x in metrics.read_text().splitlines()] == [1, 2]


def test_ctrl_c_while_the_devices_workers_preprocess(tmp_path):
    from reltrain.data.examples import EXAMPLE_DIR

    lines = (EXAMPLE_DIR / "train.jsonl").read_text().splitlines()
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(lines * 60) + "\n")  # 72,000 rows: seconds of tokenizing
    tag = uuid.uuid4().hex
    stderr = tmp_path / "stderr.txt"
    proc = start(["train", "devices=2", f"data.train={big}", f"data.cache_dir={tmp_path / 'c'}",
                  *BASE, f"output_dir={tmp_path / 'run'}"], tag, tmp_path, stderr)
    wait_for(lambda: (tmp_path / "run" / "train.log").is_file())  # rank 0 is in preprocessing
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    wait_for(lambda: not tagged_processes(tag), timeout=30)
    text = stderr.read_text()
    assert "Traceback" not in text and text.count("stopped by SIGINT") == 1, text[-3000:]


def test_a_signal_while_starting_is_noted_and_stops_the_run_after_the_imports():
    """`reltrain train` imports torch under a StopRequest whose handler only notes the signal:
    raised in the middle of an extension module's import, an exception left numpy half-loaded."""
    from reltrain.runtime.errors import Preempted
    from reltrain.runtime.stops import StopRequest

    before, reached = signal.getsignal(signal.SIGUSR1), False
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)
        reached = True  # the signal did not cut the block short
    assert reached and signal.getsignal(signal.SIGUSR1) is before
    with pytest.raises(Preempted) as stopped:
        stop.check("while starting; nothing to save")
    assert stopped.value.exit_code == 128 + signal.SIGUSR1
    assert "while starting" in str(stopped.value)
