"""Pieces shared by the encoders: embeddings with position features, masked pooling (B batch,
L tokens, D embedding size, H hidden size)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class Embeddings(nn.Module):
    """Word + head-position + tail-position embeddings, concatenated. Index 0 is padding."""

    def __init__(self, vocab_size: int, word_dim: int, pos_dim: int, pos_limit: int):
        super().__init__()
        num_positions = 2 * pos_limit + 2  # clipped offsets shifted to 1.., 0 for padding
        self.word = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.pos_head = nn.Embedding(num_positions, pos_dim, padding_idx=0)
        self.pos_tail = nn.Embedding(num_positions, pos_dim, padding_idx=0)
        self.dim = word_dim + 2 * pos_dim

    def forward(self, word, pos_head, pos_tail):
        return torch.cat([self.word(word), self.pos_head(pos_head), self.pos_tail(pos_tail)], dim=-1)


def masked_max(h: torch.Tensor, keep: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """Max over L of ``h`` (B, H, L) where ``keep`` (B, L) is True; 0 where nothing is kept.
    ``in_place``: overwrite ``h`` (saves a copy when nothing needs it after, nor its gradient)."""
    fill = h.masked_fill_ if in_place else h.masked_fill
    filled = fill(~keep[:, None, :], float("-inf"))
    pooled = filled.max(dim=2).values  # (B, H)
    return torch.where(keep.any(dim=1, keepdim=True), pooled, torch.zeros_like(pooled))


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """(length, dim) fixed sine/cosine position codes (Vaswani et al. 2017)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    out = torch.zeros(length, dim)
    out[:, 0::2] = torch.sin(pos * rate)
    out[:, 1::2] = torch.cos(pos * rate[: dim // 2])
    return out
