"""reltrain serve under abuse: hostile bodies are 4xx, one bad request fails alone, slow clients
time out, a full queue is a 503, stops drain, and the server says what it is doing."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from reltrain.inference.batcher import Batcher, Busy, ItemFailed

from conftest import run_cli, user_error
from test_serve import Server

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.slow

OK = {"text": "Alice Moreau was born in Dunmore .", "head": "Alice Moreau", "tail": "Dunmore"}


@pytest.fixture(scope="module")
def server(model):  # noqa: F811
    srv = Server(model, "--max-items", "100", "--max-text-chars", "500", "--access-log")
    yield srv
    srv.stop()


def raw(port: int, method: str, path: str, body: bytes | None = None,
        headers: dict | None = None) -> tuple[int, object, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    return resp.status, resp.headers, resp.read()  # headers: case-insensitive


def test_hostile_bodies_are_4xx_naming_what_is_wrong(server):
    sentence = {"text": " ".join(f"w{i}" for i in range(40)),
                "entities": [{"pos": [3 * i, 3 * i + 2]} for i in range(4000)]}
    cases = [
        (b"[" * 100_000 + b"]" * 100_000, 400, "body"),  # deeper than the recursion limit
        (b'{"text": "\\ud800 born", "head": "\\ud800", "tail": "born"}', 400, "body"),
        (b'{"text": "a b", "head": "a", "tail": "b", "tail_ofset": 2}', 422, "tail_ofset"),
        (b'{"text": "a b", "h": {"pos": [0, 1], "nmae": "a"}, "t": {"pos": [2, 3]}}', 422, "h.nmae"),
        (json.dumps({"token": ["x" * 300, "y" * 300], "h": {"pos": [0, 1]},
                     "t": {"pos": [1, 2]}}).encode(), 422, "token"),
        (json.dumps(sentence).encode(), 413, "body"),  # 16 million pairs, refused before any
        (b"\xff\xfe not utf-8", 400, "body"),
        (b'{"text": "a b", "head": "a", "tail": "b", "head_offset": ' + b"9" * 5000 + b"}", 400,
         "body"),  # past int()'s 4,300-digit limit
    ]
    for body, status, field in cases:
        got, _, answer = raw(server.port, "POST", "/predict", body)
        answer = json.loads(answer)
        assert (got, answer.get("field")) == (status, field), (body[:60], answer)
    assert "unknown key 'tail_ofset'" in json.loads(raw(server.port, "POST", "/predict",
                                                        cases[2][0])[2])["error"]
    assert server.post(OK)[0] == 200
    assert "Traceback" not in server.output() and " 500 " not in server.output()


def test_request_ids_metrics_and_the_access_log(server):
    status, headers, _ = raw(server.port, "POST", "/predict", json.dumps(OK).encode(),
                             {"X-Request-ID": "job-42.a"})
    assert status == 200 and headers["X-Request-ID"] == "job-42.a"
    _, headers, _ = raw(server.port, "POST", "/predict", json.dumps(OK).encode(),
                        {"X-Request-ID": "bad id\x7f"})
    assert len(headers["X-Request-ID"]) == 32  # a fresh one instead of the unusable one
    raw(server.port, "POST", "/predict", b"{")
    status, headers, text = raw(server.port, "GET", "/metrics")
    text = text.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for series in ('reltrain_requests_total{path="/predict",status="200"}',
                   'reltrain_requests_total{path="/predict",status="400"}',
                   "reltrain_request_seconds_bucket", "reltrain_batch_examples_count",
                   "reltrain_queued_examples", "reltrain_failed_batches_total"):
        assert series in text, series
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    mine = [line for line in lines if line["request_id"] == "job-42.a"]
    assert mine and mine[0]["status"] == 200 and mine[0]["path"] == "/predict"
    assert raw(server.port, "GET", "/ready")[0] == 200


def test_docs_work_offline_and_describe_the_request(server):
    status, _, page = raw(server.port, "GET", "/docs")
    page = page.decode()
    assert status == 200 and "cdn" not in page.lower()
    script = page.split('src="')[1].split('"')[0]
    assert raw(server.port, "GET", script)[0] == 200
    schema = json.loads(raw(server.port, "GET", "/openapi.json")[2])
    body = schema["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]
    titles = {shape.get("title") for shape in body["schema"]["oneOf"]}
    assert {"pair", "row", "sentence"} <= titles


def test_a_stalled_body_times_out_and_a_vanished_client_is_no_traceback(model):  # noqa: F811
    srv = Server(model, "--body-timeout-s", "1")
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"text\":")
            answer = s.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 408"), answer
        for _ in range(3):  # a client that leaves half-way through its body
            with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
                s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert srv.post(OK)[0] == 200
    finally:
        srv.stop()
    assert "Traceback" not in srv.output()


def test_a_second_sigterm_stops_a_server_that_waits_for_a_stalled_client(model):  # noqa: F811
    srv = Server(model, "--body-timeout-s", "300", "--drain-timeout-s", "300")
    stalled = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    stalled.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(1.5)  # its headers read: a request in flight, which the drain waits for
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert srv.proc.poll() is None  # draining: the stalled request is still in flight
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout=60)
    stalled.close()
    assert "Traceback" not in srv.output()


def test_a_request_cut_by_the_drain_timeout_gets_503_not_500(model):  # noqa: F811
    srv = Server(model, "--body-timeout-s", "300", "--drain-timeout-s", "1")
    stalled = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    stalled.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(1.5)  # its headers read: in flight
    srv.proc.send_signal(signal.SIGTERM)
    answer = b""
    while chunk := stalled.recv(65536):
        answer += chunk
    stalled.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower(), answer
    assert "drain-timeout-s" in json.loads(body)["error"]
    assert srv.proc.wait(timeout=60) in (143, -signal.SIGTERM)  # uvicorn ends by the signal
    assert "Traceback" not in srv.output()


def test_over_max_connections_is_uvicorns_own_503_as_documented(model):  # noqa: F811
    srv = Server(model, "--max-connections", "2", "--body-timeout-s", "60")
    try:
        held = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        held.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(1.0)  # in flight, its body not yet sent: with the next one, two connections
        status, headers, body = raw(srv.port, "GET", "/health")
        assert (status, body) == (503, b"Service Unavailable"), (status, body)
        assert headers["connection"] == "close" and "retry-after" not in headers
        held.close()
        time.sleep(0.5)
        assert srv.get("/health")[0] == 200
    finally:
        srv.stop()


def descendants(pid: int) -> list[int]:
    out = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        out += [int(child), *descendants(int(child))]
    return out


@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C"])
def test_requests_in_flight_finish_when_two_workers_stop(model, stop):  # noqa: F811
    srv = Server(model, "--workers", "2", "--max-items", "2000", "--max-queue", "10000")
    body = json.dumps([OK] * 1500).encode()
    conns = [http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120) for _ in range(6)]
    for conn in conns:
        conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
    time.sleep(1.0)  # read and being predicted
    if stop == "SIGTERM":
        srv.proc.send_signal(signal.SIGTERM)
    else:  # a terminal's Ctrl-C reaches every process of the group
        for pid in [srv.proc.pid, *descendants(srv.proc.pid)]:
            os.kill(pid, signal.SIGINT)
    statuses = []
    for conn in conns:
        resp = conn.getresponse()
        statuses.append(resp.status)
        assert len(json.loads(resp.read())) == 1500
    assert statuses == [200] * 6
    assert srv.proc.wait(timeout=60) == 0
    assert "Traceback" not in srv.output()


def test_a_port_in_use_is_one_line(model):  # noqa: F811
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        line = user_error(run_cli("serve", str(model), "--port", str(taken.getsockname()[1])))
    assert "cannot listen on 127.0.0.1:" in line


class _Stub:
    """A predictor that fails on any batch holding the text 'bad', and can be held."""

    def __init__(self):
        self.release = threading.Event()
        self.release.set()
        self.calls = []

    def answer(self, items, top_k):
        self.release.wait(30)
        self.calls.append(list(items))
        if "bad" in items:
            raise ValueError("cannot predict 'bad'")
        return [{"top_k": [item] * 3} for item in items]


def test_one_bad_request_in_a_batch_fails_alone():
    stub = _Stub()

    async def scenario():
        batcher = Batcher(stub, max_batch=64, max_wait=0.05, max_queue=100)
        runner = asyncio.create_task(batcher.run())
        answers = await asyncio.gather(batcher.predict(["a"], 1), batcher.predict(["bad"], 1),
                                       batcher.predict(["c", "d"], 1), return_exceptions=True)
        runner.cancel()
        return answers, batcher.counts

    answers, counts = asyncio.run(scenario())
    assert answers[0] == [{"top_k": ["a"]}] and answers[2] == [{"top_k": ["c"]}, {"top_k": ["d"]}]
    assert isinstance(answers[1], ItemFailed) and "cannot predict 'bad'" in str(answers[1])
    assert stub.calls[0] == ["a", "bad", "c", "d"]  # one shared batch first
    assert counts["failed_batches"] == 2 and counts["requests"] == 2


def test_a_full_queue_refuses_instead_of_growing():
    stub = _Stub()
    stub.release.clear()  # the model is busy

    async def scenario():
        batcher = Batcher(stub, max_batch=2, max_wait=0, max_queue=4)
        runner = asyncio.create_task(batcher.run())
        first = asyncio.create_task(batcher.predict(["a", "b"], 1))
        await asyncio.sleep(0.1)  # taken by the model thread, which waits
        waiting = [asyncio.create_task(batcher.predict([x, x], 1)) for x in "cd"]
        await asyncio.sleep(0.1)
        with pytest.raises(Busy):
            await batcher.predict(["e"], 1)
        assert batcher.queued == 4
        stub.release.set()
        done = await asyncio.gather(first, *waiting)
        runner.cancel()
        return done, batcher.queued

    done, queued = asyncio.run(scenario())
    assert [len(d) for d in done] == [2, 2, 2] and queued == 0


def test_the_first_stop_signal_drains_and_the_same_one_again_forces():
    from reltrain.inference import server

    seen: list[int] = []
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    state = {"draining": False}
    try:
        for sig in saved:  # what uvicorn installs while it serves
            signal.signal(sig, lambda signum, frame: seen.append(signum))
        server._drain_on_stop(state)
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert state["draining"] and seen == [signal.SIGTERM]
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # Ctrl-C beside the parent's SIGTERM
        assert seen == [signal.SIGTERM, signal.SIGINT]
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # the same again: at once
        assert seen[-1] == signal.SIGINT and len(seen) == 3
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_running_out_of_descriptors_is_one_line_not_a_traceback_per_accept():
    import errno
    import logging

    from reltrain.inference.server import _OneLine

    one = _OneLine()
    exc = OSError(errno.EMFILE, "Too many open files")

    def record():
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "socket.accept() out of "
                                 "system resource", None, (OSError, exc, None))

    first, again = record(), record()
    assert one.filter(first) and first.exc_info is None
    assert "out of file descriptors (Too many open files)" in first.getMessage()
    assert not one.filter(again)  # within 10 s: dropped
    other = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "other", None, None)
    assert one.filter(other) and other.getMessage() == "other"


def test_serve_limits_out_of_range_are_one_line(model, capsys):  # noqa: F811
    from conftest import cli_error

    for flags, words in ((["--max-queue", "0"], "must be at least 1"),
                         (["--max-items", "100", "--max-queue", "50"], "must hold at least one request"),
                         (["--body-timeout-s", "0"], "--body-timeout-s must be positive"),
                         (["--max-wait-ms", "-1"], "--max-wait-ms must be >= 0"),
                         (["--workers", "0"], "--workers must be at least 1"),
                         (["--max-connections", "0"], "--max-connections must be at least 1"),
                         (["--drain-timeout-s", "-1"], "--drain-timeout-s must be positive"),
                         (["--port", "70000"], "--port must be from 0 to 65535")):
        assert words in cli_error(capsys, "serve", str(model), *flags), flags


class _Panic(BaseException):
    """What pyo3 raises for a panic in a Rust tokenizer: not an Exception."""


def test_a_base_exception_fails_its_request_and_the_loop_goes_on():
    stub = _Stub()
    real = stub.answer

    def answer(items, top_k):
        if "panic" in items:
            raise _Panic("tokenizer panicked")
        return real(items, top_k)

    stub.answer = answer

    async def scenario():
        batcher = Batcher(stub, max_batch=64, max_wait=0, max_queue=100)
        runner = asyncio.create_task(batcher.run())
        first = await asyncio.gather(batcher.predict(["panic"], 1), return_exceptions=True)
        later = await asyncio.wait_for(batcher.predict(["after"], 1), 10)
        runner.cancel()
        return first[0], later

    failed, later = asyncio.run(scenario())
    assert isinstance(failed, ItemFailed) and "_Panic" in str(failed)
    assert later == [{"top_k": ["after"]}]


def test_a_dead_model_loop_answers_everyone_instead_of_hanging(monkeypatch):
    from reltrain.inference.batcher import Unavailable

    stub = _Stub()
    stub.release.clear()

    async def scenario():
        batcher = Batcher(stub, max_batch=1, max_wait=0, max_queue=100)
        runner = asyncio.create_task(batcher.run())
        first = asyncio.create_task(batcher.predict(["a"], 1))
        await asyncio.sleep(0.1)  # in the model thread
        waiting = asyncio.create_task(batcher.predict(["b"], 1))
        await asyncio.sleep(0.1)
        monkeypatch.setattr(batcher, "_fill", lambda *a: 1 / 0)  # a bug in the loop itself
        stub.release.set()
        got = await asyncio.wait_for(asyncio.gather(first, waiting, return_exceptions=True), 10)
        with pytest.raises(Unavailable):
            await batcher.predict(["c"], 1)
        assert runner.done() and batcher.stopped and batcher.queued == 0
        return got

    first, waiting = asyncio.run(scenario())
    assert first == [{"top_k": ["a"]}] and isinstance(waiting, Unavailable)


def test_a_large_request_takes_turns_with_the_others():
    stub = _Stub()

    async def scenario():
        batcher = Batcher(stub, max_batch=4, max_wait=0, max_queue=100)
        runner = asyncio.create_task(batcher.run())
        stub.release.clear()
        big = asyncio.create_task(batcher.predict([f"b{i}" for i in range(10)], 1))
        await asyncio.sleep(0.1)  # its first slice is in the model thread
        small = asyncio.create_task(batcher.predict(["s1", "s2"], 1))
        await asyncio.sleep(0.1)
        stub.release.set()
        answers = await asyncio.wait_for(asyncio.gather(big, small), 10)
        runner.cancel()
        return answers

    big, small = asyncio.run(scenario())
    assert [r["top_k"][0] for r in big] == [f"b{i}" for i in range(10)]  # in order
    assert small == [{"top_k": ["s1"]}, {"top_k": ["s2"]}]
    # Slices of max_batch, the small request right after the big one's first slice.
    assert stub.calls == [["b0", "b1", "b2", "b3"], ["s1", "s2"], ["b4", "b5", "b6", "b7"],
                          ["b8", "b9"]]


def test_one_request_cannot_hold_the_model(model):  # noqa: F811
    srv = Server(model, "--max-batch", "8")
    try:
        words = [f"w{i:04d}" for i in range(1600)]  # 9,599 characters
        text = " ".join(words)
        nested = [{"pos": [6 * i, len(text) - 6 * i]} for i in range(32)]  # each covers the text
        status, answer = srv.post({"text": text, "entities": nested})
        assert (status, answer["field"]) == (413, "body") and "characters" in answer["error"]
        far = {"text": text, "h": {"pos": [0, 5]}, "t": {"pos": [len(text) - 5, len(text)]}}
        status, answer = srv.post(far)  # 1,600 tokens from head to tail; the model reads 200
        assert status == 422 and "spans 1600 tokens" in answer["error"], answer
        # Within every limit and still 992 pairs: taken in slices between other requests.
        short = " ".join(words[:150])
        spread = [{"pos": [24 * i, 24 * i + 5]} for i in range(32)]
        done: list[str] = []

        def big():
            assert srv.post({"text": short, "entities": spread})[0] == 200
            done.append("big")

        thread = threading.Thread(target=big)
        thread.start()
        deadline = time.monotonic() + 60
        while srv.get("/health")[1]["batches"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        assert srv.post(OK)[0] == 200
        done.append("small")
        waited = time.monotonic() - start
        thread.join(120)
        assert done == ["small", "big"], (done, waited)
    finally:
        srv.stop()
    assert "Traceback" not in srv.output()
