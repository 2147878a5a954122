"""SIGTERM / SIGINT become a request to stop at the next step boundary, with a checkpoint."""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


class StopRequest:
    """Installs handlers for SIGTERM and SIGINT; ``signum`` is set once one arrives.

    A second signal of the same kind acts as usual (Ctrl-C twice interrupts at once).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum = 0
        self._previous: dict = {}

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
        log.warning("received %s: saving a checkpoint at the next step, then stopping",
                    signal.Signals(signum).name)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
