"""Writing what evaluate / predict produce, never over the user's own input."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
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


@contextmanager
def output_stream(output: str | None):
    """A text stream for command output: stdout, or a temporary file beside ``output`` that is
    renamed over it only when everything was written (an error leaves no half-written file)."""
    if not output:
        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(output)
    try:
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".part",
                                   dir=target.parent if str(target.parent) else ".")
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
