"""A gradient all-reduce through shared memory, for DDP ranks that all run on one CPU host.

Why: on CPU a training step is tens of milliseconds, and a gloo all-reduce between processes
on the same machine costs several of them whatever its size (loopback TCP, and a sleeping
thread to wake on each side; see docs/benchmarks.md). Here each rank writes its gradients
into a file in /dev/shm that every rank has mapped, raises a counter, and spins until the
others' counters reach the same collective. Then each rank sums its 1/N of the elements over
all slots in rank order into a shared result (so a rank reads the gradients' size once,
whatever N), raises a second counter, and once all have, copies the whole result. Every rank
holds the same bits, and with two ranks the same bits as gloo's all-reduce.

This module only moves bytes between mapped slots; ``training/distributed.py`` decides when it
is used, creates the file and tells the ranks its name.

File layout: a header row of 16 int64 per rank (the two counters and the pid), then two
generations of ``world_size`` slots and one result. Collective ``n`` uses generation
``n % 2``: a rank starts collective ``n`` only after every rank has summed its part of
collective ``n - 1``, and so has finished with generation ``n % 2`` of collective ``n - 2``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import torch

SHM_DIR = Path("/dev/shm")
_HEADER_INTS = 16  # 128 bytes per rank: each counter on its own cache line
_WRITTEN, _SUMMED, _PID = 0, 1, 2  # header columns: counters of the two phases, and the pid
_SPIN_S = 0.005  # spin this long before sleeping between looks: a step's jitter is ~1 ms


def file_size(world_size: int, slot_bytes: int) -> int:
    return world_size * _HEADER_INTS * 8 + 2 * (world_size + 1) * _round_up(slot_bytes)


def _round_up(nbytes: int, to: int = 64) -> int:
    return (nbytes + to - 1) // to * to


def create_file(world_size: int, slot_bytes: int) -> Path:
    """A new zero-filled file for the collective, with a name no other job uses.

    Its pages are reserved now: a sparse file on a tmpfs that fills up later would kill the
    job with SIGBUS on the first write to an unbacked page, instead of failing here.
    """
    path = SHM_DIR / f"reltrain-allreduce-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, file_size(world_size, slot_bytes))
    except OSError:
        path.unlink()
        raise
    finally:
        os.close(fd)
    return path


class ShmAllReduce:
    """Averages a tensor over the ranks that mapped the same file (see the module docstring)."""

    def __init__(self, path: Path, rank: int, world_size: int, slot_bytes: int, timeout_s: float):
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.slot_bytes = _round_up(slot_bytes)
        header_bytes = world_size * _HEADER_INTS * 8
        mapped = torch.from_file(str(path), shared=True, size=file_size(world_size, slot_bytes),
                                 dtype=torch.uint8)
        self._header = mapped[:header_bytes].view(torch.int64).view(world_size, _HEADER_INTS)
        self._slots = mapped[header_bytes:].view(2, world_size + 1, self.slot_bytes)  # last: result
        self._counters = self._header.numpy()  # numpy reads are cheap in a spin loop
        self._seq = int(self._header[rank, _WRITTEN])
        self._header[rank, _PID] = os.getpid()

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replace ``tensor`` (contiguous, same shape on every rank) by its mean over the ranks."""
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes > self.slot_bytes:
            raise ValueError(f"{nbytes} bytes do not fit the {self.slot_bytes}-byte slots")
        self._seq += 1
        *slots, result = [s[:nbytes].view(tensor.dtype) for s in self._slots[self._seq % 2]]
        # Divide before summing, as DDP's own hook does: with two ranks the sum is then
        # bit-identical to gloo's. Each element is summed in rank order, by one rank.
        torch.div(tensor, self.world_size, out=slots[self.rank])
        self._raise_and_wait(_WRITTEN)
        lo, hi = (tensor.numel() * r // self.world_size for r in (self.rank, self.rank + 1))
        mine = result[lo:hi].copy_(slots[0][lo:hi])
        for slot in slots[1:]:
            mine.add_(slot[lo:hi])
        self._raise_and_wait(_SUMMED)
        return tensor.copy_(result)

    def _raise_and_wait(self, column: int) -> None:
        """Set this rank's counter in ``column`` to this collective's number; wait for all."""
        self._header[self.rank, column] = self._seq  # x86 keeps this store after the data's
        start = time.monotonic()
        next_check = start + 0.1
        for rank in range(self.world_size):
            while self._counters[rank, column] < self._seq:
                now = time.monotonic()
                if now - start < _SPIN_S:
                    os.sched_yield()  # busy, but yields the core if another process wants it
                    continue
                time.sleep(0.0002)
                if now >= next_check:
                    next_check = now + 0.1
                    self._check_peer(rank, now - start)

    def _check_peer(self, rank: int, waited: float) -> None:
        pid = int(self._header[rank, _PID])
        if _exited(pid):
            raise RuntimeError(f"rank {rank} (pid {pid}) exited while rank {self.rank} waited for "
                               f"its gradients in the shared-memory all-reduce")
        if waited > self.timeout_s:
            raise RuntimeError(f"rank {self.rank} waited {waited:.0f} s for rank {rank}'s "
                               f"gradients in the shared-memory all-reduce (dist.timeout_s)")


def _exited(pid: int) -> bool:
    """True if ``pid`` is gone or a zombie (a dead child its launcher has not reaped yet)."""
    if pid <= 0:  # not written yet: the rank has not mapped the file
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def comm_hook(state: ShmAllReduce, bucket):
    """DDP comm hook: average the bucket's gradients through ``state`` before returning.

    No return annotation: DDP compares it with ``Future[Tensor]`` and this module's
    annotations are strings.
    """
    done: torch.futures.Future = torch.futures.Future()
    done.set_result(state.mean_(bucket.buffer()))
    return done
