"""What ``reltrain serve`` records of each request: its id, the Prometheus series, the access
log, and the 503 a request gets when the drain timeout cuts it."""

# No "from __future__ import annotations", as in server.py.
import asyncio
import json
import logging
import re
import time
import uuid

access = logging.getLogger("reltrain.serve.access")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_PATHS = ("/", "/predict", "/health", "/ready", "/model", "/metrics", "/docs", "/openapi.json")


class Metrics:
    """The Prometheus series of one server process (each of ``--workers N`` has its own)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("reltrain_requests", "HTTP requests answered, by path and status",
                                ["path", "status"], registry=self.registry)
        self.latency = Histogram("reltrain_request_seconds", "time to answer POST /predict",
                                 registry=self.registry)
        self.batch_examples = Histogram("reltrain_batch_examples", "examples per model batch",
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
                                        registry=self.registry)
        self.queued = Gauge("reltrain_queued_examples", "examples waiting for the model",
                            registry=self.registry)
        self.failed_batches = Counter("reltrain_failed_batches", "model batches that failed",
                                      registry=self.registry)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class Observed:
    """ASGI middleware for the request id, the Prometheus counts and the access log: a plain
    wrapper, without the task and streams that Starlette's http middleware adds to every request."""

    def __init__(self, app, metrics: Metrics, access_log: bool, in_flight: set, state: dict):
        self.app, self.metrics, self.access_log = app, metrics, access_log
        self.in_flight = in_flight  # the tasks answering requests now
        self.state = state  # the app's: whether it is draining

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        start, status, started = time.perf_counter(), [500], [False]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0], started[0] = message["status"], True
                message = {**message, "headers": [*message.get("headers", ()),
                                                  (b"x-request-id", rid.encode())]}
            await send(message)

        task = asyncio.current_task()
        self.in_flight.add(task)
        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            # The drain timed out and uvicorn cancels what is left: it would answer 500. The
            # client gets the API's 503 instead, which says to retry (another server, or later).
            if not self.state["draining"] or started[0]:
                raise
            body = json.dumps({"error": "the server stopped before this request was answered "
                                        "(--drain-timeout-s passed); retry it",
                               "field": None}).encode()
            await sending({"type": "http.response.start", "status": 503,
                           "headers": [(b"content-type", b"application/json"),
                                       (b"content-length", str(len(body)).encode()),
                                       (b"retry-after", b"1"), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.in_flight.discard(task)
            seconds = time.perf_counter() - start
            path = scope["path"] if scope["path"] in _PATHS else "other"
            self.metrics.requests.labels(path, str(status[0])).inc()
            if path == "/predict":
                self.metrics.latency.observe(seconds)
            if self.access_log:
                client = scope.get("client")
                access.info(json.dumps({"time": round(time.time(), 3), "request_id": rid,
                                        "method": scope["method"], "path": scope["path"],
                                        "status": status[0], "ms": round(seconds * 1e3, 2),
                                        "client": client[0] if client else None}))


def access_log_to_stderr(enabled: bool) -> None:
    if enabled and not access.handlers:
        handler = logging.StreamHandler()  # stderr, beside uvicorn's own lines
        handler.setFormatter(logging.Formatter("%(message)s"))
        access.addHandler(handler)
        access.setLevel(logging.INFO)
        access.propagate = False
