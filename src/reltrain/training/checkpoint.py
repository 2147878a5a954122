"""Saving a run's training state to checkpoints and restoring it, part for part; the file's
format is ``reltrain.artifacts.checkpoint_format``'s."""

from __future__ import annotations

import os
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from reltrain.artifacts.checkpoint_format import (Checkpoint, EpochProgress, TrainState, atomic_write,
                                        rank_state, save_checkpoint)
from reltrain.runtime.errors import UserError, first_line


class Checkpointer:
    """Saves the training state part for part (model, optimizer, schedule, scaler, the trainer's
    counters, every rank's RNG and partial totals) and restores it the same way; rank 0 writes
    ``last.pt``, ``best.pt`` and ``ckpt-<step>.pt`` links."""

    def __init__(self, directory: str | Path, static: dict, model, optimizer, scheduler,
                 ctx, scaler=None, keep: int = 2):
        self.directory, self.ctx = Path(directory), ctx
        self.static, self.model = static, model  # static: the Checkpoint fields fixed for the run
        self.optimizer, self.scheduler, self.scaler, self.keep = optimizer, scheduler, scaler, keep

    def _scaling(self) -> bool:
        return self.scaler is not None and self.scaler.is_enabled()

    def save(self, state: TrainState, progress: EpochProgress, best: bool, summary: dict) -> None:
        # Every rank's RNG and partial-epoch counters, so each rank resumes exactly.
        rank_states = self.ctx.all_gather_objects(rank_state(progress))
        if not self.ctx.is_main:
            return
        from reltrain.runtime import distributed as D

        ck = Checkpoint(**self.static, model=D.unwrap(self.model).state_dict(),
                        optimizer=self.optimizer.state_dict(),
                        scheduler=self.scheduler.state_dict(),
                        scaler=self.scaler.state_dict() if self._scaling() else None,
                        state=asdict(state), rank_states=rank_states)
        if best:  # before last.pt: a crash in between replays the epoch, which rewrites best.pt
            save_checkpoint(self.directory / "best.pt", ck, summary)
        last = self.directory / "last.pt"
        save_checkpoint(last, ck, summary)
        numbered = self.directory / f"ckpt-{state.step:08d}.pt"
        for suffix in ("", ".json"):
            _link_or_copy(Path(str(last) + suffix), Path(str(numbered) + suffix))
        for old in numbered_checkpoints(self.directory)[self.keep:]:
            for suffix in ("", ".json"):
                Path(str(old) + suffix).unlink(missing_ok=True)

    def restore(self, ck: Checkpoint, where: str) -> tuple[TrainState, EpochProgress]:
        """Put a checkpoint (on every rank, resume.find_resume) back into the parts it was saved
        from, but the model's weights, which ``load_model_weights`` put in before wrapping;
        returns the trainer's counters and this rank's partial-epoch totals."""
        _load_part(self.optimizer, ck.optimizer, "optimizer state", where)
        _load_part(self.scheduler, ck.scheduler, "learning-rate schedule state", where)
        if self._scaling() and ck.scaler is not None:  # a scaler only where fp16 ran
            _load_part(self.scaler, ck.scaler, "gradient scaler state", where)
        rank, world_size = self.ctx.rank, self.ctx.world_size
        ck.restore_rng(rank)
        progress = ck.rank_progress()
        if len(progress) == world_size:
            partial = progress[rank]
        elif rank == 0:  # the epoch's running totals of all old ranks, on the new rank 0
            partial = EpochProgress(sum(p.loss_sum for p in progress),
                                    sum(p.examples for p in progress),
                                    max(p.seconds for p in progress))
        else:
            partial = EpochProgress()
        return ck.train_state(), partial


def load_model_weights(model, ck: Checkpoint, where: str) -> None:
    """A resumed run's weights into the model before DDP wraps it: wrapping then starts every
    rank from them, and nothing is loaded into a wrapper."""
    from reltrain.artifacts.model_folder import strip_wrapper_prefixes

    _load_part(model, strip_wrapper_prefixes(ck.model), "model state", where)


def _load_part(part, state: dict, what: str, where: str) -> None:
    try:
        part.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:  # a stranger's file
        raise UserError(f"{where}: its {what} does not fit this run "
                        f"({first_line(exc)[:200]})") from None


def _link_or_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dst)
    except OSError:
        tmp.unlink(missing_ok=True)
        atomic_write(dst, lambda f: f.write(src.read_bytes()))


def numbered_checkpoints(directory: Path) -> list[Path]:
    """``ckpt-<step>.pt`` files, newest first."""
    found = []
    for path in Path(directory).glob("ckpt-*.pt"):
        step = path.stem[len("ckpt-"):]
        if step.isascii() and step.isdigit():
            found.append((int(step), path))
    return [p for _, p in sorted(found, reverse=True)]


def resume_candidates(directory: Path) -> list[Path]:
    """Checkpoints for ``resume=auto``, newest first; ``last.pt`` (written before its link)
    leads."""
    out: list[Path] = []
    for path in [Path(directory) / "last.pt", *numbered_checkpoints(directory)]:
        if path.is_file() and not any(os.path.samefile(path, p) for p in out):
            out.append(path)
    return out


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices) alike on every rank."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
