"""reltrain: relation-extraction training that gives the same result on any number of devices.
Importing the package has no side effects: logging, jieba and the trainer load lazily."""

from __future__ import annotations

from reltrain.runtime.errors import UserError

__version__ = "0.1.0"

__all__ = ["__version__", "BatchModel", "UserError", "load", "train"]


def __getattr__(name: str):
    if name == "BatchModel":  # imported on first use: importing reltrain stays light
        from reltrain.inference.batch import BatchModel  # `import reltrain` stays light

        return BatchModel
    raise AttributeError(f"module 'reltrain' has no attribute {name!r}")


def load(path, device: str = "cpu", runtime: str = "torch", amp: str = "auto"):
    """A model folder (a checkpoint or an export) or a run directory, for prediction
    (``runtime="onnx"``: its ``model.onnx``): ``reltrain.load(path).predict_text(...)``, or for
    an extraction model ``reltrain.load(path).extract(text)``."""
    from reltrain.inference.predictor import Predictor  # `import reltrain` stays light

    return Predictor.from_checkpoint(path, device=device, runtime=runtime, amp=amp)


def train(config=None, overrides=None) -> dict:
    """Train a model in this process and return its summary (what ``summary.json`` holds).

    ``config``: a YAML/JSON file, a mapping of sections (``{"data": {"train": "t.csv"}}``) or a
    ``reltrain.config.train.Config``, which is checked as the others are; ``overrides``:
    ``{"train.epochs": 5}`` or ``["train.epochs=5"]``, applied after it. The keys are those of
    ``reltrain train --help``; a bad one raises ``reltrain.UserError`` with the
    message the command line prints. Several processes: ``torchrun ... -m reltrain train``.
    """
    import json

    from reltrain.commands.train import run_train  # `import reltrain` stays light
    from reltrain.config.load import load_config  # `import reltrain` stays light
    from reltrain.config.train import Config, dotted, to_dict  # `import reltrain` stays light
    from reltrain.runtime.distributed import launched  # `import reltrain` stays light

    def items_of(mapping: dict) -> list[str]:  # JSON is YAML: each value reads back the same
        return [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in dotted(mapping).items()]

    if isinstance(config, Config):
        config = to_dict(config)
    if config is not None and not isinstance(config, (str, dict)) and not hasattr(config, "__fspath__"):
        raise UserError("config must be a file path, a mapping of options or a Config")
    items = items_of(config) if isinstance(config, dict) else []
    if isinstance(overrides, dict):
        items += items_of(overrides)
    elif overrides:
        items += [str(item) for item in overrides]
    path = None if config is None or isinstance(config, dict) else str(config)
    cfg = load_config(path, items)
    if cfg.devices > 1 and not launched():
        raise UserError("devices=N starts N processes: use 'reltrain train devices=N ...' or "
                        "torchrun from a shell; from Python, train in this process")
    return run_train(cfg)
