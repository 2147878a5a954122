"""Class probabilities of a model over a dataset (each relation's own for a model of several
relations a pair), each example once: in one process a plain loop over length-sorted batches;
under DDP (validation, test, ``reltrain evaluate`` under torchrun) each rank scores every W-th
of the same batches and the shares are gathered."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn as nn

from reltrain.runtime import distributed as D
from reltrain.data.dataset import RelationDataset, eval_batches
from reltrain.runtime.precision import FP32


def predict_probs(model: nn.Module, dataset: RelationDataset, batch_size: int,
                  device: torch.device, precision=None, progress: bool = False,
                  desc: str = "predict") -> np.ndarray:
    """(N, C) class probabilities in dataset order, in this process alone."""
    batches = eval_batches(dataset.lengths, batch_size)
    return _in_order([_scored(model, dataset, batches, device, precision, progress, desc)],
                     len(dataset))


def gathered_probs(model: nn.Module, dataset: RelationDataset, batch_size: int,
                   ctx: D.DistContext, precision=None, progress: bool = False,
                   desc: str = "eval") -> np.ndarray:
    """``predict_probs`` with each rank scoring a share, on every rank. ``model`` unwrapped:
    ranks may hold different numbers of batches, and a DDP forward would wait for ranks that
    never join."""
    if not ctx.distributed:
        return predict_probs(model, dataset, batch_size, ctx.device, precision, progress, desc)
    mine = eval_batches(dataset.lengths, batch_size)[ctx.rank::ctx.world_size]
    local = _scored(model, dataset, mine, ctx.device, precision, progress, desc)
    return _in_order(ctx.all_gather_objects(local), len(dataset))


@torch.no_grad()
def _scored(model: nn.Module, dataset: RelationDataset, batches: list[np.ndarray],
            device: torch.device, precision, progress: bool, desc: str):
    """(indices, probabilities) of ``batches``, in batch order; probabilities None for none."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    # several relations a pair: each relation's own probability
    activate = torch.sigmoid if getattr(model, "multi_label", False) else partial(torch.softmax, dim=-1)
    probs = []
    for indices in tqdm(batches, desc=desc, disable=not progress, unit="batch", leave=False):
        batch = dataset.batch(indices)
        if device.type == "cuda":
            batch = batch.pin_memory()
        batch = batch.to(device, non_blocking=True)
        with (precision or FP32).autocast(device):
            logits = model(**batch.inputs())  # (B, C)
        probs.append(activate(logits.float()).cpu().numpy())
    model.train(was_training)
    return (np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64),
            np.concatenate(probs) if probs else None)


def _in_order(parts: list, num_examples: int) -> np.ndarray:
    indices = np.concatenate([p[0] for p in parts])
    probs = np.concatenate([p[1] for p in parts if p[1] is not None])
    order = np.argsort(indices, kind="stable")
    assert np.array_equal(indices[order], np.arange(num_examples)), "an example went missing"
    return probs[order]
