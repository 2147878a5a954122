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
from contextlib import contextmanager

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
    try:
        with signals_held():
            child.start()
        send.close()
        ok, value = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the child process for {fn.__name__} ended with exit code "
                           f"{child.exitcode} and no result") from None
    except BaseException:
        if child.pid is not None:
            child.terminate()
            child.join()
        raise
    finally:
        send.close()
        receive.close()
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


# The signals reltrain's processes turn into a stop (training/preemption.py). SIGHUP: the
# terminal of a foreground run was closed (torchrun passes it on to workers too). SIGUSR1:
# Slurm's warning before the time limit (#SBATCH --signal=USR1@120).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)


@contextmanager
def signals_held():
    """Around a fork: the stop signals that arrive meanwhile wait until it is over.

    Python runs a signal's handler at the next Python line, and inside ``os.fork`` that is an
    at-fork callback (logging's lock): the handler's exception (Preempted, KeyboardInterrupt)
    is printed as "Exception ignored" and dropped, so Ctrl-C is lost with a traceback on the
    screen. Held, the signal is handled when this block ends, in code that can raise. A child
    forked meanwhile starts with them held too (pending ones stay with the parent) and lets
    them in with ``let_signals_in`` once its own handlers are set."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def let_signals_in() -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _quiet_signals() -> None:
    """The parent handles Ctrl-C and stops the child; SIGTERM ends the child without a word."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    let_signals_in()


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
        with signals_held():
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
