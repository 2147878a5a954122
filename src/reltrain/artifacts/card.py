"""A model folder's README.md: YAML metadata for model hubs, then what the model is, its
figures and how to use it. Every name in it comes from the folder's creator, so it is escaped."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path


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
    multi = (config.get("reltrain_config") or {}).get("model", {}).get("multi_label") == "true"
    what = (f"which of {len(labels)} relations hold (each above its own threshold: several on "
            f"one pair, or none)" if multi else f"which of {len(labels)} relations holds")
    chosen = (f"The checkpoint of epoch {best['epoch']}, chosen on validation {best['metric']} "
              f"({best['value']:.4f})." if best.get("metric") else "")
    return "\n".join(header) + f"""

# {markdown_text(out.name)}: relation extraction ({config['model_type']}, {prep['language']})

Trained with reltrain {config['reltrain_version']}. Given a sentence and two entities (head,
tail), it predicts {what}: {', '.join(labels)}.

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
