"""BiLSTM relation classifier with attention pooling (Zhou et al. 2016, Att-BLSTM); B batch,
L tokens, D embedding size, H = 2 x hidden (both directions), C relations."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from reltrain.models.registry import register_model
from reltrain.models.dropout import ExampleDropout
from reltrain.models.layers import Embeddings, masked_max


class BiLSTMClassifier(nn.Module):
    """Packed BiLSTM over word + position embeddings (padding never reaches the LSTM), pooled by
    attention, max or the last states."""

    def __init__(self, vocab_size: int, num_labels: int, pos_limit: int, word_dim: int = 100,
                 pos_dim: int = 10, hidden: int = 150, layers: int = 2, pooling: str = "attention",
                 dropout: float = 0.5):
        super().__init__()
        self.embed = Embeddings(vocab_size, word_dim, pos_dim, pos_limit)
        self.embed_dropout = ExampleDropout(dropout, stream=1)
        self.lstm = nn.LSTM(self.embed.dim, hidden, num_layers=layers, batch_first=True,
                            bidirectional=True)
        self.pooling = pooling
        self.query = nn.Parameter(torch.randn(2 * hidden) / (2 * hidden) ** 0.5)
        self.dropout = ExampleDropout(dropout)
        self.classifier = nn.Linear(2 * hidden, num_labels)

    def forward(self, word, pos_head, pos_tail, mask, segment=None, noise=None, head=None, tail=None):
        x = self.embed_dropout(self.embed(word, pos_head, pos_tail), noise)  # (B, L, D)
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))  # (B, L, H)
        if self.pooling == "last":
            sent = torch.cat([h_n[-2], h_n[-1]], dim=-1)  # (B, H)
        elif self.pooling == "max":
            sent = masked_max(h.transpose(1, 2), mask)  # (B, H)
        else:
            scores = torch.tanh(h) @ self.query  # (B, L)
            alpha = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)  # (B, L)
            sent = torch.tanh((alpha.unsqueeze(-1) * h).sum(1))  # (B, H)
        return self.classifier(self.dropout(sent, noise))  # (B, C)


@register_model("bilstm")
def build_bilstm(cfg, vocab_size: int, num_labels: int, pos_limit: int, **_) -> BiLSTMClassifier:
    return BiLSTMClassifier(vocab_size, num_labels, pos_limit, word_dim=cfg.word_dim,
                            pos_dim=cfg.pos_dim, hidden=cfg.bilstm.hidden,
                            layers=cfg.bilstm.layers, pooling=cfg.bilstm.pooling,
                            dropout=cfg.dropout)
