"""Work in fresh Python processes, never in a fork of this one (a fork copies the locks of torch's,
gloo's and the DataLoader's threads in whatever state they are in). A child has a session of its
own, so Ctrl-C reaches only reltrain's processes, which end their children; its stdin is its
lifeline (the parent gone, it reads end-of-file and exits). Pickle goes over its pipes only."""

from __future__ import annotations

import logging
import os
import pickle
import resource
import select
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack

log = logging.getLogger(__name__)

_HEADER = 8  # a frame is its length (8 bytes, little-endian), then a pickle
# How a child runs a call: fn(*args); the same, keeping the result as the child's state (its
# answer is None); or fn(state, *args).
_PLAIN, _KEEP, _WITH_STATE = 0, 1, 2
_ABSENT = object()  # Pool.map without a share of its own
_live: set = set()  # this process's children not yet closed
_peak_kb = 0  # the most their peaks (each with its own children's) summed to while they ran together


class ChildFailed(RuntimeError):
    pass


class Child:
    """One child serving calls of module-level functions in order (``send``, then ``receive``);
    ``setup(*args)`` is its first call; leaving the context ends it."""

    def __init__(self, setup: Callable | None = None, *args):
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "reltrain.runtime.children", str(write)],
                                         stdin=subprocess.PIPE, stdout=2, pass_fds=(write,),
                                         start_new_session=True)  # stdout may be predictions
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self._results, self.pending, self.peak_kb = read, 0, 0
        _live.add(self)
        self._write(sys.path)  # the same imports as here (a script's folder, a test's)
        if setup is not None:
            self.send(setup, *args)

    def send(self, fn: Callable, *args, mode: int = _PLAIN) -> None:
        self._write((fn, args, mode))
        self.pending += 1

    def _write(self, value) -> None:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(len(data).to_bytes(_HEADER, "little") + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._failed() from None

    def receive(self, stop: Callable[[], None] | None = None):
        """The oldest unanswered call's result. ``stop``, called every 0.1 s while waiting, may
        raise to give up (the caller then leaves the ``with`` block, which ends the child)."""
        while stop is not None and not select.select([self._results], [], [], 0.1)[0]:
            stop()
        header = self._read(_HEADER)
        ok, value, records, self.peak_kb = pickle.loads(self._read(int.from_bytes(header, "little")))
        self.pending -= 1
        global _peak_kb
        _peak_kb = max(_peak_kb, sum(child.peak_kb for child in _live))
        for name, level, message in records:
            logging.getLogger(name).log(level, "%s", message)
        if ok:
            return value
        raise value

    def answered(self) -> bool:
        """Whether an answer is waiting to be received."""
        return bool(select.select([self._results], [], [], 0)[0])

    def _read(self, size: int) -> bytes:
        parts, left = [], size
        while left:
            part = os.read(self._results, min(left, 1 << 20))
            if not part:
                raise self._failed()
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def _failed(self) -> ChildFailed:
        code = self.proc.wait()
        return ChildFailed(f"a reltrain child process ended with exit code {code} before "
                           f"answering (out of memory?)")

    def close(self) -> None:
        _live.discard(self)
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()  # end-of-file: the child exits
            except BrokenPipeError:
                pass
        if self.pending:
            self.proc.terminate()
        self.proc.wait()
        os.close(self._results)

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def call(fn: Callable, *args, stop: Callable[[], None] | None = None):
    """``fn(*args)`` in a child that then ends; its result, or its exception raised here."""
    with Child() as child:
        child.send(fn, *args)
        return child.receive(stop)


def peak_rss_mb() -> float:
    """The memory this process's children held together at most, as the sum of their peaks: an
    upper bound, since the peaks need not coincide (the kernel's RUSAGE_CHILDREN keeps the largest
    single child's, and only once it has ended)."""
    return _peak_kb / 1024


def _tree_peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + _peak_kb


def default_workers(local_processes: int = 1) -> int:
    """One worker per core, shared among the processes a launcher started on this host
    (``launch.local_processes``); at most 8."""
    return max(1, min((os.cpu_count() or 1) // max(local_processes, 1), 8))


class Pool:
    """Children started at once, each first running ``warm()`` when given (the imports a later
    setup needs, done while this process does its own), then ``setup`` and ``map``."""

    def __init__(self, size: int, warm: Callable | None = None):
        self._stack = ExitStack()
        self.children = [self._stack.enter_context(Child(warm)) for _ in range(size)]
        # Answers each child owes before its first result: warm's and setup's (None, or their
        # error, raised when the result is asked for).
        self._owed = {child: int(warm is not None) for child in self.children}
        self._set_up = False

    def setup(self, fn: Callable, *args) -> None:
        """``state = fn(*args)`` in each child, kept for ``map``'s calls."""
        for child in self.children:
            child.send(fn, *args, mode=_KEEP)
            self._owed[child] += 1
        self._set_up = True

    def map(self, fn: Callable, items: Iterable, stop: Callable[[], None] | None = None,
            local: object = _ABSENT) -> Iterator:
        """``fn(state, item)`` for each item (``fn(item)`` without a setup), yielded in input
        order. An item goes to the child with the fewest in flight while it has under two; with
        ``local``, this process calls ``fn(local, item)`` itself when every child has two, so a
        child never waits for work while this process computes, nor this process for a child
        still starting."""
        if not self.children and local is _ABSENT:
            raise ValueError("a pool without children maps only with local")
        mode = _WITH_STATE if self._set_up else _PLAIN
        busy = {child: 0 for child in self.children}  # calls in flight
        pending: deque = deque()  # (child, None) awaiting its answer, or (None, result)
        most = 2 * (len(self.children) + 1)
        for item in items:
            while local is _ABSENT and pending and min(busy.values()) >= 2:
                yield self._result(pending.popleft(), busy, stop)
            child = min(self.children, key=busy.__getitem__, default=None)
            if child is not None and busy[child] < 2:
                child.send(fn, item, mode=mode)
                busy[child] += 1
                pending.append((child, None))
            else:
                pending.append((None, fn(local, item)))
            while pending and (len(pending) > most or self._done(pending[0][0])):
                yield self._result(pending.popleft(), busy, stop)
        while pending:
            yield self._result(pending.popleft(), busy, stop)

    def _done(self, child: Child | None) -> bool:
        """Whether ``child``'s next result is here (None: a result of this process)."""
        if child is None:
            return True
        while child.answered():
            if not self._owed[child]:
                return True
            child.receive()
            self._owed[child] -= 1
        return False

    def _result(self, entry: tuple, busy: dict, stop):
        child, result = entry
        if child is None:
            return result
        while self._owed[child]:
            child.receive(stop)
            self._owed[child] -= 1
        busy[child] -= 1
        return child.receive(stop)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ordered_map(fn: Callable, items: Iterable, workers: int, setup: Callable | None = None,
                setup_args: tuple = (), stop: Callable[[], None] | None = None) -> Iterator:
    """``fn(item)`` for each item in ``workers`` children, yielded in input order (``Pool.map``).
    With ``setup``, each child first runs ``state = setup(*setup_args)`` (a loaded model, a
    tokenizer) and then ``fn(state, item)``."""
    with Pool(workers) as pool:
        if setup is not None:
            pool.setup(setup, *setup_args)
        yield from pool.map(fn, items, stop)


class _Records(logging.Handler):
    """The child's log records, sent back with each result and logged there by the parent."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list = []

    def emit(self, record):
        self.records.append((record.name, record.levelno, record.getMessage()))


def _serve(result_fd: int) -> None:
    import threading
    from queue import SimpleQueue

    records = _Records()
    logging.getLogger().addHandler(records)
    logging.getLogger().setLevel(logging.INFO)
    calls: SimpleQueue = SimpleQueue()
    # Calls are read as they come, so the parent's writes never wait on a busy child.
    threading.Thread(target=_read_calls, args=(sys.stdin.buffer, calls), daemon=True).start()
    sys.path[:] = pickle.loads(calls.get())
    state = None  # what a _KEEP call returned
    answers: SimpleQueue = SimpleQueue()
    # Answers are written as the parent reads them, so a busy parent never holds up the next call.
    threading.Thread(target=_write_answers, args=(result_fd, answers), daemon=True).start()
    while True:
        call = calls.get()
        try:
            fn, args, mode = pickle.loads(call)
            value = fn(state, *args) if mode == _WITH_STATE else fn(*args)
            if mode == _KEEP:
                state, value = value, None
            result = (True, value)
        except Exception as exc:
            result = (False, exc)
        try:
            data = pickle.dumps((*result, records.records, _tree_peak_kb()),
                                protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result or an error that does not pickle
            error = RuntimeError(f"a child's result: {result[1]!r} ({exc})")
            data = pickle.dumps((False, error, records.records, _tree_peak_kb()))
        records.records = []
        answers.put(len(data).to_bytes(_HEADER, "little") + data)


def _write_answers(result_fd: int, answers) -> None:
    try:
        with open(result_fd, "wb") as out:
            while True:
                out.write(answers.get())
                out.flush()
    except BaseException:  # the parent is gone (a broken pipe): said, then gone
        import traceback

        traceback.print_exc()
        os._exit(1)


def _read_calls(stream, calls) -> None:
    while len(header := stream.read(_HEADER)) == _HEADER:
        size = int.from_bytes(header, "little")
        data = stream.read(size)
        if len(data) < size:
            break
        calls.put(data)
    os._exit(0)  # end-of-file: the parent closed us or is gone


if __name__ == "__main__":
    try:  # as reltrain.runtime.children, the module the calls import, not a second copy named __main__
        from reltrain.runtime.children import _serve as serve

        serve(int(sys.argv[1]))
    except BaseException:  # the parent is gone (a broken pipe), or a bug: said, then gone
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)  # not Python's shutdown, which would wait on the reading thread's lock
