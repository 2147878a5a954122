"""The demo page of reltrain serve, opened in headless Chromium: a deep link shows the answer
reltrain predict gives, marked for tools; a sentence holding markup shows as text; --no-demo."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from conftest import run_cli
from test_report import browser
from test_serve import Server, model  # noqa: F401  (model: the fixture)

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
        import matplotlib.image

        assert matplotlib.image.imread(str(shot)).std() > 0.05
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
