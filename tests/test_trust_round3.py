"""Input from a stranger, third round (issue 44): a tokenizer that panics, names that differ
from their span only in case, unreadable rows that inspect must count, ids carried to answers."""

from __future__ import annotations

import json

import pytest

import reltrain
from reltrain.cli import main
from reltrain.data.readers import read_records
from reltrain.runtime.errors import DataError, UserError

from conftest import cli_error, data_overrides, encoder_args

# Oniguruma gives up on this pattern over a long run of "a" (its retry limit), and the
# tokenizers crate turns that error into a Rust panic: pyo3's PanicException, a BaseException.
PANIC_TEXT = "alice " + "a" * 60 + "b was born in paris"


@pytest.fixture(scope="module")
def panicking_folder(small_en, tiny_bert, tmp_path_factory):
    """An exported LM folder whose tokenizer.json has a pathological pre-tokenizer regex."""
    root = tmp_path_factory.mktemp("panic")
    assert main(["train", *data_overrides(small_en), *encoder_args("lm", tiny_bert),
                 "train.epochs=1", "log.progress=false", f"output_dir={root / 'run'}"]) == 0
    folder = root / "model"
    assert main(["export", str(root / "run"), str(folder)]) == 0
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"},
                             "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    # The generic fast class reads tokenizer.json as it is (BertTokenizer rebuilds its own).
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_a_tokenizer_that_panics_is_one_line_at_every_entry_point(panicking_folder, tmp_path,
                                                                    capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"text": PANIC_TEXT, "h": {"pos": [0, 5]},
                                "t": {"pos": [len(PANIC_TEXT) - 5, len(PANIC_TEXT)]},
                                "relation": "born_in"}) + "\n", encoding="utf-8")
    said = "the model's tokenizer failed on this text"
    assert said in cli_error(capsys, "predict", str(panicking_folder), "--text", PANIC_TEXT,
                             "--head", "alice", "--tail", "paris")
    assert said in cli_error(capsys, "predict", str(panicking_folder), str(rows),
                             "--workers", "1")
    assert said in cli_error(capsys, "evaluate", str(panicking_folder), str(rows))
    model = reltrain.load(panicking_folder)
    with pytest.raises(UserError, match=said):
        model.predict_text(PANIC_TEXT, "alice", "paris")
    # The same model reads ordinary text.
    assert model.predict_text("alice was born in paris", "alice", "paris")["relation"]


def test_a_tokenizer_that_panics_fails_its_request_and_the_server_goes_on(panicking_folder):
    pytest.importorskip("fastapi")
    from test_serve import Server

    server = Server(panicking_folder)
    try:
        status, body = server.post({"text": PANIC_TEXT, "head": "alice", "tail": "paris"})
        assert status == 422 and "the model's tokenizer failed" in body["error"]
        status, body = server.post({"text": "alice was born in paris", "head": "alice",
                                    "tail": "paris", "id": "q-1"})
        assert status == 200 and body["relation"] and body["id"] == "q-1"  # issue 44, item 6
    finally:
        server.stop()


def test_an_opennre_name_that_differs_only_in_case_or_spaces_is_read(tmp_path):
    """wiki80 and FewRel lower-case ``name`` while the tokens keep their case; pos is the truth."""
    path = tmp_path / "wiki80.jsonl"
    rows = [{"token": ["The", "TJQ", "Tower", "is", "in", "New", "York"], "h": {"name": "tjq tower",
             "pos": [1, 3]}, "t": {"name": "new york", "pos": [5, 7]}, "relation": "located_in"},
            {"text": "Ann met Bob", "h": {"name": " ANN", "pos": [0, 3]}, "t": {"name": "b o b",
             "pos": [8, 11]}, "relation": "met"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    first, second = read_records(path).records
    assert (first.head.name, first.tail.name) == ("TJQ Tower", "New York")
    assert (second.head.name, second.tail.name) == ("Ann", "Bob")
    path.write_text(json.dumps({**rows[1], "h": {"name": "Anne", "pos": [0, 3]}}) + "\n",
                    encoding="utf-8")
    with pytest.raises(DataError, match=r"field 'h.pos': the text at \[0, 3\] is 'Ann', not 'Anne'"):
        read_records(path)


def test_inspect_counts_and_names_the_rows_it_cannot_read(tmp_path, capsys):
    path = tmp_path / "train.jsonl"
    good = {"text": "Ann met Bob", "h": {"pos": [0, 3]}, "t": {"pos": [8, 11]}, "relation": "met"}
    lines = [json.dumps(good), json.dumps({**good, "t": {"pos": [8, 30]}}), "{not json",
             json.dumps({**good, "relation": "knows"}), json.dumps({**good, "h": {"pos": [9, 3]}}),
             json.dumps({**good, "text": 5})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "train: " in out and ": 2 rows;" in out and "no repeated rows" not in out
    assert (f"4 row(s) of train cannot be read and are left out of these counts; first: "
            f"{path}:2: field 't.pos': [8, 30] lies outside the sentence (11 characters); "
            f"{path}:3: invalid JSON") in out
    assert main(["inspect", str(path), "--json"]) == 0
    split = json.loads(capsys.readouterr().out)["splits"]["train"]
    assert split["rows"] == 2 and split["bad_rows"] == 4 and len(split["bad_examples"]) == 3
    assert split["bad_examples"][2].startswith(f"{path}:5: field 'h.pos'")


@pytest.mark.parametrize("encoding", ["gbk", "gb18030", "utf-16"])
def test_data_files_in_the_encodings_excel_writes_are_read_with_data_encoding(
        encoding, zh_csv, tmp_path, capsys):
    path = tmp_path / f"{encoding}.csv"
    path.write_bytes(zh_csv.read_text(encoding="utf-8").encode(encoding))
    want = read_records(zh_csv).records
    got = read_records(path, encoding=encoding).records
    assert [(r.text, r.head, r.tail, r.relation) for r in got] == \
        [(r.text, r.head, r.tail, r.relation) for r in want]
    with pytest.raises(DataError, match=r":[12]: not UTF-8 text \(byte 0x..\); save the file as "
                                        r"UTF-8, or name its encoding with data.encoding"):
        read_records(path)
    assert main(["inspect", str(path), "--encoding", encoding]) == 0
    assert f": {len(want)} rows;" in capsys.readouterr().out


def test_a_bad_encoding_name_or_a_folder_for_a_file_is_one_line(tmp_path, small_en, capsys):
    assert "data.encoding: 'rot13' is not a text encoding" in cli_error(
        capsys, "train", *data_overrides(small_en), "data.encoding=rot13")
    assert "--encoding: 'klingon' is not a text encoding" in cli_error(
        capsys, "inspect", small_en["train"], "--encoding", "klingon")
    assert f"data.train: {tmp_path} is a directory; give a file" in cli_error(
        capsys, "train", f"data.train={tmp_path}")
    assert f"DATA: {tmp_path} is a directory; give a file" in cli_error(
        capsys, "inspect", str(tmp_path))


def test_compare_lines_up_chinese_relation_names_by_display_width(tmp_path, capsys):
    from reltrain.evaluation.metrics import display_width

    runs = []
    for name, f1 in (("a", 0.5), ("b", 0.75)):
        (tmp_path / name).mkdir()
        per_class = {rel: {"f1": f1} for rel in ("所在城市", "x", "出品公司（电影）", "祖籍")}
        (tmp_path / name / "summary.json").write_text(json.dumps(
            {"test": {"macro_f1": f1, "per_class": per_class}}, ensure_ascii=False),
            encoding="utf-8")
        runs.append(str(tmp_path / name))
    assert main(["compare", *runs]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "0.5000" in line]
    assert len(rows) == 5
    # Each figure ends at the same terminal column, whatever the name before it.
    assert len({display_width(row[:row.index("0.5000") + 6]) for row in rows}) == 1


def test_the_bundled_example_is_learnt_over_epochs_not_in_one(tmp_path):
    """reltrain train with no data: the first epoch lands clearly below a perfect score and
    later epochs improve on it (issue 44: it used to score 1.0000 everywhere after one)."""
    assert main(["train", "log.progress=false", f"output_dir={tmp_path / 'run'}"]) == 0
    history = [json.loads(line) for line in
               (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = history[0]["valid"]["positive_micro_f1"]
    best = max(r["valid"]["positive_micro_f1"] for r in history)
    assert first < 0.9 and best > first + 0.03, [r["valid"]["positive_micro_f1"] for r in history]
    test = json.loads((tmp_path / "run" / "summary.json").read_text())["test"]
    assert test["positive_micro_f1"] < 0.97
