"""``reltrain inspect``: the data report a training run logs (data/report.py), without training."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reltrain.config.checks import check_encoding, check_file
from reltrain.runtime.errors import UserError
from reltrain.config.commands import ENCODING_HELP, opt


@dataclass
class InspectOptions:
    files: list[str] = opt([], "the training file first, then others (valid, test) to compare "
                               "with it", metavar="DATA")
    labels: str = opt("", "the label file (relation.csv), whose relations without a training "
                          "row are named", metavar="FILE")
    as_json: bool = opt(False, "the report as JSON", flag="--json")
    encoding: str = opt("utf-8", ENCODING_HELP, metavar="NAME")

    def __post_init__(self):
        if not self.files:
            raise UserError("give at least one data file (the training file first)")
        for path in [*self.files, *([self.labels] if self.labels else [])]:
            check_file(path, "DATA" if path in self.files else "--labels")
        check_encoding(self.encoding, "--encoding")


def split_names(files: list[str]) -> dict[str, str]:
    """``train`` for the first file; the others by their file name's stem (``dev.csv``: dev)."""
    names = {"train": files[0]}
    for path in files[1:]:
        stem, n = Path(path).stem or "data", 2
        name = stem if stem != "train" else "train-2"
        while name in names:
            name, n = f"{stem}-{n}", n + 1
        names[name] = path
    return names


def run_inspect(options: InspectOptions) -> dict:
    """Print the report (or its JSON) and return it."""
    # cli imports this module at start-up; the readers and numpy's report only when it runs
    from reltrain.data.readers import read_labels
    from reltrain.data.report import data_report, report_lines  # (the comment above)

    if _extraction(options.files[0], options.encoding):
        return _inspect_extraction(options)
    labels = read_labels(options.labels, options.encoding) if options.labels else None
    report = data_report(split_names(options.files), labels, options.encoding)
    if options.as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return report
    for name, split in report["splits"].items():
        relations = split["relations"]
        shown = ", ".join(f"{rel} {n}" for rel, n in list(relations.items())[:12])
        more = f", ... ({len(relations)} relations)" if len(relations) > 12 else ""
        print(f"{name}: {split['file']}: {split['rows']} rows; {shown}{more}")
    lines = report_lines(report)
    for line in lines:
        print(f"  {line}")
    if len(lines) <= 1:
        print("  no repeated rows, no sentence of another file in train, every relation trained")
    return report


def _extraction(path: str, encoding: str) -> bool:
    """A file of the extraction task (entities and relations of whole sentences)?"""
    from reltrain.data.extraction import detect  # loaded by cli at start-up: its work's code only when run

    kind = detect(path, encoding)
    if kind != "spert":
        return kind in ("pure", "duie", "reltrain")
    # cli imports this module at start-up: the readers only when it runs
    from reltrain.data import formats
    from reltrain.data.readers import read_lines  # (the comment above)

    first = next(formats.tacred_rows(path, read_lines(path, encoding), lambda obj, p, n: obj), None)
    obj = first[1]() if first else None
    return isinstance(obj, dict) and "entities" in obj  # else TACRED's array


def _inspect_extraction(options: InspectOptions) -> dict:
    # loaded by cli at start-up: its work's code only when run
    from reltrain.data.extraction_report import extraction_lines, extraction_report

    report = extraction_report(split_names(options.files), options.encoding)
    if options.as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print("\n".join(extraction_lines(report)))
    return report
