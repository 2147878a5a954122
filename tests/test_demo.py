"""The demo page of reltrain serve, opened in headless Chromium: a sentence typed in it with its
head and tail selected, and a deep link, both show the answer reltrain predict gives, marked for
tools; a sentence holding markup shows as text; --no-demo leaves the JSON API alone."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from conftest import run_cli
from test_report import browser
from test_serve import Server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.slow

TEXT, HEAD, TAIL = "Alice Moreau was born in Dunmore .", "Alice Moreau", "Dunmore"


def page(srv: Server, **query) -> str:
    url = f"http://127.0.0.1:{srv.port}/?{urllib.parse.urlencode(query)}"
    return browser("--virtual-time-budget=15000", "--dump-dom", url).stdout


def test_a_deep_link_shows_what_predict_answers(model, tmp_path):  # noqa: F811
    srv = Server(model)
    try:
        dom = page(srv, text=TEXT, head=HEAD, tail=TAIL)
        expected = json.loads(run_cli("predict", str(model), "--text", TEXT, "--head", HEAD,
                                      "--tail", TAIL).stdout)["relation"]
        assert 'data-ready="true"' in dom, dom[-2000:]
        assert f'data-top-relation="{expected}"' in dom
        hostile = "<script>document.title='owned'</script> Alice Moreau was born in Dunmore ."
        dom = page(srv, text=hostile, head=HEAD, tail=TAIL)
        assert "&lt;script&gt;document.title='owned'&lt;/script&gt;" in dom
        assert "<title>reltrain demo</title>" in dom and "data-top-relation=" in dom
        dom = page(srv, text=TEXT, head="Nobody", tail=TAIL)  # the API's 422, shown as text
        assert 'class="error"' in dom and "does not occur in the text" in dom
        shot = tmp_path / "demo.png"
        url = f"http://127.0.0.1:{srv.port}/?" + urllib.parse.urlencode(
            {"text": TEXT, "head": HEAD, "tail": TAIL})
        browser("--virtual-time-budget=15000", "--window-size=1000,800", f"--screenshot={shot}", url)
        import numpy as np
        from PIL import Image

        assert (np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64) / 255).std() > 0.05
    finally:
        srv.stop()
    assert "Traceback" not in srv.output()


def test_no_demo_leaves_the_json_api_only(model):  # noqa: F811
    srv = Server(model, "--no-demo")
    try:
        status, answer = srv.get("/")
        assert status == 404 and "error" in answer
        assert srv.post({"text": TEXT, "head": HEAD, "tail": TAIL})[0] == 200
    finally:
        srv.stop()


class DevTools:
    """Chromium driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
    messages ending in NUL on file descriptors 3 and 4), with no client library."""

    def __init__(self):
        import os
        import subprocess

        from test_report import CHROMIUM

        if CHROMIUM is None:
            pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
        import fcntl

        to_browser, self._write = os.pipe()
        self._read, from_browser = os.pipe()
        # Above 9, so that placing them at 3 and 4 in the child cannot overwrite one another; bash
        # places them (a preexec_fn would make subprocess fork this torch-holding process).
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&-',
             CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=ends, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (to_browser, from_browser, *ends):
            os.close(fd)
        self._buffer, self._next = b"", 0
        target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=target["targetId"],
                                 flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params) -> dict:
        import os
        import select
        import time

        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._next:
                    assert "error" not in answer, answer
                    return answer.get("result", {})
            assert time.monotonic() < deadline, f"no answer to {method}"
            if select.select([self._read], [], [], 1)[0]:
                self._buffer += os.read(self._read, 1 << 20)

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=self.session, **params)

    def js(self, expression: str):
        result = self.page("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_typing_a_sentence_and_selecting_head_and_tail_answers_as_predict(model):  # noqa: F811
    import time

    srv = Server(model)
    chrome = DevTools()
    try:
        chrome.page("Page.navigate", url=f"http://127.0.0.1:{srv.port}/")
        for _ in range(150):
            if chrome.js("document.body && document.body.dataset.ready") == "true":
                break
            time.sleep(0.1)
        chrome.js("document.getElementById('text').focus()")
        chrome.page("Input.insertText", text=TEXT)  # typed, as a keyboard would
        for role, name in (("head", HEAD), ("tail", TAIL)):
            start = TEXT.index(name)
            chrome.js(f"document.getElementById('text').setSelectionRange({start}, "
                      f"{start + len(name)})")
            chrome.js(f"document.getElementById('pick-{role}').click()")
        chrome.js("document.getElementById('submit').click()")
        top = None
        for _ in range(150):
            top = chrome.js("(document.querySelector('[data-top-relation]') || {}).dataset"
                            "?.topRelation")
            if top:
                break
            time.sleep(0.1)
        expected = json.loads(run_cli("predict", str(model), "--text", TEXT, "--head", HEAD,
                                      "--tail", TAIL).stdout)["relation"]
        assert top == expected
        assert chrome.js("document.getElementById('head_offset').value") == "0"
        assert chrome.js("document.getElementById('tail_offset').value") == str(TEXT.index(TAIL))
        # Every pair of three entities, each added from a selection.
        chrome.js("document.querySelector('input[name=mode][value=all]').click()")
        for name in (HEAD, "born", TAIL):
            start = TEXT.index(name)
            chrome.js(f"document.getElementById('text').setSelectionRange({start}, "
                      f"{start + len(name)})")
            chrome.js("document.getElementById('add-entity').click()")
        chrome.js("document.getElementById('submit').click()")
        rows = 0
        for _ in range(150):
            rows = chrome.js("document.querySelectorAll('#answer table tr').length")
            if rows:
                break
            time.sleep(0.1)
        assert rows == 1 + 6  # a header and the 3 x 2 ordered pairs
    finally:
        chrome.close()
        srv.stop()
