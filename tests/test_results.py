"""Results in the field's terms (issue 30): the positive figures that leave out the negative
relation (TACRED's scorer), the figure that selects best.pt, and every test answer kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reltrain.cli import main
from reltrain.data.schema import negative_index
from reltrain.runtime.errors import UserError
from reltrain.evaluation.metrics import compute_metrics, resolve_select

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
    assert resolve_select("auto", 2, LABELS) == "positive_micro_f1"
    assert resolve_select("auto", None, LABELS) == "macro_f1"
    with pytest.raises(UserError, match="needs a negative relation"):
        resolve_select("positive_macro_f1", None, LABELS)
    with pytest.raises(UserError, match="semeval_macro_f1 needs directed labels"):
        resolve_select("semeval_macro_f1", 2, LABELS)


SEMEVAL = ["Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Other", "Entity-Origin(e1,e2)",
           "Entity-Origin(e2,e1)"]


def semeval_scores(key: list[str], answers: list[str]) -> dict:
    index = {name: i for i, name in enumerate(SEMEVAL)}
    return compute_metrics(np.array([index[k] for k in key]), np.array([index[a] for a in answers]),
                           SEMEVAL, negative_index("auto", SEMEVAL))


def test_semeval_macro_f1_is_the_official_scorers_score():
    """SemEval-2010 Task 8's scorer v1.2, "(9+1)-way evaluation with directionality taken into
    account": the four rows of issue 44, for which the official score is 80.00%."""
    m = semeval_scores(["Cause-Effect(e1,e2)", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Other"],
                       ["Cause-Effect(e1,e2)", "Cause-Effect(e1,e2)", "Other", "Other"])
    assert m["semeval_macro_f1"] == pytest.approx(0.8, abs=1e-12)
    assert m["positive_macro_f1"] == pytest.approx(0.5, abs=1e-12)  # the 18-way figure
    # A wrong direction counts against the type's precision (it is an answer of the type) and
    # its recall; Entity-Origin's answer without a gold one gives it F1 0, averaged in.
    m = semeval_scores(["Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Other", "Other"],
                       ["Cause-Effect(e2,e1)", "Cause-Effect(e2,e1)", "Entity-Origin(e1,e2)", "Other"])
    # Cause-Effect: 1 correct of 2 answers and 2 gold: P = R = F1 = 0.5; Entity-Origin: 0.
    assert m["semeval_macro_f1"] == pytest.approx(0.25, abs=1e-12)
    assert "semeval_macro_f1" not in compute_metrics(np.array([0, 1]), np.array([0, 0]), LABELS)


def test_a_run_on_directed_labels_selects_shows_and_compares_the_semeval_score(small_en, tmp_path,
                                                                              capsys, caplog):
    files = {}
    for split in ("train", "valid", "test"):
        rows = [json.loads(line) for line in open(small_en[split])]
        for i, row in enumerate(rows):
            rel = row["relation"]
            row["relation"] = "Other" if rel == "no_relation" else f"{rel}(e{1 + i % 2},e{2 - i % 2})"
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = []
    for name in ("a", "b"):
        caplog.clear()
        assert main(["train", *data_overrides(files), "train.epochs=1", "model.cnn.num_filters=8", "train.select_metric=semeval_macro_f1",
                     f"output_dir={tmp_path / name}"]) == 0
        runs.append(str(tmp_path / name))
        assert "SemEval macro-F1" in caplog.text
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["best"]["metric"] == "semeval_macro_f1"
    assert 0 <= summary["test"]["semeval_macro_f1"] <= 1
    capsys.readouterr()
    assert main(["compare", *runs]) == 0
    assert "SemEval macro-F1" in capsys.readouterr().out


@pytest.fixture(scope="module")
def run(small_en, tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["train", *data_overrides(small_en), "train.epochs=2", "model.cnn.num_filters=8", "train.select_metric=loss",
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
    predicted = run.parent / "predicted.jsonl"  # reltrain predict's answers count the same
    assert main(["predict", str(run), small_en["test"], "--output", str(predicted)]) == 0
    guesses = [a["relation"] for a in read_jsonl(predicted)]
    assert tacred_score([a["gold"] for a in answers], guesses, "no_relation") == pytest.approx(
        (p, r, f), abs=1e-12)


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
                     "model.cnn.num_filters=8",
                     "train.select_metric=macro_f1", f"output_dir={run}")
    assert "train.select_metric was 'loss', now 'macro_f1'" in line


def test_an_unknown_negative_label_stops_at_start(small_en, tmp_path, capsys):
    line = cli_error(capsys, "train", *data_overrides(small_en), "eval.negative_label=nope",
                     f"output_dir={tmp_path / 'run'}")
    assert "eval.negative_label 'nope' is not a relation of this data" in line
    line = cli_error(capsys, "train", *data_overrides(small_en), "eval.negative_label=none",
                     "train.select_metric=positive_micro_f1", f"output_dir={tmp_path / 'run2'}")
    assert "needs a negative relation" in line


def write_every_format(rows: list[dict], folder) -> dict:
    """The same examples (JSONL rows of space-separated tokens) as CSV, TACRED's JSON array,
    SemEval's numbered tagged file, and tagged sentences in a CSV and a JSONL field."""
    import csv

    def tagged(row):
        text, (hs, he), (ts, te) = row["text"], row["h"]["pos"], row["t"]["pos"]
        marks = sorted([(hs, "<e1>"), (he, "</e1>"), (ts, "<e2>"), (te, "</e2>")], reverse=True)
        for at, tag in marks:
            text = text[:at] + tag + text[at:]
        return text

    def token_span(text, start, end):
        first = text[:start].count(" ")
        return first, first + text[start:end].count(" ")  # inclusive, as TACRED writes it

    out = {"jsonl": folder / "rows.jsonl", "csv": folder / "rows.csv",
           "tacred": folder / "rows.json", "semeval": folder / "rows.txt",
           "tagged_csv": folder / "tagged.csv", "tagged_jsonl": folder / "tagged.jsonl"}
    out["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open(out["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence", "relation", "head", "head_offset", "tail", "tail_offset"])
        for r in rows:
            (hs, he), (ts, te) = r["h"]["pos"], r["t"]["pos"]
            w.writerow([r["text"], r["relation"], r["text"][hs:he], hs, r["text"][ts:te], ts])
    tacred = []
    for i, r in enumerate(rows):
        ss, se = token_span(r["text"], *r["h"]["pos"])
        os_, oe = token_span(r["text"], *r["t"]["pos"])
        tacred.append({"id": str(i), "relation": r["relation"], "token": r["text"].split(" "),
                       "subj_start": ss, "subj_end": se, "obj_start": os_, "obj_end": oe,
                       "subj_type": "PERSON", "obj_type": "LOCATION"})
    out["tacred"].write_text(json.dumps(tacred, indent=1))
    out["semeval"].write_text("".join(f'{i + 1}\t"{tagged(r)}"\n{r["relation"]}\nComment:\n\n'
                                      for i, r in enumerate(rows)))
    with open(out["tagged_csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence", "relation"])
        for r in rows:
            w.writerow([tagged(r), r["relation"]])
    out["tagged_jsonl"].write_text("".join(json.dumps({"text": tagged(r), "relation": r["relation"]})
                                           + "\n" for r in rows))
    return out


def test_the_benchmarks_formats_give_the_same_examples_and_figures(run, small_en, tmp_path, capsys):
    from reltrain.data.readers import read_records

    rows = [json.loads(line) for line in open(small_en["test"])]
    files = write_every_format(rows, tmp_path)
    examples = {}
    for kind, path in files.items():
        records = read_records(path).records
        examples[kind] = [(r.text, r.head.start, r.head.end, r.tail.start, r.tail.end, r.relation)
                          for r in records]
    assert len(examples["jsonl"]) == len(rows)
    for kind, got in examples.items():
        assert got == examples["jsonl"], kind
    figures = {}
    for kind in ("tacred", "semeval", "jsonl"):
        capsys.readouterr()
        assert main(["evaluate", str(run), str(files[kind])]) == 0
        figures[kind] = json.loads(capsys.readouterr().out)
    assert figures["tacred"] == figures["semeval"] == figures["jsonl"]


def test_answers_carry_the_inputs_id_in_every_format(run, small_en, tmp_path, capsys):
    """TACRED's id, SemEval's sentence number, a JSONL row's or a CSV column's id reach predict's
    output, evaluate --predictions and the Python API, so a scorer can match answers by id."""
    import csv

    import reltrain

    rows = [json.loads(line) for line in open(small_en["test"])][:6]
    files = write_every_format(rows, tmp_path)
    files["jsonl"].write_text("".join(json.dumps({**r, "id": f"row-{i}"}) + "\n"
                                      for i, r in enumerate(rows)))
    with open(files["csv"], newline="") as f:
        table = list(csv.reader(f))
    with open(files["csv"], "w", newline="") as f:
        csv.writer(f).writerows([[*table[0], "id"]] + [[*r, f"c{i}"] for i, r in enumerate(table[1:])])
    want = {"jsonl": [f"row-{i}" for i in range(6)], "csv": [f"c{i}" for i in range(6)],
            "tacred": [str(i) for i in range(6)], "semeval": [str(i + 1) for i in range(6)]}
    for kind, ids in want.items():
        out = tmp_path / f"{kind}.answers.jsonl"
        assert main(["predict", str(run), str(files[kind]), "--output", str(out)]) == 0
        assert [a["id"] for a in read_jsonl(out)] == ids, kind
        assert main(["evaluate", str(run), str(files[kind]), "--predictions", str(out)]) == 0
        assert [a["id"] for a in read_jsonl(out)] == ids, kind
    assert "id" not in read_jsonl(run / "test_predictions.jsonl")[0]  # the bundled rows have none
    model = reltrain.load(run)
    text = "alice was born in paris"
    answers = model.predict_rows([{"id": 7, "text": text, "head": "alice", "tail": "paris"},
                                  {"id": "s", "text": text,
                                   "entities": [{"pos": [0, 5]}, {"pos": [18, 23]}]}])
    assert answers[0]["id"] == 7 and answers[1]["id"] == "s"
    assert all("id" not in pair for pair in answers[1]["pairs"])
    for bad in ("", "x" * 201, "a\nb", 1.5, [1]):
        with pytest.raises(ValueError, match=r"rows\[0\]\.id: expected an integer or a string|"
                                             r"rows\[0\]\.id: an id holds a control"):
            model.predict_rows([{"id": bad, "text": text, "head": "alice", "tail": "paris"}])
    # one row, or a sentence, in place of a list: once read as its keys or its letters
    for rows in ({"text": text, "head": "alice", "tail": "paris"}, text):
        with pytest.raises(UserError, match="predict_rows takes a list"):
            model.predict_rows(rows)
    for top_k in (0, 1.5, "3", True):  # 1.5 and "3" were tracebacks, 0 answered as 1
        with pytest.raises(UserError, match="top_k must be a whole number of at least 1"):
            model.predict_text(text, "alice", "paris", top_k=top_k)
    assert len(model.predict_text(text, "alice", "paris", top_k=np.int64(2))["top_k"]) == 2


def test_bad_rows_of_the_benchmark_formats_name_file_line_and_field(tmp_path):
    from reltrain.data.readers import read_records
    from reltrain.runtime.errors import DataError

    tacred = tmp_path / "bad.json"
    tacred.write_text('[\n {"token": ["a", "b"], "subj_start": 0, "subj_end": 0, '
                      '"obj_start": 1, "obj_end": 1, "relation": "r"},\n'
                      ' {"token": ["a", "b"], "subj_start": 1, "subj_end": 0, '
                      '"obj_start": 1, "obj_end": 1, "relation": "r"}\n]\n')
    with pytest.raises(DataError, match=r"bad.json:3: field 'subj_end': 0 is before subj_start 1"):
        read_records(tacred)
    semeval = tmp_path / "bad.txt"
    semeval.write_text('1\t"The <e1>child</e1> was in the <e2>cradle</e2>."\nOther\n\n'
                       '2\t"The <e1>child</e1> was in the cradle."\nOther\n')
    with pytest.raises(DataError, match=r"bad.txt:4: field 'sentence': expected one <e2>"):
        read_records(semeval)
    unknown = tmp_path / "data.xyz"
    unknown.write_text("just words\n")
    with pytest.raises(UserError, match="not a format reltrain reads; expected CSV"):
        read_records(unknown)


def test_compare_puts_runs_side_by_side(run, small_en, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(["train", *data_overrides(small_en), "train.epochs=1", "model.cnn.num_filters=4", f"output_dir={other}"]) == 0
    capsys.readouterr()
    assert main(["compare", str(run), str(other), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    first, second = (json.loads((r / "summary.json").read_text())["test"] for r in (run, other))
    assert result["figures"]["positive_micro_f1"] == [first["positive_micro_f1"],
                                                   second["positive_micro_f1"]]
    assert result["per_relation_f1"]["born_in"] == [first["per_class"]["born_in"]["f1"],
                                                    second["per_class"]["born_in"]["f1"]]
    assert result["config_differences"]["model.cnn.num_filters"] == [8, 4]
    assert result["config_differences"]["train.epochs"] == [2, 1]
    assert "output_dir" not in result["config_differences"]
    assert main(["compare", str(run), str(other)]) == 0
    text = capsys.readouterr().out
    assert "pos. micro-F1" in text and "F1 per relation" in text
    assert "model.cnn.num_filters: [1] 8  [2] 4" in text
    assert "not a finished run directory" in cli_error(capsys, "compare", str(run), str(tmp_path))


def test_hostile_benchmark_files_and_run_folders_are_one_line(run, tmp_path, capsys):
    from reltrain.data.readers import read_records
    from reltrain.runtime.errors import DataError

    deep = tmp_path / "deep.json"
    deep.write_text("[" + "[" * 100_000 + "]" * 100_000 + "]")
    with pytest.raises(DataError, match="deep.json:1: .*nested too deeply"):
        read_records(deep)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(json.dumps({"text": "<e1>a</e1> <e1>b</e1> <e2>c</e2>", "relation": "r"}) + "\n")
    with pytest.raises(DataError, match=r"twice.jsonl:1: field 'text': <e1> appears twice"):
        read_records(twice)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "summary.json").write_text('{"test": ' * 50_000)
    for command in ("compare", "report"):
        line = cli_error(capsys, command, str(run), str(broken), *(
            ["--output", str(tmp_path / "r.html")] if command == "report" else []))
        assert "summary.json: cannot read it as JSON" in line, line


def test_a_damaged_validation_block_in_a_summary_is_no_figures_not_a_crash(tmp_path):
    """Without a test split the view reads the best epoch's validation block, which may come
    from someone else: a block of the wrong shape gives no figures, never a traceback."""
    from reltrain.evaluation.runs import run_view

    for best, split in (({"valid": [1, 2]}, None), ({"valid": {}}, None), ("x", None),
                        ({"valid": {"entities_f1": 0.5, "per_entity_type": "x"}}, "validation")):
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"best": best}))
        view = run_view(run, {"task": "extract"})
        assert view["split"] == split and view["per_entity_type"] == {}
        assert view["answers"]["rows"] == 0


def test_a_report_is_never_written_over_a_run_file(run, tmp_path, capsys):
    """``--output RUN/summary.json`` once replaced the run's summary with the page; the run's
    own report.html may be written again."""
    summary = (run / "summary.json").read_bytes()
    for target in (run / "summary.json", run / "checkpoints/best/config.json"):
        line = cli_error(capsys, "report", str(run), "--output", str(target))
        assert f"--output {target} lies inside {run}" in line
    assert (run / "summary.json").read_bytes() == summary
    assert main(["report", str(run), "--output", str(run / "report.html")]) == 0
