"""Symmetric relations of task=extract (a SpERT types file, or extract.symmetric): trained in
both orders, answered once a pair, counted in either order; the model folder keeps them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conftest import ok, read_jsonl, run_cli, user_error

PEOPLE = ["Ann Lee", "Bo Park", "Cy Moss", "Dee Ray", "Eli Fox", "Flo Hart", "Gus Dean", "Hal Wu"]
BASE = ["task=extract", "model.name=bilstm", "model.word_dim=16", "extract.hidden=32",
        "extract.max_width=3", "data.min_freq=1", "train.epochs=10", "log.progress=false",
        "train.lr=0.01", "extract.entity_weight=1"]


def sentence(rng: random.Random) -> dict:
    """"A married B ." with the couple written in either order, or "A met B .", no relation."""
    p, q = rng.sample(PEOPLE, 2)
    married = rng.random() < 0.6
    text = f"{p} {'married' if married else 'met'} {q} ."
    entities = [{"start": 0, "end": len(p), "type": "Peop"},
                {"start": len(text) - 2 - len(q), "end": len(text) - 2, "type": "Peop"}]
    head = rng.randrange(2)  # the order the annotator happened to write
    relations = [{"head": head, "tail": 1 - head, "type": "Married"}] if married else []
    return {"text": text, "entities": entities, "relations": relations}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    root, rng = tmp_path_factory.mktemp("symmetric"), random.Random(5)
    files = {}
    for split, n in (("train", 80), ("valid", 30), ("test", 30)):
        files[split] = root / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(sentence(rng)) + "\n" for _ in range(n)))
    types = {"entities": {"Peop": {"short": "Peop", "verbose": "People"}},
             "relations": {"Married": {"short": "Mar", "verbose": "Married", "symmetric": True}}}
    files["labels"] = root / "types.json"
    files["labels"].write_text(json.dumps(types))
    return {k: str(v) for k, v in files.items()}


def test_a_symmetric_relation_is_learnt_answered_once_and_counted_either_way(data, tmp_path):
    ok(run_cli("train", *[f"data.{k}={v}" for k, v in data.items()], *BASE,
               f"output_dir={tmp_path / 'run'}"))
    folder = tmp_path / "run/checkpoints/best"
    config = json.loads((folder / "config.json").read_text())["reltrain_config"]
    assert config["extract"]["symmetric"] == "Married"
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    # the written order is a coin toss: only in either order can it be learnt and scored
    assert summary["test"]["relations_strict_f1"] > 0.9, summary["test"]
    for row in read_jsonl(tmp_path / "run/test_predictions.jsonl"):
        pairs = [frozenset((r["head"], r["tail"])) for r in row["answer"]["relations"]]
        assert len(pairs) == len(set(pairs)) <= 1
    text = ok(run_cli("evaluate", str(folder), data["test"])).stdout
    again = json.loads(text[text.index("{"):])
    assert again["relations_strict_f1"] == summary["test"]["relations_strict_f1"]


def test_the_encoder_labels_both_orders_of_a_symmetric_relation():
    from reltrain.data.schema import Annotated, Link, Span
    from reltrain.data.spans import SpanEncoder
    from reltrain.data.tokenize import Tokenizer

    sentence = Annotated("Ann Lee married Bo Park .", (Span(0, 7, "Peop"), Span(16, 23, "Peop")),
                         (Link(1, 0, "Married"),), "x:1")
    for symmetric, expected in ((frozenset(), [[0.0], [1.0]]), (frozenset({"Married"}), [[1.0], [1.0]])):
        encoder = SpanEncoder(Tokenizer("word", lowercase=False), ["Peop"], ["Married"], 3, 100,
                              to_ids=lambda toks: [1] * len(toks), symmetric=symmetric)
        example = encoder(sentence)
        order = sorted(range(len(example.pairs)), key=lambda i: tuple(example.pairs[i]))
        assert example.pair_labels[order].tolist() == expected


def test_a_bad_types_file_or_name_is_one_line(data, tmp_path):
    files = [f"data.{k}={v}" for k, v in data.items() if k != "labels"]
    message = user_error(run_cli("train", *files, *BASE, "extract.symmetric=Wed",
                                 f"output_dir={tmp_path / 'a'}"))
    assert message.startswith("reltrain: error: extract.symmetric: 'Wed' is not a relation")
    bad = Path(tmp_path / "types.json")
    bad.write_text(json.dumps({"relations": {"Married": {"symmetric": "yes"}}}))
    message = user_error(run_cli("train", *files, f"data.labels={bad}", *BASE,
                                 f"output_dir={tmp_path / 'b'}"))
    assert message == (f"reltrain: error: {bad}: field 'relations.Married': expected an object "
                       f"whose \"symmetric\" is true or false")


@pytest.mark.parametrize("content, why", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a SpERT types file"),
    ('{"relations": ["Married"]}', "expected a SpERT types file"),
    ('{"relations": {"Married": true}}', "\"symmetric\" is true or false"),
    ("x" * (1 << 20) + "x", "more than 1048576 bytes"),
])
def test_a_hostile_types_file_is_one_data_error(tmp_path, content, why):
    from reltrain.data.extract_prepare import read_symmetric
    from reltrain.runtime.errors import DataError

    path = tmp_path / "types.json"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        read_symmetric(str(path))
    assert str(err.value).startswith(str(path)) and why in str(err.value)
    assert "\n" not in str(err.value)
