"""Saving a run's checkpoints and restoring their training state, part for part; the folder and
its files are ``reltrain.artifacts``'."""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from reltrain.artifacts.model_folder import Artifact
from reltrain.artifacts.save import link_checkpoint, write_checkpoint
from reltrain.artifacts.training_state import (STATE_FILE, EpochProgress, TrainingState, TrainState,
                                               best_metric, rank_state)
from reltrain.runtime.errors import UserError, first_line


class Checkpointer:
    """Saves the training state part for part (model, optimizer, schedule, scaler, the trainer's
    counters, every rank's RNG and partial totals) and restores it the same way; rank 0 writes
    the checkpoint folders ``last``, ``best`` and ``ckpt-<step>`` (links to ``last``'s files)."""

    def __init__(self, directory: str | Path, model_part: dict, run: dict, model, optimizer,
                 scheduler, ctx, scaler=None, keep: int = 2):
        self.directory, self.ctx = Path(directory), ctx
        # model_part: the Artifact's fields fixed for the run; run: the TrainingState's
        self.model_part, self.run, self.model = model_part, run, model
        self.optimizer, self.scheduler, self.scaler, self.keep = optimizer, scheduler, scaler, keep

    def _scaling(self) -> bool:
        return self.scaler is not None and self.scaler.is_enabled()

    def save(self, state: TrainState, progress: EpochProgress, best: bool, summary: dict) -> None:
        # Every rank's RNG and partial-epoch counters, so each rank resumes exactly.
        rank_states = self.ctx.all_gather_objects(rank_state(progress))
        if not self.ctx.is_main:
            return
        from reltrain.runtime import distributed as D  # torch.distributed only when used

        model = Artifact(**self.model_part, weights=D.unwrap(self.model).state_dict(),
                         best=best_metric(state.best), test=None)
        training = TrainingState(**self.run, optimizer=self.optimizer.state_dict(),
                                 scheduler=self.scheduler.state_dict(),
                                 scaler=self.scaler.state_dict() if self._scaling() else None,
                                 state=asdict(state), rank_states=rank_states)
        if best:  # before last: a crash in between replays the epoch, which rewrites best
            write_checkpoint(self.directory / "best", model, training, summary)
        last = self.directory / "last"
        write_checkpoint(last, model, training, summary)
        link_checkpoint(last, self.directory / f"ckpt-{state.step:08d}")
        for old in numbered_checkpoints(self.directory)[self.keep:]:
            shutil.rmtree(old, ignore_errors=True)

    def restore(self, training: TrainingState, where: str) -> tuple[TrainState, EpochProgress]:
        """Put a checkpoint's training state (on every rank, resume.find_resume) back into the
        parts it was saved from; the model's weights ``load_model_weights`` put in before
        wrapping. Returns the trainer's counters and this rank's partial-epoch totals."""
        _load_part(self.optimizer, training.optimizer, "optimizer state", where)
        _load_part(self.scheduler, training.scheduler, "learning-rate schedule state", where)
        if self._scaling() and training.scaler is not None:  # a scaler only where fp16 ran
            _load_part(self.scaler, training.scaler, "gradient scaler state", where)
        rank, world_size = self.ctx.rank, self.ctx.world_size
        training.restore_rng(rank)
        progress = training.rank_progress()
        if len(progress) == world_size:
            partial = progress[rank]
        elif rank == 0:  # the epoch's running totals of all old ranks, on the new rank 0
            partial = EpochProgress(sum(p.loss_sum for p in progress),
                                    sum(p.examples for p in progress),
                                    max(p.seconds for p in progress))
        else:
            partial = EpochProgress()
        return training.train_state(), partial


def load_model_weights(model, weights: dict, where: str) -> None:
    """A resumed run's weights into the model before DDP wraps it: wrapping then starts every
    rank from them, and nothing is loaded into a wrapper."""
    _load_part(model, weights, "model state", where)


def _load_part(part, state: dict, what: str, where: str) -> None:
    try:
        part.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:  # a stranger's file
        raise UserError(f"{where}: its {what} does not fit this run "
                        f"({first_line(exc)[:200]})") from None


def numbered_checkpoints(directory: Path) -> list[Path]:
    """``ckpt-<step>`` folders, newest first."""
    found = []
    for path in Path(directory).glob("ckpt-*"):
        step = path.name[len("ckpt-"):]
        if step.isascii() and step.isdigit() and path.is_dir():
            found.append((int(step), path))
    return [p for _, p in sorted(found, reverse=True)]


def resume_candidates(directory: Path) -> list[Path]:
    """Checkpoint folders for ``resume=auto``, newest first; ``last`` (written before its
    link) leads."""
    out: list[Path] = []
    for path in [Path(directory) / "last", *numbered_checkpoints(directory)]:
        state = path / STATE_FILE
        if state.is_file() and not any(os.path.samefile(state, p / STATE_FILE) for p in out):
            out.append(path)
    return out


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) alike on every rank."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
