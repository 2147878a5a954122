"""Pretrained-encoder relation classifier: the states at the head and tail start markers (the
R-BERT / OpenNRE "entity" recipe) or the [CLS] state; B batch, L subwords, H width, C relations."""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn

from reltrain.models.registry import register_model
from reltrain.models.dropout import ExampleDropout


class LMClassifier(nn.Module):
    def __init__(self, encoder: nn.Module, num_labels: int, pooling: str = "entity",
                 dropout: float = 0.1, added_tokens: int = 0):
        super().__init__()
        self.encoder, self.pooling = encoder, pooling
        width = encoder.config.hidden_size * (2 if pooling == "entity" else 1)
        self.dropout = ExampleDropout(dropout)
        self.classifier = nn.Linear(width, num_labels)
        # Tokens added from the training text (data/lm.py): outside the encoder, so they learn at
        # the head's rate; they start at the mean pretrained embedding (Hewitt, 2021).
        self.added = None
        if added_tokens:
            base = encoder.get_input_embeddings().weight
            self.added = nn.Embedding(added_tokens, base.size(1))
            with torch.no_grad():
                self.added.weight.copy_(base.mean(0).expand_as(self.added.weight))

    def forward(self, word, pos_head, pos_tail, mask, segment=None, noise=None, head=None, tail=None):
        mask = mask.long()
        if self.added is None:
            h = self.encoder(input_ids=word, attention_mask=mask).last_hidden_state  # (B, L, H)
        else:
            base = self.encoder.get_input_embeddings()
            is_added = (word >= base.num_embeddings).unsqueeze(-1)  # (B, L, 1)
            vectors = torch.where(is_added, self.added((word - base.num_embeddings).clamp(min=0)),
                                  base(word.clamp(max=base.num_embeddings - 1)))  # (B, L, H)
            h = self.encoder(inputs_embeds=vectors, attention_mask=mask).last_hidden_state
        if self.pooling == "entity":
            rows = torch.arange(h.size(0), device=h.device)
            rep = torch.cat([h[rows, head[:, 0]], h[rows, tail[:, 0]]], dim=-1)  # (B, 2H)
        else:
            rep = h[:, 0]  # (B, H)
        return self.classifier(self.dropout(rep, noise))  # (B, C)


@register_model("lm")
def build_lm(cfg, vocab_size: int, num_labels: int, pos_limit: int, hf_config: dict | None = None,
             added_tokens: int = 0, **_) -> LMClassifier:
    """From ``cfg.lm.pretrained`` when training; from ``hf_config`` when loading a checkpoint, so no
    model folder is needed then. The last ``added_tokens`` ids get their own table."""
    from transformers import AutoConfig, AutoModel

    with quiet_transformers():  # its loading bar, unused pretraining heads, resizing notes
        if hf_config is None:
            encoder = AutoModel.from_pretrained(cfg.lm.pretrained, local_files_only=True)
        else:
            config = dict(hf_config)
            encoder = AutoModel.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
        # A model stored in fp16/bf16 comes in that type under transformers 5 (its config's
        # dtype): reltrain keeps fp32 weights, and autocast (train.amp) picks the precision.
        encoder = encoder.float()
        if encoder.get_input_embeddings().num_embeddings != vocab_size - added_tokens:
            encoder.resize_token_embeddings(vocab_size - added_tokens)  # room for the markers
    if getattr(encoder, "pooler", None) is not None:
        # Unused here; parameters without gradients would stall DDP without find_unused_parameters.
        encoder.pooler = None
    return LMClassifier(encoder, num_labels, cfg.lm.pooling, cfg.lm.dropout, added_tokens)


@contextmanager
def quiet_transformers():
    """transformers' own messages and progress bars off while loading (reltrain's log says what
    was loaded), then the caller's settings again."""
    from transformers.utils import logging as hf_logging

    previous, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars:
            hf_logging.enable_progress_bar()
