"""CNN and PCNN relation classifiers (Zeng et al. 2014 / 2015).

Letters: B batch, L tokens, D embedding size, F filters per width, K number of widths,
H = F*K (x3 for PCNN) sentence vector, C relations.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from reltrain.models import register_model
from reltrain.models.dropout import ExampleDropout
from reltrain.models.layers import ACTIVATIONS, Embeddings, masked_max


class CNNClassifier(nn.Module):
    """Convolutions of several odd widths over the embedded sentence, max pooled, classified.

    ``piecewise`` pools the three pieces cut at the entity ends separately (PCNN).
    """

    def __init__(self, vocab_size: int, num_labels: int, pos_limit: int, word_dim: int = 100,
                 pos_dim: int = 10, kernel_sizes=(3, 5, 7), num_filters: int = 128,
                 activation: str = "relu", dropout: float = 0.5, piecewise: bool = False):
        super().__init__()
        self.embed = Embeddings(vocab_size, word_dim, pos_dim, pos_limit)
        # "same" padding keeps L, so pooling masks line up with tokens.
        self.convs = nn.ModuleList(nn.Conv1d(self.embed.dim, num_filters, k, padding=k // 2)
                                   for k in kernel_sizes)
        self.act = ACTIVATIONS[activation]()
        self.piecewise = piecewise
        hidden = num_filters * len(kernel_sizes) * (3 if piecewise else 1)
        self.dropout = ExampleDropout(dropout)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, word, pos_head, pos_tail, mask, segment=None, noise=None, head=None, tail=None):
        """``noise``: (B,) per-example dropout seeds (see models/dropout.py); None in eval."""
        # contiguous once: each convolution would copy the transposed view again.
        x = self.embed(word, pos_head, pos_tail).transpose(1, 2).contiguous()  # (B, D, L)
        masks = [segment == k for k in (1, 2, 3)] if self.piecewise else [mask]
        # Each convolution is pooled as soon as it is computed: no (B, F*K, L) concatenation.
        # Features stay in the order piece, kernel.
        pooled = [[] for _ in masks]
        for conv in self.convs:
            h = self.act(conv(x))  # (B, F, L)
            for features, keep in zip(pooled, masks):
                # Without autograd (prediction) the one-piece pooling may overwrite h.
                in_place = not torch.is_grad_enabled() and len(masks) == 1
                features.append(masked_max(h, keep, in_place))  # (B, F)
        sent = torch.cat([f for features in pooled for f in features], dim=1)  # (B, P*F*K)
        return self.classifier(self.dropout(sent, noise))  # (B, C)


def _builder(piecewise: bool):
    def build(cfg, vocab_size: int, num_labels: int, pos_limit: int, **_) -> CNNClassifier:
        return CNNClassifier(vocab_size, num_labels, pos_limit, word_dim=cfg.word_dim,
                             pos_dim=cfg.pos_dim, kernel_sizes=tuple(cfg.kernel_sizes),
                             num_filters=cfg.num_filters, activation=cfg.activation,
                             dropout=cfg.dropout, piecewise=piecewise)
    return build


register_model("cnn")(_builder(piecewise=False))
register_model("pcnn")(_builder(piecewise=True))
