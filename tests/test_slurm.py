"""srun without torchrun: the rank, world and rendezvous come from Slurm's variables."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from reltrain.runtime.errors import UserError
from reltrain.runtime.distributed import slurm_launch_env, slurm_tasks

from conftest import (SCRATCH, WORKER_ENV, ok, run_cli, torchrun, training_of, user_error,
                      weights_of)

SRUN = {"SLURM_NTASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "7123456",
        "SLURM_JOB_NODELIST": "gpu[03-05,09]", "SLURM_JOB_NAME": "train"}
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


def test_srun_variables_become_torchruns():
    env = slurm_launch_env(SRUN)
    assert env == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "gpu03",
                   "MASTER_PORT": str(15000 + 3456)}
    assert slurm_launch_env({**SRUN, "MASTER_PORT": "29999"})["MASTER_PORT"] == "29999"
    array = slurm_launch_env({**SRUN, "SLURM_ARRAY_JOB_ID": "555", "SLURM_ARRAY_TASK_ID": "17"})
    assert array["MASTER_PORT"] == str(15000 + 5517)
    assert slurm_tasks({**SRUN, "SLURM_JOB_NAME": "bash"}) == 0  # salloc's interactive shell
    with pytest.raises(UserError, match="SLURM_PROCID is not set"):
        slurm_launch_env({k: v for k, v in SRUN.items() if k != "SLURM_PROCID"})
    with pytest.raises(UserError, match="not a node list"):
        slurm_launch_env({**SRUN, "SLURM_JOB_NODELIST": "gpu[03-"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_tasks_as_srun_starts_them_train_like_torchrun(small_en, tmp_path):
    args = ["train", *(f"data.{k}={v}" for k, v in small_en.items()), "log.progress=false",
            "train.epochs=1", "train.batch_size=8"]
    ok(torchrun(2, "-m", "reltrain", *args, f"output_dir={tmp_path / 'torchrun'}"))
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    port = str(free_port())
    procs = [subprocess.Popen(
        [sys.executable, "-m", "reltrain", *args, f"output_dir={tmp_path / 'srun'}"],
        env={**base, **WORKER_ENV, **SRUN, "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank),
             "SLURM_LOCALID": str(rank), "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": port},
        cwd=SCRATCH, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][1][-3000:] + outputs[1][1][-3000:]
    a, b = (weights_of(tmp_path / d / "checkpoints/last") for d in ("torchrun", "srun"))
    assert training_of(tmp_path / "srun" / "checkpoints/last")["world_size"] == 2
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_half_set_launcher_variables_are_one_line_errors():
    base = {k: "" for k in LAUNCHER_VARS}
    line = user_error(run_cli("train", "train.epochs=1", env={**base, "SLURM_NTASKS": "2",
                                                              "SLURM_JOB_NAME": "train"}))
    assert "SLURM_NTASKS=2 but SLURM_PROCID, SLURM_LOCALID, SLURM_JOB_ID" in line
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    result = subprocess.run([sys.executable, "-m", "reltrain", "train", "train.epochs=1"],
                            capture_output=True, text=True, cwd=SCRATCH, env={**env, "RANK": "0"})
    assert "RANK is set but WORLD_SIZE is not" in user_error(result)


@pytest.mark.skipif(shutil.which("srun") is None, reason="Slurm is not installed here")
def test_under_a_real_srun(small_en, tmp_path):
    result = subprocess.run(["srun", "-n", "2", sys.executable, "-m", "reltrain", "train",
                             *(f"data.{k}={v}" for k, v in small_en.items()), "log.progress=false",
                             "train.epochs=1", f"output_dir={tmp_path}"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert training_of(tmp_path / "checkpoints/last")["world_size"] == 2
