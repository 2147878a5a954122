"""``reltrain evaluate``: the metrics of a checkpoint on a labelled file."""

from __future__ import annotations

import json
import logging

from reltrain.config.train import DistConfig
from reltrain.data.readers import read_records
from reltrain.config.commands import EvaluateOptions
from reltrain.runtime.output import check_output, write_output
from reltrain.inference.predictor import write_predictions
from reltrain.data.schema import negative_index
from reltrain.commands.predict import load_predictor, warn_misfit
from reltrain.runtime import distributed as D
from reltrain.evaluation.evaluate import evaluate
from reltrain.data.answers import sentence_json
from reltrain.data.extraction import read_annotated
from reltrain.evaluation.span_decode import evaluate_spans
from reltrain.runtime.errors import UserError

log = logging.getLogger("reltrain.evaluate")


def run_evaluate(checkpoint: str | None = None, data: str | None = None,
                 options: EvaluateOptions | None = None, **settings) -> dict:
    """Score ``checkpoint`` on ``data`` and print the metrics as JSON (the keys of summary.json);
    ``options`` (the command line's) or the arguments and ``settings`` (EvaluateOptions' fields:
    ``predictions``, also every row's answer as a run's ``test_predictions.jsonl``;
    ``negative_label``, as ``eval.negative_label``, default the model's own setting)."""
    o = options or EvaluateOptions(checkpoint, data, **settings)
    check_output(o.output, (o.data, o.checkpoint))
    check_output(o.predictions, (o.data, o.checkpoint), "--predictions")
    ctx = D.setup(o.device, DistConfig())
    try:
        predictor = load_predictor(o, ctx)
        if getattr(predictor, "entity_types", None) is not None:  # an extraction model
            return _evaluate_extraction(predictor, o, ctx)
        result = read_records(o.data, predictor.labels, skip_bad_rows=o.skip_bad_rows,
                              encoding=o.encoding)
        if ctx.is_main:
            warn_misfit(predictor, result.records)
        setting = o.negative_label or predictor.config.eval.negative_label
        negative = negative_index(setting, predictor.labels)
        metrics, probs = evaluate(predictor.model, predictor.dataset(result.records), o.batch_size,
                                  predictor.labels, ctx, precision=predictor.precision,
                                  negative=negative)
        if o.predictions and ctx.is_main:
            write_predictions(o.predictions, result.records, probs, predictor.answering)
        metrics["skipped_rows"] = len(result.skipped)
        if ctx.is_main:
            text = json.dumps(metrics, indent=2, ensure_ascii=False)
            if o.output:
                write_output(o.output, text + "\n")
            print(text, flush=True)
        return metrics
    finally:
        D.teardown(ctx)


def _evaluate_extraction(extractor, o: EvaluateOptions, ctx: D.DistContext) -> dict:
    """Entities and relations of a gold file (any of the extraction formats) against the
    model's answers, scored as a run's test set is; the same on every rank."""
    if o.negative_label is not None:  # every rank alike
        raise UserError("--negative-label does not apply to an extraction model: a pair with no "
                        "relation answers none")
    skipped = [] if o.skip_bad_rows else None
    gold = read_annotated(o.data, o.encoding, skipped=skipped)
    if ctx.is_main:
        warn_misfit(extractor, gold)
    metrics, answers = evaluate_spans(extractor.model, extractor.dataset(gold), o.batch_size, ctx,
                                      precision=extractor.precision)
    metrics["skipped_rows"] = len(skipped or [])
    if ctx.is_main:
        if o.predictions:
            write_output(o.predictions, "".join(
                json.dumps({"gold": sentence_json(g), "answer": sentence_json(a.sentence, a)},
                           ensure_ascii=False) + "\n" for g, a in zip(gold, answers)))
        text = json.dumps(metrics, indent=2, ensure_ascii=False)
        if o.output:
            write_output(o.output, text + "\n")
        print(text, flush=True)
    return metrics
