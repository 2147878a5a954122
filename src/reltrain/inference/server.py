"""``reltrain serve``: a trained model behind an HTTP JSON API (FastAPI on uvicorn, the
``[serve]`` extra).

    POST /predict   one example or a list: {"text", "head", "tail"[, "head_offset", "tail_offset"]},
                    the JSONL shape ({"text", "h": {"pos"}, "t": {"pos"}}), or
                    {"text", "entities": [...]} for every pair; answers what `reltrain predict` writes
    GET  /health    {"status": "ok", ...} and counters
    GET  /model     labels, encoder, language, runtime, the metrics of the model card

Requests that arrive together are predicted together: when the model thread is free, the
batcher takes every request that queued meanwhile, up to ``max_batch`` examples (a request is
never split), optionally waiting ``max_wait_ms`` for more; one client alone never waits, many
clients share batches because requests queue while a batch runs. Every bad request gets a 4xx JSON error
``{"error": ..., "field": ...}``; nothing a client sends can make a 500.
"""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at runtime,
# and Request is imported inside create_app (FastAPI is an optional extra).
import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from reltrain.errors import DataError, UserError

log = logging.getLogger("reltrain.serve")

OPTIONS_ENV = "RELTRAIN_SERVE_OPTIONS"  # how uvicorn's worker processes get the options


@dataclass
class ServeOptions:
    model: str
    device: str = "cpu"
    runtime: str = "torch"
    max_batch: int = 64
    max_wait_ms: float = 0.0
    top_k: int = 3
    max_body_bytes: int = 1_000_000
    max_items: int = 1024
    max_text_chars: int = 10_000
    threads: int = 0  # torch threads per process; 0: the cores shared among the workers
    amp: str = "auto"


class BadRequest(Exception):
    def __init__(self, status: int, message: str, field_name: str | None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field_name


@dataclass
class _Job:
    items: list
    top_k: int
    future: asyncio.Future
    size: int = 0  # examples: a sentence with entities counts each pair


@dataclass
class Batcher:
    """Groups the examples of concurrent requests into batches for one model thread."""

    predictor: object
    max_batch: int
    max_wait: float  # seconds
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "reltrain-model"))
    counts: dict = field(default_factory=lambda: {"requests": 0, "examples": 0, "batches": 0})
    _carry: _Job | None = None

    async def predict(self, items: list, top_k: int) -> list[dict]:
        job = _Job(items, top_k, asyncio.get_running_loop().create_future(), examples(items))
        await self.queue.put(job)
        return await job.future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect(loop)
            items = [item for job in jobs for item in job.items]
            top_k = max(job.top_k for job in jobs)
            try:
                results = await loop.run_in_executor(self.pool, self.predictor.predict_any, items, top_k)
            except Exception as exc:  # a model fault: every waiting request learns of it
                log.exception("prediction failed")
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            self.counts["batches"] += 1
            self.counts["requests"] += len(jobs)
            self.counts["examples"] += sum(job.size for job in jobs)
            start = 0
            for job in jobs:
                mine = results[start:start + len(job.items)]
                start += len(job.items)
                if not job.future.done():  # the client may have gone
                    job.future.set_result([_top(r, job.top_k) for r in mine])

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


def examples(items: list) -> int:
    from reltrain.data.schema import EntitySentence

    return sum(len(item.pairs()) if isinstance(item, EntitySentence) else 1 for item in items)


def _top(result: dict, k: int) -> dict:
    """A result cut to ``k`` alternatives (requests in one batch may ask for different k)."""
    if "pairs" in result:
        return {**result, "pairs": [_top(p, k) for p in result["pairs"]]}
    return {**result, "top_k": result["top_k"][:k]}


def parse_items(body: bytes, options: ServeOptions) -> tuple[list, bool]:
    """The examples of a request body and whether it was a list; ``BadRequest`` naming the
    field for anything wrong."""
    from reltrain.data.readers import json_record, pair_record

    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"the body is not JSON ({str(exc)[:120]})", "body") from None
    many = isinstance(obj, list)
    objs = obj if many else [obj]
    if not objs:
        raise BadRequest(422, "an empty list: send at least one example", "body")
    if len(objs) > options.max_items:
        raise BadRequest(413, f"{len(objs)} examples in one request; at most {options.max_items}",
                         "body")
    items = []
    for i, one in enumerate(objs):
        where = f"[{i}]" if many else ""
        if not isinstance(one, dict):
            raise BadRequest(422, f"expected a JSON object, got {type(one).__name__}", where or "body")
        text = one.get("text")
        if isinstance(text, str) and len(text) > options.max_text_chars:
            raise BadRequest(422, f"text of {len(text)} characters; at most {options.max_text_chars}",
                             f"{where}.text".lstrip("."))
        try:
            if "entities" in one or "h" in one or "token" in one:
                items.append(json_record(one, "request", None, entity_lists=True))
            else:
                items.append(pair_record(one, "request", None))
        except DataError as exc:
            name = f"{where}.{exc.field}" if exc.field else where
            raise BadRequest(422, exc.reason, name.lstrip(".") or "body") from None
    count = examples(items)
    if count > options.max_items:
        raise BadRequest(413, f"{count} examples (every pair of a sentence's entities "
                              f"counts); at most {options.max_items}", "body")
    return items, many


def create_app(options: ServeOptions):
    """The FastAPI application for ``options`` (the model loads when the server starts)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    state: dict = {}

    @asynccontextmanager
    async def lifespan(app):
        import torch

        from reltrain.predict import Predictor

        torch.set_num_threads(options.threads or torch.get_num_threads())
        predictor = Predictor.from_checkpoint(options.model, device=options.device,
                                              runtime=options.runtime, amp=options.amp)
        batcher = Batcher(predictor, options.max_batch, options.max_wait_ms / 1000)
        state.update(predictor=predictor, batcher=batcher, info=model_info(predictor, options))
        task = asyncio.create_task(batcher.run())
        try:
            yield
        finally:
            task.cancel()
            batcher.pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="reltrain", lifespan=lifespan, docs_url="/docs", redoc_url=None)

    def error(status: int, message: str, field_name: str | None) -> JSONResponse:
        return JSONResponse({"error": message, "field": field_name}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):  # 404, 405 in the same JSON shape
        return error(exc.status_code, str(exc.detail), None)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        return error(422, first.get("msg", "invalid request"),
                     ".".join(str(p) for p in first.get("loc", ())[1:]) or None)

    @app.get("/health")
    async def health():
        return {"status": "ok", **state["batcher"].counts}

    @app.get("/model")
    async def model():
        return state["info"]

    @app.post("/predict")
    async def predict(request: Request, top_k: int | None = None):
        k = options.top_k if top_k is None else top_k
        if not 1 <= k <= len(state["predictor"].labels):
            return error(422, f"top_k must be between 1 and {len(state['predictor'].labels)}", "top_k")
        try:
            body = await _read_body(request, options.max_body_bytes)
            items, many = parse_items(body, options)
        except BadRequest as exc:
            return error(exc.status, exc.message, exc.field)
        try:
            results = await state["batcher"].predict(items, k)
        except UserError as exc:  # e.g. an LM tokenizer refusing a text
            return error(422, str(exc), "body")
        return results if many else results[0]

    return app


async def _read_body(request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"a body of {declared} bytes; at most {limit}", "body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"a body of more than {limit} bytes", "body")
        chunks.append(chunk)
    return b"".join(chunks)


def model_info(predictor, options: ServeOptions) -> dict:
    """What GET /model answers: the model, its labels and the metrics of its card (as checked
    when it loaded: nothing of the folder is shown unread)."""
    metrics = predictor.card if any(predictor.card.values()) else None
    config = predictor.config
    return {"model": str(options.model), "encoder": config.model.name,
            "language": config.data.language, "labels": predictor.labels,
            "runtime": options.runtime, "device": str(predictor.device),
            "precision": predictor.precision.name, "metrics": metrics,
            "max_batch": options.max_batch, "max_wait_ms": options.max_wait_ms}


def app_from_env():
    """The application of a uvicorn worker process (``--workers N``); options come by environment."""
    return create_app(ServeOptions(**json.loads(os.environ[OPTIONS_ENV])))


def serve(options: ServeOptions, host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
          access_log: bool = False) -> None:
    """Run the server until SIGINT or SIGTERM (uvicorn then finishes open requests and stops)."""
    try:
        import uvicorn
    except ImportError:
        raise UserError("reltrain serve needs FastAPI and uvicorn: pip install 'reltrain[serve]'") from None
    from reltrain.predict import Predictor

    Predictor.from_checkpoint(options.model, runtime=options.runtime, amp=options.amp)  # errors first
    if not options.threads:
        options.threads = max(1, (os.cpu_count() or 1) // workers)
    wait = (f"waiting up to {options.max_wait_ms:g} ms for more" if options.max_wait_ms
            else "what queued while the model was busy")
    log.info("serving %s on http://%s:%d (POST /predict, GET /health, GET /model); %d worker "
             "process(es), batches of up to %d examples (%s)",
             options.model, host, port, workers, options.max_batch, wait)
    os.environ[OPTIONS_ENV] = json.dumps(asdict(options))
    uvicorn.run("reltrain.inference.server:app_from_env", factory=True, host=host, port=port,
                workers=workers, access_log=access_log, log_level="info")
