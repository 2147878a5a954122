"""Metrics of a model on a labelled split, identical on every rank (evaluation/scoring.py counts
every example exactly once under any world size)."""

from __future__ import annotations

import numpy as np
import torch.nn as nn

from reltrain.runtime import distributed as D
from reltrain.data.dataset import RelationDataset
from reltrain.evaluation.scoring import gathered_probs
from reltrain.evaluation.metrics import compute_metrics


def evaluate(model: nn.Module, dataset: RelationDataset, batch_size: int, labels: list[str],
             ctx: D.DistContext, progress: bool = False, desc: str = "eval",
             precision=None, negative: int | None = None,
             with_loss: bool = False) -> tuple[dict, np.ndarray]:
    """Metrics of ``model`` on a labelled split, identical on every rank (with the positive
    figures when ``negative`` names the "no relation" label; ``with_loss``: the mean
    cross-entropy too, which unlike the others moves with float rounding between world sizes);
    also the probabilities, (N, C) in the split's order."""
    if getattr(dataset, "task", "classify") == "extract":
        from reltrain.evaluation.span_decode import evaluate_spans

        return evaluate_spans(model, dataset, batch_size, ctx, progress, desc, precision)
    probs = gathered_probs(model, dataset, batch_size, ctx, precision, progress, desc)
    gold = dataset.split.labels
    metrics = compute_metrics(gold, probs.argmax(axis=1), labels, negative)
    if not with_loss:
        return metrics, probs
    known = gold >= 0
    picked = probs[np.flatnonzero(known), gold[known]].astype(np.float64)
    metrics["loss"] = float(-np.log(np.maximum(picked, 1e-12)).mean()) if picked.size else None
    return metrics, probs
