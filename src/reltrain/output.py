"""Writing what evaluate / predict produce, never over the user's own input."""

from __future__ import annotations

import os
from pathlib import Path

from reltrain.errors import UserError


def check_output(output: str | None, inputs: tuple[str | None, ...]) -> None:
    """Refuse an ``--output`` that is one of the inputs (the same file, by inode, not by name)."""
    if not output or not os.path.exists(output):
        return
    for path in inputs:
        if path and os.path.exists(path) and os.path.samefile(output, path):
            raise UserError(f"--output {output} is the input file {path}: writing there would "
                            f"replace your data; choose another output file")


def write_output(output: str, text: str) -> None:
    """Write ``text`` to ``output``; a failure is a one-line error."""
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None
