"""Errors a user can fix. The CLI prints them on one line and exits with status 2."""

from __future__ import annotations

import signal


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception's message cut to its first line (its type's name when it has none), for
    one-line errors built around another library's exception."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__


class UserError(Exception):
    """Bad options, bad data or a bad file: reported without a traceback. ``shared``: every rank
    raises this same error, so only global rank 0 prints it."""

    shared = False


class SharedUserError(UserError):
    """A ``UserError`` that every rank raises alike."""

    shared = True


class DataError(UserError):
    """A problem at one place of one input file."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field, self.reason = path, line, field, message
        where = str(path) if line is None else f"{path}:{line}"
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")

    def __reduce__(self):  # bad rows travel to prediction worker processes
        return DataError, (self.path, self.line, self.field, self.reason)


class Preempted(Exception):
    """The run stopped on a signal (SIGTERM, SIGINT); ``checkpoint`` holds the state to resume
    from when the signal came during training, else None."""

    def __init__(self, signum: int, checkpoint: str | None = None, run_dir: str | None = None,
                 when: str = ""):
        self.signum, self.checkpoint, self.run_dir = signum, checkpoint, run_dir
        name = signal.Signals(signum).name
        if checkpoint:
            text = f"stopped by {name}; state saved in {checkpoint}"
        else:
            text = f"stopped by {name}{' ' + when if when else ''}"
        super().__init__(text)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention for "ended by this signal"
