"""reltrain: relation-extraction training that gives the same result on any number of devices.
Importing the package has no side effects: logging, jieba and the trainer load lazily."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def load(path, device: str = "cpu", runtime: str = "torch", amp: str = "auto"):
    """A checkpoint or an exported folder, for prediction (``runtime="onnx"``: its ``model.onnx``):
    ``reltrain.load(path).predict_text(...)``."""
    from reltrain.inference.predictor import Predictor

    return Predictor.from_checkpoint(path, device=device, runtime=runtime, amp=amp)
