"""Shared fixtures: small data written to a temporary folder, a private preprocessing cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reltrain.examples import EXAMPLE_DIR

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "deepke-zh"

ZH_HEADER = "sentence,relation,head,head_offset,tail,tail_offset\n"
ZH_ROWS = [
    ("《娘家的故事第二部》是张玲执导，林在培、何赛飞等主演的电视剧", "导演", "娘家的故事第二部", 1, "张玲", 11),
    ("谢万松，字树人，湖北省武汉市人，生于1940年", "出生地", "谢万松", 0, "湖北省武汉市", 8),
    ("《逐风行》是纵横中文网签约作家清水秋风创作的小说", "连载网站", "逐风行", 1, "纵横中文网", 6),
    ("张玲导演说，张玲很满意《红楼》的拍摄", "导演", "红楼", 12, "张玲", 6),
]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets the same throwaway cache root, never the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


def write_csv(path: Path, rows, header: str = ZH_HEADER) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(header)
        for row in rows:
            f.write(",".join(str(x) for x in row) + "\n")
    return path


@pytest.fixture
def zh_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "zh.csv", ZH_ROWS)


@pytest.fixture(scope="session")
def small_en(tmp_path_factory) -> dict:
    """A 240/80/80-row slice of the bundled example (fast to train on)."""
    root = tmp_path_factory.mktemp("small_en")
    out = {}
    for split, n in (("train", 240), ("valid", 80), ("test", 80)):
        lines = (EXAMPLE_DIR / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()[:n]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        out[split] = str(root / f"{split}.jsonl")
    out["labels"] = str(EXAMPLE_DIR / "labels.txt")
    return out


def data_overrides(files: dict) -> list[str]:
    return [f"data.{k}={v}" for k, v in files.items()]


def run_cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m reltrain ARGS`` in a fresh process (for exit codes and stderr as users see them)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "reltrain", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
