"""Work in fresh child processes (reltrain/children.py), stop signals as a flag
(reltrain/stops.py), and no fork of a process that has imported torch anywhere in a run."""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from reltrain.runtime import children, stops
from reltrain.runtime.errors import Preempted

from conftest import SCRATCH, WORKER_ENV, data_overrides, ok

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and sessions")


def _session_and_parent() -> tuple[int, int]:
    return os.getsid(0), os.getppid()


def _log_and_return(value):
    logging.getLogger("reltrain.data").warning("a warning from the child")
    return value


def test_a_result_an_error_and_the_childs_log_come_back(caplog):
    assert children.call(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        children.call(divmod, 1, 0)
    with caplog.at_level(logging.INFO, logger="reltrain"):
        assert children.call(_log_and_return, 7) == 7
    assert "a warning from the child" in caplog.text


def _hold(mb: int) -> int:
    return len(b"\x01" * (mb << 20))  # resident, unlike a zeroed allocation


def _two_workers_holding(mb: int) -> list:
    return list(children.ordered_map(_hold, [mb, mb], 2))


def test_the_peak_of_children_that_ran_together_is_their_sum_grandchildren_included(monkeypatch):
    monkeypatch.setattr(children, "_peak_kb", 0)
    assert children.call(_two_workers_holding, 150) == [150 << 20] * 2
    # the kernel's RUSAGE_CHILDREN would say one worker's ~150 MB, and nothing of the grandchildren
    assert children.peak_rss_mb() > 300


def _state() -> str:
    return "helper"


def _tagged(state: str, item: int) -> tuple[str, int, int]:
    if item == 0:
        time.sleep(0.5)  # the first helper call is slow: this process takes items meanwhile
    return state, item, os.getpid()


def _big(mb: int) -> bytes:
    return b"\x01" * (mb << 20)


def test_a_pool_shares_the_work_with_this_process_in_input_order():
    with children.Pool(1, _state) as pool:  # _state as the warm-up: its answer is skipped
        pool.setup(_state)
        results = list(pool.map(_tagged, range(12), local="here"))
    assert [item for _, item, _ in results] == list(range(12))
    who = {state for state, _, _ in results}
    assert who == {"helper", "here"}, results
    assert all((pid == os.getpid()) == (state == "here") for state, _, pid in results)
    with children.Pool(2) as pool:  # no setup: fn(item), as ordered_map
        assert [len(b) for b in pool.map(_big, [3, 1, 2])] == [3 << 20, 1 << 20, 2 << 20]


def _stamped(mb: int) -> tuple[float, bytes]:
    return time.time(), b"\x01" * (mb << 20)


def test_a_child_goes_on_to_its_next_call_while_its_answer_waits_to_be_read():
    """An answer larger than a pipe holds must not keep a child idle while its parent is busy."""
    with children.Child() as child:
        child.send(_stamped, 8)
        child.send(_stamped, 0)
        time.sleep(1.0)  # the parent, busy: nothing read
        reading = time.time()
        first, second = child.receive(), child.receive()
    assert len(first[1]) == 8 << 20
    assert second[0] < reading - 0.5, (second[0], reading)


def test_the_child_is_a_new_process_in_a_session_of_its_own():
    """Ctrl-C at the terminal signals the foreground process group: not the child's."""
    session, parent = children.call(_session_and_parent)
    assert parent == os.getpid() and session != os.getsid(0)


def test_a_stop_while_waiting_ends_the_child_and_raises():
    with stops.StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGUSR1)  # noted only: this line and the next still run
        assert stop.signum == signal.SIGUSR1
        with children.Child() as child:
            child.send(time.sleep, 30)
            start = time.monotonic()
            with pytest.raises(Preempted) as stopped:
                child.receive(lambda: stop.check("while waiting"))
            proc = child.proc
        assert time.monotonic() - start < 10
    assert proc.returncode is not None  # ended with the block, not after its 30 s
    assert stopped.value.exit_code == 128 + signal.SIGUSR1 and "while waiting" in str(stopped.value)


def test_the_handler_notes_once_and_a_second_signal_acts_as_before():
    before = signal.getsignal(signal.SIGUSR1)
    seen = []
    signal.signal(signal.SIGUSR1, lambda *a: seen.append(a[0]))
    try:
        with stops.StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert stop.signum == signal.SIGUSR1
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler before it runs again
            assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, before)


_ORPHAN = textwrap.dedent("""
    import sys, time
    from reltrain.runtime import children
    child = children.Child()
    print(child.proc.pid, flush=True)
    child.send(time.sleep, 60)
    time.sleep(60)
""")


def test_a_child_whose_parent_is_killed_exits():
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **WORKER_ENV})
    pid = int(parent.stdout.readline())
    parent.kill()  # SIGKILL: no clean-up of any kind in the parent
    parent.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# Every process of the run gets this through PYTHONPATH: a fork in a process that has imported
# torch leaves a line in the log (subprocess and spawn exec without calling the at-fork hooks).
_SITECUSTOMIZE = textwrap.dedent("""
    import os, sys

    def _record_fork():
        if "torch" in sys.modules:
            with open(os.environ["RELTRAIN_FORK_LOG"], "a") as f:
                f.write(f"{os.getpid()} {sys.argv}\\n")

    os.register_at_fork(before=_record_fork)
""")


@pytest.mark.slow
def test_no_process_of_a_run_is_forked_after_torch_is_imported(small_en, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    forks = tmp_path / "forks.log"
    env = {**os.environ, **WORKER_ENV, "RELTRAIN_FORK_LOG": str(forks),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))}

    def reltrain(*args):
        return ok(subprocess.run([sys.executable, "-m", "reltrain", *args], env=env, cwd=SCRATCH,
                                 capture_output=True, text=True, timeout=600))

    # The detector works: a fork after `import torch` is recorded.
    subprocess.run([sys.executable, "-c", "import torch, os\nif os.fork() == 0: os._exit(0)"],
                   env=env, check=True)
    assert forks.read_text().count("\n") == 1
    forks.unlink()
    run = tmp_path / "run"
    # devices=2: torchrun's agent, two ranks with gloo, the preprocessing child, DataLoader
    # workers.
    reltrain("train", "devices=2", *data_overrides(small_en), "train.epochs=2",
             "data.num_workers=1",
             "log.progress=false", "model.cnn.num_filters=16", f"data.cache_dir={tmp_path / 'c'}",
             f"output_dir={run}")
    assert (run / "report.html").is_file()
    reltrain("predict", str(run / "checkpoints" / "best"), small_en["test"], "--workers", "2",
             "--chunk-rows", "10", "--output", str(tmp_path / "p.jsonl"))
    reltrain("export", str(run / "checkpoints" / "best"), str(tmp_path / "exported"), "--format",
             "onnx")
    reltrain("predict", str(tmp_path / "exported"), small_en["test"], "--workers", "2",
             "--chunk-rows", "10", "--runtime", "onnx", "--output", str(tmp_path / "o.jsonl"))
    assert not forks.exists(), forks.read_text()
