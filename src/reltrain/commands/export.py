"""``reltrain export``: a checkpoint's model folder, without its training state, as a shareable
folder with the run's test figures on its card (model.safetensors, config.json, vocab.json or
tokenizer files, README.md; no pickle); ``--format onnx`` adds model.onnx."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from reltrain.artifacts.model_folder import load_artifact, model_source
from reltrain.artifacts.save import write_model_folder
from reltrain.artifacts.training_state import STATE_FILE, metric_values
from reltrain.config.commands import ExportOptions
from reltrain.runtime.errors import UserError
from reltrain.runtime.output import check_output
from reltrain.data.schema import Entity, Record

log = logging.getLogger(__name__)


def run_export(options: ExportOptions) -> Path:
    """``reltrain export``: ``export_model``, then the line that says where it wrote."""
    out = export_model(options)
    print(f"exported {options.checkpoint} to {out}", flush=True)
    return out


def export_model(options: ExportOptions) -> Path:
    """Write the model folder of ``options.checkpoint`` (a checkpoint, a run directory or an
    exported folder) into ``options.out_dir``, without the training state; format onnx adds
    ``model.onnx``, written only if it agrees with PyTorch."""
    from torch import device as torch_device

    from reltrain.inference.predictor import Predictor  # the export of the folder's task only

    source, out_dir, fmt = options.checkpoint, options.out_dir, options.format
    if fmt == "onnx":
        from reltrain.inference.onnx import _require  # the export of the folder's task only

        _require("onnx")
        _require("onnxruntime")
    source = model_source(source)
    artifact = load_artifact(source)
    # not inside what it reads: a run directory holding it is no run directory any more
    check_output(out_dir, (options.checkpoint,), "OUT_DIR")
    if artifact.config.task == "extract":
        from reltrain.inference.extractor import Extractor  # the export of the folder's task only

        if fmt == "onnx":
            raise UserError(f"{source}: an extraction model exports as safetensors only (its "
                            f"span and pair scoring runs in torch)")
        predictor = Extractor.from_artifact(artifact, str(source), torch_device("cpu"))
    else:
        predictor = Predictor.from_artifact(artifact, str(source))  # the checks of loading
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder: choose a new OUT_DIR")
    summary = _run_summary(source)
    test = artifact.test or metric_values(summary.get("test"))
    if test is None:
        log.warning("%s was never scored on a test set (no data.test, or the run stopped before "
                    "its end): the model card will have no test metrics", source)
    try:
        out.mkdir(parents=True, exist_ok=True)
        if fmt == "onnx":
            _add_onnx(predictor, out)
        write_model_folder(out, artifact, test, summary, onnx=fmt == "onnx")
    except OSError as exc:
        _empty(out)
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    except BaseException:  # no half-written folder for the next attempt to trip on
        _empty(out)
        raise
    return out


def _empty(out: Path) -> None:
    if out.is_dir():
        for path in out.iterdir():
            path.unlink()


def _add_onnx(predictor, out: Path) -> None:
    """``model.onnx``, written only if onnxruntime gives PyTorch's logits on a short and a long
    sentence in one batch."""
    import numpy as np
    import torch

    # looked up when called, so a test can stand a failing export in for it
    from reltrain.inference.onnx import ONNX_FILE, OnnxModel, export_onnx

    words = "ab cd ef gh ij kl mn op qr st uv wx yz".split()
    records = [Record(text=" ".join(words[:n]), head=Entity(words[0], 0, 2),
                      tail=Entity(words[2], 6, 8), relation=None, source="export check")
               for n in (3, len(words))]
    batch = predictor.dataset(records).__getitems__([0, 1])
    inputs = batch.inputs()
    export_onnx(predictor.model, inputs, out / ONNX_FILE, predictor.config.model.name)
    with torch.no_grad():
        expected = predictor.model(**inputs).float().numpy()
    got = OnnxModel(out / ONNX_FILE, predictor.device)(**inputs).numpy()
    if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
        raise UserError(f"the ONNX graph of this {predictor.config.model.name} model does not give "
                        f"PyTorch's outputs (max difference {np.abs(got - expected).max():.2g}); "
                        "nothing exported")


def _run_summary(checkpoint: Path) -> dict:
    """``summary.json`` of the run a checkpoint folder belongs to (test figures), when it is
    there; an export has none beside it."""
    folder = Path(os.path.abspath(checkpoint))
    if folder.parent.name != "checkpoints" or not (folder / STATE_FILE).is_file():
        return {}
    path = folder.parent.parent / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return summary if isinstance(summary, dict) else {}
