"""Models by name. Nothing in this package is rank-aware or imports the distributed package
(a test walks the syntax trees to keep it so)."""

from __future__ import annotations

import torch.nn as nn

from reltrain.models.registry import build_model, check_model_name, model_names, register_model

__all__ = ["build_model", "check_model_name", "model_names", "register_model", "model_hf_config"]


def model_hf_config(model: nn.Module) -> dict | None:
    """A pretrained encoder's own config (to rebuild it from a checkpoint), else None."""
    encoder = getattr(model, "encoder", None)
    config = getattr(encoder, "config", None)
    return config.to_dict() if hasattr(config, "to_dict") else None


# Importing the encoder modules registers them (lm imports transformers only when built).
from reltrain.models import cnn, lm, rnn, transformer  # noqa: E402,F401
