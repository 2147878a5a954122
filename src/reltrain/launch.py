"""``devices=N``: this process becomes the torchrun agent of N local workers, so a signal to
``reltrain`` reaches the agent, which passes it on and waits (no orphans, the workers' status)."""

from __future__ import annotations

import logging
import sys


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
