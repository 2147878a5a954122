"""``reltrain report RUN_DIR... --output report.html``: one self-contained page (data, script and
style inline; nothing from the network) to look at runs: headline figures, learning curves, F1 per
relation, the confusion matrix with its examples, and the test rows each run got wrong. Every
value reaches the page as JSON and is shown by the page's script as text, never as markup."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reltrain.config.commands import opt
from reltrain.evaluation.runs import check_finished, runs_view
from reltrain.runtime.errors import UserError

PAGE = Path(__file__).parents[1] / "pages" / "report.html"


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
    from reltrain.runtime.output import write_output  # tempfile, shutil: not at cli start-up

    data = runs_view(runs)
    write_output(str(output), page_html(data))
    return data


def run_report(options: ReportOptions) -> Path:
    from reltrain.runtime.output import check_output  # tempfile, shutil: not at cli start-up

    out = Path(options.output)
    own = out.name == "report.html" and out.parent.is_dir()  # a run's own page, written again
    check_output(options.output, tuple(r for r in options.runs
                                       if not (own and out.parent.samefile(r))))
    data = write_report(options.runs, options.output)
    rows = sum(len(r["answers"].get("mistakes", ())) for r in data["runs"])
    sentences = sum(len(r["answers"].get("sentences", ())) for r in data["runs"])
    shown = ", ".join(part for part in (rows and f"{rows} misclassified test rows",
                                         sentences and f"{sentences} test sentences with a "
                                                       f"missed or spurious relation") if part)
    print(f"wrote {options.output} ({len(data['runs'])} run(s){', ' + shown if shown else ''} "
          f"shown); open it in a browser: it needs no network")
    return Path(options.output)
