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
