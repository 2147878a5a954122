"""Micro-batching for the server: the examples of concurrent requests predicted together by one
model thread, with a bounded queue, failures kept to the request that caused them, and a large
request taken in slices between the others so that it cannot hold the model for long."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from reltrain.runtime.errors import UserError, first_line

log = logging.getLogger("reltrain.serve")


class Busy(Exception):
    """The queue is full: the client should retry after a while (503 with Retry-After)."""


class ItemFailed(Exception):
    """This request's examples could not be predicted (the others of its batch were)."""


class Unavailable(Exception):
    """The model thread has stopped: nothing more can be predicted (503, not ready)."""


@dataclass
class _Job:
    units: list  # what the predictor predicts one result for (a record: one entity pair)
    top_k: int
    future: asyncio.Future
    finish: Callable[[list], object]  # the request's answer from its units' results
    results: list = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.units) - len(self.results)


@dataclass
class _Slice:
    job: _Job
    start: int
    stop: int

    @property
    def units(self) -> list:
        return self.job.units[self.start:self.stop]


@dataclass
class Batcher:
    """Takes what queued while the model was busy, up to ``max_batch`` examples, optionally
    waiting ``max_wait`` seconds for more; one client alone never waits, many share batches. A
    request that fits is never split; one larger than ``max_batch`` goes in slices of
    ``max_batch``, taking turns with the requests that arrive meanwhile. At most ``max_queue``
    examples wait: beyond that ``Busy``. ``predictor.answer(units, top_k)`` gives one result
    per unit."""

    predictor: object
    max_batch: int
    max_wait: float  # seconds
    max_queue: int
    metrics: object = None  # reltrain.inference.observe.Metrics, or None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "reltrain-model"))
    counts: dict = field(default_factory=lambda: {"requests": 0, "examples": 0, "batches": 0,
                                                  "failed_batches": 0})
    queued: int = 0  # examples waiting
    stopped: str | None = None  # why the model thread stopped, once it has
    _ready: deque = field(default_factory=deque)  # jobs taken from the queue, in turn order
    _later: list = field(default_factory=list)  # jobs with slices left: behind new arrivals

    async def predict(self, units: list, top_k: int, finish: Callable[[list], object] = list):
        if self.stopped:
            raise Unavailable(self.stopped)
        size = len(units)
        if self.queued and self.queued + size > self.max_queue:
            raise Busy(f"{self.queued} examples are waiting; at most {self.max_queue}")
        job = _Job(units, top_k, asyncio.get_running_loop().create_future(), finish)
        if not units:  # e.g. a sentence whose entities are all one span: no pair to predict
            return finish([])
        self._queued(size)
        await self.queue.put(job)
        return await job.future

    def _queued(self, change: int) -> None:
        self.queued += change
        if self.metrics is not None:
            self.metrics.queued.set(self.queued)

    async def run(self) -> None:
        """The model loop; if it ever ends but by cancellation, every waiting request is answered
        (``Unavailable``) and later ones are refused: the server never hangs on a dead loop."""
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.stop(f"the model loop stopped ({type(exc).__name__}: {first_line(exc, 200)})")
            raise

    def stop(self, reason: str) -> None:
        self.stopped = reason
        log.error("%s; the server is not ready and answers 503", reason)
        self._take_queued()
        for job in self._ready:
            if not job.future.done():
                job.future.set_exception(Unavailable(reason))
        self._ready.clear()
        self._queued(-self.queued)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect(loop)
            if not batch:
                continue
            try:
                await self._predict(loop, batch)
            except asyncio.CancelledError:
                raise
            # BaseException: a tokenizer from a stranger's folder may raise one (a Rust panic
            # arrives as pyo3's PanicException); it fails its request, not the loop.
            except BaseException as exc:  # one request's examples broke the batch: find whose
                self._failed(exc, len(batch))
                if len(batch) == 1:
                    self._fail(batch[0].job, exc)
                    continue
                for piece in batch:
                    try:
                        await self._predict(loop, [piece])
                    except asyncio.CancelledError:
                        raise
                    except BaseException as alone:
                        self._failed(alone, 1)
                        self._fail(piece.job, alone)

    async def _predict(self, loop, batch: list[_Slice]) -> None:
        units = [unit for piece in batch for unit in piece.units]
        top_k = max(piece.job.top_k for piece in batch)
        results = await loop.run_in_executor(self.pool, self.predictor.answer, units, top_k)
        self.counts["batches"] += 1
        self.counts["examples"] += len(units)
        if self.metrics is not None:
            self.metrics.batch_examples.observe(len(units))
        start = 0
        for piece in batch:
            job, mine = piece.job, results[start:start + piece.stop - piece.start]
            start += piece.stop - piece.start
            job.results += [_top(r, job.top_k) for r in mine]
            if not job.left and not job.future.done():  # the client may have gone
                self.counts["requests"] += 1
                job.future.set_result(job.finish(job.results))

    def _failed(self, exc: BaseException, requests: int) -> None:
        self.counts["failed_batches"] += 1
        if self.metrics is not None:
            self.metrics.failed_batches.inc()
        log.warning("a batch of %d request(s) failed: %s: %s", requests, type(exc).__name__,
                    first_line(exc, 200))

    def _fail(self, job: _Job, exc: BaseException) -> None:
        for turns in (self._ready, self._later):
            if job in turns:  # the rest of a request in slices
                turns.remove(job)
                self._queued(-job.left)
        if not job.future.done():
            reason = (first_line(exc, 300) if isinstance(exc, UserError)
                      else f"({type(exc).__name__}: {first_line(exc, 200)})")
            job.future.set_exception(ItemFailed(f"these examples could not be predicted: {reason}"))

    async def _collect(self, loop) -> list[_Slice]:
        if not self._ready and not self._later:
            self._ready.append(await self.queue.get())
        self._take_queued()
        batch: list[_Slice] = []
        size, deadline = 0, loop.time() + self.max_wait
        while True:
            size = self._fill(batch, size)
            remaining = deadline - loop.time()
            if size >= self.max_batch or remaining <= 0 or self._ready:
                return batch  # full, no more time, or the next request waits for the next batch
            try:
                self._ready.append(await asyncio.wait_for(self.queue.get(), remaining))
            except asyncio.TimeoutError:
                return batch
            self._take_queued()

    def _take_queued(self) -> None:
        """New requests join the turn order ahead of the jobs that have just had a slice."""
        while not self.queue.empty():
            self._ready.append(self.queue.get_nowait())
        self._ready.extend(self._later)
        self._later.clear()

    def _fill(self, batch: list[_Slice], size: int) -> int:
        """Slices from the jobs in turn: a job that fits goes whole; one that does not fit
        starts a batch of its own with ``max_batch`` of its units, then waits its next turn."""
        while self._ready and size < self.max_batch:
            job = self._ready[0]
            if job.future.done():  # its client went away or it failed: drop the rest
                self._ready.popleft()
                self._queued(-job.left)
                continue
            start = len(job.results) + sum(p.stop - p.start for p in batch if p.job is job)
            left = len(job.units) - start
            if left <= self.max_batch - size:
                take = left
            elif size == 0:
                take = self.max_batch
            else:
                break
            self._ready.popleft()
            batch.append(_Slice(job, start, start + take))
            self._queued(-take)
            size += take
            if take < left:
                self._later.append(job)  # its next slice after the requests now waiting
                break
        return size


def _top(result: dict, k: int) -> dict:
    """A result cut to ``k`` alternatives (requests in one batch may ask for different k; an
    extraction answer has none)."""
    return {**result, "top_k": result["top_k"][:k]} if "top_k" in result else result
