"""Logging: the command line sets up the console and a run adds its ``train.log`` while it runs;
importing reltrain sets up nothing, so a library user's own logging is left as it is."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from pathlib import Path

from reltrain.runtime.output import open_append

_FORMAT = "%(asctime)s %(message)s"
_LOGGER = "reltrain"


class _TqdmHandler(logging.StreamHandler):
    """Writes through tqdm so log lines do not tear an active progress bar."""

    def emit(self, record):
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # logging must never take the job down
            self.handleError(record)


def setup_console_logging(is_main: bool) -> None:
    """For the ``reltrain`` command: INFO on global rank 0, warnings only elsewhere."""
    logger = logging.getLogger(_LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, _TqdmHandler)]:
        logger.removeHandler(handler)
    handler = _TqdmHandler()
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if is_main else logging.WARNING)


@contextmanager
def run_log(path: Path | None):
    """Copy reltrain's INFO messages into ``path`` (a run's ``train.log``) while the run lasts."""
    if path is None:
        yield
        return

    logger = logging.getLogger(_LOGGER)
    handler = logging.StreamHandler(open_append(path))
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
    handler.setLevel(logging.INFO)
    level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)  # else INFO records never reach the file
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.stream.close()
        logger.setLevel(level)


def progress_enabled(setting: str, is_main: bool) -> bool:
    if not is_main or setting == "false":
        return False
    return setting == "true" or sys.stderr.isatty()
