"""Prediction in fresh worker processes that load the model from its file, results in input order.
On a CPU each worker predicts whole chunks while the main process reads and writes; on a GPU
the workers tokenize; ``lm`` models predict in the main process."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack

from reltrain.children import Child

_PREDICTOR = None  # this worker's own predictor (set by _load)


def default_workers() -> int:
    """One worker per core, shared among the processes torchrun started on this host; at most 8."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min((os.cpu_count() or 1) // max(local, 1), 8))


def mode(predictor, workers: int) -> str:
    """``predict`` (whole chunks in workers), ``encode`` (tokenize in workers) or ``main``."""
    if workers <= 0 or predictor.config.model.name == "lm":
        return "main"
    return "predict" if predictor.device.type == "cpu" else "encode"


def _load(path: str, runtime: str, amp: str) -> None:
    import torch

    from reltrain.inference.predictor import Predictor

    global _PREDICTOR
    torch.set_num_threads(1)  # one process per core does the parallel work
    _PREDICTOR = Predictor.from_checkpoint(path, device="cpu", runtime=runtime, amp=amp)


def _call(fn: Callable, item):
    return fn(_PREDICTOR, item)


def ordered_map(fn: Callable, items: Iterable, source: tuple[str, str, str], workers: int,
                stop: Callable[[], None] | None = None) -> Iterator:
    """``fn(predictor, item)`` for each item in ``workers`` processes, yielded in input order: item
    i goes to worker i % workers, and at most two items per worker are in flight, so memory stays
    bounded. ``fn`` must be module-level (or a partial of one); ``stop`` is called while waiting."""
    with ExitStack() as stack:
        pool = [stack.enter_context(Child(_load, *source)) for _ in range(workers)]
        for child in pool:
            child.receive(stop)  # loaded (in parallel), or its error raised here
        pending: deque = deque()
        for index, item in enumerate(items):
            child = pool[index % workers]
            child.send(_call, fn, item)
            pending.append(child)
            if len(pending) > 2 * workers:
                yield pending.popleft().receive(stop)
        while pending:
            yield pending.popleft().receive(stop)
