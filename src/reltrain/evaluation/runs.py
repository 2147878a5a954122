"""What a finished run shows, computed in one place from what it left on disk (``summary.json``,
``config.yaml``, ``metrics.jsonl``, ``test_predictions.jsonl``): ``reltrain report`` and a
run's own ``report.html`` render it as a page, ``reltrain compare`` as a table or JSON. A run
directory may come from someone else: every file is read bounded, and a damaged one is one line."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from pathlib import Path

from reltrain.config.files import read_config_file
from reltrain.config.train import dotted
from reltrain.runtime.errors import UserError

MAX_FILE = 64 << 20  # a summary of 10^5 relations is a few MB
MAX_LINE = 1 << 20  # one line of metrics.jsonl or test_predictions.jsonl
MAX_ROWS = 1_000_000  # test rows read per run
SHOWN_MISTAKES = 300  # misclassified rows kept per run (the most confident first)


def runs_view(runs: list[str], answers: bool = True) -> dict:
    """Each run's view (``run_view``) and the options in which the runs differ."""
    configs = [_flat_config(Path(run)) for run in runs]
    tasks = [_task(c) for c in configs]
    if len(set(tasks)) > 1:  # their figures, curves and sections have nothing in common
        raise UserError("these runs are of different tasks (" + ", ".join(
            f"{run}: {task}" for run, task in zip(runs, tasks)) + "); give runs of one task")
    return {"runs": [run_view(Path(run), config, answers) for run, config in zip(runs, configs)],
            "config_differences": config_differences(configs) if len(runs) > 1 else {}}


def _task(config: dict) -> str:
    return "extract" if config.get("task") == "extract" else "classify"


def run_view(path: Path, config: dict, answers: bool = True) -> dict:
    """One run as plain data: what it was, its best epoch, its test figures and per-relation
    figures (without a test split, its best epoch's validation ones: ``split`` says which),
    its learning curves and, with ``answers``, the confusion counts and most confident
    mistakes of its test rows; each file read once."""
    summary = _read_json(path / "summary.json")
    history = list(_jsonl(path / "metrics.jsonl", 100_000))
    test = summary.get("test") if isinstance(summary.get("test"), dict) else {}
    best = summary.get("best") if isinstance(summary.get("best"), dict) else {}
    split = "test" if test else None
    if not test and isinstance(best.get("valid"), dict) and best["valid"]:
        # no test split (the shared data has none): the selected epoch's validation figures,
        # named as such wherever they are shown
        test, split = best["valid"], "validation"
    task = _task(config)
    per_kind = {k: test.get(k) if isinstance(test.get(k), dict) else {}
                for k in ("per_class", "per_entity_type", "per_relation")}
    return {
        "name": path.name or str(path), "path": str(path), "task": task,
        "encoder": config.get("model.name"),
        "mentions": config.get("extract.mentions") if task == "extract" else None,
        "data": {k: config.get(f"data.{k}") for k in ("train", "valid", "test")},
        "world_size": summary.get("world_size"),
        "global_batch_size": summary.get("global_batch_size"),
        "epochs_run": summary.get("epochs_run"),
        "best": {k: best.get(k) for k in ("metric", "value", "epoch")},
        "split": split,  # whose figures "figures" and the per-kind ones are
        "seconds": sum(r.get("train_seconds") or 0 for r in history),
        "figures": {k: v for k, v in test.items() if k not in per_kind},
        **per_kind,
        "curves": _curves(history),
        **({"answers": _extraction_answers(path) if task == "extract" else
            _answers(path, test.get("negative_label"))} if answers else {}),
    }


def check_finished(runs: list[str]) -> None:
    for run in runs:
        if not (Path(run) / "summary.json").is_file():
            raise UserError(f"{run}: not a finished run directory (no summary.json)")


def _read_json(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE + 1)
        value = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"{path}: cannot read it as JSON ({str(exc)[:120]})") from None
    if len(raw) > MAX_FILE or not isinstance(value, dict):
        raise UserError(f"{path}: not a run's summary")
    return value


def config_differences(configs: list[dict]) -> dict:
    """The flat option keys whose values are not the same in every run, with each run's value
    (``output_dir``, which always differs, left out)."""
    keys = sorted(set().union(*configs))
    return {k: [c.get(k) for c in configs] for k in keys
            if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1
            and k != "output_dir"}


def _flat_config(run: Path) -> dict:
    """The run's options, flat; none if its config.yaml is missing or cannot be read (the view
    goes on without them)."""
    path = run / "config.yaml"
    try:
        return dotted(read_config_file(str(path))) if path.is_file() else {}
    except UserError:
        return {}


def _jsonl(path: Path, limit: int) -> Iterator[dict]:
    """The first ``limit`` objects of a JSON-lines file, one at a time."""
    if not path.is_file():
        return
    kept = 0
    with open(path, "rb") as f:
        for raw in f:
            if kept >= limit or len(raw) > MAX_LINE:
                break
            try:
                row = json.loads(raw.decode("utf-8"))
            except (ValueError, RecursionError):
                continue  # a damaged line: the run's own readers say so
            if isinstance(row, dict):
                kept += 1
                yield row


def _curves(history: list[dict]) -> list[dict]:
    out = []
    for row in history:
        valid = row.get("valid") if isinstance(row.get("valid"), dict) else {}
        out.append({"epoch": row.get("epoch"), "train_loss": row.get("train_loss"),
                    "lr": row.get("lr"),
                    **{k: valid.get(k) for k in ("positive_micro_f1", "macro_f1", "micro_f1",
                                                 "relations_strict_f1", "triples_f1")}})
    return out


def _answers(run: Path, negative: object = None) -> dict:
    """The confusion counts of the test rows and the most confident mistakes (their text), read
    a row at a time: only ``SHOWN_MISTAKES`` rows are held, however many the test set has. A
    row of several relations (``relations``) counts each gold one against itself or "none"
    (the negative label), and each answered one the gold lacks as "none" against it."""
    none = negative if isinstance(negative, str) else "(none)"
    counts: dict = {}
    kept: list = []  # (score, -row, row, answer): a min-heap of the most confident mistakes
    rows = wrong = 0
    for i, row in enumerate(_jsonl(run / "test_predictions.jsonl", MAX_ROWS)):
        rows += 1
        cells = _cells(row, none)
        if cells is None:
            continue
        for cell in cells:
            counts[cell] = counts.get(cell, 0) + 1
        if any(g != p for g, p in map(lambda c: c.split("\t"), cells)):
            wrong += 1
            item = (float(row.get("score") or 0), -i, i, row, cells)
            if len(kept) < SHOWN_MISTAKES:
                heapq.heappush(kept, item)
            elif item[:2] > kept[0][:2]:
                heapq.heapreplace(kept, item)
    shown = [{"row": i, "text": r.get("text"), "head": r.get("head"), "tail": r.get("tail"),
              "gold": _named(r.get("gold"), none), "relation": _named(r.get("relations"), none)
              if "relations" in r else r.get("relation"), "score": r.get("score"),
              "gold_score": next((k.get("score") for k in r.get("top_k") or []
                                  if isinstance(k, dict) and k.get("relation") == r.get("gold")), None),
              **({"cells": cells} if "relations" in r else {})}
             for _, _, i, r, cells in sorted(kept, key=lambda item: (-item[0], item[2]))]
    return {"rows": rows, "confusion": counts, "mistakes": shown, "wrong": wrong}


def _cells(row: dict, none: str) -> list[str] | None:
    """The "gold\tpredicted" cells a test row counts in (None: a row not as written)."""
    gold = row.get("gold")
    if "relations" not in row:
        guess = row.get("relation")
        ok = isinstance(gold, str) and isinstance(guess, str)
        return [f"{gold}\t{guess}"] if ok else None
    golds = [gold] if isinstance(gold, str) else gold
    answered = row.get("relations")
    if not isinstance(golds, list) or not isinstance(answered, list):
        return None
    golds = {g for g in golds if isinstance(g, str) and g != none}
    given = {a.get("relation") for a in answered if isinstance(a, dict)} - {None}
    cells = [f"{g}\t{g if g in given else none}" for g in sorted(golds)]
    cells += [f"{none}\t{a}" for a in sorted(given - golds, key=str)]
    return cells or [f"{none}\t{none}"]


def _named(relations: object, none: str) -> str:
    """A row's relations as one line: "born_in, lived_in", or the negative label for none."""
    if isinstance(relations, str):
        return relations
    names = [r.get("relation") if isinstance(r, dict) else r for r in relations or []]
    return ", ".join(str(n) for n in names if n is not None) or none


def _extraction_answers(run: Path) -> dict:
    """The test sentences of an extraction run whose answer missed a gold relation or gave one
    the gold lacks (strict: both spans, both types and the relation), the first
    ``SHOWN_MISTAKES`` of them with their answer's entities, read a row at a time."""
    rows = wrong = 0
    shown = []
    for i, row in enumerate(_jsonl(run / "test_predictions.jsonl", MAX_ROWS)):
        rows += 1
        gold, answer = _strict_triples(row.get("gold")), _strict_triples(row.get("answer"))
        if gold is None or answer is None or gold == answer:
            continue
        wrong += 1
        if len(shown) < SHOWN_MISTAKES:
            shown.append({"row": i, "text": row["answer"].get("text"),
                          "entities": row["answer"].get("entities"),
                          "missed": [gold[k] for k in sorted(set(gold) - set(answer))],
                          "spurious": [answer[k] for k in sorted(set(answer) - set(gold))]})
    return {"rows": rows, "wrong": wrong, "sentences": shown}


def _strict_triples(sentence: object) -> dict | None:
    """A sentence's relations as ``{key: [head text, head type, relation, tail text, tail
    type]}``; None where the row is not an answer's shape (a damaged file: left out)."""
    if not isinstance(sentence, dict) or not isinstance(sentence.get("text"), str):
        return None
    ents, rels = sentence.get("entities"), sentence.get("relations")
    if not isinstance(ents, list) or not isinstance(rels, list):
        return None
    out = {}
    for r in rels:
        head, tail = (r.get(k) if isinstance(r, dict) else None for k in ("head", "tail"))
        if not all(isinstance(x, int) and 0 <= x < len(ents) and isinstance(ents[x], dict)
                   for x in (head, tail)):
            return None
        h, t = ents[head], ents[tail]
        key = json.dumps([h.get("start"), h.get("end"), h.get("type"), r.get("type"),
                          t.get("start"), t.get("end"), t.get("type")])
        out[key] = [h.get("text"), h.get("type"), r.get("type"), t.get("text"), t.get("type")]
    return out
