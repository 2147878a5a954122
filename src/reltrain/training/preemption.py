"""SIGTERM / SIGINT become a request to stop at the next step boundary, with a checkpoint."""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager

from reltrain.errors import Preempted
from reltrain.forked import STOP_SIGNALS

log = logging.getLogger(__name__)


class StopRequest:
    """Handlers for SIGTERM, SIGINT, SIGHUP and SIGUSR1 for the whole run.

    While ``training()`` is active a signal only sets ``signum``: the trainer saves a checkpoint
    at the next step all ranks agree on and stops. Outside it (preprocessing, test scoring)
    there is nothing to save, so the signal stops the run at once with ``Preempted``. A second
    signal of the same kind acts as usual (Ctrl-C twice interrupts at once).
    """

    def __init__(self, announce: bool = True):
        self.signum, self.announce = 0, announce  # announce: say so in the log (rank 0 only)
        self._deferring = self._noting = False
        self._previous: dict = {}

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup: the user asked to ignore it
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    @contextmanager
    def training(self):
        if self.signum:  # handled where Python drops exceptions (a finalizer): stop here at least
            raise self.stopped()
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False

    @contextmanager
    def noted(self):
        """Inside, a signal is only noted; on leaving, the handlers are put back and a noted
        signal stops the program with ``Preempted``. For the start of ``reltrain train``, which
        imports torch: raised in the middle of an extension module's import, the exception left
        numpy half-loaded in a torchrun worker (an ImportError traceback on the next import)."""
        self._noting = True
        self.install()
        try:
            yield
        finally:
            self._noting = False
            self.restore()
        if self.signum:
            raise Preempted(self.signum, when="while starting; nothing to save")

    def stopped(self) -> Preempted:
        """The stop outside training: there is no new state to save."""
        return Preempted(self.signum, when="before training or after it; nothing new to save")

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
        if self._noting:
            return
        if not self._deferring:
            raise self.stopped()
        if self.announce:
            log.warning("received %s: saving a checkpoint at the next step, then stopping",
                        signal.Signals(signum).name)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
