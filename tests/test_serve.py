"""reltrain serve: a real server on a free port, real HTTP requests."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest


from conftest import SCRATCH, WORKER_ENV, read_jsonl, run_cli, user_error

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model: Path, *args: str):
        self.port = free_port()
        self.log = SCRATCH / f"serve-{self.port}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reltrain", "serve", str(model), "--port", str(self.port), *args],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, cwd=SCRATCH,
            env={**os.environ, **WORKER_ENV})
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the server did not start:\n{self.output()}")
            time.sleep(0.2)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, object]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body,
                                     method=method, headers={"Content-Type": "application/json",
                                                             **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def get(self, path: str):
        return self.request("GET", path)

    def declare_body(self, size: int) -> tuple[int, object]:
        """POST headers that declare SIZE bytes and wait for the answer before sending any, as a
        client that sends `Expect: 100-continue` does. (Sending the body at once races the
        server's 413 and close: the client may see a broken pipe instead of the answer.)"""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.putrequest("POST", "/predict")
            for name, value in (("Content-Type", "application/json"),
                                ("Content-Length", str(size)), ("Expect", "100-continue")):
                conn.putheader(name, value)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def post(self, obj, path: str = "/predict"):
        return self.request("POST", path, json.dumps(obj, ensure_ascii=False).encode())

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def server(model):
    srv = Server(model, "--max-wait-ms", "100", "--max-items", "100", "--max-text-chars", "500")
    yield srv
    srv.stop()


def same_prediction(got: dict, want: dict) -> None:
    assert {k: v for k, v in got.items() if k not in ("score", "top_k")} == \
        {k: v for k, v in want.items() if k not in ("score", "top_k")}
    assert got["score"] == pytest.approx(want["score"], abs=1e-5)
    assert [t["relation"] for t in got["top_k"]] == [t["relation"] for t in want["top_k"]]


def test_answers_equal_reltrain_predict(server, model, small_en, tmp_path):
    out = tmp_path / "predicted.jsonl"
    assert run_cli("predict", str(model), small_en["test"], "--output", str(out)).returncode == 0
    expected = read_jsonl(out)
    status, answers = server.post(read_jsonl(small_en["test"]))
    assert status == 200 and len(answers) == len(expected)
    for got, want in zip(answers, expected):
        same_prediction(got, want)
    first = expected[0]
    status, one = server.post({"text": first["text"], "head": first["head"]["name"],
                               "tail": first["tail"]["name"], "head_offset": first["head"]["pos"][0],
                               "tail_offset": first["tail"]["pos"][0]})
    assert status == 200
    same_prediction(one, {k: v for k, v in first.items() if k != "gold"})
    status, info = server.get("/model")
    assert status == 200 and info["encoder"] == "cnn" and info["labels"][0] == "born_in"
    assert info["precision"] == "fp32"  # a CNN: fp32 on any CPU (reltrain/precision.py)
    assert info["metrics"]["test"]["macro_f1"] >= 0


def test_fifty_concurrent_clients_get_their_own_answers_in_shared_batches(server, small_en):
    rows = read_jsonl(small_en["test"])[:50]
    status, expected = server.post(rows)
    assert status == 200
    before = server.get("/health")[1]
    start, answers = threading.Barrier(50), [None] * 50

    def client(i: int) -> None:
        start.wait()
        answers[i] = server.post(rows[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (status, got), want in zip(answers, expected):
        assert status == 200
        same_prediction(got, want)
    after = server.get("/health")[1]
    assert after["requests"] - before["requests"] == 50
    assert after["batches"] - before["batches"] < 50  # requests were grouped


def test_every_bad_request_is_a_4xx_naming_the_field_and_the_server_goes_on(server):
    ok = {"text": "Alice Moreau was born in Dunmore .", "head": "Alice Moreau", "tail": "Dunmore"}
    cases = [
        (b"{not json", 400, "body"),
        (json.dumps([]).encode(), 422, "body"),
        (json.dumps("a string").encode(), 422, "body"),
        (json.dumps([ok, 7]).encode(), 422, "[1]"),
        (json.dumps({**ok, "head": "Bob"}).encode(), 422, "head"),
        (json.dumps({**ok, "head": 3}).encode(), 422, "head"),
        (json.dumps({**ok, "head_offset": 2}).encode(), 422, "head_offset"),
        (json.dumps({**ok, "tail_offset": -1}).encode(), 422, "tail_offset"),
        (json.dumps({**ok, "tail_offset": "x"}).encode(), 422, "tail_offset"),
        (json.dumps({**ok, "text": ""}).encode(), 422, "text"),
        (json.dumps({**ok, "text": None}).encode(), 422, "text"),
        (json.dumps({**ok, "text": "x" * 501}).encode(), 422, "text"),
        (json.dumps({**ok, "tail": "Alice Moreau"}).encode(), 422, "tail_offset"),
        (json.dumps({"text": "A B", "h": {"pos": [0, 1]}, "t": {"pos": [2, 9]}}).encode(), 422, "t.pos"),
        (json.dumps({"text": "A B", "entities": [{"pos": [0, 1]}]}).encode(), 422, "entities"),
        (json.dumps({"text": "A B", "entities": "AB"}).encode(), 422, "entities"),
        (json.dumps([ok] * 101).encode(), 413, "body"),
        (json.dumps({"text": " ".join(f"w{i}" for i in range(12)),
                     "entities": [{"pos": [3 * i, 3 * i + 2]} for i in range(11)]}).encode(), 413, "body"),
    ]
    for body, status, field in cases:
        got, answer = server.request("POST", "/predict", body)
        assert (got, answer.get("field")) == (status, field), (body[:80], answer)
        assert answer["error"]
    got, answer = server.declare_body(1_000_001)
    assert (got, answer.get("field")) == (413, "body") and "1000001" in answer["error"]
    assert server.request("POST", "/predict?top_k=0", json.dumps(ok).encode())[0] == 422
    assert server.request("POST", "/predict?top_k=x", json.dumps(ok).encode())[0] == 422
    assert server.get("/nowhere")[0] == 404 and server.get("/predict")[0] == 405
    status, answer = server.post(ok)
    assert status == 200 and answer["relation"]
    assert "Traceback" not in server.output() and " 500 " not in server.output()


def test_the_openapi_schema_says_what_the_server_does(server):
    """schemathesis, every check, a bounded run: each request the schema admits is answered as
    documented (status, body, content type; 405 with Allow), each it refuses is refused. What
    JSON Schema cannot state is named in tests/assets/schemathesis.toml."""
    import shutil

    st = shutil.which("schemathesis") or pytest.skip("schemathesis is not installed")
    config = Path(__file__).parent / "assets" / "schemathesis.toml"
    result = subprocess.run(
        [st, "--config-file", str(config), "--no-color", "run",
         f"http://127.0.0.1:{server.port}/openapi.json", "--checks", "all", "-n", "40",
         "--seed", "44", "--continue-on-failure", "--request-timeout", "30"],
        capture_output=True, text=True, timeout=600, cwd=SCRATCH)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_sigterm_stops_it_cleanly_with_two_worker_processes(model):
    srv = Server(model, "--workers", "2")
    assert srv.post({"text": "Alice Moreau was born in Dunmore .", "head": "Alice Moreau",
                     "tail": "Dunmore"})[0] == 200
    assert srv.stop(signal.SIGTERM) == 0
    assert "Traceback" not in srv.output() and "Finished server process" in srv.output()


def test_serve_refuses_a_missing_model_before_listening(tmp_path):
    result = run_cli("serve", str(tmp_path / "nothing"), "--port", str(free_port()))
    assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize("device, words", [("gpu", "device must be auto, cpu, cuda or cuda:N"),
                                           ("cuda:99", "device=cuda:99 but")])
def test_serve_refuses_a_device_it_cannot_use_before_listening(model, device, words):
    result = run_cli("serve", str(model), "--device", device, "--port", str(free_port()))
    assert words in user_error(result)
