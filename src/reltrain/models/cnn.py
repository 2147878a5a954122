"""CNN and PCNN relation classifiers (Zeng et al. 2014 / 2015). B batch, L tokens, D embedding
size, F filters per width, K widths, H = F*K (x3 for PCNN) sentence vector, C relations."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from reltrain.models import register_model
from reltrain.models.dropout import ExampleDropout
from reltrain.models.layers import ACTIVATIONS, Embeddings, masked_max


class CNNClassifier(nn.Module):
    """Convolutions of several odd widths, max pooled (per piece between the entities with
    ``piecewise``, PCNN), classified."""

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
        masks = [segment == k for k in (1, 2, 3)] if self.piecewise else [mask]
        if self._cpu_inference(word):
            return self._cpu_inference_forward(word, pos_head, pos_tail, masks)
        # contiguous once: each convolution would copy the transposed view again.
        x = self.embed(word, pos_head, pos_tail).transpose(1, 2).contiguous()  # (B, D, L)
        # Each convolution is pooled at once (no (B, F*K, L) concatenation); features: piece, width.
        pooled = [[] for _ in masks]
        for conv in self.convs:
            h = self.act(conv(x))  # (B, F, L)
            for features, keep in zip(pooled, masks):
                # Without autograd (prediction) the one-piece pooling may overwrite h.
                in_place = not torch.is_grad_enabled() and len(masks) == 1
                features.append(masked_max(h, keep, in_place))  # (B, F)
        sent = torch.cat([f for features in pooled for f in features], dim=1)  # (B, P*F*K)
        return self.classifier(self.dropout(sent, noise))  # (B, C)

    def _cpu_inference(self, word: torch.Tensor) -> bool:
        return (word.device.type == "cpu" and not torch.is_grad_enabled()
                and isinstance(self.act, nn.ReLU) and not _exporting())

    def _cpu_inference_forward(self, word, pos_head, pos_tail, masks):
        """Without autograd on a CPU, faster (docs/benchmarks.md): 2-D convolutions on a
        channels-last view, and the max before the ReLU, which is exact as ReLU keeps order."""
        x = self.embed(word, pos_head, pos_tail)[:, None].permute(0, 3, 1, 2)  # (B, D, 1, L)
        away = [torch.zeros(keep.shape, dtype=x.dtype).masked_fill_(~keep, float("-inf"))[:, None, :, None]
                for keep in masks]  # (B, 1, L, 1)
        pooled = [[] for _ in masks]
        for conv in self.convs:
            weight = conv.weight[:, :, None, :].contiguous(memory_format=torch.channels_last)
            h = F.conv2d(x, weight, conv.bias, padding=(0, conv.padding[0]))
            h = h.permute(0, 2, 3, 1)  # (B, 1, L, F), contiguous
            for features, mask in zip(pooled, away):
                masked = h.add_(mask) if len(away) == 1 else h + mask
                features.append(torch.relu(masked.amax(dim=2)[:, 0]))  # (B, F)
        return self.classifier(torch.cat([f for features in pooled for f in features], dim=1))


def _exporting() -> bool:
    """In an ONNX export, which traces the training forward. Asked only once torch.onnx is
    loaded: importing it costs prediction's start a tenth of a second, and without it no export
    can be running."""
    return "torch.onnx" in sys.modules and torch.onnx.is_in_onnx_export()


def _builder(piecewise: bool):
    def build(cfg, vocab_size: int, num_labels: int, pos_limit: int, **_) -> CNNClassifier:
        return CNNClassifier(vocab_size, num_labels, pos_limit, word_dim=cfg.word_dim,
                             pos_dim=cfg.pos_dim, kernel_sizes=tuple(cfg.cnn.kernel_sizes),
                             num_filters=cfg.cnn.num_filters, activation=cfg.cnn.activation,
                             dropout=cfg.dropout, piecewise=piecewise)
    return build


register_model("cnn")(_builder(piecewise=False))
register_model("pcnn")(_builder(piecewise=True))
