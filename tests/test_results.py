"""Results in the field's terms (issue 30): the positive figures that leave out the negative
relation (TACRED's scorer), the figure that selects best.pt, and every test answer kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reltrain.cli import main
from reltrain.data.schema import negative_index
from reltrain.errors import UserError
from reltrain.training.metrics import compute_metrics, resolve_select

from conftest import cli_error, data_overrides, read_jsonl

LABELS = ["born_in", "works_for", "no_relation"]


def tacred_score(gold: list[str], guess: list[str], negative: str) -> tuple[float, float, float]:
    """TACRED's scorer, written out from its definition: a guess of the negative relation is no
    guess, a gold negative is no gold item."""
    correct = sum(g == p != negative for g, p in zip(gold, guess))
    guessed = sum(p != negative for p in guess)
    golds = sum(g != negative for g in gold)
    p = correct / guessed if guessed else 0.0
    r = correct / golds if golds else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def test_the_positive_figures_count_as_tacreds_scorer():
    gold = [0, 0, 1, 2, 2, 2, 1, 0]
    pred = [0, 2, 1, 2, 0, 2, 0, 0]
    m = compute_metrics(np.array(gold), np.array(pred), LABELS, negative=2)
    p, r, f = tacred_score([LABELS[i] for i in gold], [LABELS[i] for i in pred], "no_relation")
    assert (m["positive_micro_precision"], m["positive_micro_recall"],
            m["positive_micro_f1"]) == pytest.approx((p, r, f))
    assert (p, r) == (3 / 5, 3 / 5)  # 3 right of 5 positive guesses, of 5 positive gold items
    f1 = {name: v["f1"] for name, v in m["per_class"].items()}
    assert m["positive_macro_f1"] == pytest.approx((f1["born_in"] + f1["works_for"]) / 2)
    assert m["negative_label"] == "no_relation"
    plain = compute_metrics(np.array(gold), np.array(pred), LABELS)
    assert plain["negative_label"] is None and "positive_micro_f1" not in plain


def test_which_label_is_negative():
    assert negative_index("auto", ["A", "NA", "B"]) == 1
    assert negative_index("auto", ["A", "Other", "None"]) is None  # two candidates: no guess
    assert negative_index("auto", ["A", "B"]) is None
    assert negative_index("none", LABELS) is None
    assert negative_index("works_for", LABELS) == 1
    assert negative_index("auto", ["出生地", "无关系"]) == 1
    with pytest.raises(UserError, match="eval.negative_label 'nope' is not a relation"):
        negative_index("nope", LABELS)
    assert resolve_select("auto", 2) == "positive_micro_f1"
    assert resolve_select("auto", None) == "macro_f1"
    with pytest.raises(UserError, match="needs a negative relation"):
        resolve_select("positive_macro_f1", None)


@pytest.fixture(scope="module")
def run(small_en, tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["train", *data_overrides(small_en), "train.epochs=2", "log.plots=false",
                 "model.cnn.num_filters=8", "train.select_metric=loss",
                 f"output_dir={root / 'run'}"]) == 0
    return root / "run"


def test_a_run_keeps_every_test_answer_and_its_figures_match_them(run, small_en):
    summary = json.loads((run / "summary.json").read_text())
    answers = read_jsonl(run / "test_predictions.jsonl")
    expected = [json.loads(line) for line in open(small_en["test"])]
    assert [a["text"] for a in answers] == [e["text"] for e in expected]  # input order
    assert [a["gold"] for a in answers] == [e["relation"] for e in expected]
    p, r, f = tacred_score([a["gold"] for a in answers], [a["relation"] for a in answers],
                           "no_relation")
    test = summary["test"]
    assert test["negative_label"] == "no_relation"
    assert (test["positive_micro_precision"], test["positive_micro_recall"],
            test["positive_micro_f1"]) == pytest.approx((p, r, f), abs=1e-12)
    assert all(len(a["top_k"]) == 3 and a["top_k"][0]["relation"] == a["relation"] for a in answers)


def test_evaluate_gives_the_same_figures_and_answers(run, small_en, tmp_path, capsys):
    out = tmp_path / "answers.jsonl"
    capsys.readouterr()
    assert main(["evaluate", str(run), small_en["test"], "--predictions", str(out)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    summary = json.loads((run / "summary.json").read_text())
    assert metrics.pop("skipped_rows") == 0 and metrics == summary["test"]
    assert read_jsonl(out) == read_jsonl(run / "test_predictions.jsonl")
    assert main(["evaluate", str(run), small_en["test"], "--negative-label", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["negative_label"] is None


def test_the_loss_can_select_the_best_epoch(run):
    summary = json.loads((run / "summary.json").read_text())
    losses = [json.loads(line)["valid"]["loss"] for line in open(run / "metrics.jsonl")]
    assert summary["best"]["metric"] == "loss"
    assert summary["best"]["value"] == min(losses)
    assert summary["best"]["epoch"] == 1 + losses.index(min(losses))


def test_a_resumed_run_refuses_another_selection_metric(run, small_en, capsys):
    line = cli_error(capsys, "train", *data_overrides(small_en), "train.epochs=3",
                     "log.plots=false", "model.cnn.num_filters=8",
                     "train.select_metric=macro_f1", f"output_dir={run}")
    assert "train.select_metric was 'loss', now 'macro_f1'" in line


def test_an_unknown_negative_label_stops_at_start(small_en, tmp_path, capsys):
    line = cli_error(capsys, "train", *data_overrides(small_en), "eval.negative_label=nope",
                     f"output_dir={tmp_path / 'run'}")
    assert "eval.negative_label 'nope' is not a relation of this data" in line
    line = cli_error(capsys, "train", *data_overrides(small_en), "eval.negative_label=none",
                     "train.select_metric=positive_micro_f1", f"output_dir={tmp_path / 'run2'}")
    assert "needs a negative relation" in line
