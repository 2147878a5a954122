"""Optimizer, LR schedule, loss and mixed precision from the config."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn

from reltrain.runtime.errors import UserError
from reltrain.runtime.distributed import unwrap
from reltrain.models.spans import span_loss


class Optimizers:
    """A run's optimizer: Adam (AdamW for a pretrained encoder) over the dense gradients and, with
    sparse embedding updates, SparseAdam over the word embedding's rows. One learning rate, the
    first optimizer's (the schedule sets it; the others follow), and one state dict."""

    def __init__(self, dense: torch.optim.Optimizer, sparse: torch.optim.Optimizer | None = None):
        self.dense, self.sparse = dense, sparse
        self.parts = [dense] + ([sparse] if sparse is not None else [])

    @property
    def param_groups(self) -> list[dict]:
        return self.dense.param_groups

    def follow_lr(self) -> None:
        if self.sparse is not None:
            for group in self.sparse.param_groups:
                group["lr"] = self.dense.param_groups[0]["lr"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        state = self.dense.state_dict()
        return state if self.sparse is None else {**state, "sparse": self.sparse.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        sparse = state.pop("sparse", None)
        if (sparse is None) != (self.sparse is None):
            had = "sparse" if sparse is not None else "dense"
            raise ValueError(f"it was trained with {had} embedding updates and this run's are "
                             f"not (train.sparse_embeddings)")
        self.dense.load_state_dict(state)
        if self.sparse is not None:
            self.sparse.load_state_dict(sparse)


def build_optimizer(model: nn.Module, train_cfg, sparse: nn.Embedding | None = None, *,
                    pretrained: bool) -> Optimizers:
    """Adam for reltrain's own encoders; AdamW with an encoder LR for a pretrained one;
    SparseAdam for ``sparse``, an embedding whose gradients are sparse."""
    lazy = [sparse.weight] if sparse is not None else []
    named = [(n, p) for n, p in model.named_parameters()
             if p.requires_grad and not any(p is q for q in lazy)]
    device = named[0][1].device.type if named else "cpu"
    # The fused kernel updates all parameters in one pass, a measurable share of a CNN step
    # (docs/benchmarks.md); it exists on CPU from torch 2.4 and on CUDA, the same update.
    fused = {"fused": True} if _fused_supported(device) else {}
    rows = RowAdam(lazy, lr=train_cfg.lr) if lazy else None
    if not pretrained:
        return Optimizers(torch.optim.Adam([p for _, p in named], lr=train_cfg.lr,
                                           weight_decay=train_cfg.weight_decay, **fused), rows)
    groups: dict[tuple, list] = {}
    for name, p in named:
        in_encoder = "encoder" in name.split(".")  # "module.encoder..." under DDP
        no_decay = p.ndim == 1 or "norm" in name.lower()  # biases and LayerNorm weights
        lr = train_cfg.encoder_lr if in_encoder else train_cfg.lr
        groups.setdefault((lr, 0.0 if no_decay else train_cfg.weight_decay), []).append(p)
    return Optimizers(torch.optim.AdamW([{"params": ps, "lr": lr, "weight_decay": wd}
                                         for (lr, wd), ps in groups.items()], **fused))


class RowAdam(torch.optim.SparseAdam):
    """``torch.optim.SparseAdam``: its options, state and update, with the square root of the
    second moments taken by numpy on a CPU (IEEE, correctly rounded). On an Intel Xeon (AVX-512,
    AMX) torch's float32 square root here came out at about 11-bit accuracy on one of the threads
    in some processes and not in others (the same input, in- or out-of-place), so two runs with
    the same seed trained two different models (docs/benchmarks.md, "Same seed, same model")."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in (p for p in group["params"] if p.grad is not None):
                grad = p.grad.coalesce()
                rows, g = grad._indices()[0], grad._values()
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v = state["exp_avg"][rows], state["exp_avg_sq"][rows]
                m = m + (g - m) * (1 - beta1)
                v = v + (g * g - v) * (1 - beta2)
                state["exp_avg"][rows], state["exp_avg_sq"][rows] = m, v
                step = state["step"]
                size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                root = torch.from_numpy(np.sqrt(v.numpy())) if v.device.type == "cpu" else v.sqrt()
                p.index_add_(0, rows, -size * (m / (root + group["eps"])))
        return loss


def sparse_embedding(setting: str, model: nn.Module, train_cfg, ctx) -> tuple[nn.Embedding | None, str]:
    """The word embedding to update sparsely, set to give sparse gradients (None: all dense),
    and why, for the log.

    Adam touches every row of the embedding at every step, used or not, so a step's cost grows
    with the vocabulary; SparseAdam updates the rows the step used. NCCL has no sparse all-reduce,
    so ``auto`` keeps GPUs dense: one GPU and many then train alike."""
    word = getattr(getattr(unwrap(model), "embed", None), "word", None)
    if setting == "false":
        return None, "dense embedding updates (train.sparse_embeddings=false)"
    if not isinstance(word, nn.Embedding) or not word.weight.requires_grad:
        if setting == "true":
            raise UserError("train.sparse_embeddings=true needs a trainable word embedding of "
                            "reltrain's own encoders (not model.name=lm or freeze_embeddings)")
        return None, "dense updates (no trainable word embedding of reltrain's own)"
    if setting == "auto" and ctx.device.type != "cpu":
        return None, ("dense embedding updates (auto: on a GPU; NCCL cannot all-reduce sparse "
                      "gradients)")
    if ctx.world_size > 1 and ctx.backend == "nccl":
        raise UserError("train.sparse_embeddings=true under dist.backend=nccl: NCCL cannot "
                        "all-reduce sparse gradients; use gloo, one process, or false")
    if train_cfg.weight_decay:
        if setting == "auto":
            return None, "dense embedding updates (auto: SparseAdam has no train.weight_decay)"
        raise UserError("train.sparse_embeddings=true: SparseAdam has no weight decay; set "
                        "train.weight_decay=0 or train.sparse_embeddings=false")
    word.sparse = True
    return word, (f"sparse embedding updates: {word.num_embeddings:,} word rows, only those a "
                  f"step uses are updated (train.sparse_embeddings={setting})")


def clip_gradients(params, max_norm: float) -> None:
    """``clip_grad_norm_`` over dense and sparse gradients alike: a sparse one is coalesced
    first (its repeated rows summed), so its norm is that of the dense gradient it stands for."""
    dense, sparse = [], []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            p.grad = p.grad.coalesce()
            sparse.append(p.grad._values())
        else:
            dense.append(p)
    total = nn.utils.get_total_norm([p.grad for p in dense] + sparse)
    nn.utils.clip_grads_with_norm_(dense, max_norm, total)
    if sparse:
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # clip_grads_with_norm_'s rule
        for values in sparse:
            values.mul_(scale.to(values.device))


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

    def __init__(self, optimizers: Optimizers, train_cfg, steps_per_epoch: int, pretrained: bool):
        optimizer, self.optimizers = optimizers.dense, optimizers
        self.per_step = linear_schedule(train_cfg, pretrained)
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
            self.optimizers.follow_lr()

    def after_epoch(self, metric: float | None) -> None:
        if not self.per_step and metric is not None:
            self.scheduler.step(metric)
            self.optimizers.follow_lr()

    def state_dict(self) -> dict:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state)


def linear_schedule(train_cfg, pretrained: bool) -> bool:
    """Whether the LR follows warm-up and linear decay, stepped per optimizer step."""
    return train_cfg.schedule == "linear" or (train_cfg.schedule == "auto" and pretrained)


class GlobalBatchLoss(nn.Module):
    """Cross-entropy as a share of the global batch's mean: a micro-batch's (class-weighted) sum
    over the global ``normaliser``, so all ranks' micro-batches add up to the global mean. With
    a 0/1 row of labels per example (several relations a pair), each relation's binary
    cross-entropy summed over the relations instead; the negative label (``negative``) is never
    a target there: a pair without relations has none above its threshold."""

    def __init__(self, weight: torch.Tensor | None = None, negative: int | None = None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.negative = negative

    def normaliser(self, labels: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return torch.tensor(float(len(labels)), device=self._device())
        return self.weight[labels.to(self.weight.device)].sum()

    def _device(self) -> torch.device:
        return self.weight.device if self.weight is not None else torch.device("cpu")

    def forward(self, logits: torch.Tensor, batch, normaliser: torch.Tensor | float) -> torch.Tensor:
        """``logits``: (B, C) of ``batch``'s examples."""
        if batch.label.ndim == 2:
            target = batch.label.float()
            if self.negative is not None:
                target[:, self.negative] = 0
            total = nn.functional.binary_cross_entropy_with_logits(logits.float(), target,
                                                                   reduction="sum")
            return total / normaliser
        total = nn.functional.cross_entropy(logits.float(), batch.label, weight=self.weight,
                                            reduction="sum")
        return total / normaliser


class SpanLoss(nn.Module):
    """task=extract: ``models.spans.span_loss`` as a share of the global batch (its examples)."""

    def __init__(self, entity_weight: float):
        super().__init__()
        self.entity_weight = entity_weight

    def normaliser(self, labels: torch.Tensor) -> torch.Tensor:
        return torch.tensor(float(len(labels)))

    def forward(self, out, batch, normaliser) -> torch.Tensor:
        span_logits, pair_logits, *owner = out
        return span_loss(span_logits.float(), pair_logits.float(), batch, normaliser,
                         self.entity_weight, *owner)


def build_loss(train_cfg, train_labels: np.ndarray, num_labels: int,
               negative: int | None = None) -> GlobalBatchLoss:
    """Cross-entropy; ``balanced`` weighs each class by n / (C * count), unseen classes by 0.
    ``train_labels`` of a 0/1 row per example: binary cross-entropy per relation."""
    if train_labels.ndim == 2 and train_cfg.class_weights != "none":
        raise UserError("train.class_weights=balanced weighs one relation a pair; this run "
                        "gives several (model.multi_label): leave it at none")
    if train_cfg.class_weights == "none":
        return GlobalBatchLoss(negative=negative)
    counts = np.bincount(train_labels, minlength=num_labels).astype(np.float64)
    seen = counts > 0
    weights = np.zeros(num_labels)
    weights[seen] = counts.sum() / (seen.sum() * counts[seen])
    return GlobalBatchLoss(torch.tensor(weights, dtype=torch.float32))
