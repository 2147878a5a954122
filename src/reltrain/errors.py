"""Errors a user can fix. The CLI prints them on one line and exits with status 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad options, bad data or a bad file: reported without a traceback."""


class DataError(UserError):
    """A problem at one place of one input file."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field, self.reason = path, line, field, message
        where = str(path) if line is None else f"{path}:{line}"
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")


class Preempted(Exception):
    """Training stopped on SIGTERM / SIGINT after saving a checkpoint; rerun to resume."""

    def __init__(self, signum: int, checkpoint: str):
        self.signum, self.checkpoint = signum, checkpoint
        super().__init__(f"stopped by signal {signum}; state saved to {checkpoint}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention for "ended by this signal"
