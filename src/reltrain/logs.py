"""Logging for the entry points. Called by run_* functions, never on import."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

_FORMAT = "%(asctime)s %(message)s"


class _TqdmHandler(logging.StreamHandler):
    """Writes through tqdm so log lines do not tear an active progress bar."""

    def emit(self, record):
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # logging must never take the job down
            self.handleError(record)


def setup_logging(is_main: bool) -> logging.Logger:
    """INFO on global rank 0, warnings only elsewhere (each rank's errors stay visible)."""
    logger = logging.getLogger("reltrain")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if is_main else logging.WARNING)
    logger.propagate = False
    return logger


def add_file_log(path: Path) -> None:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    logging.getLogger("reltrain").addHandler(handler)


def progress_enabled(setting: str, is_main: bool) -> bool:
    if not is_main or setting == "false":
        return False
    return setting == "true" or sys.stderr.isatty()
