"""The run directory: its name, its lock, and what a (resumed) run writes into it first."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

from reltrain.artifacts.save import recover_checkpoints
from reltrain.runtime.errors import UserError
from reltrain.runtime.output import write_output
from reltrain.runtime import distributed as D

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
# Everything a run writes at the top of its directory; a folder holding anything else is not a
# run, and a run started there could overwrite the user's files.
# ("plots" is an older run's folder of PNG pictures, now report.html's.)
RUN_ENTRIES = frozenset({LOCK_NAME, "config.yaml", "train.log", "metrics.jsonl", "summary.json",
                         "checkpoints", "plots", "tensorboard", "test_predictions.jsonl",
                         "report.html"})


def new_run_dir(cfg) -> Path:
    """``output_dir``, or a fresh ``runs/<time>-<model>`` (under a launcher, named by the job),
    claimed by creating it, so two runs started in the same second get two folders."""
    if cfg.output_dir:
        return Path(cfg.output_dir)
    run_id = D.launcher_run_id()  # stable across restarts and requeues: they find the checkpoints
    if run_id:
        return Path("runs") / f"{run_id}-{cfg.model.name}"
    base = Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.model.name}"
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserError(f"cannot create the run directory {path}: {exc.strerror or exc}") from None
    raise UserError(f"cannot find a free run directory name like {base}; set output_dir")


class RunDirLock:
    """An exclusive ``flock`` on a run directory, held by global rank 0: the kernel drops it when
    the process exits in any way, so a crashed run leaves no stale lock."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        check_run_dir(self.path.parent)
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no locking, as with any other tool there
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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


def check_run_dir(run_dir: Path) -> None:
    """A run writes only into a new or empty folder or a run's own, and never through a link
    inside it (a ``config.yaml`` link would make the run overwrite the file it points to)."""
    if not run_dir.is_dir():
        return
    try:
        top = list(os.scandir(run_dir))
        inner = [entry for sub in ("checkpoints", "plots") if (run_dir / sub).is_dir()
                 and not (run_dir / sub).is_symlink() for entry in os.scandir(run_dir / sub)]
    except OSError as exc:
        raise UserError(f"cannot read the run directory {run_dir}: {exc.strerror or exc}") from None
    foreign = sorted(e.name for e in top if e.name not in RUN_ENTRIES)
    if foreign:
        raise UserError(f"output_dir {run_dir} holds '{foreign[0][:80]}', which a reltrain run "
                        f"does not write: it is not a run directory; choose a new or empty folder")
    links = [e.path for e in top + inner if e.is_symlink()]
    if links:
        raise UserError(f"{links[0]} is a link; a run directory holds its own files (a run "
                        f"would write through the link); remove it")


def start_run_dir(run_dir: Path, cfg, next_epoch: int) -> None:
    """Write the resolved config; on resume keep the metrics of the epochs already finished."""
    from omegaconf import OmegaConf

    log_path = run_dir / "metrics.jsonl"
    try:
        (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        recover_checkpoints(run_dir / "checkpoints")  # after a write that was killed
        write_output(str(run_dir / "config.yaml"), OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        kept = [r for r in read_history(run_dir) if r["epoch"] < next_epoch]
        write_output(str(log_path), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
    except OSError as exc:
        raise UserError(f"cannot write the run directory {run_dir}: {exc.strerror or exc}") from None


def read_history(run_dir: Path) -> list[dict]:
    """The records of ``metrics.jsonl``; a line cut short by a kill is skipped (that epoch was not
    checkpointed either, so a resumed run writes it anew)."""
    path = run_dir / "metrics.jsonl"
    records = []
    for line in (path.read_text(encoding="utf-8").splitlines() if path.is_file() else []):
        try:
            record = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("epoch"), int):
            records.append(record)
        elif line.strip():
            log.warning("%s: skipping a damaged line (%.40s...)", path, line)
    return records
