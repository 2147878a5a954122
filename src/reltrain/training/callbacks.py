"""Side effects at the end of each epoch. Only global rank 0 creates any of these."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

from reltrain.runtime.errors import UserError
from reltrain.runtime.output import open_append

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
            if "relations_strict_f1" in v:  # task=extract
                parts += [f"valid entities F1 {v['entities_f1']:.4f}",
                          f"relations strict F1 {v['relations_strict_f1']:.4f}"]
                if "triples_f1" in v:
                    parts.append(f"triples F1 {v['triples_f1']:.4f}")
            elif v.get("negative_label") is not None:
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
        try:
            with open_append(self.path) as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write {self.path}: {exc.strerror or exc}") from None


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


def build_callbacks(run_dir: Path, cfg, select: str) -> list[Callback]:
    """``select``: the validation figure that picks checkpoints/best, as resolved for this data."""
    callbacks: list[Callback] = [EpochLine(cfg.train.epochs, select),
                                 MetricsLog(run_dir / "metrics.jsonl")]
    if cfg.log.tensorboard != "false" and importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(TensorBoardLog(run_dir / "tensorboard"))
    elif cfg.log.tensorboard == "true":
        raise UserError("log.tensorboard=true but tensorboard is not installed: "
                        "pip install 'reltrain[tensorboard]'")
    return callbacks
