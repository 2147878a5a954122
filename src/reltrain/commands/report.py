"""``reltrain report RUN_DIR... --output report.html``: one self-contained page (data, script and
style inline; nothing from the network) to look at runs: headline figures, learning curves, F1 per
relation, the confusion matrix with its examples, and the test rows each run got wrong. Every
value reaches the page as JSON and is shown by the page's script as text, never as markup."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reltrain.commands.compare import check_finished
from reltrain.runtime.errors import UserError
from reltrain.config.commands import opt

PAGE = Path(__file__).parents[1] / "pages" / "report.html"
MAX_LINE = 1 << 20  # one line of metrics.jsonl or test_predictions.jsonl
MAX_ROWS = 1_000_000  # test rows read per run
SHOWN_MISTAKES = 300  # misclassified rows embedded per run (the most confident first)


@dataclass
class ReportOptions:
    runs: list[str] = opt([], metavar="RUN_DIR")
    output: str = opt("report.html", "the page to write (default report.html)", metavar="FILE")

    def __post_init__(self):
        if not self.runs:
            raise UserError("give one or more run directories")
        check_finished(self.runs)
        if not self.output:
            raise UserError("--output must name the page to write")


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
                    **{k: valid.get(k) for k in ("positive_micro_f1", "macro_f1", "micro_f1")}})
    return out


def _answers(run: Path) -> dict:
    """The confusion counts of the test rows and the most confident mistakes (their text), read
    a row at a time: only ``SHOWN_MISTAKES`` rows are held, however many the test set has."""
    counts: dict = {}
    kept: list = []  # (score, -row, row, answer): a min-heap of the most confident mistakes
    rows = wrong = 0
    for i, row in enumerate(_jsonl(run / "test_predictions.jsonl", MAX_ROWS)):
        rows += 1
        gold, guess = row.get("gold"), row.get("relation")
        if not isinstance(gold, str) or not isinstance(guess, str):
            continue
        counts[f"{gold}\t{guess}"] = counts.get(f"{gold}\t{guess}", 0) + 1
        if gold != guess:
            wrong += 1
            item = (float(row.get("score") or 0), -i, i, row)
            if len(kept) < SHOWN_MISTAKES:
                heapq.heappush(kept, item)
            elif item[:2] > kept[0][:2]:
                heapq.heapreplace(kept, item)
    shown = [{"row": i, "text": r.get("text"), "head": r.get("head"), "tail": r.get("tail"),
              "gold": r.get("gold"), "relation": r.get("relation"), "score": r.get("score"),
              "gold_score": next((k.get("score") for k in r.get("top_k") or []
                                  if isinstance(k, dict) and k.get("relation") == r.get("gold")), None)}
             for _, _, i, r in sorted(kept, key=lambda item: (-item[0], item[2]))]
    return {"rows": rows, "confusion": counts, "mistakes": shown, "wrong": wrong}


def report_data(runs: list[str]) -> dict:
    """What the page shows, as plain data; each run's files are read once."""
    from reltrain.commands.compare import config_differences, read_json

    configs = [_flat_config(Path(run)) for run in runs]
    data = {"runs": [], "config_differences": config_differences(configs) if len(runs) > 1 else {}}
    for run, config in zip(runs, configs):
        path = Path(run)
        summary = read_json(path / "summary.json")
        history = list(_jsonl(path / "metrics.jsonl", 100_000))
        test = summary.get("test") if isinstance(summary.get("test"), dict) else {}
        best = summary.get("best") if isinstance(summary.get("best"), dict) else {}
        data["runs"].append({
            "name": path.name or str(path), "path": str(path),
            "encoder": config.get("model.name"),
            "data": {k: config.get(f"data.{k}") for k in ("train", "valid", "test")},
            "world_size": summary.get("world_size"),
            "global_batch_size": summary.get("global_batch_size"),
            "epochs_run": summary.get("epochs_run"),
            "best": {k: best.get(k) for k in ("metric", "value", "epoch")},
            "seconds": sum(r.get("train_seconds") or 0 for r in history),
            "test": {k: v for k, v in test.items() if k != "per_class"},
            "per_class": test.get("per_class") if isinstance(test.get("per_class"), dict) else {},
            "curves": _curves(history),
            "answers": _answers(path),
        })
    return data


def _flat_config(run: Path) -> dict:
    """The run's options, flat; none if its config.yaml cannot be read (the page goes on)."""
    from reltrain.commands.compare import run_config

    try:
        return run_config(run)
    except UserError:
        return {}


def page_html(data: dict) -> str:
    """The page with ``data`` inside: JSON in a script element, with ``<``, ``>`` and ``&``
    escaped, so that no value can end the element or start markup."""
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return PAGE.read_text(encoding="utf-8").replace("__REPORT_DATA__", text)


def _finite(value):
    """``value`` with NaN and infinities as null: JSON.parse refuses them."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_report(runs: list[str], output: str | Path) -> dict:
    """The page of ``runs`` at ``output``; returns its data."""
    from reltrain.runtime.output import write_output

    data = report_data(runs)
    write_output(str(output), page_html(data))
    return data


def run_report(options: ReportOptions) -> Path:
    data = write_report(options.runs, options.output)
    shown = sum(len(r["answers"]["mistakes"]) for r in data["runs"])
    print(f"wrote {options.output} ({len(data['runs'])} run(s), {shown} misclassified test rows "
          f"shown); open it in a browser: it needs no network")
    return Path(options.output)
