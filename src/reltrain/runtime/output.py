"""Writing what evaluate / predict produce, never over the user's own input."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from reltrain.runtime.errors import UserError


def check_output(output: str | None, inputs: tuple[str | None, ...], flag: str = "--output") -> None:
    """Refuse an output that is one of the inputs (the same file, by inode, not by name) or lies
    inside one that is a folder (a model folder or a run directory: the file would replace a
    part of the model, or add one)."""
    if not output:
        return
    folders = [p for p in inputs if p and os.path.isdir(p)]
    for parent in Path(os.path.abspath(output)).parents:  # by inode too: a link to the folder
        inside = parent.exists() and next((f for f in folders if parent.samefile(f)), None)
        if inside:
            raise UserError(f"{flag} {output} lies inside {inside}, an input: writing there would "
                            f"change it; choose a path outside it")
    for path in inputs if os.path.exists(output) else ():
        if path and os.path.exists(path) and os.path.samefile(output, path):
            raise UserError(f"{flag} {output} is the input file {path}: writing there would "
                            f"replace your data; choose another output file")


def write_output(output: str, text: str) -> None:
    """Replace ``output`` with ``text`` (a link there is replaced, never followed); a failure is a
    one-line error."""
    with atomic_file(output) as f:
        f.write(text)


def open_append(path: str | Path):
    """``path`` opened to append text, created if missing; a link there is refused, not followed
    (another user's link in a shared run directory would send the writes elsewhere)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.fdopen(os.open(path, flags, 0o644), "a", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", suffix: str = ".part", fsync: bool = False):
    """A new file beside ``path``, renamed over it only when the block ends without an error (else
    removed); a failure to write is a one-line error naming ``path``."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=suffix,
                                   dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would create it (mkstemp makes it 0600)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def output_stream(output: str | None):
    """A text stream for command output: stdout, or a file that replaces ``output`` only when
    everything was written (an error leaves no half-written file)."""
    if not output:
        yield sys.stdout
        sys.stdout.flush()
        return
    with atomic_file(output) as f:
        yield f
