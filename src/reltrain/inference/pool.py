"""Prediction work in forked worker processes, results in input order.

On a CPU each worker predicts whole chunks of rows (tokenize, run the model on one thread,
format the output lines) while the main process only reads and writes: jieba, the model and the
JSON all scale with the cores, and no OpenMP thread pool competes with the tokenizers for them.
On a GPU the workers tokenize and the main process runs the model. Workers are forked after the
predictor is built, so they start at once and share its weights; a pretrained (``lm``)
tokenizer's threads do not survive fork well, so those models predict in the main process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from reltrain.forked import let_signals_in, signals_held

_PREDICTOR = None  # the predictor the workers inherit through fork


def default_workers() -> int:
    """One worker per core, shared among the processes torchrun started on this host; at most 8."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, min((os.cpu_count() or 1) // max(local, 1), 8))


def mode(predictor, workers: int) -> str:
    """``predict`` (whole chunks in workers), ``encode`` (tokenize in workers) or ``main``."""
    if (workers <= 0 or predictor.config.model.name == "lm"
            or "fork" not in multiprocessing.get_all_start_methods()):
        return "main"
    return "predict" if predictor.device.type == "cpu" else "encode"


def _start_worker() -> None:
    import torch

    torch.set_num_threads(1)  # one process per core does the parallel work
    let_signals_in()
    single = getattr(_PREDICTOR.model, "single_threaded", None)
    if single:  # an onnxruntime session: its thread pool did not come through fork
        single()


def _call(fn: Callable, item):
    return fn(_PREDICTOR, item)


def ordered_map(fn: Callable, items: Iterable, predictor, workers: int) -> Iterator:
    """``fn(predictor, item)`` for each item, computed in ``workers`` forked processes and
    yielded in input order; at most two items per worker are in flight, so memory stays
    bounded whatever the input's size. ``fn`` must be a module-level function."""
    from concurrent.futures import ProcessPoolExecutor

    global _PREDICTOR
    _PREDICTOR = predictor
    getattr(predictor.encoder.tokenize, "load", lambda: None)()  # once, shared by the workers
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker) as pool:
            pending: deque = deque()
            try:
                for item in items:
                    with signals_held():  # the first submit forks the workers
                        pending.append(pool.submit(_call, fn, item))
                    if len(pending) > 2 * workers:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            except BaseException:
                # Drop what has not started and wait for what has (at most two chunks a worker).
                # Not wait=False: the pool's manager thread then outlives the executor, and
                # Python 3.11's exit hook can write to its closed wake-up pipe ("OSError: Bad
                # file descriptor" and a traceback after the error; seen once in CI).
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        _PREDICTOR = None
