"""Stop signals become a flag; the run checks it at named points (``check``, the step vote, the
waits in ``children``, the predict loop) and stops there. The handler never raises, so no
exception appears inside an import, a lock or a finalizer; a second signal acts as Python's own."""

from __future__ import annotations

import signal
import threading

from reltrain.errors import Preempted

# SIGHUP: the terminal of a foreground run was closed (torchrun passes it on to workers too).
# SIGUSR1: Slurm's warning before the time limit (#SBATCH --signal=USR1@120).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)

_active: "StopRequest | None" = None  # the installed one: a process has one set of handlers


class StopRequest:
    """Handlers for the stop signals while installed (``with StopRequest(): ...``)."""

    def __init__(self):
        self.signum = 0
        self._previous: dict = {}

    def install(self) -> "StopRequest":
        global _active
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup: the user asked to ignore it
                    self._previous[sig] = signal.signal(sig, self._note)
            _active = self
        return self

    def restore(self) -> None:
        global _active
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if _active is self:
            _active = None

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


def check(when: str) -> None:
    """``check`` of the installed request, if any (library use installs none)."""
    if _active is not None:
        _active.check(when)


def requested() -> int:
    """The stop signal noted so far, or 0."""
    return _active.signum if _active is not None else 0
