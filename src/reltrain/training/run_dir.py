"""The run directory: its name, its lock, and what a (resumed) run writes into it first."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

from reltrain.errors import UserError
from reltrain.training import distributed as D

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"


def new_run_dir(cfg) -> Path:
    """``output_dir``, or a fresh ``runs/<time>-<model>`` (torchrun: named by its run id)."""
    if cfg.output_dir:
        return Path(cfg.output_dir)
    run_id = D.launcher_run_id()  # stable across torchrun's restarts, so they find the checkpoints
    name = f"torchrun-{run_id}" if run_id else time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{cfg.model.name}"


class RunDirLock:
    """An exclusive lock on a run directory, held by the process that writes it (global rank 0).

    ``flock`` locks belong to the open file: the kernel drops them when the process exits in
    any way, so a crashed run leaves no stale lock behind, only the file with its last owner.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            import fcntl
        except OSError as exc:
            raise UserError(f"cannot write the run directory {self.path.parent}: "
                            f"{exc.strerror or exc}") from None
        except ImportError:  # not a POSIX system: no locking, as with any other tool there
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UserError(f"cannot write the run directory {self.path.parent}: "
                            f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise UserError(f"{self.path.parent} is in use by another run ({owner}); wait for it "
                            f"to finish, or choose another output_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


def start_run_dir(run_dir: Path, cfg, next_epoch: int) -> None:
    """Write the resolved config; on resume keep the metrics of the epochs already finished."""
    from omegaconf import OmegaConf

    log_path = run_dir / "metrics.jsonl"
    try:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        for stale in (run_dir / "checkpoints").glob("*.tmp"):  # left by a write that was killed
            stale.unlink()
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        kept = [line for line in read_lines(log_path) if json.loads(line)["epoch"] < next_epoch]
        log_path.write_text("".join(line + "\n" for line in kept))
    except OSError as exc:
        raise UserError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None


def read_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []


def read_history(run_dir: Path) -> list[dict]:
    """The records of ``metrics.jsonl``, one per finished epoch."""
    return [json.loads(line) for line in read_lines(run_dir / "metrics.jsonl")]
