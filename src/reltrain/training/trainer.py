"""The training loop. The Trainer receives built objects and builds none."""

from __future__ import annotations

import logging
import math
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from reltrain.artifacts.training_state import EpochProgress, TrainState
from reltrain.config.train import METRICS
from reltrain.runtime.errors import Preempted, SharedUserError
from reltrain.models.dropout import example_noise_seeds
from reltrain.runtime.precision import FP32, Precision
from reltrain.runtime import distributed as D
from reltrain.evaluation.evaluate import evaluate
from reltrain.evaluation.metrics import better
from reltrain.training.optim import clip_gradients

log = logging.getLogger(__name__)


@dataclass
class TrainParts:
    """What a Trainer works with, built and handed over by commands/train.py."""

    model: nn.Module  # wrapped for DDP or DataParallel where the launch asks for it
    optimizer: Any  # optim.Optimizers
    schedule: Any  # optim.Schedule
    loss_fn: nn.Module
    train_loader: Any  # its batch sampler cuts the global batches (data/dataset.py)
    valid_set: Any  # a RelationDataset, or None: the latest epoch is the best one
    checkpointer: Any  # training/checkpoint.Checkpointer
    precision: Precision = FP32
    scaler: Any = None  # torch.amp.GradScaler: a pass-through unless fp16
    callbacks: list = field(default_factory=list)


@dataclass
class Selection:
    """How validation picks the best epoch: the labels, the figure (resolved for this data,
    evaluation/metrics.resolve_select) and the negative relation's index."""

    labels: list[str]
    metric: str = "macro_f1"
    negative: int | None = None


class Trainer:
    def __init__(self, parts: TrainParts, train_cfg, ctx: D.DistContext, selection: Selection,
                 progress: bool = False, every_steps: int = 0, stop=None):
        self.model, self.optimizer, self.schedule = parts.model, parts.optimizer, parts.schedule
        self.precision, self.scaler = parts.precision, parts.scaler
        self.loss_fn, self.train_loader, self.valid_set = parts.loss_fn, parts.train_loader, parts.valid_set
        self.checkpointer, self.callbacks = parts.checkpointer, list(parts.callbacks)
        self.labels, self.select, self.negative = selection.labels, selection.metric, selection.negative
        self.cfg, self.ctx, self.progress = train_cfg, ctx, progress
        self.every_steps, self.stop = every_steps, stop
        self.partial = EpochProgress()
        self._vote_every = 1 if self.ctx.world_size == 1 else 8

    def fit(self, state: TrainState) -> TrainState:
        start = state.epoch
        for epoch in range(start, self.cfg.epochs + 1):
            if state.stopped_early:
                break
            record = self._run_epoch(epoch, state)
            improved = self._validate(epoch, state, record)
            state.epoch, state.batch_in_epoch = epoch + 1, 0
            self.partial = EpochProgress()
            stop = bool(self.cfg.early_stopping) and state.bad_epochs >= self.cfg.early_stopping
            state.stopped_early = stop and epoch < self.cfg.epochs
            # Logs first: if the process dies before the checkpoint lands, the epoch is replayed
            # and its metrics line rewritten (resume drops lines of epochs not checkpointed).
            for cb in self.callbacks:
                cb.on_epoch_end(record)
            self._save(state, best=improved, summary=record)
            if state.stopped_early:
                log.info("early stopping: %s has not improved for %d epochs",
                         self.select, state.bad_epochs)
        return state

    def _save(self, state: TrainState, best: bool, summary: dict) -> None:
        self.checkpointer.save(state, self.partial, best, summary)

    def _run_epoch(self, epoch: int, state: TrainState) -> dict:
        from tqdm.auto import tqdm

        self.model.train()
        sampler = self.train_loader.batch_sampler
        sampler.set_epoch(epoch, skip=state.batch_in_epoch)
        # This rank's running totals; a resumed epoch starts from the checkpoint's.
        done = self.partial
        total = torch.tensor(done.loss_sum, dtype=torch.float32, device=self.ctx.device)
        examples, start = done.examples, time.perf_counter() - done.seconds
        bar = tqdm(self.train_loader, desc=f"epoch {epoch}/{self.cfg.epochs}", unit="step",
                   initial=state.batch_in_epoch, total=sampler.num_batches,
                   disable=not self.progress, leave=False)
        # A stop request is voted on over all ranks in the background during the next step, so
        # every rank stops after the same step. Under DDP the vote runs every 8 steps only: even a
        # tiny extra collective per step cost CPU scaling efficiency (docs/benchmarks.md).
        vote = None
        for step in bar:
            total += self._run_step(step, state.step)
            examples += step.num_examples
            state.step += 1
            state.batch_in_epoch += 1
            if self.progress and state.step % 10 == 0:
                bar.set_postfix(loss=f"{total.item() / max(examples, 1):.4f}")
            signum = vote() if vote else 0
            vote = None
            if state.step % self._vote_every == 0:
                vote = self.ctx.start_vote(self.stop.signum if self.stop else 0)
            if signum or (self.every_steps and state.step % self.every_steps == 0):
                self._save_mid_epoch(state, epoch, total, examples, start, signum)
        bar.close()
        if vote and (signum := vote()):
            self._save_mid_epoch(state, epoch, total, examples, start, signum)
        seconds = time.perf_counter() - start
        loss_sum, count, new = self.ctx.sum([total.item(), float(examples),
                                             float(examples - done.examples)])
        loss = loss_sum / max(count, 1)
        if not math.isfinite(loss):
            raise SharedUserError(f"training loss became {loss} in epoch {epoch}; lower train.lr")
        return {"epoch": epoch, "train_loss": loss, "lr": self.optimizer.param_groups[0]["lr"],
                "step": state.step, "world_size": self.ctx.world_size,
                "batch_size": self.cfg.batch_size, "accum_steps": self.cfg.accum_steps,
                "global_batch_size": self.cfg.global_batch_size, "train_seconds": seconds,
                "train_sent_per_s": new / max(seconds - done.seconds, 1e-9)}

    def _save_mid_epoch(self, state, epoch, total, examples, start, signum: int) -> None:
        if signum and self.ctx.is_main:
            log.warning("received %s: saving a checkpoint, then stopping", signal.Signals(signum).name)
        self.partial = EpochProgress(total.item(), examples, time.perf_counter() - start)
        self._save(state, best=False, summary={"epoch": epoch, "step": state.step})
        if signum:
            raise Preempted(signum, str(self.checkpointer.directory / "last"))

    def _run_step(self, step, step_number: int) -> torch.Tensor:
        """One optimizer step on the global batch: each micro-batch's loss is its share of the
        global mean, so the summed gradients are one step's. Returns this rank's loss x batch."""
        normaliser = self.loss_fn.normaliser(step.global_labels)
        # DDP averages the ranks' gradients; the loss is a sum over ranks, so scale it back up.
        scale = float(self.ctx.world_size)
        self.optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float32, device=self.ctx.device)
        last = len(step.batches) - 1
        for k, batch in enumerate(step.batches):
            batch = batch.to(self.ctx.device, non_blocking=True)
            # Dropout masks keyed by (seed, step, example) are the same for any split of the batch.
            noise = example_noise_seeds(self.cfg.seed, step_number, batch.index)
            with D.no_sync(self.model, k < last):
                with self.precision.autocast(self.ctx.device):
                    out = self.model(**batch.inputs(), noise=noise)  # the task's scores
                    loss = self.loss_fn(out, batch, normaliser)
                if step.dummy:  # a stand-in: joins the all-reduce, adds nothing
                    loss = loss * 0.0
                self.scaler.scale(loss * scale).backward()  # a pass-through unless fp16
            total += loss.detach()
        parts = self.optimizer.parts
        if self.cfg.grad_clip:
            for part in parts:
                self.scaler.unscale_(part)
            clip_gradients(self.model.parameters(), self.cfg.grad_clip)
        for part in parts:
            self.scaler.step(part)
        self.scaler.update()
        self.schedule.after_step()
        return total * step.global_size

    def _validate(self, epoch: int, state: TrainState, record: dict) -> bool:
        """Score the validation split; update bests and the LR. True if checkpoints/best should change."""
        if self.valid_set is None:  # nothing to select on: the latest epoch is the best one
            state.best = {"metric": None, "value": None, "epoch": epoch, "valid": None}
            return True
        start = time.perf_counter()
        metrics, _ = evaluate(D.unwrap(self.model), self.valid_set, self.cfg.eval_batch_size,
                              self.labels, self.ctx, self.progress, desc="valid",
                              precision=self.precision, negative=self.negative,
                              with_loss=self.select == "loss", tune=True)
        record["valid"] = metrics
        record["valid_sent_per_s"] = len(self.valid_set) / max(time.perf_counter() - start, 1e-9)
        for name in (*METRICS, "loss"):
            old = state.best_by_metric.get(name)
            if name in metrics and (old is None or better(name, metrics[name], old["value"])):
                state.best_by_metric[name] = {"value": metrics[name], "epoch": epoch}
        key = self.select
        value = metrics[key]
        improved = state.best is None or better(key, value, state.best["value"])
        if improved:
            state.best = {"metric": key, "value": value, "epoch": epoch, "valid": metrics}
            state.bad_epochs = 0
        else:
            state.bad_epochs += 1
        self.schedule.after_epoch(-value if key == "loss" else value)  # the plateau wants more
        record["best"] = improved
        return improved
