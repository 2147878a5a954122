"""task=extract is trained like classification: 2 gloo processes train the same model as one and
score it exactly; a run killed mid-epoch resumes to the uninterrupted result; a checkpoint is a
model folder with its entity types; the test answers are kept beside their gold."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path

import pytest
import torch

from reltrain.cli import main

from conftest import cli_error, ok, read_jsonl, run, run_cli, torchrun, user_error, weights_of

pytestmark = pytest.mark.slow

PEOPLE = ["Ann Lee", "Bo Park", "Cy Moss", "Dee Ray", "Eli Fox", "Flo Hart", "Gus Dean", "Hal Wu"]
ORGS = ["Acme", "Zeta Corp", "Nova Labs", "Orbit Inc"]
PLACES = ["Paris", "Oslo", "Lima", "Kyoto"]


def sentence(rng: random.Random) -> dict:
    """One sentence of a few templates; a pair in the third carries two relations."""
    p, q = rng.sample(PEOPLE, 2)
    org, place = rng.choice(ORGS), rng.choice(PLACES)
    kind = rng.randrange(4)
    if kind == 0:
        parts = [(p, "Peop"), " works for ", (org, "Org"), " in ", (place, "Loc"), " ."]
        links = [(0, 1, "Work_For"), (1, 2, "OrgBased_In")]
    elif kind == 1:
        parts = [(p, "Peop"), " killed ", (q, "Peop"), " ."]
        links = [(0, 1, "Kill")]
    elif kind == 2:
        parts = [(p, "Peop"), " , who killed ", (q, "Peop"), " , worked with ", (q, "Peop"), " ."]
        parts = parts[:4] + [" ."]
        links = [(0, 1, "Kill"), (0, 1, "Work_For")]
    else:
        parts = ["Nothing happened in ", (place, "Loc"), " today ."]
        links = []
    text, entities = "", []
    for part in parts:
        if isinstance(part, tuple):
            entities.append({"start": len(text), "end": len(text) + len(part[0]), "type": part[1]})
            part = part[0]
        text += part
    return {"text": text, "entities": entities,
            "relations": [{"head": h, "tail": t, "type": r} for h, t, r in links]}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> list[str]:
    root, rng = tmp_path_factory.mktemp("extract"), random.Random(3)
    files = {}
    for split, n in (("train", 61), ("valid", 24), ("test", 24)):
        files[split] = root / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(sentence(rng)) + "\n" for _ in range(n)))
    return [f"data.{k}={v}" for k, v in files.items()]


BASE = ["task=extract", "model.name=bilstm", "model.word_dim=16", "extract.hidden=16",
        "extract.max_width=3", "data.min_freq=1", "train.epochs=8", "train.global_batch_size=16",
        "log.progress=false", "train.lr=0.01", "extract.entity_weight=1"]

KILLING = """
import os, signal, sys
from reltrain.cli import main
from reltrain.training.trainer import Trainer

real = Trainer._run_step

def run_step(self, step, number):
    if number == int(os.environ["AT_STEP"]) and not os.path.exists(os.environ["MARKER"]):
        open(os.environ["MARKER"], "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, step, number)

Trainer._run_step = run_step
sys.exit(main(["train", *sys.argv[1:]]))
"""


@pytest.fixture(scope="module")
def one(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    assert main(["train", *data, *BASE, "train.batch_size=16", f"output_dir={out}"]) == 0
    return out


def test_two_processes_train_and_score_as_one(one, data, tmp_path):
    two = tmp_path / "two"
    ok(torchrun(2, "-m", "reltrain", "train", *data, *BASE, "train.batch_size=4",
                f"output_dir={two}"))
    a, b = weights_of(one / "checkpoints/last"), weights_of(two / "checkpoints/last")
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-5, msg=key)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (one, two))
    assert sb["world_size"] == 2 and sb["global_batch_size"] == sa["global_batch_size"] == 16
    assert sa["test"] == sb["test"] and "relations_strict_f1" in sa["test"]
    assert [r["valid"] for r in read_jsonl(one / "metrics.jsonl")] == \
        [r["valid"] for r in read_jsonl(two / "metrics.jsonl")]


def test_a_tagger_trains_and_scores_in_two_processes_as_in_one(data, tmp_path):
    """extract.mentions=tags: its unit dropout and loss are per example, its own mentions'
    negative pairs too, so 2 processes at batch 4 train what one does at 16."""
    tags = [*BASE, "extract.mentions=tags", "extract.negatives=4", "train.lr=0.05"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["train", *data, *tags, "train.batch_size=16", f"output_dir={one}"]) == 0
    ok(torchrun(2, "-m", "reltrain", "train", *data, *tags, "train.batch_size=4",
                f"output_dir={two}"))
    a, b = weights_of(one / "checkpoints/last"), weights_of(two / "checkpoints/last")
    assert "tagger.weight" in a
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-5, msg=key)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (one, two))
    assert sa["test"] == sb["test"] and sa["test"]["entities_f1"] > 0


def test_the_run_leaves_a_model_folder_and_its_answers(one):
    card = json.loads((one / "checkpoints/best/config.json").read_text())
    assert card["task"] == "extract" and card["entity_types"] == ["Loc", "Org", "Peop"]
    assert card["model_type"] == "bilstm-spans"
    rows = read_jsonl(one / "test_predictions.jsonl")
    assert len(rows) == 24 and {"gold", "answer"} <= set(rows[0])
    gold = rows[0]["gold"]
    assert all(gold["text"][e["start"]:e["end"]] == e["text"] for e in gold["entities"])
    assert '"lr": 0.01, "positive_micro_f1": null, "macro_f1": null, "micro_f1": null, ' \
        '"relations_strict_f1": ' in (one / "report.html").read_text()  # its learning curve
    summary = json.loads((one / "summary.json").read_text())
    # these templates are easy: eight small epochs find much of it
    assert summary["test"]["entities_f1"] > 0.4, summary["test"]


def test_a_killed_run_resumes_to_the_uninterrupted_result(one, data, tmp_path):
    script = tmp_path / "killing.py"
    script.write_text(KILLING)
    out = tmp_path / "run"
    args = [sys.executable, str(script), *data, *BASE, "train.batch_size=16", "ckpt.every_steps=2",
            f"output_dir={out}"]
    # as many threads as `one` trained with here: on some CPUs (an AMD EPYC) 1 and 2 threads
    # round the BiLSTM's products apart by 1e-7, and this compares bit for bit
    env = {"AT_STEP": "5", "MARKER": str(tmp_path / "killed"),
           "OMP_NUM_THREADS": str(torch.get_num_threads())}
    first = run(args, env)
    assert first.returncode == -signal.SIGKILL and os.path.exists(tmp_path / "killed")
    second = run(args, env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming from" in second.stderr
    a, b = weights_of(one / "checkpoints/last"), weights_of(out / "checkpoints/last")
    assert all(torch.equal(a[k], b[k]) for k in a)


def rounded(answer: dict) -> dict:
    return json.loads(json.dumps(answer), parse_float=lambda x: round(float(x), 5))


def test_the_model_answers_raw_text_and_scores_a_gold_file(one, data, tmp_path, capsys):
    import reltrain

    model = reltrain.load(one)
    with pytest.raises(reltrain.UserError, match="finds the entities itself: extract"):
        model.predict_text("Ann Lee works for Acme .", "Ann Lee", "Acme")
    answer = model.extract("Ann Lee works for Acme in Paris .")
    assert set(answer) == {"text", "entities", "relations"}
    for e in answer["entities"]:
        assert answer["text"][e["start"]:e["end"]] == e["text"] and 0 <= e["score"] <= 1
    for r in answer["relations"]:
        assert r["head"] < len(answer["entities"]) and r["tail"] < len(answer["entities"])
    raw = tmp_path / "raw.txt"
    raw.write_text("Ann Lee works for Acme in Paris .\n\nBo Park killed Cy Moss .\n")
    out = tmp_path / "answers.jsonl"
    assert main(["predict", str(one), str(raw), "--output", str(out)]) == 0
    rows = read_jsonl(out)
    assert [r["text"] for r in rows] == ["Ann Lee works for Acme in Paris .", "Bo Park killed Cy Moss ."]
    # many texts from Python are plain strings, as one is (once they had to be Annotated)
    assert [rounded(a) for a in model.extract_rows(r["text"] for r in rows)] == [
        rounded(model.extract(r["text"])) for r in rows]
    with pytest.raises(reltrain.UserError, match=r"^texts\[1\]: expected a non-empty string"):
        list(model.extract_rows(["Ann Lee works for Acme .", 7]))
    with pytest.raises(reltrain.UserError, match="extract_rows takes a list"):  # not its letters
        model.extract_rows("Ann Lee works for Acme .")
    assert rounded(rows[0]) == rounded(answer)  # batched with another sentence: float rounding
    capsys.readouterr()
    test = data[2].split("=", 1)[1]
    assert main(["evaluate", str(one), test]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics.pop("skipped_rows") == 0
    assert metrics == json.loads((one / "summary.json").read_text())["test"]
    assert main(["export", str(one), str(tmp_path / "shared")]) == 0
    assert rounded(reltrain.load(tmp_path / "shared").extract(answer["text"])) == rounded(answer)
    assert "--text needs --head and --tail" not in capsys.readouterr().err
    card = (tmp_path / "shared" / "README.md").read_text()
    assert "Given raw text, it finds the entities (3 types: Loc, Org, Peop)" in card
    assert f"| {metrics['relations_strict_f1']:.4f} |" in card and "--head" not in card
    assert 'reltrain predict shared --text "..."' in card and 'model.extract("...")' in card
    # a folder name that would break out of the commands' code is not spelled in them
    assert main(["export", str(one), str(tmp_path / "a `b")]) == 0
    card = (tmp_path / "a `b" / "README.md").read_text()
    assert "# a \\`b: relation" in card and 'reltrain.load("MODEL_FOLDER")' in card


def test_a_bad_row_stops_predict_in_one_line_or_is_answered_by_its_error(one, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "Ann Lee works for Acme ."}\n{"txt": "no text"}\n'
                    '{"text": "Bo Park killed Cy Moss ."}\n')
    out = tmp_path / "out.jsonl"
    error = cli_error(capsys, "predict", str(one), str(rows), "--output", str(out))
    assert f"{rows}:2:" in error and not out.exists()
    assert main(["predict", str(one), str(rows), "--output", str(out), "--skip-bad-rows"]) == 0
    answers = read_jsonl(out)
    assert [a.get("text") for a in answers] == ["Ann Lee works for Acme .", None,
                                                "Bo Park killed Cy Moss ."]
    assert answers[1]["line"] == 2 and "text" in answers[1]["error"]
    assert "1 bad row(s)" in capsys.readouterr().err


def test_the_server_and_its_demo_page_answer_raw_text(one, tmp_path):
    """POST /predict {"text"} answers what predict --text does; the demo page, deep-linked as
    /?text=..., shows the entities marked by type and the relations, markup shown as text."""
    import urllib.parse

    from test_report import browser
    from test_serve import Server

    pytest.importorskip("fastapi")
    text = "Ann Lee works for Acme in Paris ."
    expected = json.loads(run_cli("predict", str(one), "--text", text).stdout)
    assert len(expected["entities"]) == 3 and expected["relations"]
    srv = Server(one)
    try:
        status, answer = srv.post({"text": text})
        assert status == 200 and rounded(answer) == rounded(expected)
        status, answers = srv.post([{"text": text, "id": 7}, {"text": "Bo Park killed Cy Moss ."}])
        assert status == 200 and answers[0]["id"] == 7 and len(answers) == 2
        assert rounded({k: v for k, v in answers[0].items() if k != "id"}) == rounded(expected)
        assert srv.post({"text": text, "head": "Ann Lee"}) == (422, {
            "error": "unknown key 'head'; an extraction model takes text and id", "field": "head"})
        assert srv.post([{"text": " "}])[1]["field"] == "[0].text"
        assert srv.post({"text": text}, "/predict?top_k=2") == (422, {
            "error": "top_k does not apply to an extraction model: it answers every relation "
                     "above its threshold", "field": "top_k"})
        status, info = srv.get("/model")
        assert info["task"] == "extract" and info["entity_types"] == ["Loc", "Org", "Peop"]

        def page(query: str, *args: str) -> str:
            url = f"http://127.0.0.1:{srv.port}/?{urllib.parse.urlencode({'text': query})}"
            return browser("--virtual-time-budget=15000", *args, url).stdout

        dom = page(text, "--dump-dom")
        assert 'data-ready="true"' in dom, dom[-2000:]
        assert dom.count("data-entity=") == 3 and 'class="mention t2"' in dom  # Peop, third type
        for relation in expected["relations"]:
            assert f'data-relation="{relation["type"]}"' in dom
        hostile = "<b>bold</b> Ann Lee works for Acme in Paris ."
        shown = page(hostile, "--dump-dom").split('<p id="sentence">')[1].split("</p>")[0]
        assert "&lt;" in shown and "<b>" not in shown  # the markup is text, in marked pieces
        shot = tmp_path / "demo.png"
        page(text, "--window-size=1000,700", f"--screenshot={shot}")
        import numpy as np
        from PIL import Image

        assert (np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64) / 255).std() > 0.05
    finally:
        srv.stop()
    assert "Traceback" not in srv.output()


def test_with_no_data_it_trains_on_the_bundled_example(tmp_path, capsys):
    out = tmp_path / "example"
    assert main(["train", "task=extract", "train.epochs=2", "log.progress=false",
                 f"output_dir={out}"]) == 0
    log = (out / "train.log").read_text()
    assert "training on the bundled English example of task=extract" in log
    assert "5 entity types, 8 relations" in log and "mentions decoded flat" in log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test"]["num_sentences"] == 120 and "relations_strict_f1" in summary["test"]
    assert (out / "checkpoints/best/model.safetensors").is_file()


def test_a_tagger_trains_predicts_and_loads_as_the_span_model_does(tmp_path, capsys):
    """extract.mentions=tags, the second design (docs/extraction.md): trained on the bundled
    example, its folder answers --text and reltrain.load alike, and the log says tagged."""
    import reltrain

    out = tmp_path / "tags"
    # with the units' shapes (extract.shapes, as configs/conll04-minilm.yaml): the folder keeps them
    assert main(["train", "task=extract", "extract.mentions=tags", "extract.shapes=true",
                 "train.epochs=5", "log.progress=false", f"output_dir={out}"]) == 0
    assert "mentions decoded flat (tagged)" in (out / "train.log").read_text()
    test = json.loads((out / "summary.json").read_text())["test"]
    assert test["entities_f1"] > 0.9 and test["relations_strict_f1"] > 0.6
    text = "Hugo Moreau has been the spouse of Jonas Abara for years ."
    capsys.readouterr()
    assert main(["predict", str(out), "--text", text]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == reltrain.load(str(out)).extract(text)
    assert {(e["text"], e["type"]) for e in answer["entities"]} == {("Hugo Moreau", "person"),
                                                                     ("Jonas Abara", "person")}
    extract = json.loads((out / "checkpoints/best/config.json").read_text())["reltrain_config"][
        "extract"]
    assert extract["mentions"] == "tags" and extract["shapes"] is True


def test_the_report_shows_figures_per_type_and_the_wrong_sentences(one, tmp_path):
    """The run's report.html: test figures of extraction, per entity type and per relation, and
    the test sentences with a missed or spurious relation (the same ones runs_view finds)."""
    from reltrain.evaluation.runs import runs_view
    from test_report import browser

    view = runs_view([str(one)])["runs"][0]
    assert view["task"] == "extract" and set(view["per_entity_type"]) == {"Loc", "Org", "Peop"}
    rows = [json.loads(line) for line in (one / "test_predictions.jsonl").read_text().splitlines()]

    def strict(s: dict) -> set:
        def end(i):
            return tuple(s["entities"][i][k] for k in ("start", "end", "type"))
        return {(r["type"], end(r["head"]), end(r["tail"])) for r in s["relations"]}

    wrong = sum(strict(row["gold"]) != strict(row["answer"]) for row in rows)
    assert view["answers"]["rows"] == 24 and view["answers"]["wrong"] == wrong
    dom = browser("--virtual-time-budget=10000", "--dump-dom",
                  (one / "report.html").resolve().as_uri()).stdout
    assert 'data-rendered="true"' in dom and "relations strict F1" in dom
    assert '<section id="classification" hidden=""' in dom and '<section id="extraction">' in dom
    assert f"{wrong} of 24 test sentences have a missed or spurious relation" in dom
    for kind in ("Loc", "Org", "Peop", "Work_For", "Kill"):
        assert f"<td>{kind}</td>" in dom
    missed = sum(len(s["missed"]) for s in view["answers"]["sentences"])
    assert dom.count('data-kind="missed"') == missed


def test_a_folder_whose_thresholds_were_tampered_with_is_one_line(one, tmp_path):
    import shutil

    from safetensors.torch import save_file

    folder = tmp_path / "tampered"
    shutil.copytree(one / "checkpoints/best", folder)
    weights = weights_of(folder)
    assert weights["thresholds"].shape == (3,)  # one a relation, kept with the weights
    weights["thresholds"] = torch.zeros(10**6)
    save_file(weights, str(folder / "model.safetensors"))
    line = user_error(run_cli("predict", str(folder), "--text", "Ann Lee works for Acme ."))
    assert "weights do not fit an extraction model with this vocabulary and label set (thresholds" in line
    # a folder from before thresholds were tuned has none: every relation at extract.threshold
    save_file({k: v for k, v in weights.items() if k != "thresholds"}, str(folder / "model.safetensors"))
    import reltrain

    assert reltrain.load(folder).model.thresholds.tolist() == [0.5] * 3


@pytest.mark.parametrize("key, value, expected", [
    ("mentions", "tags", "weights do not fit an extraction model"),  # a span model's weights
    ("mentions", "crf", "mentions"),  # not a choice of the option
    ("shapes", True, "(shape.weight: missing where"),  # none saved
    ("shapes", "maybe", "shapes"),
    ("sentences", "paragraphs", "sentences"),  # not a choice
    ("sentences", ["split"], "sentences"),
])
def test_a_folder_whose_design_was_tampered_with_is_one_line(one, tmp_path, key, value, expected):
    import shutil

    folder = tmp_path / "tampered"
    shutil.copytree(one / "checkpoints/best", folder)
    card = json.loads((folder / "config.json").read_text())
    card["reltrain_config"]["extract"][key] = value
    (folder / "config.json").write_text(json.dumps(card))
    line = user_error(run_cli("predict", str(folder), "--text", "Ann Lee works for Acme ."))
    assert expected in line


def test_a_folder_whose_sizes_were_tampered_with_allocates_nothing(one, tmp_path):
    # A width in config.json (at most 65,536) sizes the model before its weights are compared:
    # a 2 x 12,000 BiLSTM would take 4.6 GB to build. The check runs on shapes alone.
    import shutil

    folder = tmp_path / "tampered"
    shutil.copytree(one / "checkpoints/best", folder)
    card = json.loads((folder / "config.json").read_text())
    card["reltrain_config"]["extract"]["hidden"] = 24_000
    (folder / "config.json").write_text(json.dumps(card))
    script = ("import resource, sys\nfrom reltrain.cli import main\ntry:\n    main(sys.argv[1:])\n"
              "finally:\n    print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
              "file=sys.stderr)")
    result = run([sys.executable, "-c", script, "predict", str(folder), "--text", "Ann Lee ."])
    assert "weights do not fit an extraction model" in result.stderr, result.stderr
    peak_mb = int(result.stderr.rsplit("peak ", 1)[1].split()[0]) / 1024
    assert peak_mb < 1500, peak_mb


def test_evaluate_skips_bad_gold_rows_when_asked(one, data, tmp_path, capsys):
    test = Path(dict(item.split("=", 1) for item in data)["data.test"])
    gold = tmp_path / "gold.jsonl"
    gold.write_text(test.read_text() + json.dumps({"text": "Ann Lee .", "entities": [
        {"start": 0, "end": 99, "type": "Peop"}]}) + "\n")
    assert "gold.jsonl:25: field 'entities[0]': [0, 99) lies outside" in cli_error(
        capsys, "evaluate", str(one), str(gold))
    assert "--negative-label does not apply to an extraction model" in cli_error(
        capsys, "evaluate", str(one), str(test), "--negative-label", "none")
    assert "--top-k does not apply to an extraction model" in cli_error(
        capsys, "predict", str(one), "--text", "Ann Lee works for Acme .", "--top-k", "2")
    assert "--head and --tail-offset: not for an extraction model" in cli_error(
        capsys, "predict", str(one), "--text", "Ann Lee works for Acme .", "--head", "Ann Lee",
        "--tail-offset", "18")
    metrics = main_json(capsys, "evaluate", str(one), str(gold), "--skip-bad-rows")
    assert metrics["skipped_rows"] == 1
    assert metrics == {**main_json(capsys, "evaluate", str(one), str(test)), "skipped_rows": 1}


def main_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def predicted(one, tmp_path, texts: list[str], *flags: str) -> list[dict]:
    rows, out = tmp_path / "rows.txt", tmp_path / "answers.jsonl"
    rows.write_text("".join(text + "\n" for text in texts))
    assert main(["predict", str(one), str(rows), "--output", str(out), *flags]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_text_of_many_sentences_is_answered_sentence_by_sentence(one, tmp_path, caplog):
    """The model was trained on sentences (extract.sentences resolved to split): a text of 60
    sentences (about 360 units; the model reads data.max_len = 200) answers exactly what each
    sentence answers alone, at its offsets into the text, and no relation between two."""
    kept = json.loads((one / "checkpoints/best/config.json").read_text())["reltrain_config"]
    assert kept["extract"]["sentences"] == "split"
    short = ["Ann Lee works for Acme .", "Bob Day killed Ann Lee .",
             "Nothing happened in Rome today ."]
    text = " ".join(short * 20)
    answers = predicted(one, tmp_path, [*short, text], "--workers", "2", "--chunk-rows", "1")
    alone, whole = answers[:3], answers[3]
    assert all(a["entities"] for a in alone) and any(a["relations"] for a in alone)
    expected, entities, at = set(), [], 0
    for k in range(60):
        answer = alone[k % 3]
        ends = [(e["start"] + at, e["end"] + at, e["type"]) for e in answer["entities"]]
        expected |= {(ends[r["head"]], ends[r["tail"]], r["type"]) for r in answer["relations"]}
        entities += ends
        at += len(short[k % 3]) + 1
    found = [(e["start"], e["end"], e["type"]) for e in whole["entities"]]
    assert found == entities and expected
    assert {(found[r["head"]], found[r["tail"]], r["type"]) for r in whole["relations"]} == expected
    assert "longer than this model reads" not in caplog.text


def test_a_sentence_longer_than_the_model_reads_is_read_in_windows(one, tmp_path, caplog):
    """One sentence of about 420 units: the windows past the first are searched too, their
    entities at offsets into the whole text, none answered twice where windows overlap."""
    part = "Ann Lee works for Acme and "
    [answer] = predicted(one, tmp_path, [part * 60 + "Rome ."])
    assert "1 text(s) hold a sentence longer than this model reads at once" in caplog.text
    spans = [(e["start"], e["end"]) for e in answer["entities"]]
    assert len(spans) == len(set(spans)) and spans == sorted(spans)
    for e in answer["entities"]:
        assert answer["text"][e["start"]:e["end"]] == e["text"]
    assert max(e["start"] for e in answer["entities"]) > 50 * len(part)  # the first: 33 parts


def test_text_an_extraction_model_cannot_read_is_warned_about(one, tmp_path, caplog, capsys):
    chinese = tmp_path / "zh.txt"
    chinese.write_text("李明在北京的阿里巴巴工作。\n王芳出生于上海。\n", encoding="utf-8")
    assert main(["predict", str(one), str(chinese)]) == 0
    assert "trained on English text" in caplog.text
    caplog.clear()
    assert main(["predict", str(one), "--text", "Qzx vrrp wubble frox glimt ."]) == 0
    assert "not in the model's vocabulary" in caplog.text
    caplog.clear()
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"text": "李明在北京工作。", "entities": [], "relations": []}) + "\n",
                    encoding="utf-8")
    main(["evaluate", str(one), str(gold)])
    assert "trained on English text" in caplog.text
    caplog.clear()
    assert main(["predict", str(one), "--text", "Ann Lee works for Acme in Paris ."]) == 0
    assert "mean little" not in caplog.text


def test_what_an_extraction_model_does_not_do_yet_is_one_line(one, tmp_path):
    line = user_error(run_cli("export", str(one), str(tmp_path / "x"), "--format", "onnx"))
    assert "exports as safetensors only" in line
    line = user_error(run_cli("predict", str(one), "--text", "x" * 20_001))
    assert "--text: 20001 characters, more than the 20000 a sentence may have" in line
    import reltrain

    with pytest.raises(reltrain.UserError, match="non-empty string"):
        reltrain.BatchModel(str(one))({"text": ["fine", " "]})
    with pytest.raises(reltrain.UserError, match=r"texts\[0\]: expected a non-empty"):
        reltrain.BatchModel(str(one))({"text": [None]})  # a null cell is no text "None"
    # DataParallel on several GPUs would cut a batch's spans apart from their sentences
    from reltrain.runtime.distributed import DistContext
    from reltrain.training.extract_run import check_strategy

    check_strategy(DistContext(strategy="dp", dp_devices=[0]))  # one GPU: the plain model
    with pytest.raises(reltrain.UserError, match="launch with torchrun"):
        check_strategy(DistContext(strategy="dp", dp_devices=[0, 1]))
    line = user_error(run_cli("train", "task=extract", "extract.negatives=-1",
                              f"output_dir={tmp_path / 'neg'}"))
    assert "extract.negatives must be >= 0, not -1" in line


def test_a_picklable_batch_model_answers_both_tasks(one, tmp_path):
    """What Ray's map_batches and Spark's predict_batch_udf run: pickled small, loaded once."""
    import pickle

    import numpy as np

    import reltrain

    for_extraction = reltrain.BatchModel(str(one))
    shipped = pickle.dumps(for_extraction)
    assert len(shipped) < 1000
    batch = {"text": np.array(["Ann Lee works for Acme in Paris .", "Bo Park killed Cy Moss ."]),
             "doc": np.array([7, 8])}
    out = pickle.loads(shipped)(batch)
    assert list(out["doc"]) == [7, 8] and len(out["answer"]) == 2
    first = json.loads(out["answer"][0])
    assert first["text"] == "Ann Lee works for Acme in Paris ." and "entities" in first
    assert pickle.loads(pickle.dumps(for_extraction)).predict_texts(batch["text"])[1] == out["answer"][1]
    assert len(pickle.dumps(for_extraction)) < 1000  # loaded, it still travels without the model
    # a classification model, on the rows predict_rows takes
    assert main(["train", "log.progress=false", "train.epochs=1", "model.cnn.num_filters=8",
                 f"output_dir={tmp_path / 'cls'}"]) == 0
    rows = {"text": ["Alice Moreau was born in Dunmore ."], "head": ["Alice Moreau"],
            "tail": ["Dunmore"]}
    answer = json.loads(pickle.loads(pickle.dumps(reltrain.BatchModel(tmp_path / "cls")))(rows)["answer"][0])
    assert answer["relation"] and answer["head"]["name"] == "Alice Moreau"


def test_prediction_in_helpers_or_under_torchrun_writes_what_one_process_does(one, tmp_path):
    rng = random.Random(5)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(sentence(rng)["text"] + "\n" for _ in range(600)))
    chunks = ["--chunk-rows", "256"]  # 3 chunks
    ok(run_cli("predict", str(one), str(corpus), "--workers", "1", *chunks, "--output",
               str(tmp_path / "one.jsonl")))
    ok(run_cli("predict", str(one), str(corpus), "--workers", "2", *chunks, "--output",
               str(tmp_path / "helpers.jsonl")))
    ok(torchrun(2, "-m", "reltrain", "predict", str(one), str(corpus), *chunks, "--output",
                str(tmp_path / "two.jsonl")))
    one_rows, helper_rows, two_rows = (read_jsonl(tmp_path / f"{n}.jsonl")
                                       for n in ("one", "helpers", "two"))
    assert len(one_rows) == 600 and one_rows == two_rows
    # a helper computes on one thread: a score's last digits may differ, no answer does
    assert [rounded(r) for r in helper_rows] == [rounded(r) for r in one_rows]


def test_a_run_without_a_test_split_shows_its_validation_figures(data, tmp_path):
    """No data.test (the shared data has none): the report and compare show the selected
    epoch's validation figures, named as such, and say there are no test sentences."""
    from reltrain.commands.compare import compare_runs
    from reltrain.evaluation.runs import runs_view
    from test_report import browser

    out = tmp_path / "run"
    assert main(["train", *data[:2], *BASE, "train.batch_size=16", "train.epochs=2",
                 f"output_dir={out}"]) == 0
    best = json.loads((out / "summary.json").read_text())["best"]
    view = runs_view([str(out)])["runs"][0]
    assert view["split"] == "validation" and view["mentions"] == "spans"
    assert view["figures"]["relations_strict_f1"] == best["valid"]["relations_strict_f1"]
    assert view["per_entity_type"] == best["valid"]["per_entity_type"]
    compared = compare_runs([str(out), str(out)])
    assert [r["split"] for r in compared["runs"]] == ["validation", "validation"]
    assert compared["figures"]["entities_f1"] == [best["valid"]["entities_f1"]] * 2
    dom = browser("--virtual-time-budget=10000", "--dump-dom",
                  (out / "report.html").resolve().as_uri()).stdout
    assert 'data-rendered="true"' in dom and "Figures (validation)" in dom
    assert "Per entity type (<span class=\"split\">validation</span>)" in dom
    assert "bilstm, mentions spans" in dom and "it had no test split" in dom
    assert "0 of 0" not in dom


def test_compare_and_report_refuse_runs_of_two_tasks(one, model, tmp_path, capsys):
    """An extraction run's strict F1 per relation beside a classifier's F1 per class: compare
    printed a difference of nothing, and the report left the extraction run's sections out."""
    for command in (["compare"], ["report", "--output", str(tmp_path / "r.html")]):
        line = cli_error(capsys, *command, str(one), str(model.parent / "run"))
        assert "error: these runs are of different tasks" in line and "run: extract" in line
    assert not (tmp_path / "r.html").exists()
