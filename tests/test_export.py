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

from conftest import data_overrides, encoder_args, read_jsonl, run_cli, user_error

pytestmark = pytest.mark.slow

ENCODERS = ["cnn", "pcnn", "bilstm", "transformer", "lm"]


@pytest.fixture(scope="module")
def exported(small_en, tiny_bert, tmp_path_factory) -> dict:
    out = {}
    for name in ENCODERS:
        root = tmp_path_factory.mktemp(name)
        args = ["train", *data_overrides(small_en), "log.progress=false", "log.plots=false",
                "train.epochs=1", "train.batch_size=32",
                *(encoder_args(name, tiny_bert) if name != "pcnn" else ["model.name=pcnn"]),
                f"output_dir={root / 'run'}"]
        assert main(args) == 0
        assert main(["export", str(root / "run/checkpoints/best.pt"), str(root / "model")]) == 0
        shipped = root / "elsewhere" / "model"  # without the run directory beside it
        shutil.copytree(root / "model", shipped)
        out[name] = (root / "run/checkpoints/best.pt", shipped)
    return out


@pytest.mark.parametrize("name", ENCODERS)
def test_the_folder_predicts_like_the_checkpoint(exported, small_en, name):
    checkpoint, folder = exported[name]
    records = read_records(small_en["test"]).records
    a = reltrain.load(checkpoint).probabilities(records)
    b = reltrain.load(folder).probabilities(records)
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
    assert "incomplete or damaged export" in line
