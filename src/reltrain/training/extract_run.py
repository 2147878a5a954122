"""What a task=extract run does differently from a classification run, for commands/train.py:
its data (data/extract_prepare.py), its model (models/spans.py) and loss, what the log says
about the data, and its test answers. The trainer, checkpoints, resume and launch modes are the
classification run's own."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from reltrain.data.extract_prepare import PreparedSpans, prepare_spans
from reltrain.models.spans import build_span_model
from reltrain.runtime.errors import UserError
from reltrain.runtime.output import write_output
from reltrain.training.optim import SpanLoss
from reltrain.data.answers import sentence_json

log = logging.getLogger("reltrain.train")

__all__ = ["PreparedSpans", "prepare_spans", "select_metric", "check_strategy", "span_model",
           "SpanLoss", "describe", "write_test_answers"]


def select_metric(setting: str, prepared: PreparedSpans) -> str:
    """``auto``: the strict relation F1, or DuIE's string triples where entities were strings."""
    if setting == "auto":
        return "triples_f1" if prepared.meta["strings"] else "relations_strict_f1"
    allowed = ("entities_f1", "relations_strict_f1", "relations_boundaries_f1", "triples_f1")
    if setting not in allowed or (setting == "triples_f1" and not prepared.meta["strings"]):
        raise UserError(f"train.select_metric={setting} is not a figure of task=extract on this "
                        f"data; choose auto, entities_f1, relations_strict_f1 or "
                        f"relations_boundaries_f1 (triples_f1 where entities are strings)")
    return setting


def check_strategy(ctx) -> None:
    """DataParallel cuts every input tensor of a batch evenly across its GPUs: a batch's spans
    and pairs would be cut apart from their sentences. DDP gives each process whole ones."""
    if len(ctx.dp_devices) > 1:
        raise UserError("task=extract does not run under dist.strategy=dp on several GPUs "
                        "(DataParallel would cut a batch's spans apart from their sentences); "
                        "launch with torchrun (DDP), which gives each process whole sentences")


def span_model(cfg, prepared: PreparedSpans, hf_config: dict | None = None):
    return build_span_model(cfg.model, cfg.extract, prepared.vocab_size,
                            len(prepared.entity_types), len(prepared.labels), hf_config)


def describe(prepared: PreparedSpans) -> None:
    meta = prepared.meta
    rows = ", ".join(f"{k} {v}" for k, v in meta["rows"].items())
    log.info("data: %s sentences; %d entity types, %d relations; vocabulary %d; mentions "
             "decoded %s%s; prediction answers a text's sentences %s", rows,
             len(prepared.entity_types), len(prepared.labels), prepared.vocab_size, meta["overlap"],
             " (tagged)" if meta["tags"] else "",
             "alone" if meta["sentences"] == "split" else "together (extract.sentences=whole)")
    lost = ", ".join(f"{n} in {s}" for s, n in meta["lost_entities"].items() if n)
    if lost:
        why = ("inside or across a longer one: a tagger answers one mention a unit" if meta["tags"]
               else "wider than extract.max_width")
        log.info("gold entities the model cannot answer (%s, off the units' edges or past "
                 "data.max_len): %s", why, lost)


def write_test_answers(run_dir: Path, dataset, answers) -> None:
    """``test_predictions.jsonl``: each test sentence's gold and answer, in input order."""
    lines = [json.dumps({"gold": sentence_json(gold), "answer": sentence_json(a.sentence, a)},
                        ensure_ascii=False)
             for gold, a in zip(dataset.sentences, answers)]
    write_output(str(run_dir / "test_predictions.jsonl"), "".join(line + "\n" for line in lines))
