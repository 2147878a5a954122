"""``reltrain compare RUN_DIR RUN_DIR...``: runs side by side (evaluation/runs.py): the headline
test figures (a run without a test split: its best epoch's validation ones; an extraction run's
too), F1 per relation with the difference to the first run,
and the options in which the runs differ, as a table or JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

from reltrain.config.commands import opt
from reltrain.evaluation.runs import check_finished, runs_view
from reltrain.runtime.errors import UserError

FIGURES = (("positive_micro_f1", "pos. micro-F1"), ("positive_micro_precision", "pos. P"),
           ("positive_micro_recall", "pos. R"), ("positive_macro_f1", "pos. macro-F1"),
           ("semeval_macro_f1", "SemEval macro-F1"),
           ("macro_f1", "macro-F1"), ("micro_f1", "micro-F1"), ("accuracy", "accuracy"),
           ("entities_f1", "entities F1"), ("relations_strict_f1", "rel. strict F1"),
           ("relations_strict_precision", "strict P"), ("relations_strict_recall", "strict R"),
           ("relations_boundaries_f1", "rel. boundaries F1"), ("triples_f1", "triples F1"))


@dataclass
class CompareOptions:
    runs: list[str] = opt([], metavar="RUN_DIR")
    as_json: bool = opt(False, "the comparison as JSON", flag="--json")

    def __post_init__(self):
        if len(self.runs) < 2:
            raise UserError("give two or more run directories to compare")
        check_finished(self.runs)


def compare_runs(runs: list[str]) -> dict:
    """The comparison as plain data (what ``--json`` prints), from the runs' views."""
    view = runs_view(runs, answers=False)
    tests = [run["figures"] for run in view["runs"]]
    # per relation: a classification run's per class, an extraction run's strict per relation
    per_class = [run["per_relation"] if run["task"] == "extract" else run["per_class"]
                 for run in view["runs"]]
    relations = list(dict.fromkeys(name for classes in per_class for name in classes))
    return {
        "runs": [{"run_dir": run["path"], "encoder": run["encoder"],
                  "world_size": run["world_size"], "global_batch_size": run["global_batch_size"],
                  "epochs_run": run["epochs_run"], "best": run["best"]["epoch"],
                  "split": run["split"], "negative_label": run["figures"].get("negative_label")}
                 for run in view["runs"]],
        "figures": {key: [t.get(key) for t in tests] for key, _ in FIGURES
                 if any(isinstance(t.get(key), (int, float)) for t in tests)},
        "per_relation_f1": {name: [(classes.get(name) or {}).get("f1") for classes in per_class]
                            for name in relations},
        "config_differences": view["config_differences"],
    }


def run_compare(options: CompareOptions) -> dict:
    """Print the comparison (a table, or JSON) and return it."""
    from reltrain.evaluation.metrics import display_width, pad  # numpy: not at cli start-up

    result = compare_runs(options.runs)
    if options.as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return result
    names = [f"[{i + 1}]" for i in range(len(options.runs))]
    for name, run in zip(names, result["runs"]):
        print(f"{name} {run['run_dir']}: {run['encoder']}, world size {run['world_size']}, "
              f"global batch {run['global_batch_size']}, {run['epochs_run']} epoch(s), best "
              f"epoch {run['best']}, " + (f"figures of its {run['split']} split" if run["split"]
                                           else "no test or validation figures"))
    rows = [(label, result["figures"][key]) for key, label in FIGURES if key in result["figures"]]
    rows += [(name, values) for name, values in result["per_relation_f1"].items()]
    width = max([display_width(label) for label, _ in rows] + [8]) + 2
    print((pad("figure", width) + "".join(f"{n:>10}" + (" " * 10 if i else "")
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
