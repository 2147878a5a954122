"""Finding, checking and applying the checkpoint a run continues from.

Global rank 0 reads the file and broadcasts it, so the other ranks need not see the run
directory (node-local output directories work).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

from reltrain.config import Config
from reltrain.errors import UserError
from reltrain.training import distributed as D
from reltrain.training.checkpoint import load_checkpoint, resume_candidates
from reltrain.training.trainer import EpochProgress, TrainState

log = logging.getLogger(__name__)


def find_resume(cfg: Config, run_dir: Path, identity: dict) -> dict | None:
    """The checkpoint to continue from (on every rank), or None for a fresh start."""
    if D.is_main():
        try:
            found = ("ok", _pick(cfg, run_dir, identity))
        except UserError as exc:
            found = ("error", str(exc))
    else:
        found = None
    status, value = D.broadcast_object(found)
    if status == "error":
        raise UserError(value)
    return value


def _pick(cfg: Config, run_dir: Path, identity: dict) -> dict | None:
    directory = run_dir / "checkpoints"
    if cfg.resume == "never":
        if (directory / "last.pt").exists():
            log.warning("resume=never: starting afresh; checkpoints in %s will be overwritten", directory)
        return None
    explicit = cfg.resume != "auto"
    candidates = [Path(cfg.resume)] if explicit else resume_candidates(directory)
    for path in candidates:
        try:
            payload = load_checkpoint(path)
            check_compatible(payload, path, cfg, identity)
        except UserError as exc:
            if explicit or "does not match" in str(exc):
                raise
            log.warning("%s; trying the previous checkpoint", exc)
            continue
        state = payload["state"]
        log.info("resuming from %s (epoch %d, %d batches into it, step %d)", path, state["epoch"],
                 state["batch_in_epoch"], state["step"])
        payload["path"] = str(path)
        return payload
    if candidates:
        log.warning("no readable checkpoint in %s: starting afresh", directory)
    return None


def check_compatible(payload: dict, path: Path, cfg: Config, identity: dict) -> None:
    """A checkpoint of another model, vocabulary or label set is a clear error."""
    state_keys = {f.name for f in fields(TrainState)}
    if (not isinstance(payload.get("state"), dict) or not state_keys <= set(payload["state"])
            or not payload.get("rank_states") or "optimizer" not in payload):
        raise UserError(f"{path}: not a resumable checkpoint of this reltrain version "
                        f"(it can still be used with evaluate / predict)")
    old = payload.get("config", {})
    for section, keys in (("model", None), ("data", ("pos_limit",))):
        was, now = old.get(section, {}), getattr(cfg, section).__dict__
        for key in keys or now:
            if key in was and was[key] != now[key]:
                raise UserError(f"{path}: does not match this run: {section}.{key} was "
                                f"{was[key]!r}, now {now[key]!r} (use another output_dir, "
                                f"or resume=never to overwrite)")
    if payload.get("labels") != identity["labels"]:
        raise UserError(f"{path}: does not match this run: it was trained on another label set")
    if payload.get("vocab") != identity["vocab"] or payload.get("lm") != identity["lm"]:
        raise UserError(f"{path}: does not match this run: it was trained with another vocabulary "
                        f"(different training data or preprocessing options)")
    for key in ("batch_size", "seed"):
        if old.get("train", {}).get(key) != getattr(cfg.train, key):
            log.warning("train.%s changed since %s: the run continues but will not match an "
                        "uninterrupted one", key, path)


def restore(payload: dict, model, optimizer, scheduler, trainer, scaler=None) -> TrainState:
    """Put a checkpoint's training state into freshly built objects (model before wrapping)."""
    from reltrain.training.checkpoint import restore_rng

    ctx = D.context()
    state = TrainState(**payload["state"])
    saved_world = int(payload.get("world_size", 1))
    if saved_world != ctx.world_size and state.batch_in_epoch:
        raise UserError(f"{payload['path']} was saved mid-epoch by {saved_world} process(es) but "
                        f"this run has {ctx.world_size}: the data order would not line up. Resume "
                        f"with {saved_world} process(es), or from an epoch-end checkpoint")
    if saved_world != ctx.world_size:
        log.warning("world size changed from %d to %d: continuing from the start of epoch %d with "
                    "the new global batch; results will differ from an uninterrupted run",
                    saved_world, ctx.world_size, state.epoch)
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    if scaler is not None and "scaler" in payload:
        scaler.load_state_dict(payload["scaler"])
    rank_states = payload["rank_states"]
    mine = rank_states[ctx.rank % len(rank_states)]
    restore_rng(mine["rng"])
    if saved_world == ctx.world_size:
        trainer.partial = EpochProgress(**mine["progress"])
    return state


def load_best_weights(run_dir: Path, state: TrainState) -> dict | None:
    """The weights of ``best.pt`` if they belong to this state's best epoch (rank 0 reads)."""
    weights = None
    if D.is_main() and state.best is not None:
        path = run_dir / "checkpoints" / "best.pt"
        try:
            payload = load_checkpoint(path)
            best = payload["state"].get("best") or {}
            if best.get("epoch") == state.best["epoch"]:
                weights = D.strip_wrapper_prefixes(payload["model"])
        except UserError as exc:
            log.warning("%s: the best weights will come from the epochs still to run", exc)
    return D.broadcast_object(weights)
