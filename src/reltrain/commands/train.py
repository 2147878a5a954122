"""``reltrain train``: preprocess, train, select on valid, score the best checkpoint on test."""

from __future__ import annotations

import json
import logging
import resource
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from reltrain.runtime import children
from reltrain.artifacts.training_state import RunIdentity, TrainState
from reltrain.config.train import Config
from reltrain.data.dataset import RelationDataset, TrainBatchSampler, collate_batch
from reltrain.data.inputs import TextEncoder, text_encoder
from reltrain.data.preprocess import PREPROCESSING, Prepared, prepare_run, token_identity
from reltrain.data.readers import read_records
from reltrain.data.report import report_lines
from reltrain.inference.predictor import Answering, write_predictions
from reltrain.runtime.errors import Preempted, UserError
from reltrain.data.examples import use_example_data
from reltrain.runtime.launch import local_processes
from reltrain.runtime.logs import progress_enabled, run_log
from reltrain.models import build_model, model_hf_config
from reltrain.runtime.output import write_output
from reltrain.runtime.stops import StopRequest
from reltrain.runtime import distributed as D
from reltrain.training.callbacks import build_callbacks
from reltrain.training.checkpoint import Checkpointer, load_model_weights, seed_everything
from reltrain.evaluation.evaluate import evaluate
from reltrain.data.schema import negative_index
from reltrain.evaluation.metrics import format_report, headline, resolve_select
from reltrain.runtime.precision import resolve as resolve_precision
from reltrain.training.optim import Schedule, build_loss, build_optimizer, sparse_embedding
from reltrain.training.batching import BatchPlan, plan_batches
from reltrain.training.resume import (Resumed, describe_resume, find_resume, load_best_weights,
                                      run_complete)
from reltrain.training.run_dir import RunDirLock, new_run_dir, read_history, start_run_dir
from reltrain.training import extract_run as extract
from reltrain.training.trainer import Selection, Trainer, TrainParts
from reltrain.data.vectors import load_word_vectors
from reltrain.commands.report import write_report
from reltrain.evaluation.extraction import extraction_headline, format_extraction

log = logging.getLogger("reltrain.train")


def run_train(cfg: Config) -> dict:
    """Train one model and return the summary (also ``summary.json``). Rerunning the same command
    with the run's output_dir continues it from its latest good checkpoint (resume=auto)."""
    ctx = D.setup(cfg.device, cfg.dist)
    stop = StopRequest().install()
    lock = None
    try:
        run_dir = Path(ctx.agree(lambda: str(new_run_dir(cfg))))
        lock = RunDirLock(run_dir)
        ctx.agree(lock.acquire)  # before anything reads or writes the run directory
        with run_log(run_dir / "train.log" if ctx.is_main else None):
            return _train(cfg, ctx, run_dir, stop)
    except Preempted as exc:
        exc.run_dir = str(lock.path.parent) if lock else None
        raise
    except Exception:
        stop.check(_OUTSIDE)  # a collective broke: the other ranks stopped on the same signal
        raise
    finally:
        stop.restore()
        if lock:
            lock.release()
        D.teardown(ctx)


_OUTSIDE = "before training or after it; nothing new to save"


def _train(cfg: Config, ctx: D.DistContext, run_dir: Path, stop: StopRequest) -> dict:
    if use_example_data(cfg.data, cfg.task):
        log.info("no data.train given: training on the bundled English example%s",
                 " of task=extract" if cfg.task == "extract" else "")
    seed_everything(cfg.train.seed)
    progress = progress_enabled(cfg.log.progress, ctx.is_main)
    extracting = cfg.task == "extract"
    with ctx.main_first():  # rank 0 fills the cache; the others then read it
        prepared = (extract.prepare_spans(cfg) if extracting else
                    prepare_run(cfg, progress, lambda: stop.check(PREPROCESSING), local_processes()))
    stop.check(_OUTSIDE)
    negative, select, multi = ctx.agree(lambda: _scoring(cfg, prepared))
    if not extracting:  # one relation a pair, or several: the model folder keeps which
        prepared.splits = {name: split.with_labels(multi, len(prepared.labels), negative,
                                                   getattr(cfg.data, name))
                           for name, split in prepared.splits.items()}
        cfg = replace(cfg, model=replace(cfg.model, multi_label="true" if multi else "false"))
    tokens = token_identity(prepared)  # its vocabulary or tokenizer, for either task
    identity = RunIdentity(prepared.labels, tokens.vocab, tokens.lm, prepared.cache_key,
                           getattr(prepared, "entity_types", None))
    resumed = find_resume(cfg, run_dir, identity, ctx)
    plan = ctx.agree(lambda: plan_batches(
        cfg.train, ctx.world_size, resumed.training.global_batch_size if resumed else None,
        resumed.path if resumed else ""))
    # What runs is what config.yaml, the checkpoints and the summary say: the config with the
    # batch plan resolved (a new object; the validated one is left as it was).
    cfg = replace(cfg, train=replace(cfg.train, accum_steps=plan.accum_steps,
                                     global_batch_size=plan.global_batch))
    if extracting:  # and how it decodes, which the model folder keeps for prediction
        cfg = replace(cfg, extract=replace(cfg.extract, overlap=prepared.meta["overlap"],
                                           symmetric=",".join(prepared.meta["symmetric"]),
                                           sentences=prepared.meta["sentences"]))
    if ctx.is_main:
        start_run_dir(run_dir, cfg, resumed.training.train_state().epoch if resumed else 1)
        _describe(cfg, ctx, prepared, plan)
    parts = _build(cfg, ctx, prepared, run_dir, identity, progress, stop, resumed, select, negative)
    with stop.checked():  # the steps vote on a stop, and the run saves and ends there
        state = _fit(parts, ctx, resumed, stop)
    summary = _summary(cfg, ctx, state, run_dir, prepared)
    summary["precision"] = parts.trainer.precision.name
    if "test" in parts.sets:
        stop.check(_OUTSIDE)
        _score_test(cfg, ctx, parts, state, prepared.labels, run_dir, progress, summary, negative)
    summary.update(_memory(ctx))
    if ctx.is_main:
        write_output(str(run_dir / "summary.json"), json.dumps(summary, indent=2, ensure_ascii=False))
        _write_page(run_dir)
    # The last collective before anything is printed: a print that fails (the reader of the
    # output left, `| head`) ends rank 0 with no other rank waiting for it.
    ctx.barrier()
    if ctx.is_main:
        _print_summary(summary)
    return summary


def _describe(cfg: Config, ctx: D.DistContext, prepared: Prepared, plan: BatchPlan) -> None:
    cuda = f"yes, {torch.cuda.device_count()} GPU(s)" if torch.cuda.is_available() else "no"
    log.info("device %s (CUDA available: %s), strategy %s, world size %d, %d CPU thread(s) per process",
             ctx.device, cuda, ctx.strategy, ctx.world_size, torch.get_num_threads())
    log.info(plan.describe())
    meta = prepared.meta
    for split, reasons in meta["skipped"].items():
        if reasons:
            log.warning("skipped %d bad row(s) in %s, e.g.:\n  %s", len(reasons), split,
                        "\n  ".join(reasons[:5]))
    if cfg.task == "extract":
        return extract.describe(prepared)
    rows = ", ".join(f"{k} {v}" for k, v in meta["rows"].items())
    cache = (f"{prepared.cache_path}{' (reused)' if prepared.reused else ''}"
             if prepared.cache_path else "off (the cache location is not writable)")
    log.info("data: %s rows; %d relations; vocabulary %d; tokenizer %s; cache %s", rows,
             len(prepared.labels), prepared.vocab_size, meta["tokenizer"], cache)
    for line in report_lines(meta.get("report") or {"splits": {}}):
        log.info("data check: %s", line)
    cut = ", ".join(f"{n} in {split}" for split, n in meta["truncated"].items() if n)
    if cut:
        log.info("sentences cut to data.max_len=%d tokens around the entities: %s",
                 cfg.data.max_len, cut)


@dataclass
class _Parts:
    """What ``_build`` makes for a run: the trainer (holding model, optimizer, loaders) and data."""

    trainer: Trainer
    sets: dict[str, RelationDataset]
    callbacks: list


def _scoring(cfg: Config, prepared) -> tuple[int | None, str, bool]:
    """The negative relation's index (or None), the validation figure that selects, and
    whether a pair may have several relations (``model.multi_label``)."""
    if cfg.task == "extract":
        return None, extract.select_metric(cfg.train.select_metric, prepared), False
    labels, setting = prepared.labels, cfg.model.multi_label
    multi = setting == "true" or (setting == "auto" and bool(prepared.meta.get("multi_label")))
    negative = negative_index(cfg.eval.negative_label, labels)
    select = resolve_select(cfg.train.select_metric, negative, labels, multi)
    if negative is not None:
        log.info("negative relation: %s (left out of the positive figures); checkpoints/best by %s",
                 labels[negative], select)
    if multi:
        log.info("several relations a pair (model.multi_label): one sigmoid per relation, each "
                 "answered above its own threshold, chosen on validation")
    return negative, select, multi


def _build(cfg: Config, ctx: D.DistContext, prepared: Prepared, run_dir: Path,
           identity: RunIdentity, progress: bool, stop: StopRequest, resumed: Resumed | None,
           select: str, negative: int | None) -> _Parts:
    """Datasets, model (resumed weights loaded before wrapping), optimizer and the trainer."""
    if cfg.task == "extract":
        extract.check_strategy(ctx)
        sets = prepared.sets
    else:
        encoder = text_encoder(cfg.data, prepared.vocab, prepared.lm)
        sets = {name: RelationDataset(split, cfg.data.pos_limit, encoder.pad_id)
                for name, split in prepared.splits.items()}
    sampler = TrainBatchSampler(sets["train"].lengths, cfg.train.batch_size, cfg.train.seed,
                                ctx.rank, ctx.world_size, bucket=cfg.data.bucket,
                                accum_steps=cfg.train.accum_steps)
    loader = DataLoader(sets["train"], batch_sampler=sampler, collate_fn=collate_batch,
                        num_workers=cfg.data.num_workers, pin_memory=ctx.device.type == "cuda",
                        persistent_workers=cfg.data.num_workers > 0,
                        # not fork: this process holds torch's and gloo's threads
                        multiprocessing_context="spawn" if cfg.data.num_workers else None)
    model = (_build_span_model(cfg, prepared, resumed) if cfg.task == "extract"
             else _build_model(cfg, prepared, encoder, resumed))
    # Before wrapping: DDP reads each parameter's gradient layout when it builds its buckets.
    sparse, how = sparse_embedding(cfg.train.sparse_embeddings, model, cfg.train, ctx)
    if ctx.is_main:
        log.info("%s", how)
    model = D.wrap(model, ctx, cfg.dist.find_unused_parameters)
    pretrained = cfg.model.pretrained_encoder
    optimizer = build_optimizer(model, cfg.train, sparse, pretrained=pretrained)
    scheduler = Schedule(optimizer, cfg.train, sampler.num_batches, pretrained)
    precision = resolve_precision(cfg.train.amp, ctx.device, pretrained)
    if ctx.is_main:
        log.info(precision.describe())
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=precision.dtype == torch.float16)
    loss_fn = (extract.SpanLoss(cfg.extract.entity_weight) if cfg.task == "extract" else
               build_loss(cfg.train, prepared.splits["train"].labels, len(prepared.labels),
                          negative))
    loss_fn = loss_fn.to(ctx.device)
    model_part = dict(config=cfg, labels=identity.labels, vocab=identity.vocab, lm=identity.lm,
                      hf_config=model_hf_config(D.unwrap(model)), data_rows=prepared.meta["rows"],
                      entity_types=identity.entity_types)
    run = dict(data_key=identity.data_key, world_size=ctx.world_size,
               global_batch_size=cfg.train.global_batch_size)
    checkpointer = Checkpointer(run_dir / "checkpoints", model_part, run, model, optimizer,
                                scheduler, ctx, scaler=scaler, keep=cfg.ckpt.keep)
    callbacks = build_callbacks(run_dir, cfg, select) if ctx.is_main else []
    parts = TrainParts(model, optimizer, scheduler, loss_fn, loader, sets.get("valid"),
                       checkpointer, precision, scaler, callbacks)
    trainer = Trainer(parts, cfg.train, ctx, Selection(prepared.labels, select, negative),
                      progress, every_steps=cfg.ckpt.every_steps, stop=stop)
    return _Parts(trainer, sets, callbacks)


def _build_model(cfg: Config, prepared: Prepared, encoder: TextEncoder, resumed: Resumed | None):
    model = build_model(cfg.model, encoder.size, len(prepared.labels), cfg.data.pos_limit,
                        added_tokens=encoder.added_tokens)
    positions = (model_hf_config(model) or {}).get("max_position_embeddings")
    if positions and cfg.data.max_len > positions:
        raise UserError(f"data.max_len={cfg.data.max_len} is more than the {positions} positions "
                        f"of {cfg.model.lm.pretrained}: set data.max_len={positions} or less")
    if resumed:  # before wrapping: DDP starts every rank from these
        load_model_weights(model, resumed.model.weights, resumed.path)
    elif cfg.model.word_vectors:
        _init_word_vectors(model, cfg, prepared)
    if cfg.model.freeze_embeddings and hasattr(model, "embed"):
        model.embed.word.weight.requires_grad_(False)
    return model


def _build_span_model(cfg: Config, prepared, resumed: Resumed | None):
    model = extract.span_model(cfg, prepared)
    if resumed:  # before wrapping: DDP starts every rank from these
        load_model_weights(model, resumed.model.weights, resumed.path)
    return model


def _fit(parts: _Parts, ctx: D.DistContext, resumed: Resumed | None, stop: StopRequest) -> TrainState:
    """Restore a resumed run's state, then train the epochs that are left."""
    trainer, state = parts.trainer, TrainState()
    if resumed:
        describe_resume(resumed.training, ctx)
        state, trainer.partial = trainer.checkpointer.restore(resumed.training, resumed.path)
        if run_complete(state, trainer.cfg.epochs) and "test" in parts.sets:
            log.info("re-scoring the best checkpoint (epoch %s) on the test set",
                     (state.best or {}).get("epoch"))
    try:
        stop.check(_OUTSIDE)
        return trainer.fit(state)
    finally:
        for cb in parts.callbacks:
            cb.close()


def _init_word_vectors(model, cfg: Config, prepared: Prepared) -> None:
    """Start the word embeddings from pretrained vectors (identical on every rank)."""
    vectors, found = load_word_vectors(cfg.model.word_vectors, prepared.vocab, cfg.model.word_dim)
    with torch.no_grad():
        weight = model.embed.word.weight
        weight[torch.from_numpy(found)] = torch.from_numpy(vectors[found])
    log.info("word vectors: %d of %d vocabulary entries found in %s (%.1f%%)%s", found.sum(),
             len(found) - 2, cfg.model.word_vectors, 100 * found.sum() / max(len(found) - 2, 1),
             "; frozen" if cfg.model.freeze_embeddings else "")


def _score_test(cfg, ctx, parts: _Parts, state, labels, run_dir, progress, summary,
                negative: int | None) -> None:
    """Every rank tests the best weights: rank 0 reads checkpoints/best and sends them (node-local run
    directories work); no rank keeps a copy of them while training."""
    trainer, test_set = parts.trainer, parts.sets["test"]
    model = D.unwrap(trainer.model)
    weights = load_best_weights(run_dir, state, ctx)
    if weights is not None:
        model.load_state_dict(weights)
        del weights
    else:
        log.warning("best weights unavailable (checkpoints/best missing or unreadable): testing "
                    "the last ones")
    start = time.perf_counter()
    metrics, probs = evaluate(model, test_set, cfg.train.eval_batch_size, labels, ctx, progress,
                              desc="test", precision=trainer.precision, negative=negative)
    summary["test"] = metrics
    summary["test_sent_per_s"] = len(test_set) / max(time.perf_counter() - start, 1e-9)
    if ctx.is_main and cfg.task == "extract":
        extract.write_test_answers(run_dir, test_set, probs)
    elif ctx.is_main:
        _write_test_predictions(cfg, run_dir, Answering.of(model, labels, negative), probs)


def _write_test_predictions(cfg: Config, run_dir: Path, answering: Answering, probs) -> None:
    """``test_predictions.jsonl``: every test row with its gold and predicted relation, in input
    order; the rows are read again here (the cache holds their ids, not their text)."""
    records = read_records(cfg.data.test, answering.labels, skip_bad_rows=cfg.data.skip_bad_rows,
                           encoding=cfg.data.encoding).records
    if len(records) != len(probs):  # the file changed since the cache was built
        log.warning("%s now has %d rows, %d were scored: test_predictions.jsonl not written",
                    cfg.data.test, len(records), len(probs))
        return
    write_predictions(str(run_dir / "test_predictions.jsonl"), records, probs, answering)


def _write_page(run_dir: Path) -> None:
    """``report.html``, the run's page: what ``reltrain report RUN_DIR`` writes for it."""
    try:
        write_report([str(run_dir)], run_dir / "report.html")
    except OSError as exc:  # the run itself is complete
        log.warning("cannot write %s: %s", run_dir / "report.html", exc.strerror or exc)


def _summary(cfg: Config, ctx: D.DistContext, state: TrainState, run_dir: Path,
             prepared: Prepared) -> dict:
    history = read_history(run_dir) if ctx.is_main else []
    speeds = [r["train_sent_per_s"] for r in history[1:]] or [r["train_sent_per_s"] for r in history]
    return {
        "run_dir": str(run_dir),
        "best": state.best,
        "best_by_metric": state.best_by_metric,
        "epochs_run": state.epoch - 1,
        "stopped_early": state.stopped_early,
        "world_size": ctx.world_size,
        "batch_size": cfg.train.batch_size,
        "accum_steps": cfg.train.accum_steps,
        "global_batch_size": cfg.train.global_batch_size,
        "strategy": ctx.strategy,
        "device": str(ctx.device),
        "train_sent_per_s_median": statistics.median(speeds) if speeds else None,
        # torch's allocator on this rank's GPU (what the tensors held at most, not the cache)
        "peak_gpu_mb": (torch.cuda.max_memory_allocated(ctx.device) / 2**20
                        if ctx.device.type == "cuda" else None),
        "data": {"rows": prepared.meta["rows"], "relations": len(prepared.labels),
                 "vocab_size": prepared.vocab_size,
                 "skipped": {k: len(v) for k, v in prepared.meta["skipped"].items()},
                 "report": prepared.meta.get("report")},
        "checkpoints": {"best": str(run_dir / "checkpoints" / "best"),
                        "last": str(run_dir / "checkpoints" / "last")},
    }


def _memory(ctx: D.DistContext) -> dict:
    """Peak resident memory: this rank's own, its children's (the cache build and its workers;
    DataLoader workers only as the largest one), and the run's, summed over every rank.
    Sums of peaks: an upper bound, since the peaks need not coincide."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = max(children.peak_rss_mb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return {"peak_rss_mb": own, "peak_rss_children_mb": kids,
            "peak_rss_run_mb": ctx.sum([own + kids])[0]}


def _print_summary(summary: dict) -> None:
    best = summary["best"]
    page = Path(summary["run_dir"]) / "report.html"
    lines = [f"run directory: {summary['run_dir']}"
             + (f" (its page: {page}, to open in a browser)" if page.is_file() else "")]
    if best and best["metric"]:
        lines.append(f"best checkpoint: epoch {best['epoch']} by valid {best['metric']} "
                     f"{best['value']:.4f}")
        for name in ("positive_micro_f1", "macro_f1", "micro_f1"):
            b = summary["best_by_metric"].get(name)
            if b:
                lines.append(f"  best valid {name}: {b['value']:.4f} at epoch {b['epoch']}")
    if "test" in summary and "per_relation" in summary["test"]:  # task=extract
        lines += [format_extraction(summary["test"]),
                  f"test (best checkpoint): {extraction_headline(summary['test'])}"]
    elif "test" in summary:
        t = summary["test"]
        lines.append(format_report(t))
        lines.append(f"test (best checkpoint): {headline(t)}  macro-P {t['macro_precision']:.4f}  "
                     f"macro-R {t['macro_recall']:.4f}")
    print("\n".join(lines), flush=True)
