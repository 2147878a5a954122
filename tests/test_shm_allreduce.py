"""The shared-memory gradient all-reduce against gloo's, with real processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from reltrain.errors import UserError
from reltrain.training import distributed as D
from reltrain.training import shm_allreduce as S

pytestmark = pytest.mark.skipif(not S.SHM_DIR.is_dir(), reason="no /dev/shm")

# Several collectives in a row (both generations of slots, reused), odd sizes, two dtypes.
SIZES = [(7, torch.float32), (1000, torch.float32), (64_003, torch.float32), (5, torch.float64),
         (64_003, torch.float32), (1, torch.float32)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _collective_worker(rank: int, world_size: int, port: int, path: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    shared = S.ShmAllReduce(Path(path), rank, world_size, 64_003 * 4, timeout_s=60)
    dist.barrier()
    for i, (size, dtype) in enumerate(SIZES):
        mine = torch.randn(size, dtype=dtype, generator=torch.Generator().manual_seed(100 * i + rank))
        ours = shared.mean_(mine.clone())
        theirs = mine / world_size  # what DDP's default hook hands to gloo
        dist.all_reduce(theirs)
        if world_size == 2:
            assert torch.equal(ours, theirs), f"collective {i}"
        else:
            torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
        everyone = [torch.empty_like(ours) for _ in range(world_size)]
        dist.all_gather(everyone, ours)
        assert all(torch.equal(ours, other) for other in everyone), "ranks disagree"
    dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [2, 3])
def test_mean_equals_gloo_and_is_the_same_on_every_rank(world_size):
    path = S.create_file(world_size, 64_003 * 4)
    try:
        torch.multiprocessing.spawn(_collective_worker, args=(world_size, _free_port(), str(path)),
                                    nprocs=world_size)
    finally:
        path.unlink()


PEER = """
import sys, time
from pathlib import Path
from reltrain.training.shm_allreduce import ShmAllReduce
ShmAllReduce(Path(sys.argv[1]), 1, 2, 64, 60)
time.sleep(float(sys.argv[2]))
"""


def _rank0_with_peer(peer_seconds: float, timeout_s: float):
    """Rank 0 in this process; rank 1 a process that maps the file, then sleeps and exits."""
    path = S.create_file(2, 64)
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(path), str(peer_seconds)])
    rank0 = S.ShmAllReduce(path, 0, 2, 64, timeout_s)
    deadline = time.monotonic() + 60
    while int(rank0._header[1, S._PID]) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    return path, peer, rank0


def test_a_peer_that_exits_is_reported_not_waited_for():
    path, peer, rank0 = _rank0_with_peer(0, timeout_s=30)
    try:
        while peer.poll() is None:  # reaped here; the next case keeps a zombie
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match=rf"rank 1 \(pid {peer.pid}\) exited"):
            rank0.mean_(torch.ones(4))
    finally:
        path.unlink()


def test_a_zombie_peer_counts_as_exited():
    path, peer, rank0 = _rank0_with_peer(0, timeout_s=30)
    try:
        stat = Path(f"/proc/{peer.pid}/stat")
        while stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="exited"):
            rank0.mean_(torch.ones(4))
    finally:
        peer.wait()
        path.unlink()


def test_a_peer_that_never_arrives_times_out():
    path, peer, rank0 = _rank0_with_peer(60, timeout_s=0.5)
    try:
        with pytest.raises(RuntimeError, match=r"waited \d+ s for rank 1.*dist.timeout_s"):
            rank0.mean_(torch.ones(4))
    finally:
        peer.kill()
        peer.wait()
        path.unlink()


def test_ranks_on_several_hosts_use_gloo_and_shm_says_why(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    ctx = D.DistContext(world_size=2, strategy="ddp", backend="gloo", cpu_allreduce="auto")
    assert D._shm_unusable(ctx, 64) == "the ranks are not all on this host"
    assert D.open_shm_allreduce(ctx, 64) is None
    ctx.cpu_allreduce = "shm"
    with pytest.raises(UserError, match="cpu_allreduce=shm cannot be used: the ranks are not all"):
        D.open_shm_allreduce(ctx, 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert D._shm_unusable(ctx, 64) is None
    ctx.device = torch.device("cuda", 0)
    assert "gloo on CPU" in D._shm_unusable(ctx, 64)
