"""Shared fixtures: small data written to a temporary folder, a private preprocessing cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from reltrain.data.examples import EXAMPLE_DIR

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "deepke-zh"

ZH_HEADER = "sentence,relation,head,head_offset,tail,tail_offset\n"
ZH_ROWS = [
    ("《娘家的故事第二部》是张玲执导，林在培、何赛飞等主演的电视剧", "导演", "娘家的故事第二部", 1, "张玲", 11),
    ("谢万松，字树人，湖北省武汉市人，生于1940年", "出生地", "谢万松", 0, "湖北省武汉市", 8),
    ("《逐风行》是纵横中文网签约作家清水秋风创作的小说", "连载网站", "逐风行", 1, "纵横中文网", 6),
    ("张玲导演说，张玲很满意《红楼》的拍摄", "导演", "红楼", 12, "张玲", 6),
]


SCRATCH = Path(tempfile.mkdtemp(prefix="reltrain-tests-"))  # cwd of the processes tests start


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test gets the same throwaway cache root, never the user's ~/.cache, and runs from a
    scratch folder, so a default run directory (runs/...) never lands in the checkout."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    monkeypatch.chdir(SCRATCH)


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


# One thread per process: the multi-process tests start 2-3 workers on 2 cores.
WORKER_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run(cmd: list[str], extra_env: dict | None = None, timeout: int = 300,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A command in a fresh process, from ``cwd`` (default: a scratch folder, never the checkout)."""
    env = {**os.environ, **WORKER_ENV, **(extra_env or {})}  # now: XDG_CACHE_HOME is the test's
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=cwd or SCRATCH)


def run_cli(*args: str, env: dict | None = None, timeout: int = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m reltrain ARGS`` in a fresh process (for exit codes and stderr as users see them)."""
    return run([sys.executable, "-m", "reltrain", *args], env, timeout, cwd)


def torchrun(nproc: int, *args: str, extra_env: dict | None = None, restarts: int = 0,
             timeout: int = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=N ARGS`` (ARGS: ``-m reltrain ...`` or a script)."""
    return run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={nproc}", f"--max-restarts={restarts}", *args], extra_env, timeout)


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def user_error(result: subprocess.CompletedProcess) -> str:
    """The one ``reltrain: error:`` line of a run that failed with exit 2 and no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("reltrain: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def cli_error(capsys, *argv: str) -> str:
    """``user_error`` for ``reltrain ARGV`` run in this process (quicker than a fresh one)."""
    from reltrain.cli import main

    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    return user_error(subprocess.CompletedProcess(argv, code, "", err))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def assert_same_predictions(a: Path, b: Path, tol: float = 1e-5) -> None:
    """Two prediction files alike line for line, scores within ``tol``: on some CPUs (Intel Xeon
    with AVX-512, MKL and oneDNN) an fp32 score's last bits depend on which rows share a batch."""
    def alike(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return abs(x - y) <= tol
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(alike(x[k], y[k]) for k in x)
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(alike(u, v) for u, v in zip(x, y))
        return type(x) is type(y) and x == y

    rows_a, rows_b = read_jsonl(a), read_jsonl(b)
    assert len(rows_a) == len(rows_b)
    for i, (x, y) in enumerate(zip(rows_a, rows_b)):
        assert alike(x, y), (i, x, y)


def make_tiny_bert(folder: Path, internal_dropout: float = 0.1) -> str:
    """A randomly initialised 2-layer BERT with a fast tokenizer, saved like any model folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = set()
    for line in (EXAMPLE_DIR / "train.jsonl").read_text().splitlines():
        words.update(json.loads(line)["text"].lower().split())
    chinese = "张玲导演说很满意红楼的拍摄谢万松湖北省武汉市人"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words), *chinese]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(dict.fromkeys(vocab)), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=256,
                        hidden_dropout_prob=internal_dropout,
                        attention_probs_dropout_prob=internal_dropout)
    BertModel(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> str:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


SMALL_ENCODERS = {"cnn": ["model.cnn.num_filters=32"],
                  "bilstm": ["model.bilstm.hidden=32", "model.bilstm.layers=1"],
                  "transformer": ["model.transformer.dim=32", "model.transformer.layers=1", "model.transformer.ff=64"]}


def encoder_args(name: str, tiny_bert: str) -> list[str]:
    """Options for a small, quick model of each encoder."""
    if name == "lm":
        # fp32 pinned: train.amp=auto picks bf16 for a pretrained encoder on a CPU with bf16
        # arithmetic, and the tests compare numbers that must not depend on the machine.
        return ["model.name=lm", f"model.lm.pretrained={tiny_bert}", "train.encoder_lr=1e-3",
                "train.amp=off"]
    return [f"model.name={name}", *SMALL_ENCODERS[name]]


@pytest.fixture(scope="module")
def model(small_en, tmp_path_factory) -> Path:
    """A small CNN, trained one epoch and exported: what the server tests serve."""
    from reltrain.cli import main

    root = tmp_path_factory.mktemp("serve")
    assert main(["train", *data_overrides(small_en), "log.progress=false", "train.epochs=1", "model.cnn.num_filters=32", f"output_dir={root / 'run'}"]) == 0
    assert main(["export", str(root / "run/checkpoints/best"), str(root / "model")]) == 0
    return root / "model"


def scores(model, records, batch_size: int | None = None):
    """(N, C) probabilities of ``records`` by a ``reltrain.load`` model: its pipeline's
    encode and score stages."""
    return model.score(model.encode(records), batch_size)


def weights_of(folder: Path) -> dict:
    """The weights of a model folder (a checkpoint or an export)."""
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def training_of(folder: Path) -> dict:
    """A checkpoint folder's training state, as saved."""
    import torch

    return torch.load(Path(folder) / "training_state.pt", weights_only=True)


def payload_of(folder: Path) -> dict:
    """A model folder's parts as plain values (``write_folder`` writes them back), so a test
    can change one the way a stranger could."""
    folder = Path(folder)
    card = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    tok = card["tokenizer"]
    payload = {"config": card["reltrain_config"], "hf_config": card["hf_config"],
               "labels": [card["id2label"][str(i)] for i in range(len(card["id2label"]))],
               "model": weights_of(folder), "vocab": None, "lm": None}
    if tok["kind"] == "words":
        payload["vocab"] = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    else:
        payload["lm"] = {"types": tok["types"], "added": tok["added"],
                         "files": {n: (folder / n).read_text(encoding="utf-8") for n in tok["files"]}}
    return payload


def write_folder(payload: dict, folder: Path) -> str:
    """A model folder of ``payload``'s values, written as they are (tampered or not); tokenizer
    file names that are not plain names are only listed, never written."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True)
    labels, lm = payload.get("labels"), payload.get("lm")
    card = {"format": "reltrain-model", "format_version": payload.get("format_version", 1),
            "id2label": ({str(i): v for i, v in enumerate(labels)} if isinstance(labels, list)
                         else labels),
            "tokenizer": ({"kind": "pretrained", "types": lm["types"], "added": lm["added"],
                           "files": list(lm["files"])} if lm
                          else {"kind": "words", "vocab": "vocab.json"}),
            "hf_config": payload.get("hf_config"), "reltrain_config": payload.get("config"),
            "entity_types": payload.get("entity_types")}
    (folder / "config.json").write_text(json.dumps(card), encoding="utf-8")
    if "model" in payload:
        save_file({k: v.clone().contiguous() for k, v in payload["model"].items()},
                  str(folder / "model.safetensors"))
    if lm:
        for name, text in lm["files"].items():
            if Path(name).name == name and name not in (".", ".."):
                (folder / name).write_text(text, encoding="utf-8")
    elif payload.get("vocab") is not None:
        (folder / "vocab.json").write_text(json.dumps(payload["vocab"]), encoding="utf-8")
    return str(folder)
