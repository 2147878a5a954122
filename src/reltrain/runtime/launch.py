"""The launcher's side: ``devices=N`` makes this process the torchrun agent of N local workers,
so a signal to ``reltrain`` reaches the agent, which passes it on and waits (no orphans, the
workers' status); and what a process reads of its launcher before torch is imported (the rest
of the launcher's environment is ``distributed.py``'s)."""

from __future__ import annotations

import logging
import os
import sys


def first_rank() -> bool:
    """What concerns the whole job is said once. Read when needed: under srun, RANK is only set
    once the run has joined its group (distributed.py: setup)."""
    return os.environ.get("RANK", "0") == "0"


def adopt_local_rank_flag(local_rank: int | None) -> None:
    """``torch.distributed.launch`` passes the local rank as a flag; torchrun and reltrain read
    ``LOCAL_RANK``."""
    if local_rank is not None and "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(local_rank)


def local_processes() -> int:
    """The processes a launcher started on this host (1 without one)."""
    try:
        return max(int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1), 1)
    except ValueError:
        return 1


def run_local_workers(devices: int, worker_args: list[str]) -> int:
    """Start ``python -m reltrain WORKER_ARGS`` as ``devices`` DDP workers; their exit status."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    launcher = ["--standalone", f"--nproc_per_node={devices}", "-m", "reltrain", *worker_args]
    print(f"reltrain: starting {devices} processes: torch.distributed.run {' '.join(launcher)}",
          file=sys.stderr, flush=True)
    # The agent logs each signal it forwards, each worker it closes and each that failed (its
    # loggers have levels of their own); the workers say what happened themselves, once.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(launcher))
    except SignalException as exc:
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        code = failure.exitcode
        if code < 0:  # killed by a signal the worker did not handle
            print(f"reltrain: worker rank {rank} was killed by signal {-code}", file=sys.stderr)
            return 128 - code
        return code or 1
    return 0
