"""Several relations on one pair (model.multi_label): read from a JSON list, trained with one
sigmoid per relation, each answered above a threshold chosen on validation, scored with each
(pair, relation) counted once; the same on two processes as on one, and after a resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import (EXAMPLE_DIR, data_overrides, ok, read_jsonl, run_cli, torchrun, user_error,
                      weights_of)
from reltrain.data.readers import read_records
from reltrain.data.split import Split
from reltrain.evaluation.metrics import multi_label_metrics, tune_label_thresholds
from reltrain.runtime.errors import DataError, UserError

COMMON = ["log.progress=false", "model.cnn.num_filters=32"]


def listed(relation: str, line: int):
    """The example's relation as a list: every born_in pair also lived_in; a pair with none as
    an empty list on even lines and as the negative label's name on odd ones."""
    if relation == "born_in":
        return ["born_in", "lived_in"]
    if relation == "no_relation":
        return [] if line % 2 == 0 else "no_relation"
    return [relation]


def write_listed(root: Path, sizes: dict[str, int]) -> dict:
    out = {}
    for split, n in sizes.items():
        rows = []
        for line, text in enumerate((EXAMPLE_DIR / f"{split}.jsonl").read_text().splitlines()[:n]):
            row = json.loads(text)
            row["relation"] = listed(row["relation"], line)
            rows.append(json.dumps(row))
        (root / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
        out[split] = str(root / f"{split}.jsonl")
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("listed")
    data = write_listed(root, {"train": 1200, "valid": 240, "test": 240})
    ok(run_cli("train", *data_overrides(data), *COMMON, "train.epochs=4",
               f"output_dir={root / 'run'}"))
    return {"data": data, "run": root / "run"}


def test_a_pair_with_two_relations_is_trained_predicted_and_scored(full):
    run = full["run"]
    summary = json.loads((run / "summary.json").read_text())
    test = summary["test"]
    assert test["multi_label"] and test["negative_label"] == "no_relation"
    assert "no_relation" not in test["per_class"]
    assert test["per_class"]["lived_in"]["f1"] > 0.8 and test["per_class"]["born_in"]["f1"] > 0.8
    config = json.loads((run / "checkpoints/best/config.json").read_text())
    assert config["reltrain_config"]["model"]["multi_label"] == "true"  # auto, resolved
    rows = read_jsonl(run / "test_predictions.jsonl")
    # the figures count each (pair, relation) once, from the answers the run wrote
    gold = {(i, r) for i, row in enumerate(rows) for r in
            ([row["gold"]] if isinstance(row["gold"], str) else row["gold"]) if r != "no_relation"}
    answered = {(i, a["relation"]) for i, row in enumerate(rows) for a in row["relations"]}
    assert all(a["relation"] != "no_relation" for row in rows for a in row["relations"])
    correct = len(gold & answered)
    assert test["micro_precision"] == pytest.approx(correct / len(answered))
    assert test["micro_recall"] == pytest.approx(correct / len(gold))
    both = [row for row in rows if row["gold"] == ["born_in", "lived_in"]]
    assert both and sum({a["relation"] for a in row["relations"]} == {"born_in", "lived_in"}
                        for row in both) >= 0.8 * len(both)
    none = [row for row in rows if not row["relations"]]
    assert all(row["relation"] == "no_relation" and 0 <= row["score"] <= 1 for row in none)
    # evaluate scores the same file the same way with the model's thresholds
    text = ok(run_cli("evaluate", str(run), full["data"]["test"])).stdout
    again = json.loads(text[text.index("{"):])
    assert {k: again[k] for k in ("micro_f1", "macro_f1", "per_class")} == \
           {k: test[k] for k in ("micro_f1", "macro_f1", "per_class")}


def test_one_sentence_answers_both_relations(full):
    born = next(json.loads(t) for t in (EXAMPLE_DIR / "train.jsonl").read_text().splitlines()
                if json.loads(t)["relation"] == "born_in")
    out = ok(run_cli("predict", str(full["run"]), "--text", born["text"], "--head",
                     born["h"]["name"], "--tail", born["t"]["name"])).stdout
    answer = json.loads(out[out.index("{"):])
    assert {a["relation"] for a in answer["relations"]} == {"born_in", "lived_in"}
    assert answer["relation"] in ("born_in", "lived_in")


def test_onnx_answers_as_torch_does(full, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    ok(run_cli("export", str(full["run"]), str(tmp_path / "m"), "--format", "onnx"))
    assert "relations hold (each above its own threshold" in (tmp_path / "m/README.md").read_text()
    answers = {}
    for runtime in ("torch", "onnx"):
        ok(run_cli("predict", str(tmp_path / "m"), full["data"]["test"], "--runtime", runtime,
                   "--output", str(tmp_path / f"{runtime}.jsonl")))
        answers[runtime] = [[a["relation"] for a in row["relations"]]
                            for row in read_jsonl(tmp_path / f"{runtime}.jsonl")]
    assert answers["onnx"] == answers["torch"]
    # the graph gives logits: a folder whose weights lost the thresholds cannot answer lists
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "m/model.safetensors")
    save_file({k: v for k, v in weights.items() if k != "thresholds"}, tmp_path / "m/model.safetensors")
    message = user_error(run_cli("predict", str(tmp_path / "m"), full["data"]["test"],
                                 "--runtime", "onnx"))
    assert message == (f"reltrain: error: {tmp_path / 'm'}: model.safetensors has no relation "
                       f"thresholds, which config.json's model.multi_label=true needs")


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> dict:
    """240 training rows; 79 valid and test rows (divisible by neither 2 nor 3)."""
    return write_listed(tmp_path_factory.mktemp("odd_listed"), {"train": 240, "valid": 79,
                                                                "test": 79})


@pytest.mark.slow
def test_two_processes_and_a_resume_train_what_one_process_does(odd, tmp_path):
    base = [*data_overrides(odd), *COMMON, "train.global_batch_size=16", "train.batch_size=8"]
    ok(run_cli("train", *base, "train.epochs=3", f"output_dir={tmp_path / 'one'}"))
    ok(torchrun(2, "-m", "reltrain", "train", *base, "train.epochs=3",
                f"output_dir={tmp_path / 'two'}"))
    ok(run_cli("train", *base, "train.epochs=1", f"output_dir={tmp_path / 'resumed'}"))
    ok(run_cli("train", *base, "train.epochs=3", f"output_dir={tmp_path / 'resumed'}"))
    one = weights_of(tmp_path / "one/checkpoints/last")
    assert "thresholds" in one
    for other in ("two", "resumed"):
        theirs = weights_of(tmp_path / other / "checkpoints/last")
        assert theirs.keys() == one.keys()
        for key in one:
            torch.testing.assert_close(theirs[key], one[key], rtol=0, atol=1e-5)
        summary = json.loads((tmp_path / other / "summary.json").read_text())
        alone = json.loads((tmp_path / "one/summary.json").read_text())
        assert summary["test"] == alone["test"] and summary["best"] == alone["best"]
    answers = [[(r["gold"], r["relations"] and [a["relation"] for a in r["relations"]])
                for r in read_jsonl(tmp_path / run / "test_predictions.jsonl")]
               for run in ("one", "two")]
    assert answers[0] == answers[1] and len(answers[0]) == 79
    best = str(tmp_path / "two/checkpoints/best")
    text = ok(torchrun(3, "-m", "reltrain", "evaluate", best, odd["test"])).stdout
    spread = json.loads(text[text.index("{"):])
    text = ok(run_cli("evaluate", best, odd["test"])).stdout
    assert spread == json.loads(text[text.index("{"):])


def test_several_relations_with_multi_label_false_is_one_line(odd, tmp_path):
    message = user_error(run_cli("train", *data_overrides(odd), *COMMON, "train.epochs=1",
                                 "model.multi_label=false", f"output_dir={tmp_path / 'r'}"))
    assert "several relations" in message and "model.multi_label=false" in message


def test_single_relations_train_multi_label_when_asked(small_en, tmp_path):
    ok(run_cli("train", *data_overrides(small_en), *COMMON, "train.epochs=1",
               "model.multi_label=true", f"output_dir={tmp_path / 'r'}"))
    rows = read_jsonl(tmp_path / "r/test_predictions.jsonl")
    assert all("relations" in row and isinstance(row["gold"], str) for row in rows)
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert summary["test"]["multi_label"] and summary["best"]["metric"] == "positive_micro_f1"


def test_a_list_of_relations_is_read_checked_and_deduplicated(tmp_path):
    row = {"text": "Ann met Bob .", "h": {"name": "Ann", "pos": [0, 3]},
           "t": {"name": "Bob", "pos": [8, 11]}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({**row, "relation": ["knows", "met", "knows"]}) + "\n"
                    + json.dumps({**row, "relation": []}) + "\n")
    records = read_records(path).records
    assert [r.relation for r in records] == [("knows", "met"), ()]
    # a name's edges are not part of it, in a list or alone
    path.write_text(json.dumps({**row, "relation": ["knows\n", " met"]}) + "\n"
                    + json.dumps({**row, "relation": "knows\t"}) + "\n")
    assert [r.relation for r in read_records(path).records] == [("knows", "met"), "knows"]
    for bad, why in ((["knows", 3], "a string or a list of strings"),
                     (["x"] * 300, "at most 256"), (["knows\nmet"], ""),
                     (["knows", " "], "expected a non-empty string")):  # once a relation ''
        path.write_text(json.dumps({**row, "relation": bad}) + "\n")
        with pytest.raises(DataError) as err:
            read_records(path)
        assert str(err.value).startswith(f"{path}:1: field 'relation'") and why in str(err.value)
    path.write_text(json.dumps({**row, "relation": ["knows", "hates"]}) + "\n")
    with pytest.raises(DataError, match="unknown relation 'hates'"):
        read_records(path, ["knows", "met"])


def test_each_pair_and_relation_counts_once():
    labels = ["a", "b", "none"]
    gold = np.array([[1, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=np.uint8)
    answered = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 1, 0]], dtype=np.uint8)
    m = multi_label_metrics(gold, answered, labels, negative=2)
    # a: 2 right of 2 answered, 2 gold; b: 1 right of 2 answered, 2 gold
    assert (m["micro_precision"], m["micro_recall"]) == (0.75, 0.75)
    assert m["per_class"]["b"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert m["macro_f1"] == pytest.approx(0.75) and m["accuracy"] == 0.5
    assert "none" not in m["per_class"] and m["positive_micro_f1"] == m["micro_f1"]


def test_each_threshold_is_the_best_on_validation():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 2, (300, 3)).astype(np.uint8)
    probs = np.clip(gold * 0.3 + rng.random((300, 3)) * 0.7, 0, 1)
    chosen = tune_label_thresholds(gold, probs, negative=None)
    for c in range(3):
        def f1(t):
            a, g = probs[:, c] >= t, gold[:, c] == 1
            return 2 * (a & g).sum() / (a.sum() + g.sum())
        grid = np.round(np.arange(0.05, 0.951, 0.05), 2)
        assert f1(chosen[c]) == pytest.approx(max(f1(t) for t in grid))
    assert tune_label_thresholds(np.zeros((4, 2), np.uint8), np.full((4, 2), 0.9), 1)[0] == 0.5


def test_one_label_a_row_and_a_row_of_labels_convert():
    split = Split(np.zeros(3, np.int32), np.arange(4), np.zeros((3, 2), np.int32),
                  np.ones((3, 2), np.int32), np.array([0, 2, 1]))
    multi = split.with_labels(True, 3, 2, "x")
    assert multi.labels.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert multi.with_labels(False, 3, 2, "x").labels.tolist() == [0, 2, 1]
    both = Split(*[getattr(split, k) for k in ("token_ids", "offsets", "head", "tail")],
                 np.array([[1, 1, 0], [0, 0, 0], [0, 1, 0]], dtype=np.uint8))
    with pytest.raises(UserError, match="x: example 1 has several relations"):
        both.with_labels(False, 3, 2, "x")


@pytest.mark.slow
def test_the_server_and_demo_page_answer_both_relations(full, tmp_path):
    pytest.importorskip("fastapi")
    import urllib.parse
    import urllib.request

    from test_report import browser
    from test_serve import Server

    born = next(json.loads(t) for t in (EXAMPLE_DIR / "test.jsonl").read_text().splitlines()
                if json.loads(t)["relation"] == "born_in")
    query = {"text": born["text"], "head": born["h"]["name"], "tail": born["t"]["name"]}
    srv = Server(full["run"] / "checkpoints/best")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{srv.port}/predict",
                                         json.dumps(query).encode(),
                                         {"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
        names = [a["relation"] for a in answer["relations"]]
        assert sorted(names) == ["born_in", "lived_in"]
        url = f"http://127.0.0.1:{srv.port}/?{urllib.parse.urlencode(query)}"
        dom = browser("--virtual-time-budget=15000", "--dump-dom", url).stdout
        assert 'data-ready="true"' in dom, dom[-2000:]
        assert f'<p id="relations-answered">relations: <b>{", ".join(names)}</b>' in dom
    finally:
        srv.stop()
    assert "Traceback" not in srv.output()


def test_a_model_of_one_relation_echoes_a_list_and_refuses_to_score_it(model, tmp_path):
    import reltrain

    row = {"text": "Alice Moreau was born in Dunmore .", "h": {"name": "Alice Moreau", "pos": [0, 12]},
           "t": {"name": "Dunmore", "pos": [25, 32]}, "relation": ["born_in", "lived_in"]}
    answer = reltrain.load(str(model)).predict_rows([row])[0]
    assert answer["gold"] == ["born_in", "lived_in"] and "relations" not in answer
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps({**row, "relation": ["born_in", "works_for"]}) + "\n")
    message = user_error(run_cli("evaluate", str(model), str(path)))
    assert message == (f"reltrain: error: {path}:1: relation: 2 relations, but this model gives "
                       f"each pair one (it was trained with model.multi_label=false)")


def test_an_empty_list_is_the_negative_label_when_scored_as_in_training(model, tmp_path):
    """Training with model.multi_label=false reads ``[]`` as the negative label
    (``Split.with_labels``); evaluate and predict read it so too."""
    import reltrain

    row = {"text": "Alice Moreau was born in Dunmore .", "h": {"name": "Alice Moreau", "pos": [0, 12]},
           "t": {"name": "Dunmore", "pos": [25, 32]}, "relation": []}
    path = tmp_path / "none.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "relation": "born_in"}) + "\n")
    text = ok(run_cli("evaluate", str(model), str(path))).stdout
    metrics = json.loads(text[text.index("{"):])
    assert metrics["num_examples"] == 2 and metrics["per_class"]["no_relation"]["support"] == 1
    answer = reltrain.load(str(model)).predict_rows([row])[0]
    assert answer["gold"] == [] and answer["relation"] in reltrain.load(str(model)).labels


def test_inspect_counts_the_rows_of_several_relations(odd):
    out = ok(run_cli("inspect", odd["train"], odd["valid"])).stdout
    several = sum(len(json.loads(line)["relation"]) > 1 for line in open(odd["train"])
                  if isinstance(json.loads(line)["relation"], list))
    assert several and f"{several} row(s) of train give several relations" in out


def test_a_folder_whose_thresholds_were_tampered_with_is_one_line(full, tmp_path):
    import shutil

    from safetensors.torch import save_file

    for name, change in (("long", lambda w: torch.zeros(10**6)), ("none", None)):
        folder = tmp_path / name
        shutil.copytree(full["run"] / "checkpoints/best", folder)
        weights = weights_of(folder)
        if change is None:
            del weights["thresholds"]
        else:
            weights["thresholds"] = change(weights)
        save_file(weights, str(folder / "model.safetensors"))
        line = user_error(run_cli("predict", str(folder), "--text", "Ann met Bo .", "--head",
                                  "Ann", "--tail", "Bo"))
        assert "weights do not fit a cnn model" in line and "(thresholds: " in line


def test_multi_label_takes_only_its_three_values(tmp_path):
    from reltrain.config.load import load_config

    for value in ("true", "false", "auto", "True"):
        assert load_config(None, [f"model.multi_label={value}"]).model.multi_label == value.lower()
    with pytest.raises(UserError, match="model.multi_label must be auto, true or false, not 'maybe'"):
        load_config(None, ["model.multi_label=maybe"])
