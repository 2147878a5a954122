"""``reltrain compare RUN_DIR RUN_DIR...``: runs side by side from what each left on disk (its
``summary.json`` and ``config.yaml``): the headline test figures, F1 per relation with the
difference to the first run, and the options in which the runs differ."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reltrain.runtime.errors import UserError
from reltrain.config.commands import opt

MAX_FILE = 64 << 20  # a summary of 10^5 relations is a few MB
FIGURES = (("positive_micro_f1", "pos. micro-F1"), ("positive_micro_precision", "pos. P"),
           ("positive_micro_recall", "pos. R"), ("positive_macro_f1", "pos. macro-F1"),
           ("semeval_macro_f1", "SemEval macro-F1"),
           ("macro_f1", "macro-F1"), ("micro_f1", "micro-F1"), ("accuracy", "accuracy"))


@dataclass
class CompareOptions:
    runs: list[str] = opt([], metavar="RUN_DIR")
    as_json: bool = opt(False, "the comparison as JSON", flag="--json")

    def __post_init__(self):
        if len(self.runs) < 2:
            raise UserError("give two or more run directories to compare")
        check_finished(self.runs)


def check_finished(runs: list[str]) -> None:
    for run in runs:
        if not (Path(run) / "summary.json").is_file():
            raise UserError(f"{run}: not a finished run directory (no summary.json)")


def read_json(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE + 1)
        value = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"{path}: cannot read it as JSON ({str(exc)[:120]})") from None
    if len(raw) > MAX_FILE or not isinstance(value, dict):
        raise UserError(f"{path}: not a run's summary")
    return value


def run_config(run: Path) -> dict:
    from reltrain.config.train import dotted
    from reltrain.config.files import read_config_file

    path = run / "config.yaml"
    return dotted(read_config_file(str(path))) if path.is_file() else {}


def config_differences(configs: list[dict]) -> dict:
    """The flat option keys whose values are not the same in every run, with each run's value
    (``output_dir``, which always differs, left out)."""
    keys = sorted(set().union(*configs))
    return {k: [c.get(k) for c in configs] for k in keys
            if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1
            and k != "output_dir"}


def compare_runs(runs: list[str]) -> dict:
    """The comparison as plain data (what ``--json`` prints)."""
    summaries = [read_json(Path(run) / "summary.json") for run in runs]
    configs = [run_config(Path(run)) for run in runs]
    tests = [s.get("test") if isinstance(s.get("test"), dict) else {} for s in summaries]
    relations = list(dict.fromkeys(name for t in tests for name in (t.get("per_class") or {})))
    differ = config_differences(configs)
    return {
        "runs": [{"run_dir": str(run), "encoder": c.get("model.name"),
                  "world_size": s.get("world_size"), "global_batch_size": s.get("global_batch_size"),
                  "epochs_run": s.get("epochs_run"), "best": (s.get("best") or {}).get("epoch"),
                  "negative_label": t.get("negative_label")}
                 for run, s, c, t in zip(runs, summaries, configs, tests)],
        "test": {key: [t.get(key) for t in tests] for key, _ in FIGURES
                 if any(isinstance(t.get(key), (int, float)) for t in tests)},
        "per_relation_f1": {name: [((t.get("per_class") or {}).get(name) or {}).get("f1")
                                   for t in tests] for name in relations},
        "config_differences": differ,
    }


def run_compare(options: CompareOptions) -> dict:
    """Print the comparison (a table, or JSON) and return it."""
    from reltrain.evaluation.metrics import display_width, pad

    result = compare_runs(options.runs)
    if options.as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return result
    names = [f"[{i + 1}]" for i in range(len(options.runs))]
    for name, run in zip(names, result["runs"]):
        print(f"{name} {run['run_dir']}: {run['encoder']}, world size {run['world_size']}, "
              f"global batch {run['global_batch_size']}, {run['epochs_run']} epoch(s), best "
              f"epoch {run['best']}")
    rows = [(label, result["test"][key]) for key, label in FIGURES if key in result["test"]]
    rows += [(name, values) for name, values in result["per_relation_f1"].items()]
    width = max([display_width(label) for label, _ in rows] + [8]) + 2
    print((pad("test", width) + "".join(f"{n:>10}" + (" " * 10 if i else "")
                                        for i, n in enumerate(names))).rstrip())
    for i, (label, values) in enumerate(rows):
        if i == len(rows) - len(result["per_relation_f1"]):
            print(pad("F1 per relation", width))
        print((pad(label, width) + "".join(_cell(v, values[0], j)
                                           for j, v in enumerate(values))).rstrip())
    if result["config_differences"]:
        print("options that differ:")
        for key, values in result["config_differences"].items():
            print(f"  {key}: " + "  ".join(f"{n} {json.dumps(v, ensure_ascii=False)}"
                                           for n, v in zip(names, values)))
    else:
        print("options: the same in every run (but output_dir)")
    return result


def _cell(value, first, column: int) -> str:
    """A figure, and after the first column its difference to the first run, where there is one."""
    diff = (value - first if column and isinstance(value, (int, float))
            and isinstance(first, (int, float)) else 0.0)
    text = f"{value:>10.4f}" if isinstance(value, (int, float)) else f"{'-':>10}"
    if not column:
        return text
    return text + (f" ({diff:+.4f})" if abs(diff) >= 5e-5 else " " * 10)
