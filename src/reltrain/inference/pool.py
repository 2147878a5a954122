"""Prediction in fresh helper processes that load the model from its file, results in input order.
They start before this process loads the model and import torch meanwhile. On a CPU each process,
this one included, predicts whole chunks; on a GPU the helpers tokenize and this process predicts
(an extraction model's, this process alone); ``lm`` models predict in this process alone."""

from __future__ import annotations

import gc
import importlib
from contextlib import contextmanager

from reltrain.runtime import children


def start(workers: int) -> children.Pool:
    """The helpers of a prediction in ``workers`` processes, this one included."""
    return children.Pool(max(workers - 1, 0), _warm)


def mode(predictor, helpers: bool) -> str:
    """``predict`` (whole chunks in helpers), ``encode`` (tokenize in helpers) or ``main``."""
    if not helpers or predictor.config.model.pretrained_encoder:
        return "main"
    if predictor.device.type == "cpu":
        return "predict"
    # an extraction model's units and candidate spans are cheap beside its scoring on a GPU
    return "main" if predictor.config.task == "extract" else "encode"


def _warm() -> None:
    """torch and the model code: most of a helper's start."""
    importlib.import_module("reltrain.inference.predictor")


@contextmanager
def one_thread():
    """This process predicting beside the helpers, one core each; its threads as they were after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def load(path: str, runtime: str, amp: str):
    """A helper's own predictor, which it keeps and passes to each call."""
    import torch

    from reltrain.inference.predictor import Predictor  # numpy, torch, tqdm only when used

    torch.set_num_threads(1)  # one process per core does the parallel work
    predictor = Predictor.from_checkpoint(path, device="cpu", runtime=runtime, amp=amp)
    gc.freeze()  # as long_lived, for the helper's life
    return predictor


@contextmanager
def long_lived():
    """What this process has loaded (torch, the model, the tokenizer's tables) left out of the
    garbage collector's passes while it predicts: each full pass would walk all of it again
    (docs/benchmarks.md)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
