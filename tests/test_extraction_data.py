"""The extraction task's formats and scores: the same sentence read from SpERT's, PURE's and
reltrain's formats is one ``Annotated``; DuIE's strings become every mention; every bad row is one
line; the scores are the field's, worked by hand; the shared CoNLL04 and DuIE files read whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reltrain.data.extraction import MAX_ENTITIES, MAX_MENTIONS, detect, iter_annotated, read_annotated
from reltrain.data.schema import Annotated, Link, Span
from reltrain.data.sentences import resolve_sentences, sentence_starts
from reltrain.evaluation.extraction import ExtractionCounts, extraction_metrics
from reltrain.runtime.errors import DataError, UserError

from conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"
TOKENS = ["John", "Smith", "works", "for", "Acme", "Corp", "in", "Paris", "."]
# John Smith (Peop) works for Acme Corp (Org) in Paris (Loc): Work_For, OrgBased_In
TEXT = " ".join(TOKENS)
GOLD = Annotated(TEXT, (Span(0, 10, "Peop"), Span(21, 30, "Org"), Span(34, 39, "Loc")),
                 (Link(0, 1, "Work_For"), Link(1, 2, "OrgBased_In")), "")


def write(tmp_path: Path, name: str, rows) -> str:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        encoding="utf-8")
    return str(path)


def spert_row() -> dict:
    return {"tokens": TOKENS, "orig_id": 7,
            "entities": [{"type": "Peop", "start": 0, "end": 2}, {"type": "Org", "start": 4, "end": 6},
                         {"type": "Loc", "start": 7, "end": 8}],
            "relations": [{"type": "Work_For", "head": 0, "tail": 1},
                          {"type": "OrgBased_In", "head": 1, "tail": 2}]}


def without_source(sentence: Annotated) -> tuple:
    return sentence.text, sentence.entities, sentence.relations


def test_one_sentence_in_three_formats_is_one_annotated(tmp_path):
    spert = write(tmp_path, "spert.json", [spert_row()])
    pure = write(tmp_path, "pure.jsonl", [{
        "doc_key": "d1", "sentences": [["A", "."], TOKENS],  # document positions: the 2nd sentence
        "ner": [[], [[2, 3, "Peop"], [6, 7, "Org"], [9, 9, "Loc"]]],
        "relations": [[], [[2, 3, 6, 7, "Work_For"], [6, 7, 9, 9, "OrgBased_In"]]]}])
    own = write(tmp_path, "own.jsonl", [{
        "text": TEXT, "id": "x1",
        "entities": [{"start": 0, "end": 10, "type": "Peop"}, {"start": 21, "end": 30, "type": "Org"},
                     {"start": 34, "end": 39, "type": "Loc"}],
        "relations": [{"head": 0, "tail": 1, "type": "Work_For"}, {"head": 1, "tail": 2, "type": "OrgBased_In"}]}])
    assert [detect(p) for p in (spert, pure, own)] == ["spert", "pure", "reltrain"]
    a, (_, b), c = read_annotated(spert), read_annotated(pure), read_annotated(own)
    assert without_source(a[0]) == without_source(b) == without_source(c[0]) == without_source(GOLD)
    assert (a[0].tokens, a[0].id, b.id, c[0].id) == (tuple(TOKENS), 7, "d1/1", "x1")
    assert [TEXT[e.start:e.end] for e in a[0].entities] == ["John Smith", "Acme Corp", "Paris"]


def test_duie_strings_are_every_mention_and_what_cannot_be_placed_is_counted(tmp_path):
    path = write(tmp_path, "duie.jsonl", [{"text": "张三和张三的妻子李四", "spo_list": [
        {"predicate": "妻子", "subject": "张三", "subject_type": "人物",
         "object": {"@value": "李四"}, "object_type": {"@value": "人物"}},
        {"predicate": "饰演", "subject": "王五", "subject_type": "人物",  # never in the text
         "object": {"@value": "李四", "inWork": "某剧"}, "object_type": {"@value": "人物", "inWork": "影视作品"}}]}])
    assert detect(path) == "duie"
    [(_, build)] = list(iter_annotated(path))
    parsed = build()
    [sentence] = parsed.sentences
    assert (parsed.unmatched, parsed.compound) == (1, 1) and sentence.strings
    assert [(e.start, e.end) for e in sentence.entities] == [(0, 2), (3, 5), (8, 10)]
    assert {(r.head, r.tail, r.type) for r in sentence.relations} == {(0, 2, "妻子"), (1, 2, "妻子")}
    scores = extraction_metrics([sentence], [sentence])
    assert scores["triples_f1"] == 1.0 and scores["triples_support"] == 1  # one string triple


def test_raw_text_and_gold_files_read_without_labels(tmp_path):
    text = tmp_path / "text.txt"
    # the first line says plain text: a later sentence that begins "{" is a sentence
    text.write_text("First sentence .\n\n{\"brief\":\"a quote cut short\n", encoding="utf-8")
    assert detect(str(text)) == "text"
    # as gold (evaluate, a run's splits) it would score or train sentences of nothing
    with pytest.raises(UserError, match="text.txt: read as raw text .* holds no gold entities"):
        read_annotated(str(text))
    pairs = tmp_path / "pairs.jsonl"  # classification's rows, given to an extraction run
    pairs.write_text(json.dumps({"text": "Ann met Bob", "h": {"pos": [0, 3]},
                                 "t": {"pos": [8, 11]}, "relation": "r"}) + "\n")
    with pytest.raises(UserError, match="its rows give one pair each .* a file of task=classify"):
        read_annotated(str(pairs))
    got = read_annotated(str(text), labels=False)
    assert [(s.text, s.entities, s.id) for s in got] == [("First sentence .", (), None),
                                                         ('{"brief":"a quote cut short', (), None)]
    text.write_text("\n{\"text\": \"Second one\", \"id\": 3}\n", encoding="utf-8")
    assert [(s.text, s.id) for s in read_annotated(str(text), labels=False)] == [("Second one", 3)]
    spert = write(tmp_path, "spert.json", [spert_row()])
    [unlabelled] = read_annotated(spert, labels=False)
    assert (unlabelled.text, unlabelled.entities, unlabelled.relations) == (TEXT, (), ())


def bad(tmp_path, name, rows) -> str:
    path = write(tmp_path, name, rows)
    with pytest.raises(DataError) as caught:
        read_annotated(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}:")
    return message


@pytest.mark.parametrize("change, expected", [
    (lambda r: r["entities"][0].update(end=99), "field 'entities[0]': [0, 99) lies outside the sentence (9 tokens)"),
    (lambda r: r["entities"][0].update(start=-1), "field 'entities[0].start': expected a non-negative integer"),
    (lambda r: r["relations"][0].update(tail=9), "field 'relations[0].tail': 9 is not an index of entities (3 of them)"),
    (lambda r: r["relations"][0].update(tail=0), "a relation from an entity to itself"),
    (lambda r: r["entities"][1].update(type=""), "field 'entities[1].type': expected a non-empty string"),
    (lambda r: r.update(tokens=["a b"]), "field 'tokens': expected a non-empty list of tokens without spaces"),
    (lambda r: r.update(entities=[{"type": "X", "start": 0, "end": 1}] * (MAX_ENTITIES + 1)),
     f"more than the {MAX_ENTITIES} a sentence may have"),
])
def test_a_bad_spert_row_is_one_line(tmp_path, change, expected):
    row = spert_row()
    change(row)
    assert expected in bad(tmp_path, "bad.json", [spert_row(), row])


def test_bad_rows_of_the_line_formats_are_one_line(tmp_path):
    assert "bad.jsonl:1: field 'ner[0][0]'" in bad(tmp_path, "bad.jsonl", [
        {"sentences": [["a", "b"]], "ner": [[[1, 5, "X"]]], "relations": [[]]}])
    assert "[0, 0] is not a span of ner[0]" in bad(tmp_path, "bad.jsonl", [
        {"sentences": [["a", "b"]], "ner": [[[1, 1, "X"]]], "relations": [[[0, 0, 1, 1, "R"]]]}])
    many = "甲" * (MAX_MENTIONS + 1)
    assert f"occurs more than {MAX_MENTIONS} times" in bad(tmp_path, "bad.jsonl", [
        {"text": many, "spo_list": [{"predicate": "P", "subject": "甲", "subject_type": "T",
                                     "object": "甲甲", "object_type": "T"}]}])
    assert "field 'entities[0]': [5, 50) lies outside the sentence (4 characters)" in bad(
        tmp_path, "bad.jsonl", [{"text": "abcd", "entities": [{"start": 5, "end": 50, "type": "X"}]}])
    assert "field 'text': expected a non-empty string" in bad(tmp_path, "bad.jsonl", [
        {"text": " ", "entities": []}])


def test_the_scores_worked_by_hand():
    wrong_type = Annotated(TEXT, (Span(0, 10, "Peop"), Span(21, 30, "Loc"), Span(34, 39, "Loc")),
                           (Link(0, 1, "Work_For"), Link(2, 1, "OrgBased_In")), "")
    m = extraction_metrics([GOLD], [wrong_type])
    # entities: 2 of 3 right; strict relations: none (Acme's type); boundaries: Work_For only
    assert (m["entities_precision"], m["entities_recall"]) == (2 / 3, 2 / 3)
    assert m["relations_strict_f1"] == 0.0
    assert (m["relations_boundaries_precision"], m["relations_boundaries_recall"]) == (0.5, 0.5)
    assert m["per_relation"]["Work_For"]["support"] == 1 and "triples_f1" not in m
    assert m["per_entity_type"]["Loc"] == {"f1": 2 / 3, "precision": 0.5, "recall": 1.0, "support": 1}
    # a symmetric relation counts in either order; an unlisted one does not
    reversed_ = Annotated(TEXT, GOLD.entities, (Link(1, 0, "Work_For"), Link(1, 2, "OrgBased_In")), "")
    assert extraction_metrics([GOLD], [reversed_])["relations_strict_f1"] == 0.5
    assert extraction_metrics([GOLD], [reversed_], frozenset({"Work_For"}))["relations_strict_f1"] == 1.0
    # two relations on one pair are two items; the counts of shards add up to the whole
    two = Annotated(TEXT, GOLD.entities, (*GOLD.relations, Link(0, 1, "Kill")), "")
    whole = extraction_metrics([GOLD, two], [two, two])
    shards = ExtractionCounts().add(GOLD, two).merge([ExtractionCounts().add(two, two)]).metrics()
    assert whole["relations_strict_precision"] == 5 / 6 and whole["relations_strict_recall"] == 1.0
    assert {k: v for k, v in whole.items() if k != "num_sentences"} == shards


@pytest.mark.skipif(not (SHARED / "conll04").is_dir(), reason="../shared/data is not here")
def test_the_shared_files_read_whole():
    conll = read_annotated(str(SHARED / "conll04" / "train.json"))
    assert (len(conll), sum(len(s.entities) for s in conll), sum(len(s.relations) for s in conll)) \
        == (922, 3377, 1283)
    assert extraction_metrics(conll, conll)["relations_strict_f1"] == 1.0
    duie = read_annotated(str(SHARED / "duie" / "valid.json"))
    assert len(duie) == 1000 and all(s.strings for s in duie)
    assert extraction_metrics(duie, duie)["triples_support"] >= 1900


def test_inspect_reports_an_extraction_file(tmp_path, capsys):
    from reltrain.cli import main

    broken = spert_row()
    broken["relations"][0]["tail"] = 7
    train = write(tmp_path, "train.json", [spert_row(), spert_row(), broken])
    duie = write(tmp_path, "valid.jsonl", [{"text": TEXT, "spo_list": [
        {"predicate": "Work_For", "subject": "John Smith", "subject_type": "Peop",
         "object": "Acme Corp", "object_type": "Org"},
        {"predicate": "Kill", "subject": "John Smith", "subject_type": "Peop",
         "object": "Acme Corp", "object_type": "Org"}]}])
    assert main(["inspect", train, duie]) == 0
    out = capsys.readouterr().out
    assert "train: " in out and "(SpERT's JSON array): 2 sentences; 6 entity mentions" in out
    assert "1 row(s) cannot be read; first: " in out and "train.json:1: field 'relations[0].tail'" in out
    assert "1 pairs with several relations" in out and "2 string triples" in out
    assert "1 sentence(s) of valid are also in train" in out
    assert main(["inspect", train, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "extract" and report["splits"]["train"]["bad_rows"] == 1


def test_an_extraction_request_is_bounded_and_checked_before_the_model():
    from reltrain.inference.requests import BadRequest, Limits, parse_texts

    limits = Limits(max_items=2, max_text_chars=20, max_request_chars=30)

    def refused(body) -> tuple:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        with pytest.raises(BadRequest) as caught:
            parse_texts(raw, limits)
        return caught.value.status, caught.value.field

    parsed = parse_texts(json.dumps([{"text": "Ann works .", "id": 4}]).encode(), limits)
    assert parsed.many and [(s.text, s.id) for s in parsed.items] == [("Ann works .", 4)]
    assert refused(b"\xff\xfe") == (400, "body")
    assert refused(b'{"text": ') == (400, "body")
    assert refused([]) == (422, "body")
    assert refused([{"text": "a"}] * 3) == (413, "body")  # more sentences than --max-items
    assert refused({"text": "x" * 21}) == (422, "text")
    assert refused([{"text": "x" * 20}, {"text": "y" * 20}]) == (413, "body")  # 40 > 30 chars
    assert refused(["Ann works ."]) == (422, "[0]")
    assert refused({"text": "Ann", "entities": []}) == (422, "entities")
    assert refused({"text": "Ann", "id": "a\u0000b"}) == (422, "id")  # as every reader's ids
    assert refused({"text": "Ann", "id": True}) == (422, "id")


def test_a_damaged_test_predictions_file_leaves_its_bad_rows_out_of_the_report(tmp_path):
    from reltrain.data.answers import sentence_json
    from reltrain.evaluation.runs import _extraction_answers

    good = sentence_json(GOLD)
    missed = {**good, "relations": good["relations"][:1]}
    rows = [json.dumps({"gold": good, "answer": good}),  # right: not shown
            json.dumps({"gold": good, "answer": missed}),  # one relation missed: shown
            json.dumps({"gold": good, "answer": {**good, "relations": [{"head": 9, "tail": 0}]}}),
            json.dumps({"gold": good, "answer": {**good, "entities": "none"}}),
            json.dumps({"gold": [], "answer": good}), "{not json", json.dumps(["a list"])]
    (tmp_path / "test_predictions.jsonl").write_text("\n".join(rows) + "\n")
    view = _extraction_answers(tmp_path)
    assert (view["rows"], view["wrong"]) == (5, 1)  # objects read; the damaged ones left out
    [shown] = view["sentences"]
    assert shown["row"] == 1 and shown["spurious"] == []
    assert shown["missed"] == [["Acme Corp", "Org", "OrgBased_In", "Paris", "Loc"]]


def test_sentences_begin_where_sentencex_says_and_not_after_an_abbreviation():
    text = "Mr. Lee of the U.S. Army was born in Kosovo. He left in 1990! Why? \"Work.\" She said"
    starts = sentence_starts(text, "en")
    assert [text[s:s + 7] for s in starts] == ["He left", "Why? \"W", "\"Work.\"", "She sai"]
    assert sentence_starts("U.S. Army units met Mr. Lee.", "en") == []
    assert sentence_starts("One sentence, no mark", "en") == []
    zh = "《你好》是张三导演的电影。该片由李四主演！"
    assert sentence_starts(zh, "zh") == [zh.index("该")]
    # the longest text a row may hold, all sentence marks (sentencex: about 0.2 s here)
    hostile = "好。" * 10_000
    assert sentence_starts(hostile, "zh") == list(range(2, 20_000, 2))
    assert sentence_starts("." * 20_000 + " a", "en") == []


def test_auto_answers_sentence_by_sentence_unless_training_relations_cross_sentences():
    def sentence(text: str, head: str, tail: str) -> Annotated:
        ends = [Span(text.index(w), text.index(w) + len(w), "T") for w in (head, tail)]
        return Annotated(text, tuple(ends), (Link(0, 1, "r"),), "t")

    one = sentence("Ann met Bob. Then she left.", "Ann", "Bob")
    across = sentence("Ann came. Bob stayed.", "Ann", "Bob")
    assert resolve_sentences("auto", [one] * 20, "en") == "split"
    assert resolve_sentences("auto", [one] * 19 + [across], "en") == "split"  # 1 in 20
    assert resolve_sentences("auto", [one] * 18 + [across] * 2, "en") == "whole"
    assert resolve_sentences("whole", [one], "en") == "whole"
