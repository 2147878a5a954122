"""Finding, checking and applying the checkpoint a run continues from. Rank 0 reads the file and
broadcasts it, so the other ranks need not see the run directory."""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

import torch

from reltrain import distributed as D
from reltrain.artifacts import Artifact, best_metric, load_checkpoint, strip_wrapper_prefixes
from reltrain.config import METRICS, Config, to_dict
from reltrain.errors import UserError
from reltrain.training.checkpoint import resume_candidates
from reltrain.training.trainer import TrainState

log = logging.getLogger(__name__)


def find_resume(cfg: Config, run_dir: Path, identity: dict, ctx: D.DistContext) -> dict | None:
    """The checkpoint to continue from (on every rank), or None for a fresh start."""
    return ctx.agree(lambda: _pick(cfg, run_dir, identity))


def _pick(cfg: Config, run_dir: Path, identity: dict) -> dict | None:
    directory = run_dir / "checkpoints"
    if cfg.resume == "never":
        if (directory / "last.pt").exists():
            log.warning("resume=never: starting afresh; checkpoints in %s will be overwritten", directory)
        return None
    explicit = cfg.resume != "auto"
    candidates = [Path(cfg.resume)] if explicit else resume_candidates(directory)
    if not candidates and (directory / "best.pt").is_file():
        # Starting afresh would overwrite best.pt and metrics.jsonl without a word.
        raise UserError(f"{directory} holds best.pt but no last.pt to resume from: continue from "
                        f"the best epoch with resume={directory / 'best.pt'}, or keep it and "
                        f"use another output_dir (resume=never starts afresh and overwrites it)")
    for path in candidates:
        try:
            payload = load_checkpoint(path)
            check_compatible(payload, path, cfg, identity)
        except UserError as exc:
            if explicit or isinstance(exc, Mismatch):
                raise
            log.warning("%s; trying the previous checkpoint", exc)
            continue
        state = payload["state"]
        if run_complete(state, cfg.train.epochs):
            log.info("the run in %s is complete (%s); nothing to train", run_dir,
                     _progress_text(state))
        else:
            log.info("resuming from %s (epoch %d, %d batches into it, step %d)", path,
                     state["epoch"], state["batch_in_epoch"], state["step"])
        payload["path"] = str(path)
        return payload
    if candidates:
        log.warning("no readable checkpoint in %s: starting afresh", directory)
    return None


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


def _check_resumable(payload: dict, path: Path) -> Artifact:
    """Every field resuming reads, typed and bounded (the model's own through ``Artifact``): a
    stranger's file is one line, never a traceback in the middle of a restore."""
    artifact = Artifact.from_payload(payload, str(path))  # config, labels, vocabulary, weights
    state, ranks = payload.get("state"), payload.get("rank_states")
    problems = {
        "its training state": isinstance(state, dict)
        and set(state) == {f.name for f in fields(TrainState)}
        and all(_count(state[k]) for k in ("epoch", "step", "batch_in_epoch", "bad_epochs"))
        and state["epoch"] >= 1 and isinstance(state["stopped_early"], bool)
        and (state["best"] is None or best_metric(state["best"]) is not None)
        and _bests(state["best_by_metric"]),
        "its per-rank states": isinstance(ranks, list) and 1 <= len(ranks) <= 65536
        and all(_rank_state(r) for r in ranks),
        "its optimizer and schedule": all(isinstance(payload.get(k), dict)
                                          for k in ("optimizer", "scheduler")),
        "its world size and global batch": _count(payload.get("world_size"), 1)
        and _count(payload.get("global_batch_size"), 1),
    }
    wrong = [what for what, fine in problems.items() if not fine]
    if wrong:
        raise UserError(f"{path}: not a resumable checkpoint of this reltrain version ({wrong[0]}; "
                        f"it can still be used with evaluate / predict)")
    return artifact


def _dotted(tree: dict, prefix: str = "") -> dict:
    """``{"model": {"cnn": {"num_filters": 8}}}`` as ``{"model.cnn.num_filters": 8}``."""
    out = {}
    for key, value in tree.items():
        out.update(_dotted(value, f"{prefix}{key}.") if isinstance(value, dict)
                   else {prefix + key: value})
    return out


def _bests(value: object) -> bool:
    """``{metric: {"value", "epoch"}}``, each metric's own best."""
    return isinstance(value, dict) and all(
        k in (*METRICS, "loss") and isinstance(v, dict) and set(v) == {"value", "epoch"}
        and best_metric({"metric": k, **v}) is not None for k, v in value.items())


def _count(value: object, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= 2**40


def _rank_state(value: object) -> bool:
    """One rank's RNG states and partial-epoch totals, as ``capture_rng`` and the trainer wrote."""
    if not isinstance(value, dict) or not isinstance(value.get("progress"), dict):
        return False
    rng, progress = value.get("rng"), value["progress"]
    if set(progress) != {"loss_sum", "examples", "seconds"} or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in progress.values()):
        return False
    if not isinstance(rng, dict) or not isinstance(rng.get("numpy"), dict):
        return False
    py, npy, cuda = rng.get("python"), rng["numpy"], rng.get("cuda", [])
    states = [rng.get("torch"), *(cuda if isinstance(cuda, list) else [None])]
    return (isinstance(py, list) and len(py) == 3 and isinstance(py[1], list) and len(py[1]) == 625
            and all(_count(x) and x < 2**32 for x in py[1])
            and isinstance(npy.get("keys"), torch.Tensor) and npy["keys"].shape == (624,)
            and _count(npy.get("pos")) and _count(npy.get("has_gauss"))
            and isinstance(npy.get("gauss"), float)
            and all(_bytes(t) for t in states))


def _bytes(value: object) -> bool:
    return (isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1
            and value.numel() <= 1 << 16)


def run_complete(state: dict, epochs: int) -> bool:
    """True when a checkpoint's run has nothing left to train with ``train.epochs=epochs``."""
    return bool(state["stopped_early"]) or state["epoch"] > epochs


def _progress_text(state: dict) -> str:
    text = f"{state['epoch'] - 1} epoch(s) trained"
    if state["stopped_early"]:
        text += ", stopped early"
    best = state.get("best") or {}
    if best.get("metric"):
        text += f", best epoch {best['epoch']} by valid {best['metric']} {best['value']:.4f}"
    return text


def check_compatible(payload: dict, path: Path, cfg: Config, identity: dict) -> None:
    """A checkpoint of another model, vocabulary, label set or recipe is a clear error. Options that
    do not change the result may change; ``train.epochs`` and ``train.early_stopping`` apply from
    here on, with a note; any other change is refused, so ``config.yaml`` says what ran."""
    was = _dotted(to_dict(_check_resumable(payload, path).config))
    for key, now in _dotted(to_dict(cfg)).items():
        if (key.startswith("model.") or key in _FIXED_FOR_RESUME) and was.get(key, now) != now:
            raise Mismatch(f"{path}: does not match this run: {key} was {was[key]!r}, now "
                           f"{now!r}; a resumed run continues with the checkpoint's settings (set "
                           f"{key}={was[key]}, or use another output_dir or resume=never to "
                           f"start afresh)")
    wanted, saved = cfg.train.global_batch_size, saved_global_batch(payload)
    if wanted and wanted != saved:
        raise Mismatch(f"{path}: does not match this run: it trained with a global batch of "
                        f"{saved}, not train.global_batch_size={wanted}; the per-process batch and "
                        f"the number of processes may change, the global batch may not")
    if payload.get("labels") != identity["labels"]:
        raise Mismatch(f"{path}: does not match this run: it was trained on another label set")
    if payload.get("vocab") != identity["vocab"] or payload.get("lm") != identity["lm"]:
        raise Mismatch(f"{path}: does not match this run: it was trained with another vocabulary "
                        f"(different training data or preprocessing options)")
    if payload.get("data_key", identity["data_key"]) != identity["data_key"]:
        raise Mismatch(f"{path}: does not match this run: the data files changed since it was "
                        f"written (use another output_dir, or resume=never to start afresh)")
    _note_applied_changes(payload["config"].get("train", {}), cfg, payload["state"])


def _note_applied_changes(was: dict, cfg: Config, state: dict) -> None:
    t = cfg.train
    if was.get("epochs", t.epochs) != t.epochs and not run_complete(state, t.epochs):
        log.info("train.epochs changed from %s to %d: training on to epoch %d", was["epochs"],
                 t.epochs, t.epochs)
        if t.schedule == "linear" or (t.schedule == "auto" and cfg.model.name == "lm"):
            log.warning("the linear learning-rate schedule now decays over %d epochs: the run "
                        "matches neither the old nor the new length run uninterrupted", t.epochs)
    if was.get("early_stopping", t.early_stopping) != t.early_stopping:
        log.warning("train.early_stopping changed from %s to %d: applied from the next epoch on",
                    was["early_stopping"], t.early_stopping)


def describe_resume(payload: dict, ctx: D.DistContext) -> None:
    saved_world, state = int(payload.get("world_size", 1)), payload["state"]
    if saved_world != ctx.world_size:
        log.info("resuming on %d process(es) a run saved by %d, with the same global batch of %d "
                 "(%s)", ctx.world_size, saved_world, saved_global_batch(payload),
                 "mid-epoch, at the same example" if state["batch_in_epoch"] else "at an epoch end")


def saved_global_batch(payload: dict) -> int:
    """The global batch a checkpoint trained with (checked present by ``_check_resumable``)."""
    return int(payload["global_batch_size"])


def load_best_weights(run_dir: Path, state: TrainState, ctx: D.DistContext) -> dict | None:
    """The weights of ``best.pt`` if they belong to this state's best epoch, on every rank (rank
    0 reads; the tensors travel by broadcast), else None."""
    def read() -> dict | None:
        if state.best is None:
            return None
        path = run_dir / "checkpoints" / "best.pt"
        try:
            payload = load_checkpoint(path)
        except UserError as exc:
            log.warning("%s", exc)
            return None
        best = payload["state"].get("best") or {}
        return strip_wrapper_prefixes(payload["model"]) if best.get("epoch") == state.best["epoch"] else None

    return ctx.agree(read)
