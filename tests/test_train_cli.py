"""End to end through the CLI: train, evaluate, predict, and user errors."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import reltrain
from reltrain.cli import main

from conftest import (assert_same_predictions, cli_error, data_overrides, read_jsonl, run_cli,
                      scores, training_of, user_error, weights_of)


@pytest.fixture(scope="session")
def trained(small_en, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / "cnn"
    code = main(["train", *data_overrides(small_en), f"output_dir={run_dir}", "train.epochs=3",
                 "log.progress=false", "train.batch_size=16"])
    assert code == 0
    return run_dir


def test_run_directory_contents(trained):
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "train.log",
                 "checkpoints/best/model.safetensors", "checkpoints/best/config.json",
                 "checkpoints/best/README.md", "checkpoints/best/epoch.json",
                 "checkpoints/last/training_state.pt", "report.html", "test_predictions.jsonl"):
        assert (trained / name).is_file(), name
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["global_batch_size"] == 16
    assert set(summary["test"]) >= {"macro_f1", "micro_f1", "macro_precision", "macro_recall"}
    assert summary["test"]["num_examples"] == 80
    history = read_jsonl(trained / "metrics.jsonl")
    assert [r["epoch"] for r in history] == [1, 2, 3]


def test_each_best_metric_reports_its_own_epoch(trained):
    summary = json.loads((trained / "summary.json").read_text())
    history = read_jsonl(trained / "metrics.jsonl")
    for name in ("macro_f1", "micro_f1"):
        values = [r["valid"][name] for r in history]
        best = summary["best_by_metric"][name]
        assert best["value"] == max(values)
        assert best["epoch"] == values.index(max(values)) + 1
    assert summary["best"]["epoch"] == summary["best_by_metric"]["macro_f1"]["epoch"]


def test_evaluate_prints_the_summary_test_metrics(trained, small_en, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(trained / "checkpoints/best"), small_en["test"]]) == 0
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((trained / "summary.json").read_text())
    for key in ("macro_f1", "micro_f1", "macro_precision", "macro_recall", "per_class"):
        assert printed[key] == summary["test"][key]


def test_checkpoint_is_self_contained_and_safe(trained, tmp_path):
    """A checkpoint is a model folder (what export writes) plus its training state beside it."""
    last = trained / "checkpoints/last"
    assert {p.name for p in last.iterdir()} == {"config.json", "model.safetensors", "vocab.json",
                                                "README.md", "epoch.json", "training_state.pt"}
    assert main(["export", str(last), str(tmp_path / "out")]) == 0
    exported = {p.name for p in (tmp_path / "out").iterdir()}
    assert exported == {"config.json", "model.safetensors", "vocab.json", "README.md"}
    payload = training_of(last)
    assert {"optimizer", "scheduler", "state", "rank_states", "world_size", "data_key"} <= set(payload)
    assert not {"model", "config", "vocab", "labels"} & set(payload)  # the folder's, once
    assert {"rng", "progress"} <= set(payload["rank_states"][0])
    assert payload["state"]["epoch"] == 4  # the next epoch to run
    assert not any(k.startswith("module.") for k in weights_of(trained / "checkpoints/last"))


def test_reload_gives_identical_predictions(trained, small_en):
    from reltrain.data.readers import read_records

    records = read_records(small_en["test"]).records
    a = scores(reltrain.load(trained / "checkpoints/best"), records)
    b = scores(reltrain.load(trained / "checkpoints/best"), records, 7)
    assert (a == b).all() or abs(a - b).max() < 1e-6


def test_predict_file_and_text(trained, small_en, tmp_path, capsys):
    out = tmp_path / "pred.jsonl"
    assert main(["predict", str(trained / "checkpoints/best"), small_en["test"],
                 "--output", str(out), "--top-k", "2"]) == 0
    rows = read_jsonl(out)
    assert len(rows) == 80
    assert {"relation", "score", "top_k", "gold"} <= set(rows[0]) and len(rows[0]["top_k"]) == 2
    assert rows[0]["top_k"][0]["relation"] == rows[0]["relation"]
    capsys.readouterr()
    assert main(["predict", str(trained / "checkpoints/best"), "--text",
                 "Alice Moreau was born in Dunmore , not in Corrin .", "--head", "Alice Moreau",
                 "--tail", "Dunmore"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["relation"] == "born_in" and 0 < row["score"] <= 1
    api = reltrain.load(trained / "checkpoints/best").predict_text(
        "Alice Moreau was born in Dunmore .", "Alice Moreau", "Dunmore")
    assert api["relation"] == "born_in"


def test_no_arguments_trains_the_bundled_example(tmp_path):
    result = run_cli("train", "train.epochs=2", "log.progress=false", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "runs").iterdir())) == 1
    assert "run directory:" in result.stdout and "test (best checkpoint): positive micro-F1" in result.stdout
    assert "bundled English example" in result.stderr


def test_bad_input_is_one_line_exit_2_everywhere(trained, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("sentence,relation,head,head_offset,tail,tail_offset\n"
                   "Ann met Bob .,born_in,Ann,4,Bob,8\n")
    ckpt = str(trained / "checkpoints/best")
    for args in (["train", f"data.train={bad}", "data.cache_dir=" + str(tmp_path / "c")],
                 ["evaluate", ckpt, str(bad)], ["predict", ckpt, str(bad)]):
        line = user_error(run_cli(*args))
        assert "bad.csv:2: field 'head_offset'" in line, line
    unknown = tmp_path / "unknown.csv"
    unknown.write_text("sentence,relation,head,head_offset,tail,tail_offset\n"
                       "Ann met Bob .,knows,Ann,0,Bob,8\n")
    assert "unknown relation 'knows'" in user_error(run_cli("evaluate", ckpt, str(unknown)))


def test_skip_bad_rows_trains_and_reports(small_en, tmp_path, capsys):
    lines = Path(small_en["train"]).read_text().splitlines()
    lines[3] = '{"text": "broken"'
    lines[5] = lines[5].replace('"pos": [', '"pos": [900, ')
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(lines) + "\n")
    assert main(["preprocess", f"data.train={train}", "data.skip_bad_rows=true",
                 f"data.labels={small_en['labels']}"]) == 0
    out = capsys.readouterr().out
    assert "train.jsonl:4: invalid JSON" in out and "train.jsonl:6: field" in out
    assert "train 238" in out


def test_config_errors_and_help(capsys):
    assert user_error(run_cli("train", "train.epochs=abc")).startswith("reltrain: error: bad option")
    assert "train.nope" in user_error(run_cli("train", "train.nope=1"))
    assert "model.cnn.kernel_sizes must be 1 to 16 odd" in user_error(run_cli("train", "model.cnn.kernel_sizes=[2,4]"))
    assert "device must be" in user_error(run_cli("train", "device=tpu"))
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for key in ("data.train", "model.name", "train.epochs", "train.batch_size", "train.lr",
                "train.seed", "device", "output_dir"):
        assert key in text


def test_yaml_booleans_in_word_options_mean_the_word():
    from reltrain.config.load import load_config

    cfg = load_config(None, ["train.amp=off", "log.progress=false", "log.tensorboard=true",
                             "train.sparse_embeddings=false"])
    assert (cfg.train.amp, cfg.log.progress, cfg.log.tensorboard) == ("off", "false", "true")
    assert cfg.train.sparse_embeddings == "false"


def test_shipped_configs_load(tmp_path):
    from reltrain.config.load import load_config

    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "configs").glob("*.yaml")):
        # a recipe reads its data folder when loaded: without ../shared/data it cannot (README)
        folders = re.findall(r"shared/data/([\w-]+)", path.read_text(encoding="utf-8"))
        if not all((root.parent / "shared" / "data" / name).is_dir() for name in folders):
            continue
        overrides = [f"model.lm.pretrained={tmp_path}"] if "lm" in path.name or "minilm" in path.name else []
        cwd = Path.cwd()
        try:
            os.chdir(root)  # recipes use paths relative to the repository root
            cfg = load_config(str(path), overrides)
        finally:
            os.chdir(cwd)
        assert cfg.model.name in ("cnn", "pcnn", "bilstm", "transformer", "lm"), path


def test_output_that_is_the_input_is_refused(trained, small_en, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text(Path(small_en["test"]).read_text())
    alias = tmp_path / "alias.jsonl"
    os.link(data, alias)  # another name, the same file
    before = data.read_bytes()
    ckpt = str(trained / "checkpoints/best")
    for command in ("predict", "evaluate"):
        for output in (data, alias):
            line = user_error(run_cli(command, ckpt, str(data), "--output", str(output)))
            assert "is the input file" in line
    assert data.read_bytes() == before
    # a file inside the model folder (or its run directory) is a part of the model: evaluate
    # --predictions onto its config.json once replaced it and the model no longer loaded
    config = trained / "checkpoints/best/config.json"
    kept = config.read_bytes()
    for model, flag, target in ((ckpt, "--predictions", config), (str(trained), "--output",
                                                                  trained / "summary.json")):
        line = user_error(run_cli("evaluate", model, str(data), flag, str(target)))
        assert f"{flag} {target} lies inside" in line
    line = user_error(run_cli("predict", ckpt, str(data), "--output", str(config.parent / "new")))
    assert "lies inside" in line and not (config.parent / "new").exists()
    assert config.read_bytes() == kept


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_names_are_one_line_errors_in_every_command(trained, small_en, capsys):
    ckpt = str(trained / "checkpoints/best")
    for device, expected in (("cuda", "CUDA is not available"), ("cuda:1", "CUDA is not available"),
                             ("tpu", "device must be auto, cpu, cuda or cuda:N"),
                             ("cuda:x", "device must be")):
        assert expected in cli_error(capsys, "predict", ckpt, small_en["test"], "--device", device)
        assert expected in cli_error(capsys, "evaluate", ckpt, small_en["test"], "--device", device)
        assert expected in cli_error(capsys, "train", f"device={device}", "train.epochs=1")
    assert "CUDA is not available" in user_error(run_cli("predict", ckpt, small_en["test"],
                                                         "--device", "cuda"))  # as a user runs it


def test_smaller_user_errors(trained, small_en, tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint" * 10)
    line = user_error(run_cli("predict", str(garbage), "--text", "a b", "--head", "a", "--tail", "b"))
    assert "a model is a folder" in line and "old layout" in line
    copy = shutil.copytree(trained / "checkpoints/last", tmp_path / "garbage")
    (copy / "training_state.pt").write_bytes(b"not a checkpoint" * 10)
    line = user_error(run_cli("train", *data_overrides(small_en), f"resume={copy}",
                              f"output_dir={tmp_path / 'run'}"))
    assert "not a complete torch checkpoint" in line and "weights_only" not in line
    ckpt = str(trained / "checkpoints/best")
    line = user_error(run_cli("predict", ckpt, "--text", "Alice Moreau was born in Dunmore .",
                              "--head", "Alice Moreau", "--tail", "Dunmore", "--tail-offset", "-3"))
    assert "--tail-offset: expected a non-negative integer character offset, got -3" in line
    assert "train.early_stopping must be >= 0" in user_error(run_cli("train", "train.early_stopping=-1"))


def test_a_pickled_object_is_named_not_run(trained, small_en, tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'owned'}",))

    copy = shutil.copytree(trained / "checkpoints/last", tmp_path / "evil")
    torch.save({"format": "reltrain-training-state", "x": Evil()}, copy / "training_state.pt")
    line = user_error(run_cli("train", *data_overrides(small_en), f"resume={copy}",
                              f"output_dir={tmp_path / 'run'}"))
    assert "pickled Python object (posix.system)" in line and "weights_only" not in line
    assert not (tmp_path / "owned").exists()


def test_bad_vocabulary_and_worker_options_are_one_line(capsys):
    assert "data.max_vocab must be 0 (no cap) or more" in cli_error(
        capsys, "preprocess", "data.max_vocab=-5")
    assert "data.preprocess_workers must be 0 (one per core) or more" in cli_error(
        capsys, "preprocess", "data.preprocess_workers=-1")
    assert "data.max_vocab" in cli_error(capsys, "preprocess", "data.max_vocab=lots")


def test_one_relation_or_chinese_as_words_stop_training(tmp_path):
    from conftest import ZH_ROWS, write_csv

    one = write_csv(tmp_path / "one.csv", [r for r in ZH_ROWS if r[1] == "导演"])
    # zh: a streamed build says the script mistake after 4,096 rows, the relations at the end
    assert "at least two relations" in user_error(run_cli("train", f"data.train={one}",
                                                          "data.language=zh"))
    zh = write_csv(tmp_path / "zh.csv", ZH_ROWS)
    assert "set data.language=zh" in user_error(run_cli("train", f"data.train={zh}"))


def test_two_runs_in_one_process_keep_their_own_logs_and_leave_logging_alone(small_en, tmp_path, tiny_bert):
    import logging

    from transformers.utils import logging as hf_logging

    from reltrain.config.load import load_config
    from reltrain.commands.train import run_train

    logger = logging.getLogger("reltrain")
    before = (list(logger.handlers), logger.propagate, logger.level)
    hf_logging.set_verbosity_warning()
    args = [*data_overrides(small_en), "train.epochs=1", "log.progress=false"]
    run_train(load_config(None, [*args, f"output_dir={tmp_path / 'a'}"]))
    run_train(load_config(None, [*args, f"output_dir={tmp_path / 'b'}", "model.name=lm",
                                 f"model.lm.pretrained={tiny_bert}"]))
    first, second = ((tmp_path / d / "train.log").read_text() for d in "ab")
    assert first.count("epoch 1/1") == 1 and "tokenizer lm" not in first  # run b stayed out
    assert "tokenizer lm" in second and "epoch 1/1" in second
    assert (list(logger.handlers), logger.propagate, logger.level) == before
    assert hf_logging.get_verbosity() == hf_logging.WARNING


def test_every_key_the_docs_name_exists():
    import re

    from reltrain.config.train import describe_options

    keys = {line.split()[0] for line in describe_options().splitlines()}
    sections = {k.split(".")[0] for k in keys if "." in k}
    root = Path(__file__).resolve().parents[1]
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        named = set(re.findall(r"`((?:%s)(?:\.[a-z_]+)+)" % "|".join(sections), doc.read_text()))
        files = {n for n in named if n.rsplit(".", 1)[1] in ("csv", "log", "py", "json", "jsonl",
                                                              "safetensors", "onnx", "yaml", "txt")}
        assert named - files <= keys, (doc.name, named - files - keys)


def test_an_empty_value_is_an_empty_string():
    from reltrain.config.load import load_config

    cfg = load_config(None, ["output_dir=", "data.cache_dir="])
    assert cfg.output_dir == "" and cfg.data.cache_dir == ""


def test_workers_start_only_for_more_than_one_chunk(trained, small_en, tmp_path, monkeypatch):
    """A helper loads the model in a fresh process (seconds): one chunk is predicted here."""
    from reltrain.runtime import children
    from reltrain.commands.predict import run_predict

    started = []
    real = children.Child.__init__
    monkeypatch.setattr(children.Child, "__init__", lambda *a: started.append(1) or real(*a))
    ckpt, whole, parts = str(trained / "checkpoints/best"), tmp_path / "w.jsonl", tmp_path / "p.jsonl"
    assert run_predict(ckpt, small_en["test"], output=str(whole), workers=2) == 80 and not started
    assert run_predict(ckpt, small_en["test"], output=str(parts), workers=2, chunk_rows=7) == 80
    assert started == [1]  # one helper: this process predicts too
    assert_same_predictions(parts, whole)


def test_helpers_that_only_tokenize_give_the_same_lines(trained, small_en, tmp_path, monkeypatch):
    """On a GPU the helpers tokenize and this process runs the model (``pool.mode``: encode):
    that path, taken here on a CPU."""
    from reltrain.inference import pool
    from reltrain.commands.predict import run_predict

    ckpt, whole, parts = str(trained / "checkpoints/best"), tmp_path / "w.jsonl", tmp_path / "p.jsonl"
    assert run_predict(ckpt, small_en["test"], output=str(whole), workers=1) == 80
    modes = []
    monkeypatch.setattr(pool, "mode", lambda predictor, helpers: modes.append(helpers) or "encode")
    assert run_predict(ckpt, small_en["test"], output=str(parts), workers=3, chunk_rows=9) == 80
    assert modes == [True]
    assert_same_predictions(parts, whole)


def test_predict_streams_in_chunks_in_input_order_with_bad_rows_in_place(trained, small_en, tmp_path):
    from reltrain.commands.predict import run_predict

    lines = Path(small_en["test"]).read_text().splitlines()[:30]
    lines[4] = '{"text": "broken"'
    lines[11] = lines[11].replace('"pos": [', '"pos": [900, ')
    data = tmp_path / "mixed.jsonl"
    data.write_text("\n".join(lines) + "\n")
    ckpt = str(trained / "checkpoints/best")
    whole, chunked = tmp_path / "whole.jsonl", tmp_path / "chunked.jsonl"
    assert run_predict(ckpt, str(data), output=str(whole), skip_bad_rows=True, workers=0) == 30
    assert run_predict(ckpt, str(data), output=str(chunked), skip_bad_rows=True, chunk_rows=7,
                       workers=2) == 30  # tokenized in two worker processes
    assert_same_predictions(whole, chunked)  # other rows share a batch: scores to ~1e-7
    rows = read_jsonl(chunked)
    assert rows[4] == {"line": 5, "error": rows[4]["error"]} and "invalid JSON" in rows[4]["error"]
    assert rows[11]["line"] == 12 and "h.pos" in rows[11]["error"]
    good = [json.loads(x) for i, x in enumerate(lines) if i not in (4, 11)]
    assert [r["text"] for i, r in enumerate(rows) if i not in (4, 11)] == [g["text"] for g in good]


def test_a_failed_predict_leaves_the_output_file_as_it_was(trained, small_en, tmp_path):
    lines = Path(small_en["test"]).read_text().splitlines()[:20]
    lines[15] = '{"text": "broken"'
    data = tmp_path / "bad_late.jsonl"
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text("earlier results\n")
    from reltrain.commands.predict import run_predict
    from reltrain.runtime.errors import DataError

    with pytest.raises(DataError, match="bad_late.jsonl:16"):
        run_predict(str(trained / "checkpoints/best"), str(data), output=str(out), chunk_rows=10)
    assert out.read_text() == "earlier results\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad_late.jsonl", "out.jsonl"]


def test_every_ordered_pair_of_a_sentences_entities(trained, tmp_path):
    from reltrain.commands.predict import run_predict

    text = "Alice Moreau was born in Dunmore , not in Corrin ."
    entities = [{"name": "Alice Moreau", "pos": [0, 12]}, {"name": "Dunmore", "pos": [25, 32]},
                {"name": "Corrin", "pos": [42, 48]}]
    data = tmp_path / "sentences.jsonl"
    data.write_text(json.dumps({"text": text, "entities": entities}) + "\n"
                    + json.dumps({"text": text, "entities": entities[:1]}) + "\n")
    out = tmp_path / "pairs.jsonl"
    run_predict(str(trained / "checkpoints/best"), str(data), output=str(out), skip_bad_rows=True)
    first, second = read_jsonl(out)
    order = [(p["head"]["name"], p["tail"]["name"]) for p in first["pairs"]]
    assert order == [("Alice Moreau", "Dunmore"), ("Alice Moreau", "Corrin"), ("Dunmore", "Alice Moreau"),
                     ("Dunmore", "Corrin"), ("Corrin", "Alice Moreau"), ("Corrin", "Dunmore")]
    assert second["line"] == 2 and "at least two entities" in second["error"]
    model = reltrain.load(trained / "checkpoints/best")
    single = model.predict_text(text, "Alice Moreau", "Dunmore")
    pairs = model.predict_rows([{"text": text, "entities": entities}])[0]["pairs"]
    assert pairs[0]["relation"] == single["relation"] == "born_in"
    assert abs(pairs[0]["score"] - single["score"]) < 1e-6
    assert first["pairs"][0]["score"] == pytest.approx(single["score"], abs=1e-6)


def test_max_len_beyond_the_pretrained_positions_is_one_line(small_en, tiny_bert, capsys):
    line = cli_error(capsys, "train", *data_overrides(small_en), "model.name=lm",
                     f"model.lm.pretrained={tiny_bert}", "data.max_len=300", "log.progress=false")
    assert "data.max_len=300 is more than the 256 positions" in line


def test_summary_counts_the_child_that_built_the_cache(small_en, tmp_path):
    args = ["train", *data_overrides(small_en), "train.epochs=1", "log.progress=false",
            f"data.cache_dir={tmp_path / 'cache'}"]
    peaks = []
    for run in ("built", "reused"):
        result = run_cli(*args, f"output_dir={tmp_path / run}")
        assert result.returncode == 0, result.stderr
        summary = json.loads((tmp_path / run / "summary.json").read_text())
        peaks.append(summary["peak_rss_children_mb"])
    assert peaks[0] > 10 and peaks[1] == 0  # the tokenizing child, then no child at all


def test_predicting_one_sentence_loads_only_what_the_model_needs(trained):
    """The start of ``reltrain predict --text`` is mostly imports: checking a model's shapes on
    the meta device used to pull in torch._dynamo (a second of a two-second run)."""
    import subprocess
    import sys

    heavy = ("torch._dynamo", "transformers", "jieba", "rjieba", "matplotlib", "sklearn",
             "onnxruntime", "torch.onnx")
    script = ("import sys\nfrom reltrain.cli import main\n"
              f"code = main(['predict', {str(trained)!r}, '--text', 'Alice Moreau was born in "
              "Dunmore .', '--head', 'Alice Moreau', '--tail', 'Dunmore'])\n"
              f"print('HELD', code, [m for m in {heavy!r} if m in sys.modules])\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert "HELD 0 []" in result.stdout, (result.stdout[-500:], result.stderr[-1500:])
