"""Metrics of a model on a labelled split, identical on every rank (evaluation/scoring.py counts
every example exactly once under any world size)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from reltrain.runtime import distributed as D
from reltrain.data.dataset import RelationDataset
from reltrain.evaluation.scoring import gathered_probs
from reltrain.evaluation.metrics import (compute_metrics, multi_label_metrics,
                                        tune_label_thresholds)
from reltrain.evaluation.span_decode import evaluate_spans


def evaluate(model: nn.Module, dataset: RelationDataset, batch_size: int, labels: list[str],
             ctx: D.DistContext, progress: bool = False, desc: str = "eval",
             precision=None, negative: int | None = None,
             with_loss: bool = False, tune: bool = False) -> tuple[dict, np.ndarray]:
    """Metrics of ``model`` on a labelled split, identical on every rank (with the positive
    figures when ``negative`` names the "no relation" label; ``with_loss``: the mean
    cross-entropy too, which unlike the others moves with float rounding between world sizes);
    also the probabilities, (N, C) in the split's order. A model of several relations a pair
    answers each relation above its threshold; ``tune`` (validation) chooses them first."""
    if getattr(dataset, "task", "classify") == "extract":
        return evaluate_spans(model, dataset, batch_size, ctx, progress, desc, precision)
    probs = gathered_probs(model, dataset, batch_size, ctx, precision, progress, desc)
    gold = dataset.split.labels
    if getattr(model, "multi_label", False):
        return _multi_label(model, gold, probs, labels, negative, with_loss, tune), probs
    metrics = compute_metrics(gold, probs.argmax(axis=1), labels, negative)
    if not with_loss:
        return metrics, probs
    known = gold >= 0
    picked = probs[np.flatnonzero(known), gold[known]].astype(np.float64)
    metrics["loss"] = float(-np.log(np.maximum(picked, 1e-12)).mean()) if picked.size else None
    return metrics, probs


def _multi_label(model: nn.Module, gold: np.ndarray, probs: np.ndarray, labels: list[str],
                 negative: int | None, with_loss: bool, tune: bool) -> dict:
    """The figures of a model of several relations a pair: every rank holds the same gathered
    probabilities, so every rank chooses the same thresholds."""
    if tune:
        chosen = tune_label_thresholds(gold, probs, negative)
        model.thresholds.copy_(torch.from_numpy(chosen))
    answered = probs >= model.thresholds.cpu().numpy()[None, :]
    metrics = multi_label_metrics(gold, answered, labels, negative)
    if with_loss:
        keep = np.arange(len(labels)) != (-1 if negative is None else negative)
        p = np.clip(probs[:, keep].astype(np.float64), 1e-12, 1 - 1e-12)
        g = gold[:, keep].astype(bool)
        metrics["loss"] = float(-np.where(g, np.log(p), np.log1p(-p)).sum(axis=1).mean())
    return metrics
