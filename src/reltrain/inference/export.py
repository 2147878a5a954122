"""``reltrain export``: a trained model as a folder people can share, in the Hugging Face habit.

    model.safetensors   the weights (no pickle anywhere in the folder)
    config.json         model and preprocessing options, id2label / label2id, reltrain version
    vocab.json          the word vocabulary (reltrain's own encoders), or
    tokenizer files     the pretrained tokenizer with the entity markers and added characters (lm)
    README.md           a model card: YAML header, test metrics, training data, how to use it

``read_exported`` turns the folder back into what a checkpoint holds, so everything that loads
a checkpoint (``reltrain.load``, ``predict``, ``evaluate``) takes the folder too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from reltrain.errors import UserError

log = logging.getLogger(__name__)

FORMAT = "reltrain-export"
VERSION = 1
WEIGHTS = "model.safetensors"


def export_model(checkpoint: str | Path, out_dir: str | Path, fmt: str = "safetensors") -> Path:
    """Write the exported folder for ``checkpoint`` (a ``.pt`` file) into ``out_dir``;
    ``fmt="onnx"`` adds ``model.onnx``, checked against PyTorch before it is kept."""
    from reltrain import __version__
    from reltrain.training.checkpoint import load_checkpoint

    if fmt not in ("safetensors", "onnx"):
        raise UserError(f"--format must be safetensors or onnx, not '{fmt}'")
    if fmt == "onnx":
        from reltrain.inference.onnx import _require

        _require("onnx")
        _require("onnxruntime")
    payload = load_checkpoint(checkpoint)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder: choose a new OUT_DIR")
    try:
        _write_folder(payload, Path(checkpoint), out, fmt, __version__)
    except BaseException:  # no half-written folder for the next attempt to trip on
        if out.is_dir():
            for path in out.iterdir():
                path.unlink()
        raise
    return out


def _write_folder(payload: dict, checkpoint: Path, out: Path, fmt: str, version: str) -> None:
    from safetensors.torch import save_file

    from reltrain.training.distributed import strip_wrapper_prefixes

    try:
        out.mkdir(parents=True, exist_ok=True)
        weights = {k: v.detach().clone().contiguous()
                   for k, v in strip_wrapper_prefixes(payload["model"]).items()}
        save_file(weights, str(out / WEIGHTS), metadata={"format": "pt"})
        if payload.get("lm"):
            for name, text in payload["lm"]["files"].items():
                (out / name).write_text(text, encoding="utf-8")
        else:
            (out / "vocab.json").write_text(json.dumps(payload["vocab"], ensure_ascii=False),
                                            encoding="utf-8")
        summary = _run_summary(checkpoint)
        config = _config_json(payload, summary, version)
        (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False),
                                         encoding="utf-8")
        if fmt == "onnx":
            _add_onnx(out)
        (out / "README.md").write_text(model_card(config, summary, out, onnx=fmt == "onnx"),
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
    from reltrain.predict import Predictor

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
    path = checkpoint.resolve().parent.parent / "summary.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _config_json(payload: dict, summary: dict, version: str) -> dict:
    cfg, labels = payload["config"], list(payload["labels"])
    data = cfg["data"]
    best = payload["state"].get("best") or summary.get("best") or {}
    return {
        "library_name": "reltrain", "format": FORMAT, "format_version": VERSION,
        "reltrain_version": version, "model_type": cfg["model"]["name"],
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "preprocessing": {k: data[k] for k in ("language", "tokenizer", "lowercase", "max_len",
                                               "pos_limit")},
        "tokenizer": ({"kind": "pretrained", "types": payload["lm"]["types"],
                       "added": payload["lm"]["added"], "files": sorted(payload["lm"]["files"])}
                      if payload.get("lm") else {"kind": "words", "vocab": "vocab.json"}),
        "hf_config": payload.get("hf_config"),
        "metrics": {"test": {k: v for k, v in (summary.get("test") or {}).items()
                             if k != "per_class"} or None,
                    "best": {k: best.get(k) for k in ("metric", "value", "epoch")} if best else None},
        "training_data": _training_data(cfg, payload, summary),
        "reltrain_config": cfg,
    }


def _training_data(cfg: dict, payload: dict, summary: dict) -> dict:
    rows = payload.get("data_rows") or (summary.get("data") or {}).get("rows") or {}
    return {split: {"file": Path(cfg["data"][split]).name if cfg["data"][split] else None,
                    "rows": rows.get(split)} for split in ("train", "valid", "test")}


def model_card(config: dict, summary: dict, out: Path, onnx: bool = False) -> str:
    """README.md: YAML metadata for model hubs, then what the model is and how to use it."""
    prep, test = config["preprocessing"], (config["metrics"]["test"] or {})
    best = config["metrics"]["best"] or {}
    labels = list(config["label2id"])
    header = ["---", "library_name: reltrain", f"language: {prep['language']}",
              "pipeline_tag: text-classification", "tags:", "- relation-extraction",
              f"- {config['model_type']}", "metrics:", "- macro_f1", "- micro_f1"]
    if test:
        header += ["model-index:", f"- name: {out.name}", "  results:", "  - task:",
                   "      type: relation-extraction", "    metrics:"]
        header += [f"    - type: {k}\n      value: {test[k]:.4f}" for k in
                   ("macro_f1", "micro_f1", "macro_precision", "macro_recall") if k in test]
    header.append("---")
    rows = [f"| {split} | {d['file'] or '-'} | {d['rows'] if d['rows'] is not None else '?'} |"
            for split, d in config["training_data"].items()]
    scores = (f"| macro-F1 | micro-F1 | macro-P | macro-R |\n|---|---|---|---|\n"
              f"| {test['macro_f1']:.4f} | {test['micro_f1']:.4f} | {test['macro_precision']:.4f} "
              f"| {test['macro_recall']:.4f} |" if test else "Not scored on a test set.")
    chosen = (f"The checkpoint of epoch {best['epoch']}, chosen on validation {best['metric']} "
              f"({best['value']:.4f})." if best.get("metric") else "")
    return "\n".join(header) + f"""

# {out.name}: relation extraction ({config['model_type']}, {prep['language']})

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


def is_exported(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def read_exported(folder: str | Path) -> dict:
    """What a checkpoint would hold for prediction, read from an exported folder."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder}/config.json: not readable ({exc})") from None
    if config.get("format") != FORMAT:
        raise UserError(f"{folder}: not a folder written by 'reltrain export'")
    if config.get("format_version", 0) > VERSION:
        raise UserError(f"{folder}: written by a newer reltrain (format {config['format_version']})")
    try:
        weights = load_file(str(folder / WEIGHTS))
        tok = config["tokenizer"]
        if tok["kind"] == "pretrained":
            lm = {"files": {name: (folder / name).read_text(encoding="utf-8") for name in tok["files"]},
                  "types": tok["types"], "added": tok["added"]}
            vocab = None
        else:
            lm, vocab = None, json.loads((folder / tok["vocab"]).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, SafetensorError) as exc:
        raise UserError(f"{folder}: incomplete or damaged export ({str(exc).splitlines()[0][:200]})") from None
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    return {"config": config["reltrain_config"], "labels": labels, "vocab": vocab, "lm": lm,
            "hf_config": config.get("hf_config"), "model": weights}
