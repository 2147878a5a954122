"""Dropout whose mask is a function of (train.seed, step, example, feature), not of where the
example runs, so training does not drift apart when devices are added (B batch, H features)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_MASK32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**31, so a 32-bit value times it never overflows int64


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A well-mixed 32-bit integer hash, elementwise on int64 tensors holding 32-bit values."""
    x = (((x >> 16) ^ x) * _MIX) & _MASK32
    x = (((x >> 16) ^ x) * _MIX) & _MASK32
    return (x >> 16) ^ x


def example_noise_seeds(seed: int, step: int, index: torch.Tensor) -> torch.Tensor:
    """(B,) seeds for the examples ``index`` (their positions in the split) at ``step``."""
    salt = hash32(torch.tensor((seed * 1_000_003 + step) & _MASK32, dtype=torch.int64))
    return hash32((index.to(torch.int64) ^ salt) & _MASK32)


class ExampleDropout(nn.Module):
    """Inverted dropout keyed by per-example seeds (plain dropout without them); ``stream``
    separates several layers' masks."""

    def __init__(self, p: float, stream: int = 0):
        super().__init__()
        self.p, self.stream = p, stream

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """``rows``: the example (an index into ``noise``) of each row of ``x``, whose rows then
        share their example's mask: a sentence's spans are hashed once, not once a span (a
        CoNLL04 batch's 2,000 spans made this a tenth of an fp32 training step)."""
        if not self.training or self.p == 0:
            return x
        if noise is None:
            return F.dropout(x, self.p, training=True)
        features = x[0].numel()
        cols = torch.arange(features, device=x.device, dtype=torch.int64) + self.stream * 7_919_000
        key = noise.to(x.device)[:, None] ^ hash32(cols)[None, :]  # (B, H)
        uniform = (hash32(key) >> 8).to(torch.float32) / 2.0**24  # exact in float32
        keep = uniform >= self.p
        if rows is not None:
            keep = keep[rows]
        return x * keep.reshape(x.shape).to(x.dtype) / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, stream={self.stream}"
