"""Real processes on CPU with gloo, compared against the single-process result."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reltrain.cli import _parser

from conftest import (EXAMPLE_DIR, ROOT, WORKER_ENV, data_overrides, ok, read_jsonl, run, run_cli,
                      torchrun, user_error, weights_of)

pytestmark = pytest.mark.slow

COMMON = ["log.progress=false", "train.epochs=2"]  # dropout on: masks are per example


@pytest.fixture(scope="module")
def odd_data(tmp_path_factory) -> dict:
    """240 training rows (divisible by 2 and by the global batch), 79 valid and 79 test rows
    (divisible by neither 2 nor 3)."""
    root = tmp_path_factory.mktemp("odd")
    out = {"labels": str(EXAMPLE_DIR / "labels.txt")}
    for split, n in (("train", 240), ("valid", 79), ("test", 79)):
        lines = (EXAMPLE_DIR / f"{split}.jsonl").read_text().splitlines()[:n]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
        out[split] = str(root / f"{split}.jsonl")
    return out


@pytest.fixture(scope="module")
def runs(odd_data, tmp_path_factory) -> dict:
    """One process with batch 16 and two processes with batch 8 on the same data and seed."""
    root = tmp_path_factory.mktemp("runs")
    base = [*data_overrides(odd_data), *COMMON]
    ok(run_cli("train", *base, "train.batch_size=16", f"output_dir={root / 'one'}"))
    ok(torchrun(2, "-m", "reltrain", "train", *base, "train.batch_size=8", f"output_dir={root / 'two'}"))
    return {"one": root / "one", "two": root / "two"}


def metrics_log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_equal_one_with_the_global_batch(runs):
    one = weights_of(runs["one"] / "checkpoints/last")
    two = weights_of(runs["two"] / "checkpoints/last")
    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=0, atol=1e-5)
    for a, b in zip(metrics_log(runs["one"]), metrics_log(runs["two"])):
        assert a["valid"] == b["valid"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    # Every test row once, in input order, with the same answer as one process gave.
    answers = [[(a["text"], a["gold"], a["relation"]) for a in read_jsonl(r / "test_predictions.jsonl")]
               for r in (runs["one"], runs["two"])]
    assert answers[0] == answers[1] and len(answers[0]) == 79
    summary = json.loads((runs["two"] / "summary.json").read_text())
    assert (summary["world_size"], summary["batch_size"], summary["global_batch_size"]) == (2, 8, 16)
    # memory: the run's is every rank's with its children; rank 1 alone holds torch (> 100 MB)
    alone = json.loads((runs["one"] / "summary.json").read_text())
    assert alone["peak_rss_run_mb"] == alone["peak_rss_mb"] + alone["peak_rss_children_mb"]
    assert summary["peak_rss_run_mb"] > summary["peak_rss_mb"] + summary["peak_rss_children_mb"] + 100


def evaluate_json(result) -> dict:
    text = ok(result).stdout
    return json.loads(text[text.index("{"):])


@pytest.mark.parametrize("nproc", [2, 3])
def test_distributed_evaluation_is_exact(runs, odd_data, nproc):
    ckpt = str(runs["two"] / "checkpoints/best")
    alone = evaluate_json(run_cli("evaluate", ckpt, odd_data["test"]))
    spread = evaluate_json(torchrun(nproc, "-m", "reltrain", "evaluate", ckpt, odd_data["test"]))
    assert spread == alone and alone["num_examples"] == 79
    if nproc == 2:  # the test figures written by the 2-process training run, too
        summary = json.loads((runs["two"] / "summary.json").read_text())
        for key in ("macro_f1", "micro_f1", "macro_precision", "macro_recall", "per_class"):
            assert summary["test"][key] == alone[key]


def test_tutorial_launcher_script(odd_data, tmp_path):
    ok(run([sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2",
            str(ROOT / "scripts/reltrain_train.py"), *data_overrides(odd_data), *COMMON, "train.epochs=1",
            f"output_dir={tmp_path}"]))
    assert json.loads((tmp_path / "summary.json").read_text())["world_size"] == 2


def test_both_local_rank_spellings_are_accepted():
    for flag in ("--local-rank=1", "--local_rank=1"):
        assert _parser().parse_args(["train", flag, "train.epochs=1"]).local_rank == 1


def test_devices_convenience_goes_through_torch_distributed_run(odd_data, tmp_path):
    result = ok(run_cli("train", "devices=2", *data_overrides(odd_data), *COMMON,
                       "train.epochs=1", f"output_dir={tmp_path}"))
    assert "torch.distributed.run" in result.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["world_size"] == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_localhost(odd_data, tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
         "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=two-nodes",
         "-m", "reltrain", "train", *data_overrides(odd_data), *COMMON, "train.epochs=1",
         f"output_dir={tmp_path}"], env={**os.environ, **WORKER_ENV}, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    assert json.loads((tmp_path / "summary.json").read_text())["world_size"] == 2


FAILING = """
import os, sys
from reltrain.cli import main
from reltrain.training.trainer import Trainer

real = Trainer._run_step

def run_step(self, batch, step):
    if os.environ["RANK"] == "1" and step == 3:
        raise RuntimeError("injected failure on rank 1")
    return real(self, batch, step)

Trainer._run_step = run_step
sys.exit(main(["train", *sys.argv[1:]]))
"""


def test_a_failing_rank_stops_the_job(odd_data, tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    # A hang would hit the subprocess timeout and fail the test; the job must end by itself.
    result = torchrun(2, str(script), *data_overrides(odd_data), *COMMON, "dist.timeout_s=60",
                      f"output_dir={tmp_path / 'run'}", timeout=180)
    assert result.returncode != 0
    assert "injected failure on rank 1" in result.stdout + result.stderr


def test_data_parallel_without_gpus_says_so_and_trains(odd_data, tmp_path):
    result = ok(run_cli("train", "dist.strategy=dp", *data_overrides(odd_data), *COMMON,
                       "train.epochs=1", f"output_dir={tmp_path}"))
    assert "dist.strategy=dp needs GPUs" in result.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["strategy"] == "dp"


def test_strategy_ddp_without_a_launcher_is_a_clear_error(odd_data, tmp_path):
    result = run_cli("train", "dist.strategy=ddp", *data_overrides(odd_data), f"output_dir={tmp_path}")
    assert result.returncode == 2 and "needs a launcher" in result.stderr


def _buffers_worker(rank: int, port: int) -> None:
    import torch.distributed as dist

    from reltrain.config.load import load_config
    from reltrain.models import build_model
    from reltrain.runtime import distributed as D

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=1)
    ctx = D.DistContext(strategy="ddp", backend="gloo")
    transformer = build_model(load_config(None, ["model.name=transformer"]).model, 50, 3, 10)
    assert dict(transformer.named_buffers())  # sinusoidal positions: constant
    assert not D.wrap(transformer, ctx).broadcast_buffers
    with_stats = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    assert D.wrap(with_stats, ctx).broadcast_buffers
    dist.destroy_process_group()


def test_constant_buffers_are_not_broadcast_every_step():
    torch.multiprocessing.spawn(_buffers_worker, args=(free_port(),), nprocs=1)


def test_predict_on_two_processes_writes_the_same_bytes_as_one(runs, odd_data, tmp_path):
    lines = Path(odd_data["test"]).read_text().splitlines()
    lines[10] = '{"text": "broken"'
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    ckpt = str(runs["two"] / "checkpoints/best")
    args = ["predict", ckpt, str(data), "--skip-bad-rows", "--chunk-rows", "7"]
    ok(run_cli(*args, "--output", str(tmp_path / "one.jsonl")))
    ok(torchrun(3, "-m", "reltrain", *args, "--output", str(tmp_path / "three.jsonl")))
    ok(run_cli(*args, "--devices", "2", "--output", str(tmp_path / "two.jsonl")))
    one = (tmp_path / "one.jsonl").read_bytes()
    assert one == (tmp_path / "three.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert len(one.splitlines()) == 79 and b'{"line": 11' in one.splitlines()[10]
    bad = user_error(run_cli("predict", ckpt, str(data), "--chunk-rows", "7", "--devices", "2",
                             "--output", str(tmp_path / "x.jsonl")))  # the bad row is rank 1's
    assert "data.jsonl:11" in bad and not (tmp_path / "x.jsonl").exists()



# A whole reltrain run in each rank (run_train ends with teardown), then the threads left.
TEARDOWN_SCRIPT = """
import json, os, sys
from pathlib import Path
from reltrain.config.load import load_config
from reltrain.commands.train import run_train

run_train(load_config(overrides=sys.argv[2:]))
names = sorted(Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task"))
Path(sys.argv[1], os.environ["RANK"] + ".json").write_text(json.dumps(names))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread names from /proc")
def test_no_gloo_thread_outlives_a_run(tmp_path):
    """A process group still held after teardown is freed while the interpreter shuts down,
    where gloo's threads now and then aborted a rank that had finished its work."""
    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN_SCRIPT)
    ok(torchrun(2, str(script), str(tmp_path), *COMMON, "train.epochs=1", "train.batch_size=8",
                f"output_dir={tmp_path / 'run'}"))
    for rank in (0, 1):
        threads = json.loads((tmp_path / f"{rank}.json").read_text())
        assert threads and not [name for name in threads if "gloo" in name], threads


BROADCAST_SCRIPT = """
import json, os, sys
from pathlib import Path
import torch
import torch.distributed as dist
from reltrain.config.train import DistConfig
from reltrain.runtime import distributed as D

ctx = D.setup("cpu", DistConfig())
pickled = []
original = dist.broadcast_object_list
def counting(objects, src=0, **kw):
    if ctx.is_main:
        pickled.append(len(__import__("pickle").dumps(objects[0])))
    return original(objects, src=src, **kw)
dist.broadcast_object_list = counting
big = torch.arange(1_000_000, dtype=torch.float32)
tree = {"model": {"w": big, "b": torch.tensor([True, False]), "h": torch.ones(2, 3, dtype=torch.bfloat16)},
        "rng": [torch.arange(5, dtype=torch.uint8), 7], "state": {"epoch": 3}} if ctx.is_main else None
got = ctx.broadcast_state(tree)
agreed = ctx.agree(lambda: {"step": torch.tensor(11), "name": "x"})
ok = (torch.equal(got["model"]["w"], torch.arange(1_000_000, dtype=torch.float32))
      and got["model"]["b"].tolist() == [True, False] and got["model"]["h"].dtype == torch.bfloat16
      and got["rng"][0].tolist() == list(range(5)) and got["rng"][1] == 7
      and got["state"] == {"epoch": 3} and int(agreed["step"]) == 11 and agreed["name"] == "x")
Path(sys.argv[1], os.environ["RANK"] + ".json").write_text(json.dumps({"ok": ok, "pickled": pickled}))
D.teardown(ctx)
"""


def test_a_state_reaches_every_rank_with_its_tensors_outside_pickle(tmp_path):
    """A resumed run's checkpoint and the best weights go to every rank this way: only the
    outline is pickled (for BERT-base the whole pickle was ~1.3 GB per rank)."""
    script = tmp_path / "broadcast.py"
    script.write_text(BROADCAST_SCRIPT)
    ok(torchrun(2, str(script), str(tmp_path)))
    results = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert all(r["ok"] for r in results), results
    assert results[0]["pickled"] and max(results[0]["pickled"]) < 10_000  # 4 MB of floats sent


PIPE_SCRIPT = """
import os, sys
from pathlib import Path
import reltrain.commands.train as T
from reltrain.cli import main

def closed_pipe(summary):  # the reader of the output left (`| head`)
    raise BrokenPipeError(32, "Broken pipe")

if os.environ["RANK"] == "0":
    T._print_summary = closed_pipe
code = main(["train", *sys.argv[2:]])
Path(sys.argv[1], f"exit-{os.environ['RANK']}").write_text(str(code))
"""


def test_a_rank_whose_output_closes_leaves_no_other_rank_waiting(odd_data, tmp_path):
    script = tmp_path / "pipe.py"
    script.write_text(PIPE_SCRIPT)
    result = torchrun(2, str(script), str(tmp_path), *data_overrides(odd_data), *COMMON,
                      "train.epochs=1", f"output_dir={tmp_path / 'run'}", timeout=120)
    # Rank 0 prints only after the last collective: rank 1 has finished its run, not been left
    # at a barrier for the launcher (or the collective timeout) to end.
    assert (tmp_path / "exit-1").read_text() == "0", result.stderr[-3000:]
    assert (tmp_path / "exit-0").read_text() == "141"
    assert (tmp_path / "run" / "summary.json").is_file()
