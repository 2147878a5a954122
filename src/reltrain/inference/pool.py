"""Prediction in worker processes, results in input order. On a CPU each worker predicts whole
chunks (tokenize, model on one thread, output lines) while the main process reads and writes,
so everything scales with the cores; on a GPU the workers tokenize. A worker is a fresh process
(children.py) that loads the model from its file; ``lm`` models predict in the main process.
"""

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
    """``fn(predictor, item)`` for each item, in ``workers`` processes that each load the
    predictor from ``source`` (path, runtime, amp), yielded in input order. Item i goes to worker
    i % workers, so each worker's results come back in input order too; at most two items per
    worker are in flight, so memory stays bounded whatever the input's size. ``fn`` must be a
    module-level function (or a partial of one); ``stop`` is called while waiting and may raise."""
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
