"""Transformer-encoder relation classifier over word + position features (B batch, L tokens,
D embedding size, H model width, C relations)."""

from __future__ import annotations

import torch
import torch.nn as nn

from reltrain.models.registry import register_model
from reltrain.models.dropout import ExampleDropout
from reltrain.models.layers import Embeddings, masked_max, sinusoidal_positions

MAX_POSITIONS = 1024


class TransformerClassifier(nn.Module):
    """Projected embeddings plus positions through pre-norm encoder layers, max-pooled over real
    tokens and classified; ``head_dropout`` uses per-example masks (models/dropout.py)."""

    def __init__(self, vocab_size: int, num_labels: int, pos_limit: int, word_dim: int = 100,
                 pos_dim: int = 10, width: int = 128, layers: int = 3, heads: int = 4,
                 ff: int = 256, positions: str = "sinusoidal", dropout: float = 0.1,
                 head_dropout: float = 0.5):
        super().__init__()
        self.embed = Embeddings(vocab_size, word_dim, pos_dim, pos_limit)
        self.project = nn.Linear(self.embed.dim, width)
        if positions == "learned":
            self.positions = nn.Parameter(torch.zeros(MAX_POSITIONS, width))
            nn.init.normal_(self.positions, std=0.02)
        else:
            self.register_buffer("positions", sinusoidal_positions(MAX_POSITIONS, width),
                                 persistent=False)
        layer = nn.TransformerEncoderLayer(width, heads, ff, dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        # Nested-tensor fast paths change results with padding; exactness matters more here.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.dropout = ExampleDropout(head_dropout)
        self.classifier = nn.Linear(width, num_labels)

    def forward(self, word, pos_head, pos_tail, mask, segment=None, noise=None, head=None, tail=None):
        steps = torch.arange(word.size(1), device=word.device).clamp(max=MAX_POSITIONS - 1)
        x = self.project(self.embed(word, pos_head, pos_tail)) + self.positions[steps]  # (B, L, H)
        h = self.norm(self.encoder(x, src_key_padding_mask=~mask))  # (B, L, H)
        sent = masked_max(h.transpose(1, 2), mask)  # (B, H)
        return self.classifier(self.dropout(sent, noise))  # (B, C)


@register_model("transformer")
def build_transformer(cfg, vocab_size: int, num_labels: int, pos_limit: int, **_):
    return TransformerClassifier(vocab_size, num_labels, pos_limit, word_dim=cfg.word_dim,
                                 pos_dim=cfg.pos_dim, width=cfg.transformer.dim,
                                 layers=cfg.transformer.layers, heads=cfg.transformer.heads,
                                 ff=cfg.transformer.ff, positions=cfg.transformer.positions,
                                 dropout=cfg.transformer.dropout, head_dropout=cfg.dropout)
