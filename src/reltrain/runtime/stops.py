"""Stop signals become a flag; the run checks it at named points (``check``, the step vote, the
waits in ``children``, the predict loop) and stops there. The ``StopRequest`` is the one channel:
a command installs it and passes it (or its ``check``) to the work that stops. The handler never
raises, so no exception appears inside an import, a lock or a finalizer; a second signal acts as
Python's own.
Work with no stop point near (reading a config or a data file, building or loading a model)
gets ``GRACE_S`` seconds after the signal, then the process ends with one line: a single SIGTERM
(``timeout``, a scheduler) always ends reltrain, also where no check point is reached."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

from reltrain.runtime.errors import Preempted

# SIGHUP: the terminal of a foreground run was closed (torchrun passes it on to workers too).
# SIGUSR1: Slurm's warning before the time limit (#SBATCH --signal=USR1@120).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)

GRACE_S = 10.0  # after a stop signal, outside loops that check for it: then the process ends


class StopRequest:
    """Handlers for the stop signals while installed (``with StopRequest(): ...``)."""

    def __init__(self):
        self.signum = 0
        self._previous: dict = {}
        self._checking = 0  # loops running now that stop at their own points (``checked``)
        self._timer: threading.Timer | None = None
        self._installed = False

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup: the user asked to ignore it
                    self._previous[sig] = signal.signal(sig, self._note)
            self._installed = True
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._timer is not None:
            self._timer.cancel()
        self._installed = False

    def __enter__(self) -> "StopRequest":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.restore()

    def check(self, when: str) -> None:
        """A named stop point: raise ``Preempted`` if a stop signal came."""
        if self.signum:
            raise Preempted(self.signum, when=when)

    def _note(self, signum, frame) -> None:
        self.signum = self.signum or signum
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
        if self._timer is None:
            self._timer = threading.Timer(GRACE_S, self._overdue)
            self._timer.daemon = True
            self._timer.start()

    def _overdue(self) -> None:
        """No stop point acted on the signal in time and no checking loop runs: end here (the
        kernel drops the run's lock; children see their stdin close and end too)."""
        if self._checking or not self._installed:
            return
        name = signal.Signals(self.signum).name
        try:
            sys.stderr.write(f"reltrain: stopped by {name}: no stop point came within "
                             f"{GRACE_S:g} s (reading inputs, building or scoring a model); what "
                             f"was saved before stays\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + self.signum)

    @contextmanager
    def checked(self):
        """A stretch of work that stops at its own points (the training loop, predicting chunk
        by chunk, waiting for a child): the grace period does not end it."""
        self._checking += 1
        try:
            yield
        finally:
            self._checking -= 1
