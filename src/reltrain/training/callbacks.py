"""Side effects at the end of each epoch. Only global rank 0 creates any of these."""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)


class Callback:
    def on_epoch_end(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass


class EpochLine(Callback):
    """One readable line per epoch in the log."""

    def __init__(self, epochs: int, metric: str):
        self.epochs, self.metric = epochs, metric

    def on_epoch_end(self, record):
        parts = [f"epoch {record['epoch']}/{self.epochs}", f"loss {record['train_loss']:.4f}"]
        if "valid" in record:
            v = record["valid"]
            if v.get("negative_label") is not None:
                parts.append(f"valid positive micro-F1 {v['positive_micro_f1']:.4f}")
                parts += [f"macro-F1 {v['macro_f1']:.4f}", f"micro-F1 {v['micro_f1']:.4f}"]
            else:
                parts += [f"valid macro-F1 {v['macro_f1']:.4f}", f"micro-F1 {v['micro_f1']:.4f}"]
            if "semeval_macro_f1" in v:
                parts.append(f"SemEval macro-F1 {v['semeval_macro_f1']:.4f}")
        parts += [f"lr {record['lr']:.2g}", f"{record['train_sent_per_s']:.0f} sent/s"]
        if record.get("best"):
            parts.append(f"* best {self.metric}")
        log.info("  ".join(parts))


class MetricsLog(Callback):
    """``metrics.jsonl``: one JSON object per epoch, appended as soon as the epoch ends."""

    def __init__(self, path: Path):
        self.path = path

    def on_epoch_end(self, record):
        from reltrain.runtime.errors import UserError
        from reltrain.runtime.output import open_append

        try:
            with open_append(self.path) as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write {self.path}: {exc.strerror or exc}") from None


class CurvePlots(Callback):
    """``plots/loss.png`` and ``plots/f1.png``, drawn by a child (matplotlib never enters training):
    after the first epoch, at most every ``every_s`` s, at the end; a failed write only warns.
    ``history``: the records of the epochs a resumed run has finished (its metrics.jsonl)."""

    def __init__(self, directory: Path, history: list[dict], every_s: float = 20.0):
        self.directory, self.history, self.every_s = directory, list(history), every_s
        self.drawn, self.last, self.child = 0, float("-inf"), None

    def on_epoch_end(self, record):
        self.history.append(record)
        if time.monotonic() - self.last >= self.every_s:
            self._draw()

    def close(self):
        if self.history and self.drawn < len(self.history):
            self._draw()
        if self.child is not None:
            self._wait()
            self.child.close()

    def _draw(self):
        from reltrain.runtime.children import Child

        self.last, self.drawn = time.monotonic(), len(self.history)
        self._wait()  # one drawing at a time
        self.child = self.child or Child()
        self.child.send(draw_curves, list(self.history), self.directory)

    def _wait(self):
        from reltrain.runtime.children import ChildFailed

        try:
            if self.child is not None and self.child.pending:
                self.child.receive()
        except ChildFailed as exc:  # out of memory, say: training goes on without pictures
            log.warning("%s", exc)
            self.child.close()
            self.child = None


def draw_curves(history: list[dict], directory: Path) -> None:
    from reltrain.training.plots import plot_curves

    try:
        plot_curves(history, directory)
    except Exception as exc:  # a full disk, a picture that cannot be drawn: never the run's end
        log.warning("cannot draw the plots in %s: %s", directory, getattr(exc, "strerror", None) or exc)


class TensorBoardLog(Callback):
    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(directory))

    def on_epoch_end(self, record):
        epoch = record["epoch"]
        self.writer.add_scalar("train/loss", record["train_loss"], epoch)
        self.writer.add_scalar("train/lr", record["lr"], epoch)
        self.writer.add_scalar("train/sent_per_s", record["train_sent_per_s"], epoch)
        for key in ("macro_f1", "micro_f1", "macro_precision", "macro_recall"):
            if "valid" in record:
                self.writer.add_scalar(f"valid/{key}", record["valid"][key], epoch)
        self.writer.flush()

    def close(self):
        self.writer.close()


def build_callbacks(run_dir: Path, cfg, select: str, history: list[dict]) -> list[Callback]:
    """``select``: the validation figure that picks best.pt, as resolved for this data;
    ``history``: the metrics of the epochs a resumed run keeps (``start_run_dir``), all that a
    callback carries over."""
    callbacks: list[Callback] = [EpochLine(cfg.train.epochs, select),
                                 MetricsLog(run_dir / "metrics.jsonl")]
    if cfg.log.plots:
        callbacks.append(CurvePlots(run_dir / "plots", history))
    if cfg.log.tensorboard != "false" and importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(TensorBoardLog(run_dir / "tensorboard"))
    elif cfg.log.tensorboard == "true":
        from reltrain.runtime.errors import UserError

        raise UserError("log.tensorboard=true but tensorboard is not installed: "
                        "pip install 'reltrain[tensorboard]'")
    return callbacks
