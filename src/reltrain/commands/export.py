"""``reltrain export``: a trained model as a shareable folder in the Hugging Face habit
(model.safetensors, config.json, vocab.json or tokenizer files, a README.md model card; no
pickle). ``reltrain.artifacts.model_folder`` reads it back, so whatever loads a checkpoint takes it too."""

from __future__ import annotations

import html
import json
import logging
import os
import re
import shutil
from pathlib import Path

from reltrain.artifacts.model_folder import (CONFIG, EXPORT_FORMAT, EXPORT_VERSION, VOCAB, WEIGHTS, Artifact,
                                is_exported, load_artifact, model_source)
from reltrain.artifacts.checkpoint_format import metric_values
from reltrain.config.commands import ExportOptions
from reltrain.runtime.errors import UserError

log = logging.getLogger(__name__)


def run_export(options: ExportOptions) -> Path:
    """``reltrain export``: ``export_model``, then the line that says where it wrote."""
    out = export_model(options)
    print(f"exported {options.checkpoint} to {out}", flush=True)
    return out


def export_model(options: ExportOptions) -> Path:
    """Write the exported folder of ``options.checkpoint`` (a checkpoint, run directory or
    exported folder) into ``options.out_dir``; format onnx adds ``model.onnx``, kept only if it
    agrees with PyTorch."""
    from reltrain import __version__
    from reltrain.inference.predictor import Predictor

    source, out_dir, fmt = options.checkpoint, options.out_dir, options.format
    if fmt == "onnx":
        from reltrain.inference.onnx import _require

        _require("onnx")
        _require("onnxruntime")
    source = model_source(source)
    artifact = load_artifact(source)
    Predictor.from_artifact(artifact, str(source))  # builds it: the checks of loading, here too
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder: choose a new OUT_DIR")
    summary = {} if is_exported(source) else _run_summary(source)
    test = artifact.test or metric_values(summary.get("test"))
    if test is None:
        log.warning("%s was never scored on a test set (no data.test, or the run stopped before "
                    "its end): the model card will have no test metrics", source)
    try:
        _write_folder(artifact, out, fmt, __version__, test, summary)
    except BaseException:  # no half-written folder for the next attempt to trip on
        if out.is_dir():
            for path in out.iterdir():
                path.unlink()
        raise
    return out


def _write_folder(artifact: Artifact, out: Path, fmt: str, version: str, test: dict | None,
                  summary: dict) -> None:
    from safetensors.torch import save_file

    try:
        out.mkdir(parents=True, exist_ok=True)
        config = _config_json(artifact, test, summary, version)
        (out / CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
        weights = {k: v.detach().clone().contiguous() for k, v in artifact.weights.items()}
        save_file(weights, str(out / WEIGHTS), metadata={"format": "pt"})
        # safetensors creates its file private (0600); the folder is for sharing, as its other files
        shutil.copymode(out / CONFIG, out / WEIGHTS)
        if artifact.lm:
            for name, text in artifact.lm["files"].items():  # allow-listed plain names
                (out / name).write_text(text, encoding="utf-8")
        else:
            (out / VOCAB).write_text(json.dumps(artifact.vocab, ensure_ascii=False), encoding="utf-8")
        if fmt == "onnx":
            _add_onnx(out)
        (out / "README.md").write_text(model_card(config, out, onnx=fmt == "onnx"),
                                       encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None


def _add_onnx(out: Path) -> None:
    """``model.onnx`` beside the weights, kept only if onnxruntime gives PyTorch's logits on a
    short and a long sentence in one batch."""
    import numpy as np
    import torch

    from reltrain.data.schema import Entity, Record
    from reltrain.inference.onnx import ONNX_FILE, OnnxModel, export_onnx
    from reltrain.inference.predictor import Predictor

    predictor = Predictor.from_checkpoint(out)
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
    """``summary.json`` of the run the checkpoint belongs to (test metrics), when it is there."""
    path = Path(os.path.abspath(checkpoint)).parent.parent / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _config_json(artifact: Artifact, test: dict | None, summary: dict, version: str) -> dict:
    from reltrain.config.train import to_dict

    cfg, labels, data = to_dict(artifact.config), artifact.labels, artifact.config.data
    lm = artifact.lm
    return {
        "library_name": "reltrain", "format": EXPORT_FORMAT, "format_version": EXPORT_VERSION,
        "reltrain_version": version, "model_type": artifact.config.model.name,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "preprocessing": {k: getattr(data, k) for k in ("language", "tokenizer", "lowercase",
                                                        "max_len", "pos_limit")},
        "tokenizer": ({"kind": "pretrained", "types": lm["types"], "added": lm["added"],
                       "files": sorted(lm["files"])} if lm else {"kind": "words", "vocab": VOCAB}),
        "hf_config": artifact.hf_config,
        "metrics": {"test": test, "best": artifact.best,
                    "negative_label": _negative_name(artifact) if test else None},
        "training_data": _training_data(cfg, artifact, summary),
        "reltrain_config": cfg,
    }


def _negative_name(artifact: Artifact) -> str | None:
    from reltrain.data.schema import negative_index

    try:
        index = negative_index(artifact.config.eval.negative_label, artifact.labels)
    except UserError:
        return None
    return artifact.labels[index] if index is not None else None


def _training_data(cfg: dict, artifact: Artifact, summary: dict) -> dict:
    data = summary.get("data") if isinstance(summary.get("data"), dict) else {}
    rows = artifact.data_rows or data.get("rows") or {}
    rows = rows if isinstance(rows, dict) else {}
    return {split: {"file": Path(cfg["data"][split]).name if cfg["data"][split] else None,
                    "rows": rows.get(split) if isinstance(rows.get(split), int) else None}
            for split in ("train", "valid", "test")}


_MARKDOWN = re.compile(r"([\\`*_{}\[\]#|~])")  # what starts emphasis, code, links, tables


def markdown_text(value: object) -> str:
    """``value`` as literal text in Markdown: labels and file names come from the folder's
    creator, and a model card is read on pages that render Markdown and HTML."""
    text = "".join(" " if ch.isspace() or not ch.isprintable() else ch for ch in str(value))
    text = html.escape(text, quote=True)
    return _MARKDOWN.sub(r"\\\1", text)


def _card_metadata(config: dict, out: Path, test: dict) -> list[str]:
    """The card's YAML header: what a model hub indexes (task, language, test figures)."""
    header = ["---", "library_name: reltrain", f"language: {config['preprocessing']['language']}",
              "pipeline_tag: text-classification", "tags:", "- relation-extraction",
              f"- {config['model_type']}", "metrics:", "- macro_f1", "- micro_f1"]
    if test:
        header += ["model-index:", f"- name: {json.dumps(out.name)}", "  results:", "  - task:",
                   "      type: relation-extraction", "    metrics:"]
        header += [f"    - type: {k}\n      value: {test[k]:.4f}" for k in
                   ("positive_micro_f1", "positive_macro_f1", "semeval_macro_f1", "macro_f1", "micro_f1",
                    "macro_precision", "macro_recall") if k in test]
    return header + ["---"]


def _card_scores(test: dict, negative: str | None) -> str:
    """The test figures as a Markdown table, the positive ones first, and what they leave out."""
    shown = {"positive_micro_f1": "positive micro-F1", "positive_micro_precision": "positive P",
             "positive_micro_recall": "positive R", "positive_macro_f1": "positive macro-F1",
             "semeval_macro_f1": "SemEval macro-F1",
             "macro_f1": "macro-F1", "micro_f1": "micro-F1", "macro_precision": "macro-P",
             "macro_recall": "macro-R"}
    keys = [k for k in shown if k in test]
    scores = ("| " + " | ".join(shown[k] for k in keys) + " |\n|" + "---|" * len(keys) + "\n| "
              + " | ".join(f"{test[k]:.4f}" for k in keys) + " |" if test
              else "Not scored on a test set.")
    if negative:
        scores += (f"\n\nThe positive figures leave out the negative relation, "
                   f"{markdown_text(negative)}, as TACRED's scorer does: predicting it is no "
                   f"answer, and a gold one is no item to find.")
    return scores


def model_card(config: dict, out: Path, onnx: bool = False) -> str:
    """README.md: YAML metadata for model hubs, then what the model is and how to use it."""
    prep, test = config["preprocessing"], (config["metrics"]["test"] or {})
    best = config["metrics"]["best"] or {}
    labels = [markdown_text(name) for name in config["label2id"]]
    header = _card_metadata(config, out, test)
    rows = [f"| {split} | {markdown_text(d['file']) if d['file'] else '-'} | "
            f"{d['rows'] if d['rows'] is not None else '?'} |"
            for split, d in config["training_data"].items()]
    scores = _card_scores(test, config["metrics"].get("negative_label"))
    chosen = (f"The checkpoint of epoch {best['epoch']}, chosen on validation {best['metric']} "
              f"({best['value']:.4f})." if best.get("metric") else "")
    return "\n".join(header) + f"""

# {markdown_text(out.name)}: relation extraction ({config['model_type']}, {prep['language']})

Trained with reltrain {config['reltrain_version']}. Given a sentence and two entities (head,
tail), it predicts which of {len(labels)} relations holds: {', '.join(labels)}.

## Test metrics

{scores}

{chosen}

## Training data

| split | file | rows |
|---|---|---|
{chr(10).join(rows)}

## Use

```bash
# with reltrain installed (pip install -e . in its repository, or from your package index)
reltrain predict {out.name} --text "..." --head "..." --tail "..."
reltrain predict {out.name} sentences.jsonl --output predictions.jsonl
reltrain evaluate {out.name} test.csv
reltrain serve {out.name} --port 8000      # HTTP: POST /predict, GET /model (reltrain[serve])
{f"reltrain predict {out.name} sentences.jsonl --runtime onnx   # onnxruntime (reltrain[onnx])" + chr(10) if onnx else ""}```

```python
import reltrain
model = reltrain.load("{out.name}")
model.predict_text("...", head="...", tail="...")
```

Files: `model.safetensors` (weights), {"`model.onnx` (the same model as an ONNX graph), " if onnx else ""}`config.json` (options,
`id2label`), the vocabulary or tokenizer files; nothing in this folder is pickled.
"""
