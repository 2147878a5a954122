"""reltrain report: one page that opens from disk in a real browser (headless Chromium), shows
every relation, the curves and the heat map, loads nothing from the network and shows what the
data holds as text."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from reltrain.cli import main

from conftest import cli_error, data_overrides

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the page is "
                    "not opened in a browser")
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-extensions", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(small_en, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    out = []
    for name, filters in (("small", 4), ("wide", 16)):
        assert main(["train", *data_overrides(small_en), "train.epochs=2", f"model.cnn.num_filters={filters}", "train.lr=3e-4",
                     f"output_dir={root / name}"]) == 0
        out.append(root / name)
    # A test sentence that holds markup: the page must show it as text.
    answers = root / "small" / "test_predictions.jsonl"
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    text = "<script>document.title='owned'</script><img src=x onerror=alert(1)> "
    rows[0].update(text=text + rows[0]["text"], relation="works_for" if rows[0]["gold"] != "works_for"
                   else "born_in")
    for role in ("head", "tail"):
        rows[0][role]["pos"] = [p + len(text) for p in rows[0][role]["pos"]]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_the_report_opens_offline_with_every_relation_curves_and_heat_map(runs, tmp_path, capsys):
    page = tmp_path / "report.html"
    assert main(["report", *map(str, runs), "--output", str(page)]) == 0
    html = page.read_text()
    assert "default-src 'none'" in html  # the browser itself refuses any fetch
    assert "<script src" not in html and "<link" not in html and "url(" not in html
    dom = browser("--dump-dom", page.as_uri()).stdout
    assert 'data-rendered="true"' in dom, dom[-2000:]
    labels = list(json.loads((runs[0] / "summary.json").read_text())["test"]["per_class"])
    for name in labels:
        assert dom.count(f">{name}<") >= 3, name  # the table, the heat map's rows and columns
    assert dom.count("<path") >= 4  # two runs' loss and F1 curves
    assert '<table class="cm">' in dom and "[1] small" in dom and "[2] wide" in dom
    # The markup of a test sentence is text on the page, not elements.
    assert "&lt;script&gt;document.title='owned'&lt;/script&gt;" in dom
    assert "<img src=\"x\"" not in dom and "<title>reltrain report</title>" in dom
    shot = tmp_path / "shot.png"
    browser("--window-size=1200,2400", f"--screenshot={shot}", page.as_uri())
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64) / 255
    assert pixels.shape[0] >= 2000 and pixels.std() > 0.05  # drawn, not a blank page


def test_report_needs_finished_runs(tmp_path, capsys):
    assert "not a finished run directory" in cli_error(capsys, "report", str(tmp_path))
