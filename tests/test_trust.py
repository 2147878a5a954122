"""Input from a stranger, second round (issue 35): numbers past int()'s limit, weights that
declare more than they store or are not finite, configs that expand or nest without end, and
names that would rewrite a model card. Each is one line, exit 2, bounded."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

import reltrain
from reltrain.cli import main
from reltrain.runtime.errors import UserError

from conftest import cli_error, data_overrides, payload_of, run_cli, user_error, write_folder

HUGE = "1" * 5000  # past Python's 4,300-digit limit for int()


@pytest.fixture(scope="module")
def checkpoint(small_en, tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    assert main(["train", *data_overrides(small_en), "train.epochs=1", "log.progress=false",
                 "model.cnn.num_filters=16", f"output_dir={root / 'run'}"]) == 0
    return root / "run" / "checkpoints" / "best"


def tampered(checkpoint, tmp_path, change) -> str:
    payload = copy.deepcopy(payload_of(checkpoint))
    change(payload)
    path = tmp_path / "tampered"
    shutil.rmtree(path, ignore_errors=True)
    return write_folder(payload, path)


def refused(path: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        reltrain.load(path)


def test_a_number_past_the_digit_limit_is_a_bad_row_not_a_traceback(checkpoint, small_en,
                                                                     tmp_path, capsys):
    good = '{"text": "alice was born in paris", "h": {"pos": [0, 5]}, "t": {"pos": [18, 23]}}'
    bad = good.replace("[0, 5]", f"[0, {HUGE}]")
    data = tmp_path / "rows.jsonl"
    data.write_text(f"{good}\n{bad}\n{good}\n")
    out = tmp_path / "out.jsonl"
    capsys.readouterr()
    assert main(["predict", str(checkpoint), str(data), "--skip-bad-rows", "--output", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert "relation" in lines[0] and "relation" in lines[2]
    assert "5000 digits" in lines[1]["error"]
    assert "5000 digits" in cli_error(capsys, "predict", str(checkpoint), str(data))
    # Training data, a labels file's index, a config file and an override.
    train = tmp_path / "train.jsonl"
    train.write_text(open(small_en["train"]).read() + bad.replace("}}", '}, "relation": "x"}') + "\n")
    assert "5000 digits" in cli_error(capsys, "train", f"data.train={train}")
    labels = tmp_path / "relation.csv"
    labels.write_text(f"head_type,tail_type,relation,index\nA,B,born_in,{HUGE}\n")
    line = cli_error(capsys, "train", *data_overrides({**small_en, "labels": str(labels)}))
    assert "at most 18 digits" in line and len(line) < 300
    config = tmp_path / "c.yaml"
    config.write_text(f"train:\n  epochs: {HUGE}\n")
    assert "a number of 5000 characters" in cli_error(capsys, "train", "--config", str(config))
    assert "a number of 5000 characters" in cli_error(capsys, "train", f"train.epochs={HUGE}")
    config.write_text("train:\n  lr: 1e400\n")
    assert "train.lr must be a finite number" in cli_error(capsys, "train", "--config", str(config))
    assert "train.lr must be a finite number" in cli_error(capsys, "train", "train.lr=1e400")


def test_hostile_config_files_are_one_line_and_bounded(tmp_path, capsys):
    cases = {
        # 9^6 list items from 200 bytes: refused before any is built.
        "bomb.yaml": ("a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                      "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\ndata:\n  train: [*c,*c,*c,*c,*c]\n",
                      "aliases"),
        "deep.yaml": ("data: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
        "deep.json": ('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than"),
        "list.yaml": ("- 1\n- 2\n", "not a list"),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        assert expected in cli_error(capsys, "train", "--config", str(tmp_path / name)), name
    (tmp_path / "binary.yaml").write_bytes(bytes(range(128, 256)) * 4)
    assert "not UTF-8 text" in cli_error(capsys, "train", "--config", str(tmp_path / "binary.yaml"))
    (tmp_path / "big.yaml").write_text("# padding\n" * 200_000)
    assert "KiB; not a config" in cli_error(capsys, "train", "--config", str(tmp_path / "big.yaml"))
    assert "aliases" in cli_error(capsys, "train", "data.train=[*a]")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # nobody writes it: opening it for reading would wait for ever
    assert "not a regular file" in cli_error(capsys, "train", "--config", str(fifo))


def test_weights_that_declare_more_than_they_store_are_refused(checkpoint, tmp_path):
    path = Path(tampered(checkpoint, tmp_path, lambda p: None))
    raw = (path / "model.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    width = header["embed.word.weight"]["shape"][1]
    header["embed.word.weight"]["shape"] = [1_000_000, width]  # a (10^6, width) table, once built
    text = json.dumps(header).encode()
    (path / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size:])
    refused(str(path), "incomplete or damaged model folder")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused(checkpoint, tmp_path, value):
    def poison(payload):
        payload["model"]["classifier.weight"][0, 0] = value

    path = tampered(checkpoint, tmp_path, poison)
    refused(path, "NaN or infinite")
    assert "NaN or infinite" in user_error(run_cli("predict", path, "--text", "a b", "--head", "a",
                                                   "--tail", "b"))


def test_a_version_of_the_wrong_type_is_one_line(checkpoint, tmp_path):
    refused(tampered(checkpoint, tmp_path, lambda p: p.update(format_version="1")),
            "format_version must be a positive integer")
    refused(tampered(checkpoint, tmp_path, lambda p: p["config"]["train"].update(lr=10**400)),
            "train.lr must be a finite number")


def test_label_names_cannot_break_lines_or_the_model_card(checkpoint, small_en, tmp_path, capsys):
    refused(tampered(checkpoint, tmp_path, lambda p: p["labels"].__setitem__(0, "a\n## Use")),
            "control character U\\+000A")
    hostile = "<script>alert(1)</script>"
    def hostile_names(payload):
        payload["labels"][0] = hostile
        payload["config"]["data"]["train"] = "[click](x) <img src=x>.jsonl"

    path = tampered(checkpoint, tmp_path, hostile_names)
    assert main(["export", path, str(tmp_path / "out")]) == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert "<script>" not in card and "&lt;script&gt;" in card
    assert "<img" not in card and "\\[click\\]" in card
    labels = tmp_path / "labels.txt"
    labels.write_text("born_in\nnote\u202eevil\n")
    assert "U+202E" in cli_error(capsys, "train",
                                 *data_overrides({**small_en, "labels": str(labels)}))


def test_an_option_spelled_as_a_flag_gets_a_hint(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--data.train=x.csv"])
    assert "key=value without dashes: data.train=x.csv" in capsys.readouterr().err


def test_a_run_never_writes_through_a_link_or_into_a_foreign_folder(small_en, tmp_path, capsys):
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    for name in ("config.yaml", "summary.json", "train.log", "metrics.jsonl"):
        run = tmp_path / f"run-{name}"
        run.mkdir()
        (run / name).symlink_to(outside)
        assert "is a link" in cli_error(capsys, "train", *data_overrides(small_en),
                                        "train.epochs=1", f"output_dir={run}")
    run = tmp_path / "run-ckpt"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last").symlink_to(tmp_path)
    assert "is a link" in cli_error(capsys, "train", *data_overrides(small_en), f"output_dir={run}")
    assert outside.read_text() == "keep me"
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    line = cli_error(capsys, "train", *data_overrides(small_en), f"output_dir={home}")
    assert "holds 'thesis.tex'" in line and "not a run directory" in line
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]


def test_a_shared_cache_entry_of_another_user_is_not_reused(tmp_path, caplog):
    import os

    from reltrain.config.load import load_config
    from reltrain.data.preprocess import prepare

    from conftest import ZH_ROWS, write_csv

    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    data = load_config(None, [f"data.train={path}", "data.language=zh", "data.min_freq=1",
                              f"data.cache_dir={tmp_path / 'shared'}"]).data
    first = prepare(data)
    entry = first.cache_path
    labels = entry / "labels.json"
    planted = json.loads(labels.read_text())[::-1]  # two relations swapped by someone else
    labels.write_text(json.dumps(planted, ensure_ascii=False))
    os.chmod(labels, 0o666)
    again = prepare(data)
    assert not again.reused and again.labels == first.labels
    assert "not reused" in caplog.text
    if os.getuid() == 0:  # as root, a file of another user can be made
        os.chmod(labels, 0o644)
        os.chown(labels, 65534, 65534)
        third = prepare(data)
        assert not third.reused and third.labels == first.labels


def test_jieba_keeps_its_cache_in_reltrains_own_folder(tmp_path):
    import marshal
    import subprocess
    import sys

    folder = tmp_path / "xdg" / "reltrain" / "jieba"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "jieba.cache").write_bytes(marshal.dumps(["not", "a", "dictionary"]))
    # jieba's own dictionary, which the rjieba path leaves unloaded
    code = ("from reltrain.data.segment import _loaded_jieba; jieba = _loaded_jieba(); "
            "print(jieba.lcut('张玲导演说很满意'), jieba.dt.tmp_dir)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert out.returncode == 0, out.stderr
    assert "'张玲', '导演'" in out.stdout and str(folder) in out.stdout
    assert isinstance(marshal.loads((folder / "jieba.cache").read_bytes())[0], dict)  # rebuilt


def test_every_model_command_takes_a_run_directory(checkpoint, small_en, capsys):
    run_dir = checkpoint.parent.parent
    capsys.readouterr()
    assert main(["predict", str(run_dir), "--text", "alice was born in paris", "--head", "alice",
                 "--tail", "paris"]) == 0
    assert json.loads(capsys.readouterr().out)["relation"]
    assert main(["evaluate", str(run_dir), small_en["test"]]) == 0
    assert "macro_f1" in json.loads(capsys.readouterr().out)
    assert reltrain.load(run_dir).labels == reltrain.load(checkpoint).labels
    assert "not found (a model folder or a run directory)" in cli_error(
        capsys, "predict", str(run_dir / "nothing"), "--text", "a b", "--head", "a", "--tail", "b")


def test_the_python_api_trains_and_predicts_dicts(small_en, tmp_path):
    summary = reltrain.train({"data": {k: v for k, v in small_en.items()},
                              "model": {"cnn": {"num_filters": 8}}},
                             {"train.epochs": 1, "log.progress": False,
                              "output_dir": str(tmp_path / "run")})
    assert 0 <= summary["test"]["macro_f1"] <= 1 and summary["world_size"] == 1
    model = reltrain.load(tmp_path / "run")
    text = "alice was born in paris"
    rows = [{"text": text, "h": {"pos": [0, 5]}, "t": {"pos": [18, 23]}},
            {"text": text, "head": "alice", "tail": "paris"},
            {"text": text, "entities": [{"pos": [0, 5]}, {"pos": [18, 23]}]}]
    answers = model.predict_rows(rows, top_k=2)
    assert answers[0]["relation"] == answers[1]["relation"] == answers[2]["pairs"][0]["relation"]
    assert len(answers[0]["top_k"]) == 2 and len(answers[2]["pairs"]) == 2
    with pytest.raises(ValueError, match=r"rows\[1\]\.h\.pos"):
        model.predict_rows([rows[0], {"text": "a b", "h": {"pos": [0, 9]}, "t": {"pos": [2, 3]}}])
    with pytest.raises(ValueError, match=r"rows\[0\]: expected a JSON object, got str"):
        model.predict_rows(["alice"])
    with pytest.raises(UserError, match="^head_offset: head 'alice' at 40..45 lies outside the sentence"):
        model.predict_text(text, head="alice", tail="paris", head_offset=40)
    with pytest.raises(UserError, match="train.epochs"):
        reltrain.train(overrides=["train.epochs=0"])


def test_the_python_api_takes_the_config_object_and_checks_it(small_en, tmp_path):
    from reltrain.config.train import (CNNConfig, Config, DataConfig, LogConfig, ModelConfig, TrainConfig)

    cfg = Config(data=DataConfig(**small_en), model=ModelConfig(cnn=CNNConfig(num_filters=8)),
                 train=TrainConfig(epochs=0), log=LogConfig(progress="false"),
                 output_dir=str(tmp_path / "run"))
    with pytest.raises(UserError, match="train.epochs must be at least 1"):
        reltrain.train(cfg)
    summary = reltrain.train(cfg, {"train.epochs": 1})
    assert summary["epochs_run"] == 1 and summary["test"]["macro_f1"] >= 0
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["model"]["cnn"]["num_filters"] == 8 and saved["data"]["train"] == small_en["train"]


def test_text_the_model_cannot_read_is_warned_about(checkpoint, tmp_path, caplog, capsys):
    from conftest import ZH_ROWS, write_csv

    chinese = write_csv(tmp_path / "zh.csv", ZH_ROWS)
    assert main(["predict", str(checkpoint), str(chinese)]) == 0
    assert "trained on English text" in caplog.text
    caplog.clear()
    gibberish = tmp_path / "unknown.jsonl"
    gibberish.write_text(json.dumps({"text": "qzx vrrp wubble frox", "h": {"pos": [0, 3]},
                                     "t": {"pos": [15, 19]}}) + "\n")
    assert main(["predict", str(checkpoint), str(gibberish)]) == 0
    assert "not in the model's vocabulary" in caplog.text
    caplog.clear()
    assert main(["predict", str(checkpoint), "--text", "alice was born in paris", "--head",
                 "alice", "--tail", "paris"]) == 0
    assert "mean little" not in caplog.text


WATCHDOG = """
import sys, time
from reltrain.runtime import stops
stops.GRACE_S = 1.0
stop = stops.StopRequest().install()
print("ready", flush=True)
if sys.argv[1] == "checked":
    with stop.checked():
        for _ in range(100):  # a loop with stop points: it ends at one
            time.sleep(0.05)
            stop.check("in the loop")
else:
    time.sleep(60)  # busy with no stop point, as a huge config being read once was
"""


@pytest.mark.parametrize("how", ["busy", "checked"])
def test_one_stop_signal_always_ends_the_process(tmp_path, how):
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "busy.py"
    script.write_text(WATCHDOG)
    proc = subprocess.Popen([sys.executable, str(script), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    if how == "busy":
        assert proc.returncode == 143 and "stopped by SIGTERM: no stop point came within 1 s" in err
        assert time.monotonic() - start < 30
    else:  # Preempted at the loop's own stop point, not the watchdog's exit
        assert proc.returncode == 1 and "Preempted" in err and "no stop point" not in err


def test_small_edges_a_new_user_hit(checkpoint, small_en, tmp_path, capsys, caplog):
    # A relative path that is not there says from where it was read.
    line = cli_error(capsys, "train", "data.train=no/such.csv")
    assert "read from the current directory" in line
    # A plain sentence in a .txt file: what a row should look like, not "invalid JSON".
    plain = tmp_path / "sentences.txt"
    plain.write_text("alice was born in paris\n")
    line = cli_error(capsys, "predict", str(checkpoint), str(plain))
    assert "sentences.txt:1: not a JSON object" in line and "--text" in line
    # How many sentences were cut, in words, not a Python dict.
    assert main(["train", *data_overrides(small_en), "data.max_len=8", "train.epochs=1",
                 "model.cnn.kernel_sizes=[3]", "model.cnn.num_filters=8",
                 f"output_dir={tmp_path / 'cut'}"]) == 0
    cut = [r.getMessage() for r in caplog.records if "sentences cut" in r.getMessage()]
    assert cut and "{" not in cut[0] and " in train" in cut[0], cut


def test_loading_a_pretrained_encoder_prints_nothing_of_transformers(tiny_bert, capfd):
    from transformers import AutoTokenizer

    from reltrain.config.load import load_config
    from reltrain.models import build_model

    cfg = load_config(None, ["model.name=lm", f"model.lm.pretrained={tiny_bert}"])
    size = len(AutoTokenizer.from_pretrained(tiny_bert)) + 4  # entity markers: a resize
    capfd.readouterr()
    build_model(cfg.model, size, 3, cfg.data.pos_limit)
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "[transformers]" not in err, err


def test_inspect_reports_repeats_leaks_and_untrained_relations(tmp_path, capsys):
    from conftest import ZH_ROWS, write_csv

    train = write_csv(tmp_path / "train.csv", [*ZH_ROWS, ZH_ROWS[0], (*ZH_ROWS[1][:1], "国籍",
                                                                      *ZH_ROWS[1][2:])])
    test = write_csv(tmp_path / "test.csv", [ZH_ROWS[2], ("张玲很满意", "导演", "张玲", 0, "满意", 3)])
    labels = tmp_path / "relation.csv"
    labels.write_text("head_type,tail_type,relation,index\n" + "".join(
        f"A,B,{name},{i}\n" for i, name in enumerate(["导演", "出生地", "连载网站", "国籍", "祖籍"])))
    capsys.readouterr()
    assert main(["inspect", str(train), str(test), "--labels", str(labels), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["splits"]["train"]["duplicate_rows"] == 1
    assert report["splits"]["train"]["conflicting_rows"] == 1  # 出生地 and 国籍 for one pair
    assert report["sentences_in_train"] == {"test": 1}
    assert report["labels_without_training_rows"] == ["祖籍"]
    assert report["balance"]["largest"] == ["导演", 0.5]
    assert main(["inspect", str(train), str(test), "--labels", str(labels)]) == 0
    text = capsys.readouterr().out
    assert "1 of 2 test row(s) have a sentence that is also in train" in text
    assert "no training row (the model can never learn them): 祖籍" in text
    assert "file not found" in cli_error(capsys, "inspect", str(tmp_path / "none.csv"))


def test_a_run_logs_the_data_report_and_keeps_it_in_its_summary(checkpoint):
    run = checkpoint.parent.parent
    report = json.loads((run / "summary.json").read_text())["data"]["report"]
    assert report["splits"]["train"]["rows"] == 240 and report["balance"]["negative"][0] == "no_relation"
    assert "data check: relations in train: " in (run / "train.log").read_text()
