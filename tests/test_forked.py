"""Work in forked children (reltrain/forked.py): results, errors and signals around the fork."""

import os
import signal
import time

import pytest

from reltrain import forked

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs fork")

# A signal that arrives while os.fork runs: the at-fork callbacks are Python code, so its handler
# runs inside one of them, where an exception is printed as "Exception ignored" and dropped.
_SEND_AT_FORK: list = []
if forked.available():
    os.register_at_fork(after_in_parent=lambda: _SEND_AT_FORK and os.kill(os.getpid(),
                                                                          _SEND_AT_FORK.pop()))


def _blocked_in_child() -> set:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_a_result_and_an_error_come_back_from_the_child():
    assert forked.call(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        forked.call(divmod, 1, 0)


def test_ctrl_c_during_the_fork_is_raised_after_it_and_stops_the_child():
    _SEND_AT_FORK.append(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        forked.call(time.sleep, 10)  # dropped, the call would return after the child's 10 s
    assert not _SEND_AT_FORK


def test_the_child_lets_the_stop_signals_in_again():
    assert not _blocked_in_child() & set(forked.STOP_SIGNALS)
    assert not forked.call(_blocked_in_child) & set(forked.STOP_SIGNALS)
    with forked.signals_held():
        assert set(forked.STOP_SIGNALS) <= _blocked_in_child()
    assert not _blocked_in_child() & set(forked.STOP_SIGNALS)
