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
            self.proc = subprocess.Popen([sys.executable, "-m", "reltrain.children", str(write)],
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


def ordered_map(fn: Callable, items: Iterable, workers: int, setup: Callable | None = None,
                setup_args: tuple = (), stop: Callable[[], None] | None = None) -> Iterator:
    """``fn(item)`` for each item in ``workers`` children, yielded in input order: item i goes to
    child i % workers, at most two per child in flight. With ``setup``, each child first runs
    ``state = setup(*setup_args)`` (a loaded model, a tokenizer) and then ``fn(state, item)``."""
    mode = _PLAIN if setup is None else _WITH_STATE
    with ExitStack() as stack:
        pool = [stack.enter_context(Child()) for _ in range(workers)]
        if setup is not None:
            for child in pool:
                child.send(setup, *setup_args, mode=_KEEP)
            for child in pool:
                child.receive(stop)  # set up in parallel, or its error raised here
        pending: deque = deque()
        for index, item in enumerate(items):
            child = pool[index % workers]
            child.send(fn, item, mode=mode)
            pending.append(child)
            if len(pending) > 2 * workers:
                yield pending.popleft().receive(stop)
        while pending:
            yield pending.popleft().receive(stop)


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
    with open(result_fd, "wb") as out:
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
            out.write(len(data).to_bytes(_HEADER, "little") + data)
            out.flush()


def _read_calls(stream, calls) -> None:
    while len(header := stream.read(_HEADER)) == _HEADER:
        size = int.from_bytes(header, "little")
        data = stream.read(size)
        if len(data) < size:
            break
        calls.put(data)
    os._exit(0)  # end-of-file: the parent closed us or is gone


if __name__ == "__main__":
    try:  # as reltrain.children, the module the calls import, not a second copy named __main__
        from reltrain.children import _serve as serve

        serve(int(sys.argv[1]))
    except BaseException:  # the parent is gone (a broken pipe), or a bug: said, then gone
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)  # not Python's shutdown, which would wait on the reading thread's lock
