"""Prediction in fresh worker processes that load the model from its file, results in input order.
On a CPU each worker predicts whole chunks while the main process reads and writes; on a GPU
the workers tokenize; ``lm`` models predict in the main process."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from reltrain import children


def mode(predictor, workers: int) -> str:
    """``predict`` (whole chunks in workers), ``encode`` (tokenize in workers) or ``main``."""
    if workers <= 0 or predictor.config.model.pretrained_encoder:
        return "main"
    return "predict" if predictor.device.type == "cpu" else "encode"


def _load(path: str, runtime: str, amp: str):
    """A worker's own predictor, which it keeps and passes to each call."""
    import torch

    from reltrain.inference.predictor import Predictor

    torch.set_num_threads(1)  # one process per core does the parallel work
    return Predictor.from_checkpoint(path, device="cpu", runtime=runtime, amp=amp)


def ordered_map(fn: Callable, items: Iterable, source: tuple[str, str, str], workers: int,
                stop: Callable[[], None] | None = None) -> Iterator:
    """``fn(predictor, item)`` for each item, in input order, in ``workers`` processes that each
    load the predictor from ``source`` (path, runtime, amp); ``fn`` must be module-level."""
    return children.ordered_map(fn, items, workers, _load, source, stop)
