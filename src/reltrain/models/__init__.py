"""Models by name. Nothing in this package imports torch.distributed (a test enforces it)."""

from __future__ import annotations

from typing import Callable

import torch.nn as nn

from reltrain.errors import UserError

_REGISTRY: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str):
    """Decorator: ``@register_model("cnn")`` on a builder ``(model_cfg, vocab_size, num_labels, pos_limit)``."""
    def add(builder):
        if name in _REGISTRY:
            raise ValueError(f"model '{name}' registered twice")
        _REGISTRY[name] = builder
        return builder
    return add


def model_names() -> list[str]:
    return sorted(_REGISTRY)


def build_model(model_cfg, vocab_size: int, num_labels: int, pos_limit: int) -> nn.Module:
    if model_cfg.name not in _REGISTRY:
        raise UserError(f"unknown model.name '{model_cfg.name}'; choose one of {', '.join(model_names())}")
    return _REGISTRY[model_cfg.name](model_cfg, vocab_size, num_labels, pos_limit)


from reltrain.models import cnn  # noqa: E402,F401  (registers cnn and pcnn)
