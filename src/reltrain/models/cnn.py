"""CNN and PCNN relation classifiers (Zeng et al. 2014 / 2015). B batch, L tokens, D embedding
size, F filters per width, K widths, H = F*K (x3 for PCNN) sentence vector, C relations."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from reltrain.models.registry import register_model
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

    @property
    def cpu_batch_size(self) -> int:
        """Examples per prediction batch on a CPU: the CNN's fastest is 256, where more of a
        batch's tokens share a projected word (docs/benchmarks.md); the PCNN's 128."""
        return 128 if self.piecewise else 256

    def _cpu_inference(self, word: torch.Tensor) -> bool:
        """Below 64 tokens a batch, the training route: the projections cost more than the
        convolutions under about 30 (docs/benchmarks.md), and 64 leaves a margin, so a server's
        single sentences keep the convolutions."""
        return (word.device.type == "cpu" and not torch.is_grad_enabled() and word.numel() >= 64
                and isinstance(self.act, nn.ReLU) and not _exporting())

    def _cpu_inference_forward(self, word, pos_head, pos_tail, masks):
        """Without autograd on a CPU, faster (docs/benchmarks.md): a convolution is
        linear in each token's three embeddings, so it is a sum of projections of the tokens in
        its window through the kernel's columns. Each word and position value of the batch is
        projected once into a table, whose rows ``embedding_bag`` sums; the max is taken before
        the ReLU, exact as ReLU keeps order."""
        B, L = word.shape
        table, first, slots = self._projections((word, pos_head, pos_tail))
        half = max(conv.kernel_size[0] for conv in self.convs) // 2
        # The convolutions' zero padding: `half` all-zero items (the table's last) either side.
        rows = torch.full((3, B, L + 2 * half), (table.shape[0] // slots - 1) * slots)
        rows[:, :, half:half + L] = first
        away = [torch.zeros(keep.shape, dtype=table.dtype).masked_fill_(~keep, float("-inf"))[:, :, None]
                for keep in masks]  # (B, L, 1)
        pooled, column = [[] for _ in masks], 0
        for conv in self.convs:
            k = conv.kernel_size[0]
            start = half - k // 2
            windows = rows[:, :, start:start + L + k - 1].unfold(2, k, 1)  # (3, B, L, k)
            bags = (windows + torch.arange(column, column + k)).permute(1, 2, 0, 3).reshape(B * L, 3 * k)
            column += k
            h = F.embedding_bag(bags, table, mode="sum").view(B, L, -1)  # conv(x) without bias
            for features, mask in zip(pooled, away):
                masked = h.add_(mask) if len(away) == 1 else h + mask
                features.append(torch.relu(masked.amax(dim=1) + conv.bias))  # (B, F)
        return self.classifier(torch.cat([f for features in pooled for f in features], dim=1))

    def _projections(self, ids: tuple[torch.Tensor, ...]):
        """For ``ids`` (word, head and tail positions, each (B, L)): a table of each distinct
        value's projections through the S kernel columns (S = the widths' sum), row ``item * S +
        column``, each (F,), with an all-zero item last; each token's three items' first rows,
        (3, B, L); and S. In the autocast dtype where autocast is on."""
        weight = torch.cat([conv.weight.permute(2, 0, 1) for conv in self.convs])  # (S, F, D)
        slots, filters = weight.shape[:2]
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else weight.dtype
        weight = weight.reshape(slots * filters, -1).to(dtype)
        values, items = zip(*(torch.unique(x, return_inverse=True) for x in ids))
        table = torch.empty(sum(map(len, values)) + 1, slots * filters, dtype=dtype)
        table[-1] = 0
        item, dim, first = 0, 0, []
        embeddings = (self.embed.word, self.embed.pos_head, self.embed.pos_tail)  # ``ids``' order
        for embedding, value, index in zip(embeddings, values, items):
            width = embedding.embedding_dim
            torch.mm(embedding.weight[value].to(dtype), weight[:, dim:dim + width].T,
                     out=table[item:item + len(value)])
            first.append((item + index) * slots)
            item, dim = item + len(value), dim + width
        return table.view(-1, filters), torch.stack(first), slots


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
