"""Metrics of a model on a labelled split, identical on every rank (reltrain/scoring.py counts
every example exactly once under any world size)."""

from __future__ import annotations

import numpy as np
import torch.nn as nn

from reltrain import distributed as D
from reltrain.data.dataset import RelationDataset
from reltrain.scoring import eval_loader, predict_probs
from reltrain.training.metrics import compute_metrics


def evaluate(model: nn.Module, dataset: RelationDataset, batch_size: int, labels: list[str],
             ctx: D.DistContext, progress: bool = False, desc: str = "eval",
             precision=None) -> tuple[dict, np.ndarray]:
    """Metrics of ``model`` on a labelled split, identical on every rank; also the predictions."""
    probs = predict_probs(model, eval_loader(dataset, batch_size, ctx), len(dataset), ctx,
                          progress, desc, precision)
    pred = probs.argmax(axis=1)
    return compute_metrics(dataset.split.labels, pred, labels), pred
