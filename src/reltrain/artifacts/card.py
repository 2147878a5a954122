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


# The test figures a card shows, in order, and their names in its table.
_SCORES = {
    "classify": {"positive_micro_f1": "positive micro-F1", "positive_micro_precision": "positive P",
                 "positive_micro_recall": "positive R", "positive_macro_f1": "positive macro-F1",
                 "semeval_macro_f1": "SemEval macro-F1", "macro_f1": "macro-F1",
                 "micro_f1": "micro-F1", "macro_precision": "macro-P", "macro_recall": "macro-R"},
    "extract": {"entities_f1": "entities F1", "relations_strict_f1": "relations strict F1",
                "relations_boundaries_f1": "relations boundaries F1",
                "triples_f1": "triples F1"},
}
_HEADLINE = {"classify": ("macro_f1", "micro_f1"),
             "extract": ("entities_f1", "relations_strict_f1")}


def _card_metadata(config: dict, out: Path, test: dict, task: str) -> list[str]:
    """The card's YAML header: what a model hub indexes (task, language, test figures)."""
    header = ["---", "library_name: reltrain", f"language: {config['preprocessing']['language']}"]
    if task == "classify":  # a hub's text-classification widget fits a pair's label, not spans
        header.append("pipeline_tag: text-classification")
    header += ["tags:", "- relation-extraction", f"- {config['model_type']}", "metrics:",
               *(f"- {k}" for k in _HEADLINE[task])]
    if test:
        header += ["model-index:", f"- name: {json.dumps(out.name)}", "  results:", "  - task:",
                   "      type: relation-extraction", "    metrics:"]
        header += [f"    - type: {k}\n      value: {test[k]:.4f}" for k in _SCORES[task]
                   if isinstance(test.get(k), float)]
    return header + ["---"]


def _card_scores(test: dict, negative: str | None, task: str) -> str:
    """The test figures as a Markdown table, the positive ones first, and what they leave out."""
    shown = _SCORES[task]
    keys = [k for k in shown if isinstance(test.get(k), float)]
    scores = ("| " + " | ".join(shown[k] for k in keys) + " |\n|" + "---|" * len(keys) + "\n| "
              + " | ".join(f"{test[k]:.4f}" for k in keys) + " |" if keys
              else "Not scored on a test set.")
    if negative:
        scores += (f"\n\nThe positive figures leave out the negative relation, "
                   f"{markdown_text(negative)}, as TACRED's scorer does: predicting it is no "
                   f"answer, and a gold one is no item to find.")
    return scores


def _folder_name(name: str) -> str:
    """The folder's name as the commands below spell it, where it is plain (a name with quotes,
    spaces or backticks would break out of the code it stands in); else a placeholder."""
    return name if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name) else "MODEL_FOLDER"


def _what(config: dict, task: str) -> str:
    """What the model does, in a sentence, with its labels."""
    labels = [markdown_text(name) for name in config["label2id"]]
    if task == "extract":
        types = [markdown_text(name) for name in config.get("entity_types") or []]
        return (f"Given raw text, it finds the entities ({len(types)} types: {', '.join(types)}) "
                f"and every relation among them above its threshold (several on one pair, or "
                f"none; {len(labels)} relations: {', '.join(labels)}).")
    multi = (config.get("reltrain_config") or {}).get("model", {}).get("multi_label") == "true"
    what = (f"which of {len(labels)} relations hold (each above its own threshold: several on "
            f"one pair, or none)" if multi else f"which of {len(labels)} relations holds")
    return f"Given a sentence and two entities (head, tail), it predicts {what}: {', '.join(labels)}."


def _use(name: str, task: str, onnx: bool) -> str:
    """How to run the model, from the shell and from Python."""
    if task == "extract":
        shell = [f'reltrain predict {name} --text "..."',
                 f"reltrain predict {name} sentences.txt --output triples.jsonl   # a sentence a line",
                 f"reltrain evaluate {name} gold.json"]
        python = 'model.extract("...")'
    else:
        shell = [f'reltrain predict {name} --text "..." --head "..." --tail "..."',
                 f"reltrain predict {name} sentences.jsonl --output predictions.jsonl",
                 f"reltrain evaluate {name} test.csv"]
        python = 'model.predict_text("...", head="...", tail="...")'
    shell.append(f"reltrain serve {name} --port 8000      # HTTP: POST /predict, GET /model "
                 f"(reltrain[serve])")
    if onnx:
        shell.append(f"reltrain predict {name} sentences.jsonl --runtime onnx   # onnxruntime "
                     f"(reltrain[onnx])")
    return ("```bash\n# with reltrain installed (pip install -e . in its repository, or from "
            "your package index)\n" + "\n".join(shell) + "\n```\n\n```python\nimport reltrain\n"
            f'model = reltrain.load("{name}")\n{python}\n```')


def model_card(config: dict, out: Path, onnx: bool = False) -> str:
    """README.md: YAML metadata for model hubs, then what the model is and how to use it."""
    prep, test = config["preprocessing"], (config["metrics"]["test"] or {})
    task = "extract" if config.get("task") == "extract" else "classify"
    best = config["metrics"]["best"] or {}
    header = _card_metadata(config, out, test, task)
    rows = [f"| {split} | {markdown_text(d['file']) if d['file'] else '-'} | "
            f"{d['rows'] if d['rows'] is not None else '?'} |"
            for split, d in config["training_data"].items()]
    scores = _card_scores(test, config["metrics"].get("negative_label"), task)
    chosen = (f"The checkpoint of epoch {best['epoch']}, chosen on validation {best['metric']} "
              f"({best['value']:.4f})." if best.get("metric") else "")
    return "\n".join(header) + f"""

# {markdown_text(out.name)}: relation extraction ({config['model_type']}, {prep['language']})

Trained with reltrain {config['reltrain_version']}. {_what(config, task)}

## Test metrics

{scores}

{chosen}

## Training data

| split | file | {"sentences" if task == "extract" else "rows"} |
|---|---|---|
{chr(10).join(rows)}

## Use

{_use(_folder_name(out.name), task, onnx)}

Files: `model.safetensors` (weights), {"`model.onnx` (the same model as an ONNX graph), " if onnx else ""}`config.json` (options,
`id2label`), the vocabulary or tokenizer files; nothing in this folder is pickled.
"""
