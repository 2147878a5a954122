"""Work done in a forked child process that then ends, so that what the work imports and leaves
behind never stays in the training process: tokenizing (jieba's dictionary and the garbage of
segmentation, about 120 MB) and drawing plots (matplotlib, about 40 MB). bench/memory.py
measures it. Without fork (Windows) the work runs in the calling process.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable

log = logging.getLogger(__name__)


def available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def call(fn: Callable, *args):
    """``fn(*args)`` in a child; its result, or its exception raised here. Interrupted here
    (Ctrl-C, SIGTERM), the child is stopped too."""
    if not available():
        return fn(*args)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_send_result, args=(send, fn, *args))
    child.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the child process for {fn.__name__} ended with exit code "
                           f"{child.exitcode} and no result") from None
    except BaseException:
        child.terminate()
        child.join()
        raise
    child.join()
    if ok:
        return value
    raise value


def _send_result(send, fn: Callable, *args) -> None:
    _quiet_signals()
    try:
        result = (True, fn(*args))
    except Exception as exc:
        result = (False, exc)
    try:
        send.send(result)
    except Exception as exc:  # a result or an error that does not pickle
        send.send((False, RuntimeError(f"{fn.__name__}: {result[1]!r} ({exc})")))


def _quiet_signals() -> None:
    """The parent handles Ctrl-C and stops the child; SIGTERM ends the child without a word."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Background:
    """One job at a time in a child that runs beside the caller: ``submit`` first waits for the
    job before it, ``wait`` for the last. A job's failure is logged, never raised."""

    def __init__(self):
        self._child = None

    def submit(self, fn: Callable, *args) -> None:
        self.wait()
        if not available():
            _logged(fn, *args)
            return
        self._child = multiprocessing.get_context("fork").Process(target=_quietly_logged,
                                                                  args=(fn, *args))
        self._child.start()

    def wait(self) -> None:
        if self._child is not None:
            self._child.join()
            self._child = None


def _quietly_logged(fn: Callable, *args) -> None:
    _quiet_signals()
    _logged(fn, *args)


def _logged(fn: Callable, *args) -> None:
    try:
        fn(*args)
    except Exception as exc:  # a picture that cannot be drawn never stops a run
        log.warning("%s failed: %s", getattr(fn, "__name__", "a background job"), exc)
