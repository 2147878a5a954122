"""Finding, checking and applying the checkpoint a run continues from. Rank 0 reads the folder and
broadcasts it, so the other ranks need not see the run directory."""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path
from typing import NamedTuple

from reltrain.artifacts.model_folder import (Artifact, checked_tokenizer, model_source,
                                             read_model_folder)
from reltrain.artifacts.save import recover_checkpoints
from reltrain.artifacts.training_state import (STATE_FILE, RunIdentity, TrainingState, TrainState,
                                               load_training_state)
from reltrain.config.train import Config, dotted, to_dict
from reltrain.runtime import distributed as D
from reltrain.runtime.errors import UserError
from reltrain.training.checkpoint import resume_candidates
from reltrain.training.optim import linear_schedule

log = logging.getLogger(__name__)


class Resumed(NamedTuple):
    """The checkpoint a run continues from: its model folder and its training state."""

    model: Artifact
    training: TrainingState
    path: str


def read_checkpoint(folder: Path) -> Resumed:
    """A checkpoint folder, both halves checked."""
    training = load_training_state(folder / STATE_FILE)
    training.check(str(folder))
    return Resumed(read_model_folder(folder), training, str(folder))


def find_resume(cfg: Config, run_dir: Path, identity: RunIdentity,
                ctx: D.DistContext) -> Resumed | None:
    """The checkpoint to continue from (on every rank), or None for a fresh start."""
    found = ctx.agree(lambda: _pick(cfg, run_dir, identity))
    # The fields travel (their tensors by broadcast); rank 0 has checked them.
    if not found:
        return None
    model, training, path = found
    return Resumed(Artifact(**model), TrainingState(**training), path)


def _pick(cfg: Config, run_dir: Path, identity: RunIdentity) -> tuple | None:
    directory = run_dir / "checkpoints"
    if directory.is_dir():
        recover_checkpoints(directory)  # a folder moved aside by a write that was killed
    if cfg.resume == "never":
        if (directory / "last").exists():
            log.warning("resume=never: starting afresh; checkpoints in %s will be overwritten", directory)
        return None
    explicit = cfg.resume != "auto"
    candidates = [Path(cfg.resume)] if explicit else resume_candidates(directory)
    if not candidates and (directory / "best" / STATE_FILE).is_file():
        # Starting afresh would overwrite best and metrics.jsonl without a word.
        raise UserError(f"{directory} holds best but no last to resume from: continue from the "
                        f"best epoch with resume={directory / 'best'}, or keep it and use another "
                        f"output_dir (resume=never starts afresh and overwrites it)")
    for path in candidates:
        try:
            if explicit:
                path = model_source(path)
            ck = read_checkpoint(path)
            check_compatible(ck, cfg, identity)
        except UserError as exc:
            if explicit or isinstance(exc, Mismatch):
                raise
            log.warning("%s; trying the previous checkpoint", exc)
            continue
        state = ck.training.train_state()
        if run_complete(state, cfg.train.epochs):
            log.info("the run in %s is complete (%s); nothing to train", run_dir,
                     _progress_text(state))
        else:
            log.info("resuming from %s (epoch %d, %d batches into it, step %d)", path,
                     state.epoch, state.batch_in_epoch, state.step)
        return vars_of(ck.model), vars_of(ck.training), ck.path
    if candidates:
        log.warning("no readable checkpoint in %s: starting afresh", directory)
    return None


def vars_of(obj) -> dict:
    """A dataclass's fields, not copied (``dataclasses.asdict`` would copy every tensor)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


class Mismatch(UserError):
    """A readable checkpoint of another run: an error, never a reason to try an older one."""


# Options that shape the training trajectory: a resumed run cannot honour a new value exactly
# (the optimizer, the schedule and the data order in the checkpoint were made with the old one).
# Every model.* key is fixed too.
_FIXED_FOR_RESUME = {
    *(f"train.{key}" for key in ("lr", "encoder_lr", "weight_decay", "schedule", "warmup_ratio",
                                 "amp", "lr_factor", "lr_patience", "grad_clip", "select_metric",
                                 "sparse_embeddings",
                                 "class_weights", "seed")),
    *(f"data.{key}" for key in ("language", "tokenizer", "lowercase", "max_len", "min_freq",
                                "max_vocab", "pos_limit", "bucket", "skip_bad_rows")),
}


def run_complete(state: TrainState, epochs: int) -> bool:
    """True when a checkpoint's run has nothing left to train with ``train.epochs=epochs``."""
    return state.stopped_early or state.epoch > epochs


def _progress_text(state: TrainState) -> str:
    text = f"{state.epoch - 1} epoch(s) trained"
    if state.stopped_early:
        text += ", stopped early"
    best = state.best or {}
    if best.get("metric"):
        text += f", best epoch {best['epoch']} by valid {best['metric']} {best['value']:.4f}"
    return text


def check_compatible(ck: Resumed, cfg: Config, identity: RunIdentity) -> None:
    """A checkpoint of another model, vocabulary, label set or recipe is a clear error. Options that
    do not change the result may change; ``train.epochs`` and ``train.early_stopping`` apply from
    here on, with a note; any other change is refused, so ``config.yaml`` says what ran."""
    path, old, training = ck.path, ck.model.config, ck.training
    was = dotted(to_dict(old))
    for key, now in dotted(to_dict(cfg)).items():
        if (key.startswith("model.") or key in _FIXED_FOR_RESUME) and was.get(key, now) != now:
            raise Mismatch(f"{path}: does not match this run: {key} was {was[key]!r}, now "
                           f"{now!r}; a resumed run continues with the checkpoint's settings (set "
                           f"{key}={was[key]}, or use another output_dir or resume=never to "
                           f"start afresh)")
    wanted, saved = cfg.train.global_batch_size, training.global_batch_size
    if wanted and wanted != saved:
        raise Mismatch(f"{path}: does not match this run: it trained with a global batch of "
                        f"{saved}, not train.global_batch_size={wanted}; the per-process batch and "
                        f"the number of processes may change, the global batch may not")
    different = _mismatch(ck, identity)
    if different:
        raise Mismatch(f"{path}: does not match this run: {different}")
    _note_applied_changes(old.train, cfg, training.train_state())


def _mismatch(ck: Resumed, run: RunIdentity) -> str | None:
    """What differs between the checkpoint and this run's data, in words, or None."""
    lm = checked_tokenizer(run.lm, "this run's tokenizer") if run.lm else None
    if ck.model.labels != run.labels or ck.model.entity_types != run.entity_types:
        return "it was trained on another label set"
    if ck.model.vocab != run.vocab or ck.model.lm != lm:
        return ("it was trained with another vocabulary (different training data or "
                "preprocessing options)")
    if ck.training.data_key is not None and ck.training.data_key != run.data_key:
        return ("the data files changed since it was written (use another output_dir, or "
                "resume=never to start afresh)")
    return None


def _note_applied_changes(was, cfg: Config, state: TrainState) -> None:
    t = cfg.train
    if was.epochs != t.epochs and not run_complete(state, t.epochs):
        log.info("train.epochs changed from %s to %d: training on to epoch %d", was.epochs,
                 t.epochs, t.epochs)
        if linear_schedule(t, cfg.model.pretrained_encoder):
            log.warning("the linear learning-rate schedule now decays over %d epochs: the run "
                        "matches neither the old nor the new length run uninterrupted", t.epochs)
    if was.early_stopping != t.early_stopping:
        log.warning("train.early_stopping changed from %s to %d: applied from the next epoch on",
                    was.early_stopping, t.early_stopping)


def describe_resume(training: TrainingState, ctx: D.DistContext) -> None:
    if training.world_size != ctx.world_size:
        log.info("resuming on %d process(es) a run saved by %d, with the same global batch of %d "
                 "(%s)", ctx.world_size, training.world_size, training.global_batch_size,
                 "mid-epoch, at the same example" if training.train_state().batch_in_epoch
                 else "at an epoch end")


def load_best_weights(run_dir: Path, state: TrainState, ctx: D.DistContext) -> dict | None:
    """The weights of ``checkpoints/best`` if they belong to this state's best epoch, on every
    rank (rank 0 reads; the tensors travel by broadcast), else None."""
    def read() -> dict | None:
        if state.best is None:
            return None
        try:
            ck = read_checkpoint(run_dir / "checkpoints" / "best")
        except UserError as exc:
            log.warning("%s", exc)
            return None
        best = ck.training.train_state().best or {}
        return ck.model.weights if best.get("epoch") == state.best["epoch"] else None

    return ctx.agree(read)
