"""Optimizer, LR schedule, loss and mixed precision from the config."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn



def build_optimizer(model: nn.Module, train_cfg) -> torch.optim.Optimizer:
    """Adam for reltrain's own encoders; AdamW with an encoder LR for a pretrained one."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    device = named[0][1].device.type if named else "cpu"
    # The fused kernel updates all parameters in one pass (about 10% of a CNN step on CPU);
    # it exists on CPU from torch 2.4 and on CUDA, and gives the same update as the loop.
    fused = {"fused": True} if _fused_supported(device) else {}
    if not _is_pretrained(model):
        return torch.optim.Adam([p for _, p in named], lr=train_cfg.lr,
                                weight_decay=train_cfg.weight_decay, **fused)
    groups: dict[tuple, list] = {}
    for name, p in named:
        in_encoder = "encoder" in name.split(".")  # "module.encoder..." under DDP
        no_decay = p.ndim == 1 or "norm" in name.lower()  # biases and LayerNorm weights
        lr = train_cfg.encoder_lr if in_encoder else train_cfg.lr
        groups.setdefault((lr, 0.0 if no_decay else train_cfg.weight_decay), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": lr, "weight_decay": wd}
                              for (lr, wd), ps in groups.items()], **fused)


def _is_pretrained(model: nn.Module) -> bool:
    from reltrain.distributed import unwrap

    return hasattr(getattr(unwrap(model), "encoder", None), "config")


def _fused_supported(device: str) -> bool:
    if device not in ("cpu", "cuda"):
        return False
    try:
        torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


class Schedule:
    """The LR schedule: ReduceLROnPlateau stepped on the validation metric after each epoch,
    or linear warm-up then linear decay to zero stepped after each optimizer step."""

    def __init__(self, optimizer, train_cfg, steps_per_epoch: int, pretrained: bool):
        kind = train_cfg.schedule
        self.per_step = kind == "linear" or (kind == "auto" and pretrained)
        if self.per_step:
            total = max(steps_per_epoch * train_cfg.epochs, 1)
            warmup = int(total * train_cfg.warmup_ratio)

            def factor(step: int) -> float:
                if step < warmup:
                    return (step + 1) / (warmup + 1)
                return max(0.0, (total - step) / max(total - warmup, 1))

            self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        else:
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer, mode="max", factor=train_cfg.lr_factor, patience=train_cfg.lr_patience)

    def after_step(self) -> None:
        if self.per_step:
            self.scheduler.step()

    def after_epoch(self, metric: float | None) -> None:
        if not self.per_step and metric is not None:
            self.scheduler.step(metric)

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state)


def build_schedule(optimizer, train_cfg, steps_per_epoch: int, model: nn.Module) -> Schedule:
    return Schedule(optimizer, train_cfg, steps_per_epoch, _is_pretrained(model))


class GlobalBatchLoss(nn.Module):
    """Cross-entropy as a share of the global batch's mean: a micro-batch's (class-weighted) sum
    over the global ``normaliser``, so all ranks' micro-batches add up to the global mean."""

    def __init__(self, weight: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("weight", weight)

    def normaliser(self, labels: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return torch.tensor(float(len(labels)), device=self._device())
        return self.weight[labels.to(self.weight.device)].sum()

    def _device(self) -> torch.device:
        return self.weight.device if self.weight is not None else torch.device("cpu")

    def forward(self, logits: torch.Tensor, labels: torch.Tensor,
                normaliser: torch.Tensor | float) -> torch.Tensor:
        total = nn.functional.cross_entropy(logits, labels, weight=self.weight, reduction="sum")
        return total / normaliser


def build_loss(train_cfg, train_labels: np.ndarray, num_labels: int) -> GlobalBatchLoss:
    """Cross-entropy; ``balanced`` weighs each class by n / (C * count), unseen classes by 0."""
    if train_cfg.class_weights == "none":
        return GlobalBatchLoss()
    counts = np.bincount(train_labels, minlength=num_labels).astype(np.float64)
    seen = counts > 0
    weights = np.zeros(num_labels)
    weights[seen] = counts.sum() / (seen.sum() * counts[seen])
    return GlobalBatchLoss(torch.tensor(weights, dtype=torch.float32))


def resolve_precision(setting: str, device: torch.device, model: nn.Module):
    """train.amp for this model on this device (see reltrain/precision.py)."""
    from reltrain.precision import resolve

    return resolve(setting, device, _is_pretrained(model))
