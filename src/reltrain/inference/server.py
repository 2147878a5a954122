"""``reltrain serve``: a trained model behind an HTTP JSON API (FastAPI on uvicorn, the ``[serve]``
extra). docs/serving.md lists the endpoints, the request shapes, the limits and their flags."""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations at runtime,
# and Request is imported inside create_app (FastAPI is an optional extra).
import asyncio
import gc
import json
import logging
import os
import signal
import time
from pathlib import Path

from reltrain.inference.batcher import Batcher, Busy, ItemFailed, Unavailable
from reltrain.inference.observe import Metrics, Observed, access_log_to_stderr
from reltrain.inference.requests import (BadRequest, Limits, parse_items, parse_texts,
                                         request_schema, text_schema)
from reltrain.config.commands import ServeOptions

log = logging.getLogger("reltrain.serve")

OPTIONS_ENV = "RELTRAIN_SERVE_OPTIONS"  # how uvicorn's worker processes get the options



def create_app(options: ServeOptions):
    """The FastAPI application for ``options`` (the model loads when the server starts), inside
    the middleware that gives every answer its request id and counts it."""
    from fastapi_offline import FastAPIOffline

    # The app's state: "draining" is set by the first stop signal (/ready answers 503 from then
    # on); the predictor, the batcher and the model's description once the server has started.
    state: dict = {"draining": False}
    metrics = Metrics()
    in_flight: set = set()  # the tasks answering requests now
    access_log_to_stderr(options.access_log)
    app = FastAPIOffline(title="reltrain", lifespan=_lifespan(options, state, metrics, in_flight),
                         docs_url="/docs", redoc_url=None)
    _add_error_handlers(app)
    if options.demo:
        _add_demo(app)
    _add_status(app, state, metrics)
    _add_predict(app, state, options, _extracting(options.model))
    # Outside Starlette's own error middleware, so that its 500 carries the request id too.
    return Observed(app, metrics=metrics, access_log=options.access_log, in_flight=in_flight,
                     state=state)


def _extracting(model: str) -> bool:
    """Whether ``model`` is an extraction model, from its config alone (the weights load once,
    in the lifespan)."""
    from reltrain.artifacts.model_folder import model_task  # numpy, torch, tqdm only when used

    return model_task(model) == "extract"


def _lifespan(options: ServeOptions, state: dict, metrics, in_flight: set):
    """Load the model and run the batcher while the server serves; at the end, let the requests
    the drain timeout cut answer their 503, then stop the batcher."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        import torch

        from reltrain.inference.predictor import Predictor  # numpy, torch, tqdm only when used

        torch.set_num_threads(options.threads or torch.get_num_threads())
        _drain_on_stop(state)
        _quiet_fd_exhaustion()
        predictor = Predictor.from_checkpoint(options.model, device=options.device,
                                              runtime=options.runtime, amp=options.amp)
        predictor.max_tokens = predictor.config.data.max_len
        batcher = Batcher(predictor, options.max_batch, options.max_wait_ms / 1000,
                          options.max_queue, metrics)
        state.update(predictor=predictor, batcher=batcher, info=model_info(predictor, options))
        # torch and the model are many long-lived objects that every full collection (which a
        # large request body can set off) would walk again; frozen, they are left out.
        gc.collect()
        gc.freeze()
        task = asyncio.create_task(batcher.run())
        task.add_done_callback(_exit_if_failed)
        try:
            yield
        finally:
            if in_flight:  # cancelled by uvicorn at the drain timeout: each answers its 503
                await asyncio.wait(set(in_flight), timeout=2)
            task.cancel()
            batcher.pool.shutdown(wait=False, cancel_futures=True)

    return lifespan


def _error(status: int, message: str, field_name: str | None, headers=None):
    """Every error the API gives: ``{"error": message, "field": field}``."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message, "field": field_name}, status_code=status,
                        headers=headers)


_WHY = {400: "the body is not UTF-8 JSON text (or a number in it has more than 18 digits)",
        408: "the body did not arrive in time", 413: "too large: the body, the examples or "
        "the text to read", 422: "an example the model cannot read (the field says which)",
        503: "busy (retry after Retry-After seconds), stopping or failed"}
_ERROR_BODY = {"type": "object", "required": ["error", "field"],
               "properties": {"error": {"type": "string"},
                              "field": {"type": ["string", "null"]}}}


def _answers(*statuses: int) -> dict:
    """The error answers of an endpoint for the OpenAPI schema, each with the error body."""
    return {status: {"description": _WHY[status],
                     "content": {"application/json": {"schema": _ERROR_BODY}}}
            for status in statuses}


def _add_error_handlers(app) -> None:
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def http_error(request, exc):  # 404, 405 in the same JSON shape; 405 keeps its Allow
        return _error(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        return _error(422, first.get("msg", "invalid request"),
                      ".".join(str(p) for p in first.get("loc", ())[1:]) or None)


def _add_demo(app) -> None:
    from fastapi.responses import HTMLResponse

    page = (Path(__file__).parents[1] / "pages" / "demo.html").read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def demo():
        # The page may talk to this server only: no script, style or font from elsewhere.
        return HTMLResponse(page, headers={"Content-Security-Policy": _DEMO_POLICY})


def _add_status(app, state: dict, metrics) -> None:
    from fastapi.responses import JSONResponse, Response

    @app.get("/health", responses=_answers(503))
    async def health():
        batcher = state["batcher"]
        if batcher.stopped:
            return JSONResponse({"status": "failed", "reason": batcher.stopped}, status_code=503)
        return {"status": "ok", **batcher.counts, "queued": batcher.queued}

    @app.get("/ready", responses=_answers(503))
    async def ready():
        if state["draining"] or state["batcher"].stopped:
            reason = "draining" if state["draining"] else "failed"
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        return {"ready": True}

    @app.get("/model")
    async def model():
        return state["info"]

    @app.get("/metrics", response_class=Response, responses={200: {
        "description": "Prometheus' text format", "content": {"text/plain": {"schema": {
            "type": "string"}}}}})
    async def prometheus():
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)


def _add_predict(app, state: dict, options: ServeOptions, extracting: bool) -> None:
    """POST /predict: relations of given entity pairs, or (an extraction model) the entities
    and relations of raw sentences."""
    from fastapi import Query, Request

    limits = Limits(options.max_items, options.max_text_chars, options.max_request_chars)
    parse = parse_texts if extracting else parse_items
    schema = text_schema(limits) if extracting else request_schema(limits)

    @app.post("/predict", responses=_answers(400, 408, 413, 422, 503), openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}})
    async def predict(request: Request, top_k: int | None = Query(None, ge=1)):
        """Relations for one example or a list; a sentence with entities gives every pair; an
        extraction model takes sentences alone (``{"text"}``)."""
        k = options.top_k if top_k is None else top_k
        if extracting and top_k is not None:
            return _error(422, "top_k does not apply to an extraction model: it answers every "
                               "relation above its threshold", "top_k")
        if not extracting and not 1 <= k <= len(state["predictor"].labels):
            return _error(422, f"top_k must be between 1 and {len(state['predictor'].labels)}",
                          "top_k")
        try:
            body = await _read_body(request, options.max_body_bytes, options.body_timeout_s)
            # A body of more than a few examples is parsed off the event loop.
            parsed = (parse(body, limits) if len(body) < _INLINE_BODY
                      else await asyncio.to_thread(parse, body, limits))
            if extracting:
                results = await state["batcher"].predict(parsed.items, k)
            else:
                # numpy, torch, tqdm only when used
                from reltrain.inference.predictor import expand, group_results

                groups = expand(parsed.items)
                records = [record for _, records in groups for record in records]
                results = await state["batcher"].predict(
                    records, k, lambda answers: group_results(groups, answers))
        except BadRequest as exc:
            return _error(exc.status, exc.message, exc.field)
        except Busy as exc:
            return _error(503, f"the server is busy ({exc}); retry later", None,
                          {"Retry-After": "1"})
        except ItemFailed as exc:
            return _error(422, str(exc), "body")
        except Unavailable as exc:
            return _error(503, f"the server cannot predict ({exc}); it is stopping", None)
        return results if parsed.many else results[0]


_DEMO_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                "connect-src 'self'; img-src data:")
_INLINE_BODY = 2048  # bytes, about 20 examples: too little work to matter to the event loop


async def _read_body(request, limit: int, timeout: float) -> bytes:
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"a body of {declared} bytes; at most {limit}", "body")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"a body of more than {limit} bytes", "body")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise BadRequest(408, f"the body did not arrive within {timeout:g} s", "body") from None
    except ClientDisconnect:
        raise BadRequest(400, "the client closed the connection before its body was sent",
                         "body") from None


def _exit_if_failed(task: asyncio.Task) -> None:
    """The model loop ended by an error of its own (``Batcher.run`` has answered every waiting
    request): stop the process as SIGTERM would, so that a supervisor starts a new one."""
    if not task.cancelled() and task.exception() is not None:
        os.kill(os.getpid(), signal.SIGTERM)


def model_info(predictor, options: ServeOptions) -> dict:
    """What GET /model answers: the model, its labels and the metrics of its card (as checked
    when it loaded: nothing of the folder is shown unread)."""
    metrics = predictor.card if any(predictor.card.values()) else None
    config = predictor.config
    return {"model": str(options.model), "task": config.task, "encoder": config.model.name,
            "language": config.data.language, "labels": predictor.labels,
            "entity_types": getattr(predictor, "entity_types", None),
            "runtime": options.runtime, "device": str(predictor.device),
            "precision": predictor.precision.name, "metrics": metrics,
            "max_batch": options.max_batch, "max_wait_ms": options.max_wait_ms}


def app_from_env():
    """The application of a uvicorn worker process (``--workers N``); options come by environment."""
    return create_app(ServeOptions(**json.loads(os.environ[OPTIONS_ENV])))


def _drain_on_stop(state: dict) -> None:
    """Once uvicorn has set its handlers: the first SIGINT/SIGTERM also sets the app's
    ``draining`` (/ready false), the same signal again stops at once (a ``--workers N`` Ctrl-C
    brings SIGINT and SIGTERM: one drain)."""
    received: set[int] = set()
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(sig)
        if not callable(previous):
            continue

        def on_stop(signum, frame, previous=previous):
            state["draining"] = True
            again = signum in received
            received.add(signum)
            previous(signal.SIGINT if again else signum, frame)

        signal.signal(sig, on_stop)


class _OneLine(logging.Filter):
    """asyncio logs each failed accept() with a traceback: out of file descriptors, that is one
    traceback per retry. One line instead, at most every 10 s."""

    def __init__(self):
        super().__init__()
        self.last = 0.0

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, OSError) and exc.errno in (24, 23):  # EMFILE, ENFILE
            now = time.monotonic()
            if now - self.last < 10:
                return False
            self.last = now
            record.msg, record.args, record.exc_info = (
                "out of file descriptors (%s): new connections wait; raise 'ulimit -n' or lower "
                "--max-connections", (exc.strerror,), None)
        return True


def _quiet_fd_exhaustion() -> None:
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _OneLine) for f in asyncio_log.filters):
        asyncio_log.addFilter(_OneLine())
