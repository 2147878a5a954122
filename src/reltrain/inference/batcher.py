"""Micro-batching for the server: the examples of concurrent requests predicted together by one
model thread, with a bounded queue and failures kept to the request that caused them."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reltrain.errors import first_line

log = logging.getLogger("reltrain.serve")


class Busy(Exception):
    """The queue is full: the client should retry after a while (503 with Retry-After)."""


class ItemFailed(Exception):
    """This request's examples could not be predicted (the others of its batch were)."""


@dataclass
class _Job:
    items: list
    top_k: int
    future: asyncio.Future
    size: int  # examples: a sentence with entities counts each pair


@dataclass
class Batcher:
    """Takes what queued while the model was busy, up to ``max_batch`` examples (a request is
    never split), optionally waiting ``max_wait`` seconds for more; one client alone never
    waits, many share batches. At most ``max_queue`` examples wait: beyond that ``Busy``."""

    predictor: object
    max_batch: int
    max_wait: float  # seconds
    max_queue: int
    metrics: object = None  # reltrain.inference.server.Metrics, or None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "reltrain-model"))
    counts: dict = field(default_factory=lambda: {"requests": 0, "examples": 0, "batches": 0,
                                                  "failed_batches": 0})
    queued: int = 0  # examples waiting
    _carry: _Job | None = None

    async def predict(self, items: list, top_k: int, size: int) -> list[dict]:
        if self.queued and self.queued + size > self.max_queue:
            raise Busy(f"{self.queued} examples are waiting; at most {self.max_queue}")
        job = _Job(items, top_k, asyncio.get_running_loop().create_future(), size)
        self._queued(size)
        await self.queue.put(job)
        return await job.future

    def _queued(self, change: int) -> None:
        self.queued += change
        if self.metrics is not None:
            self.metrics.queued.set(self.queued)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect(loop)
            self._queued(-sum(job.size for job in jobs))
            try:
                await self._predict(loop, jobs)
            except Exception as exc:  # one request's examples broke the batch: find whose
                self._failed(exc, len(jobs))
                if len(jobs) == 1:
                    self._fail(jobs[0], exc)
                    continue
                for job in jobs:
                    try:
                        await self._predict(loop, [job])
                    except Exception as alone:
                        self._failed(alone, 1)
                        self._fail(job, alone)

    async def _predict(self, loop, jobs: list[_Job]) -> None:
        items = [item for job in jobs for item in job.items]
        top_k = max(job.top_k for job in jobs)
        results = await loop.run_in_executor(self.pool, self.predictor.predict_any, items, top_k)
        size = sum(job.size for job in jobs)
        self.counts["batches"] += 1
        self.counts["requests"] += len(jobs)
        self.counts["examples"] += size
        if self.metrics is not None:
            self.metrics.batch_examples.observe(size)
        start = 0
        for job in jobs:
            mine = results[start:start + len(job.items)]
            start += len(job.items)
            if not job.future.done():  # the client may have gone
                job.future.set_result([_top(r, job.top_k) for r in mine])

    def _failed(self, exc: Exception, requests: int) -> None:
        self.counts["failed_batches"] += 1
        if self.metrics is not None:
            self.metrics.failed_batches.inc()
        log.warning("a batch of %d request(s) failed: %s: %s", requests, type(exc).__name__,
                    first_line(exc, 200))

    @staticmethod
    def _fail(job: _Job, exc: Exception) -> None:
        if not job.future.done():
            job.future.set_exception(ItemFailed(f"these examples could not be predicted "
                                                f"({type(exc).__name__}: {str(exc)[:200]})"))

    async def _collect(self, loop) -> list[_Job]:
        first = self._carry or await self.queue.get()
        self._carry = None
        jobs, size = [first], first.size
        deadline = loop.time() + self.max_wait
        while size < self.max_batch:
            try:
                remaining = deadline - loop.time()
                job = (self.queue.get_nowait() if remaining <= 0
                       else await asyncio.wait_for(self.queue.get(), remaining))
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if size + job.size > self.max_batch:
                self._carry = job
                break
            jobs.append(job)
            size += job.size
        return jobs


def _top(result: dict, k: int) -> dict:
    """A result cut to ``k`` alternatives (requests in one batch may ask for different k)."""
    if "pairs" in result:
        return {**result, "pairs": [_top(p, k) for p in result["pairs"]]}
    return {**result, "top_k": result["top_k"][:k]}
