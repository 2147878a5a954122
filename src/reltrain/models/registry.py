"""The encoders by name: each registers its builder with ``register_model`` when its module is
imported (``reltrain.models`` imports them all)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from reltrain.runtime.errors import UserError

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str):
    """Decorator: ``@register_model("cnn")`` on a builder
    ``(model_cfg, vocab_size, num_labels, pos_limit, **extra)``."""
    def add(builder):
        if name in _REGISTRY:
            raise ValueError(f"model '{name}' registered twice")
        _REGISTRY[name] = builder
        return builder
    return add


def model_names() -> list[str]:
    return sorted(_REGISTRY)


def check_model_name(name: str) -> None:
    if name not in _REGISTRY:
        raise UserError(f"unknown model.name '{name}'; choose one of {', '.join(model_names())}")


def build_model(model_cfg, vocab_size: int, num_labels: int, pos_limit: int, **extra) -> nn.Module:
    """``extra`` carries what only some encoders need (the LM's saved config, say)."""
    check_model_name(model_cfg.name)
    model = _REGISTRY[model_cfg.name](model_cfg, vocab_size, num_labels, pos_limit, **extra)
    model.multi_label = getattr(model_cfg, "multi_label", "false") == "true"
    if model.multi_label:
        # One sigmoid per relation, answered where it reaches the relation's threshold; chosen
        # on validation and saved with the weights, so the selected checkpoint keeps its own.
        model.register_buffer("thresholds", torch.full((num_labels,), 0.5))
    return model
