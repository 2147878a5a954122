"""Class probabilities of a model over a dataset, each example once under any world size; training
(validation, test) and inference (``Predictor``) both score through here."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from reltrain import distributed as D
from reltrain.data.dataset import EvalBatchSampler, RelationDataset, collate_batch
from reltrain.precision import FP32


def eval_loader(dataset: RelationDataset, batch_size: int, ctx: D.DistContext) -> DataLoader:
    """This rank's share of ``dataset`` in batches of similar length."""
    sampler = EvalBatchSampler(dataset.lengths, batch_size, ctx.rank, ctx.world_size)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_batch,
                      pin_memory=ctx.device.type == "cuda")


@torch.no_grad()
def predict_probs(model: nn.Module, loader: DataLoader, num_examples: int, ctx: D.DistContext,
                  progress: bool = False, desc: str = "eval", precision=None) -> np.ndarray:
    """(N, C) class probabilities in dataset order, on every rank. ``model`` unwrapped: ranks may
    hold different numbers of batches, and a DDP forward would wait for ranks that never join."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    indices, probs = [], []
    for batch in tqdm(loader, desc=desc, disable=not progress, unit="batch", leave=False):
        batch = batch.to(ctx.device, non_blocking=True)
        with (precision or FP32).autocast(ctx.device):
            logits = model(**batch.inputs())  # (B, C)
        probs.append(torch.softmax(logits.float(), dim=-1).cpu().numpy())
        indices.append(batch.index.cpu().numpy())
    model.train(was_training)
    local = (np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64),
             np.concatenate(probs) if probs else None)
    parts = ctx.all_gather_objects(local)
    all_idx = np.concatenate([p[0] for p in parts])
    all_probs = np.concatenate([p[1] for p in parts if p[1] is not None])
    order = np.argsort(all_idx, kind="stable")
    assert np.array_equal(all_idx[order], np.arange(num_examples)), "an example went missing"
    return all_probs[order]
