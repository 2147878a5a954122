"""The command line at its edges: closed pipes, text that is not text, unreadable files, a run
directory with only best.pt, standard input, options that contradict each other."""

from __future__ import annotations

import json
import os
import shutil
import re
import subprocess
import sys

import pytest

from reltrain.cli import main

from conftest import (SCRATCH, WORKER_ENV, cli_error, data_overrides, ok, read_jsonl, run_cli,
                      user_error)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(small_en, tmp_path_factory):
    root = tmp_path_factory.mktemp("edges")
    assert main(["train", *data_overrides(small_en), "log.progress=false", "train.epochs=1", "model.cnn.num_filters=16", f"output_dir={root / 'run'}"]) == 0
    return root / "run"


def test_a_closed_pipe_ends_predict_quietly(run_dir, small_en, tmp_path):
    rows = (tmp_path / "big.jsonl")
    lines = open(small_en["test"], encoding="utf-8").read().splitlines()
    rows.write_text("\n".join(lines * 40) + "\n", encoding="utf-8")  # more than a pipe holds
    proc = subprocess.Popen([sys.executable, "-m", "reltrain", "predict",
                             str(run_dir / "checkpoints/best"), str(rows), "--workers", "0",
                             "--chunk-rows", "64"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=SCRATCH)
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -n 1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert json.loads(first)["relation"]
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err


def test_a_lone_surrogate_is_a_bad_row(run_dir, small_en, tmp_path):
    good = open(small_en["test"], encoding="utf-8").read().splitlines()[0]
    bad = json.dumps({**json.loads(good), "relation": "x"}).replace('"x"', '"\\ud800"')
    nested = "[" * 100_000 + "]" * 100_000
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join([good, bad, nested, good]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    ok(run_cli("predict", str(run_dir / "checkpoints/best"), str(data), "--skip-bad-rows",
               "--output", str(out)))
    answers = read_jsonl(out)
    assert [("error" in a) for a in answers] == [False, True, True, False]
    assert "lone surrogate" in answers[1]["error"] and "nested too deeply" in answers[2]["error"]
    line = user_error(run_cli("predict", str(run_dir / "checkpoints/best"), str(data)))
    assert ":2:" in line and "lone surrogate" in line
    train = tmp_path / "train.jsonl"
    train.write_text(open(small_en["train"], encoding="utf-8").read() + bad + "\n", encoding="utf-8")
    line = user_error(run_cli("train", f"data.train={train}", "log.progress=false",
                              f"output_dir={tmp_path / 'run'}"))
    assert "lone surrogate" in line


def test_an_unreadable_training_file_is_one_line(small_en, capsys, monkeypatch, tmp_path):
    import builtins

    from reltrain.data import preprocess

    def refusing(path, *args, **kwargs):  # as root, chmod 000 does not stop a read: a stand-in
        if str(path) == small_en["valid"]:
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(preprocess, "open", refusing, raising=False)
    line = cli_error(capsys, "train", *data_overrides(small_en), "log.progress=false",
                     f"output_dir={tmp_path / 'run'}")
    assert small_en["valid"] in line and "Permission denied" in line


def test_a_run_with_only_best_left_is_not_overwritten(small_en, tmp_path):
    args = ["train", *data_overrides(small_en), "log.progress=false", "train.epochs=1", "model.cnn.num_filters=16", f"output_dir={tmp_path / 'run'}"]
    assert main(args) == 0
    checkpoints = tmp_path / "run" / "checkpoints"
    for path in checkpoints.iterdir():
        if path.name != "best":
            shutil.rmtree(path)
    weights = checkpoints / "best" / "model.safetensors"
    best, metrics = weights.read_bytes(), (tmp_path / "run/metrics.jsonl").read_text()
    line = user_error(run_cli(*args))
    assert "holds best but no last" in line and "resume=" in line
    assert weights.read_bytes() == best
    assert (tmp_path / "run/metrics.jsonl").read_text() == metrics


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_predict_reads_standard_input(run_dir, small_en, zh_csv, tmp_path, kind):
    source = small_en["test"] if kind == "jsonl" else str(zh_csv)
    model = str(run_dir / "checkpoints/best")
    ok(run_cli("predict", model, source, "--output", str(tmp_path / "file.jsonl")))
    with open(source, "rb") as stdin:
        piped = subprocess.run([sys.executable, "-m", "reltrain", "predict", model, "-"],
                               stdin=stdin, capture_output=True, cwd=SCRATCH, timeout=120,
                               env={**os.environ, **WORKER_ENV})  # run_cli's thread count
    assert piped.returncode == 0, piped.stderr.decode()
    got = [json.loads(line) for line in piped.stdout.decode().splitlines()]
    assert got == read_jsonl(tmp_path / "file.jsonl")


def test_standard_input_is_read_by_one_process_only(run_dir):
    line = user_error(run_cli("predict", str(run_dir / "checkpoints/best"), "-",
                              "--devices", "2"))
    assert "standard input" in line


def test_predict_options_that_contradict_are_refused(run_dir, small_en, capsys):
    model = str(run_dir / "checkpoints/best")
    line = cli_error(capsys, "predict", model, small_en["test"], "--head", "Alice")
    assert "--head" in line and "not both" in line
    line = cli_error(capsys, "predict", model, small_en["test"], "--top-k", "99")
    assert "--top-k must be between 1 and 8" in line


def test_an_unknown_option_gets_a_suggestion(capsys):
    line = cli_error(capsys, "train", "train.ephocs=3")
    assert "did you mean 'train.epochs'" in line


def test_an_unknown_encoder_is_refused_before_the_data_is_read(small_en, capsys, tmp_path):
    line = cli_error(capsys, "train", *data_overrides(small_en), "model.name=bert",
                     f"data.cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}")
    assert "unknown model.name 'bert'" in line and "choose one of bilstm, cnn, lm" in line
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def test_exporting_a_never_scored_run_warns(small_en, tmp_path):
    args = ["train", f"data.train={small_en['train']}", f"data.labels={small_en['labels']}",
            "log.progress=false", "train.epochs=1", "model.cnn.num_filters=16",
            f"output_dir={tmp_path / 'run'}"]
    assert main(args) == 0
    result = ok(run_cli("export", str(tmp_path / "run"), str(tmp_path / "model")))
    assert "never scored on a test set" in result.stderr
    assert "Not scored on a test set." in (tmp_path / "model/README.md").read_text()


def test_serves_flags_are_its_options_dataclass_defined_once():
    """The parser is built from ServeOptions: its defaults are the dataclass's, every flag sets
    its field, and a bad value is the dataclass's one line."""
    import argparse
    import dataclasses

    from reltrain.runtime.errors import UserError
    from reltrain.config.commands import ServeOptions
    from reltrain.config.commands import add_to, from_args

    parser = argparse.ArgumentParser()
    add_to(parser, ServeOptions)
    assert from_args(ServeOptions, parser.parse_args(["m"])) == ServeOptions("m")
    given = from_args(ServeOptions, parser.parse_args(
        ["m", "--port", "9", "--max-wait-ms", "2.5", "--no-demo", "--access-log", "--host", "::"]))
    assert dataclasses.replace(ServeOptions("m"), port=9, max_wait_ms=2.5, demo=False,
                               access_log=True, host="::") == given
    with pytest.raises(UserError, match="--max-batch must be at least 1, not 0"):
        from_args(ServeOptions, parser.parse_args(["m", "--max-batch", "0"]))


def test_predicts_flags_are_its_options_dataclass_defined_once():
    import argparse

    from reltrain.runtime.errors import UserError
    from reltrain.config.commands import add_to, from_args
    from reltrain.config.commands import PredictOptions

    parser = argparse.ArgumentParser()
    add_to(parser, PredictOptions)
    assert from_args(PredictOptions, parser.parse_args(["m", "d.csv"])) == PredictOptions("m", "d.csv")
    given = from_args(PredictOptions, parser.parse_args(
        ["m", "--text", "A B", "--head", "A", "--tail", "B", "--tail-offset", "2", "--workers", "0"]))
    assert (given.data, given.text, given.tail_offset, given.workers) == (None, "A B", 2, 0)
    for argv, words in ((["m"], "give a DATA file, or --text"),
                        (["m", "d.csv", "--head", "A"], "not both (--head with d.csv)"),
                        (["m", "d.csv", "--chunk-rows", "0"], "--chunk-rows must be at least 1"),
                        (["m", "d.csv", "--devices", "-1"], "--devices must be >= 0")):
        with pytest.raises(UserError, match=re.escape(words)):
            from_args(PredictOptions, parser.parse_args(argv))


def test_evaluates_options_refuse_an_empty_negative_label_and_a_bad_runtime():
    from reltrain.config.commands import EvaluateOptions
    from reltrain.runtime.errors import UserError

    with pytest.raises(UserError, match="--negative-label must be auto, none or a label"):
        EvaluateOptions("m", "d.csv", negative_label=" ")
    with pytest.raises(UserError, match="--runtime must be torch or onnx"):
        EvaluateOptions("m", "d.csv", runtime="tensorrt")
