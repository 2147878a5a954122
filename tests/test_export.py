"""An exported folder predicts like its checkpoint, for every encoder, from anywhere."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.torch import load_file

import reltrain
from reltrain.cli import main
from reltrain.data.readers import read_records

from conftest import data_overrides, encoder_args, read_jsonl, run_cli, scores, user_error

pytestmark = pytest.mark.slow

ENCODERS = ["cnn", "pcnn", "bilstm", "transformer", "lm"]


@pytest.fixture(scope="module")
def exported(small_en, tiny_bert, tmp_path_factory) -> dict:
    out = {}
    for name in ENCODERS:
        root = tmp_path_factory.mktemp(name)
        args = ["train", *data_overrides(small_en), "log.progress=false", "train.epochs=1", "train.batch_size=32",
                *(encoder_args(name, tiny_bert) if name != "pcnn" else ["model.name=pcnn"]),
                f"output_dir={root / 'run'}"]
        assert main(args) == 0
        assert main(["export", str(root / "run/checkpoints/best"), str(root / "model")]) == 0
        shipped = root / "elsewhere" / "model"  # without the run directory beside it
        shutil.copytree(root / "model", shipped)
        out[name] = (root / "run/checkpoints/best", shipped)
    return out


@pytest.mark.parametrize("name", ENCODERS)
def test_the_folder_predicts_like_the_checkpoint(exported, small_en, name):
    checkpoint, folder = exported[name]
    records = read_records(small_en["test"]).records
    a = scores(reltrain.load(checkpoint), records)
    b = scores(reltrain.load(folder), records)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
    files = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "README.md"} <= files
    assert not any(f.endswith((".pt", ".pkl", ".bin")) for f in files)  # nothing pickled
    assert ("vocab.json" in files) == (name != "lm") and ("tokenizer.json" in files) == (name == "lm")
    config = json.loads((folder / "config.json").read_text())
    assert config["id2label"]["0"] == "born_in" and config["label2id"]["born_in"] == 0
    assert config["model_type"] == name and config["reltrain_version"] == reltrain.__version__
    assert set(load_file(str(folder / "model.safetensors"))) == set(
        reltrain.load(checkpoint).model.state_dict())


def test_model_card_and_cli_accept_the_folder(exported, small_en, tmp_path, capsys):
    checkpoint, folder = exported["cnn"]
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: reltrain\nlanguage: en\n")
    summary = json.loads((checkpoint.parent.parent / "summary.json").read_text())
    assert f"{summary['test']['macro_f1']:.4f}" in card and "| train | train.jsonl | 240 |" in card
    assert f"epoch {summary['best']['epoch']}" in card
    capsys.readouterr()
    assert main(["evaluate", str(folder), small_en["test"]]) == 0
    assert json.loads(capsys.readouterr().out)["macro_f1"] == summary["test"]["macro_f1"]
    for source, out in ((checkpoint, tmp_path / "a.jsonl"), (folder, tmp_path / "b.jsonl")):
        assert main(["predict", str(source), small_en["test"], "--output", str(out)]) == 0
    assert read_jsonl(tmp_path / "a.jsonl") == read_jsonl(tmp_path / "b.jsonl")


def test_export_refuses_a_non_empty_folder_and_a_damaged_one_is_one_line(exported, tmp_path):
    checkpoint, folder = exported["cnn"]
    assert "not an empty folder" in user_error(run_cli("export", str(checkpoint), str(folder)))
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "model.safetensors").write_bytes(b"garbage")
    line = user_error(run_cli("predict", str(broken), "--text", "a b", "--head", "a", "--tail", "b"))
    assert "incomplete or damaged model folder" in line


@pytest.fixture(scope="module")
def onnx_folders(exported, tmp_path_factory) -> dict:
    pytest.importorskip("onnxruntime")
    out = {}
    for name in ENCODERS:
        folder = tmp_path_factory.mktemp(f"{name}-onnx") / "model"
        assert main(["export", str(exported[name][0]), str(folder), "--format", "onnx"]) == 0
        out[name] = folder
    return out


@pytest.mark.parametrize("name", ENCODERS)
def test_onnx_gives_pytorchs_probabilities_short_long_and_mixed(onnx_folders, small_en, name):
    folder = onnx_folders[name]
    assert (folder / "model.onnx").is_file() and (folder / "model.safetensors").is_file()
    records = read_records(small_en["test"]).records
    by_length = sorted(records, key=lambda r: len(r.text))
    # onnxruntime runs the fp32 graph: PyTorch pinned to fp32 too (auto is bf16 for the lm on
    # a CPU with bf16 arithmetic).
    torch_model, onnx_model = reltrain.load(folder, amp="off"), reltrain.load(folder, runtime="onnx")
    for batch in ([by_length[0]], [by_length[-1]], by_length[:3] + by_length[-3:], records):
        np.testing.assert_allclose(scores(onnx_model, batch),
                                   scores(torch_model, batch), rtol=0, atol=1e-4)


def test_predict_with_onnx_in_worker_processes_matches_pytorch(onnx_folders, small_en, tmp_path):
    folder = onnx_folders["cnn"]
    runs = {"torch": ["--workers", "0"], "onnx": ["--runtime", "onnx", "--workers", "2",
                                                  "--chunk-rows", "7"]}
    for runtime, extra in runs.items():
        result = run_cli("predict", str(folder), small_en["test"], "--output",
                         str(tmp_path / f"{runtime}.jsonl"), *extra)
        assert result.returncode == 0, result.stderr
    a, b = read_jsonl(tmp_path / "torch.jsonl"), read_jsonl(tmp_path / "onnx.jsonl")
    assert len(a) == len(b) == len(read_records(small_en["test"]).records)
    for x, y in zip(a, b):
        assert (x["text"], x["head"], x["tail"]) == (y["text"], y["head"], y["tail"])
        assert x["score"] == pytest.approx(y["score"], abs=1e-4)
        assert x["relation"] == y["relation"] or abs(x["top_k"][0]["score"] - x["top_k"][1]["score"]) < 1e-4


def test_onnx_runtime_errors_say_what_to_do(onnx_folders, exported, tmp_path):
    checkpoint, plain = exported["cnn"]
    ask = ("--text", "a b", "--head", "a", "--tail", "b", "--runtime", "onnx")
    assert "--format onnx" in user_error(run_cli("predict", str(plain), *ask))
    assert "has none): reltrain export" in user_error(run_cli("predict", str(checkpoint), *ask))
    broken = tmp_path / "broken"
    shutil.copytree(onnx_folders["cnn"], broken)
    (broken / "model.onnx").write_bytes(b"not a graph")
    assert "onnxruntime cannot load it" in user_error(run_cli("predict", str(broken), *ask))


def test_a_failed_onnx_export_leaves_the_folder_empty(exported, tmp_path, monkeypatch, capsys):
    from reltrain.runtime.errors import UserError
    from reltrain.inference import onnx

    pytest.importorskip("onnxruntime")

    def broken(*args, **kwargs):
        raise UserError("the exporter failed")

    monkeypatch.setattr(onnx, "export_onnx", broken)
    out = tmp_path / "model"
    assert main(["export", str(exported["cnn"][0]), str(out), "--format", "onnx"]) == 2
    assert "the exporter failed" in capsys.readouterr().err
    assert out.is_dir() and not any(out.iterdir())
    monkeypatch.undo()
    assert main(["export", str(exported["cnn"][0]), str(out), "--format", "onnx"]) == 0
    assert "model.onnx" in (out / "README.md").read_text()
