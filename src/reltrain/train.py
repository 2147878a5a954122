"""``reltrain train``: preprocess, train, select on valid, score the best checkpoint on test."""

from __future__ import annotations

import json
import logging
import resource
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from reltrain.config import Config, to_dict
from reltrain.data.dataset import RelationDataset, TrainBatchSampler, collate_batch
from reltrain.data.preprocess import Prepared, prepare_run, token_identity
from reltrain.errors import Preempted, UserError
from reltrain.examples import use_example_data
from reltrain.logs import add_file_log, progress_enabled, setup_logging
from reltrain.models import build_model, model_hf_config
from reltrain.training import distributed as D
from reltrain.training.callbacks import build_callbacks
from reltrain.training.checkpoint import Checkpointer, seed_everything
from reltrain.training.evaluation import evaluate
from reltrain.training.metrics import confusion, format_report
from reltrain.training.optim import build_loss, build_optimizer, build_schedule, resolve_amp
from reltrain.training.preemption import StopRequest
from reltrain.training.resume import find_resume, load_best_weights, restore
from reltrain.training.trainer import Trainer, TrainState

log = logging.getLogger("reltrain.train")


def run_train(cfg: Config) -> dict:
    """Train one model and return the summary (also written to ``summary.json``).

    One device:   reltrain train data.train=train.csv data.valid=valid.csv data.test=test.csv
    Many (DDP):   torchrun --standalone --nproc_per_node=4 -m reltrain train data.train=...
    Resumes from the latest good checkpoint in output_dir (resume=auto), so rerunning the same
    command after a crash or preemption continues the run.
    """
    ctx = D.setup(cfg.device, cfg.dist)
    stop = StopRequest().install()
    try:
        setup_logging(ctx.is_main)
        if use_example_data(cfg.data):
            log.info("no data.train given: training on the bundled English example")
        seed_everything(cfg.train.seed)
        run_dir = Path(D.broadcast_object(_new_run_dir(cfg) if ctx.is_main else None))
        progress = progress_enabled(cfg.log.progress, ctx.is_main)
        with D.main_first():  # rank 0 fills the cache; the others then read it
            prepared = prepare_run(cfg, progress)
        identity = {**token_identity(prepared), "labels": prepared.labels}
        payload = find_resume(cfg, run_dir, identity)
        if ctx.is_main:
            _start_run_dir(run_dir, cfg, payload["state"]["epoch"] if payload else 1)
            _describe(cfg, ctx, prepared)
        return _fit_and_test(cfg, ctx, prepared, run_dir, progress, payload, stop, identity)
    finally:
        stop.restore()
        D.teardown()


def _new_run_dir(cfg: Config) -> str:
    if cfg.output_dir:
        return cfg.output_dir
    run_id = D.launcher_run_id()  # stable across torchrun's restarts, so they find the checkpoints
    name = f"torchrun-{run_id}" if run_id else time.strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{name}-{cfg.model.name}")


def _start_run_dir(run_dir: Path, cfg: Config, next_epoch: int) -> None:
    """Create the run directory; on resume keep the metrics of the epochs already finished."""
    from omegaconf import OmegaConf

    log_path = run_dir / "metrics.jsonl"
    try:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        for stale in (run_dir / "checkpoints").glob("*.tmp"):  # left by a write that was killed
            stale.unlink()
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        kept = [line for line in _read_lines(log_path) if json.loads(line)["epoch"] < next_epoch]
        log_path.write_text("".join(line + "\n" for line in kept))
    except OSError as exc:
        raise UserError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None
    add_file_log(run_dir / "train.log")


def _read_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []


def _describe(cfg: Config, ctx: D.DistContext, prepared: Prepared) -> None:
    cuda = f"yes, {torch.cuda.device_count()} GPU(s)" if torch.cuda.is_available() else "no"
    log.info("device %s (CUDA available: %s), strategy %s, world size %d, %d CPU thread(s) per process",
             ctx.device, cuda, ctx.strategy, ctx.world_size, torch.get_num_threads())
    log.info("batch size %d per process, global batch %d", cfg.train.batch_size,
             cfg.train.batch_size * ctx.world_size)
    meta = prepared.meta
    rows = ", ".join(f"{k} {v}" for k, v in meta["rows"].items())
    log.info("data: %s rows; %d relations; vocabulary %d; tokenizer %s; cache %s%s",
             rows, len(prepared.labels), prepared.vocab_size, meta["tokenizer"],
             prepared.cache_path, " (reused)" if prepared.reused else "")
    for split, reasons in meta["skipped"].items():
        if reasons:
            log.warning("skipped %d bad row(s) in %s, e.g.:\n  %s", len(reasons), split,
                        "\n  ".join(reasons[:5]))
    cut = {k: v for k, v in meta["truncated"].items() if v}
    if cut:
        log.info("sentences cut to data.max_len=%d around the entities: %s", cfg.data.max_len, cut)


def _fit_and_test(cfg: Config, ctx: D.DistContext, prepared: Prepared, run_dir: Path,
                  progress: bool, payload: dict | None, stop: StopRequest, identity: dict) -> dict:
    pos_limit = cfg.data.pos_limit
    pad_id = prepared.lm.pad_id if prepared.lm is not None else 0
    sets = {name: RelationDataset(split, pos_limit, pad_id) for name, split in prepared.splits.items()}
    sampler = TrainBatchSampler(sets["train"].lengths, cfg.train.batch_size, cfg.train.seed,
                                ctx.rank, ctx.world_size, bucket=cfg.data.bucket)
    loader = DataLoader(sets["train"], batch_sampler=sampler, collate_fn=collate_batch,
                        num_workers=cfg.data.num_workers, pin_memory=ctx.device.type == "cuda",
                        persistent_workers=cfg.data.num_workers > 0)
    added = len(prepared.lm.added) if prepared.lm is not None else 0
    model = build_model(cfg.model, prepared.vocab_size, len(prepared.labels), pos_limit,
                        added_tokens=added)
    if payload:  # load into the plain model, then wrap
        model.load_state_dict(D.strip_wrapper_prefixes(payload["model"]))
    elif cfg.model.word_vectors:
        _init_word_vectors(model, cfg, prepared)
    if cfg.model.freeze_embeddings and hasattr(model, "embed"):
        model.embed.word.weight.requires_grad_(False)
    model = D.wrap(model, ctx, cfg.dist.find_unused_parameters)
    optimizer = build_optimizer(model, cfg.train)
    scheduler = build_schedule(optimizer, cfg.train, sampler.num_batches, model)
    amp = resolve_amp(cfg.train.amp, ctx.device, model)
    scaler = torch.amp.GradScaler(ctx.device.type, enabled=amp == torch.float16)
    loss_fn = build_loss(cfg.train, prepared.splits["train"].labels, len(prepared.labels)).to(ctx.device)
    static = {"config": to_dict(cfg), **identity, "world_size": ctx.world_size,
              "hf_config": model_hf_config(D.unwrap(model))}
    checkpointer = Checkpointer(run_dir / "checkpoints", static, model, optimizer, scheduler,
                                scaler, keep=cfg.ckpt.keep)
    callbacks = build_callbacks(run_dir, cfg) if ctx.is_main else []
    trainer = Trainer(model, optimizer, scheduler, loss_fn, loader, sets.get("valid"),
                      prepared.labels, cfg.train, checkpointer, callbacks, progress,
                      every_steps=cfg.ckpt.every_steps, stop=stop, amp=amp, scaler=scaler)
    state = TrainState()
    if payload:
        state = restore(payload, model, optimizer, scheduler, trainer, scaler)
        trainer.best_weights = load_best_weights(run_dir, state)
        for cb in callbacks:
            cb.resume([json.loads(ln) for ln in _read_lines(run_dir / "metrics.jsonl")])
    try:
        state = trainer.fit(state)
    except Preempted as exc:
        log.warning("%s; run the same command again to resume", exc)
        raise
    finally:
        for cb in callbacks:
            cb.close()
    summary = _summary(cfg, ctx, state, run_dir, prepared)
    if "test" in sets:
        _score_test(cfg, ctx, trainer, state, sets["test"], prepared, run_dir, progress, summary)
    if ctx.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
        _print_summary(summary)
    D.barrier()
    return summary


def _init_word_vectors(model, cfg: Config, prepared: Prepared) -> None:
    """Start the word embeddings from pretrained vectors (identical on every rank)."""
    from reltrain.data.vectors import load_word_vectors

    vectors, found = load_word_vectors(cfg.model.word_vectors, prepared.vocab, cfg.model.word_dim)
    with torch.no_grad():
        weight = model.embed.word.weight
        weight[torch.from_numpy(found)] = torch.from_numpy(vectors[found])
    log.info("word vectors: %d of %d vocabulary entries found in %s (%.1f%%)%s", found.sum(),
             len(found) - 2, cfg.model.word_vectors, 100 * found.sum() / max(len(found) - 2, 1),
             "; frozen" if cfg.model.freeze_embeddings else "")


def _score_test(cfg, ctx, trainer, state, test_set, prepared, run_dir, progress, summary) -> None:
    """Every rank loads the same best weights (kept in memory: node-local run dirs work)."""
    model = D.unwrap(trainer.model)
    if trainer.best_weights is not None:
        model.load_state_dict(trainer.best_weights)
    else:
        log.warning("best weights unavailable (best.pt missing or unreadable): testing the last ones")
    metrics, pred = evaluate(model, test_set, cfg.train.eval_batch_size, prepared.labels,
                             progress, desc="test")
    summary["test"] = metrics
    if ctx.is_main and cfg.log.plots:
        from reltrain.training.plots import plot_confusion

        matrix = confusion(test_set.split.labels, pred, len(prepared.labels))
        plot_confusion(matrix, prepared.labels, run_dir / "plots" / "confusion_test.png",
                       f"Test confusion (best epoch {state.best['epoch']})")


def _summary(cfg: Config, ctx: D.DistContext, state: TrainState, run_dir: Path,
             prepared: Prepared) -> dict:
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.strip()] if ctx.is_main else []
    speeds = [r["train_sent_per_s"] for r in history[1:]] or [r["train_sent_per_s"] for r in history]
    return {
        "run_dir": str(run_dir),
        "best": state.best,
        "best_by_metric": state.best_by_metric,
        "epochs_run": state.epoch - 1,
        "stopped_early": state.stopped_early,
        "world_size": ctx.world_size,
        "batch_size": cfg.train.batch_size,
        "global_batch_size": cfg.train.batch_size * ctx.world_size,
        "strategy": ctx.strategy,
        "grad_allreduce": ctx.grad_allreduce,
        "device": str(ctx.device),
        "train_sent_per_s_median": statistics.median(speeds) if speeds else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # this rank
        "data": {"rows": prepared.meta["rows"], "relations": len(prepared.labels),
                 "vocab_size": prepared.vocab_size,
                 "skipped": {k: len(v) for k, v in prepared.meta["skipped"].items()}},
        "checkpoints": {"best": str(run_dir / "checkpoints" / "best.pt"),
                        "last": str(run_dir / "checkpoints" / "last.pt")},
    }


def _print_summary(summary: dict) -> None:
    best = summary["best"]
    lines = [f"run directory: {summary['run_dir']}"]
    if best and best["metric"]:
        lines.append(f"best checkpoint: epoch {best['epoch']} by valid {best['metric']} "
                     f"{best['value']:.4f}")
        for name in ("macro_f1", "micro_f1"):
            b = summary["best_by_metric"][name]
            lines.append(f"  best valid {name}: {b['value']:.4f} at epoch {b['epoch']}")
    if "test" in summary:
        t = summary["test"]
        lines.append(format_report(t))
        lines.append(f"test (best checkpoint): macro-F1 {t['macro_f1']:.4f}  micro-F1 "
                     f"{t['micro_f1']:.4f}  macro-P {t['macro_precision']:.4f}  macro-R "
                     f"{t['macro_recall']:.4f}")
    print("\n".join(lines), flush=True)
