"""What a researcher should hear about the data before trusting a score: repeated rows, test or
validation sentences that are also training sentences, relations with no training row, and how
the relations are balanced. Built once per cache entry (and by ``reltrain inspect``)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from reltrain.data.readers import iter_rows
from reltrain.data.schema import negative_index, relation_names
from reltrain.runtime.errors import DataError


BAD_ROWS_NAMED = 3  # bad rows named per file; the count covers all of them


def data_report(files: dict[str, str], labels: list[str] | None = None,
                encoding: str = "utf-8") -> dict:
    """The report of ``files`` (split -> path, ``train`` first when present); ``labels``: the
    label set, whose relations without a training row are named. Bad rows are counted, and the
    first few named as ``file:line: field: why``, apart from the rows read."""
    splits, sentences = {}, {}
    for name, path in files.items():
        counts, example_keys, text_keys, rows, bad_rows, bad = Counter(), [], [], 0, 0, []
        several = 0
        for _, build in iter_rows(path, require_relation=name == "train", encoding=encoding):
            try:
                rec = build()
            except DataError as exc:
                bad_rows += 1
                if len(bad) < BAD_ROWS_NAMED:
                    bad.append(str(exc))
                continue
            rows += 1
            counts.update(relation_names(rec.relation) if rec.relation is not None else [None])
            several += len(relation_names(rec.relation)) > 1
            spans = (rec.head.start, rec.head.end, rec.tail.start, rec.tail.end)
            example_keys.append((hash((rec.text, spans)), hash(rec.relation)))
            text_keys.append(hash(rec.text.strip()))
        pairs = np.array(example_keys, dtype=np.int64).reshape(-1, 2)
        rows_seen = np.unique(pairs, axis=0).shape[0]  # the same example and relation
        examples_seen = np.unique(pairs[:, 0]).size  # the same example, any relation
        sentences[name] = np.array(text_keys, dtype=np.int64)
        splits[name] = {"file": str(path), "rows": rows, "bad_rows": bad_rows, "bad_examples": bad,
                        "relations": dict(counts.most_common()),
                        "duplicate_rows": rows - rows_seen, "several_relations": several,
                        "conflicting_rows": rows_seen - examples_seen}
    report: dict = {"splits": splits}
    if "train" in sentences:
        train = sentences["train"]
        report["sentences_in_train"] = {name: int(np.isin(keys, train).sum())
                                        for name, keys in sentences.items() if name != "train"}
        trained = splits["train"]["relations"]
        report["labels_without_training_rows"] = [name for name in (labels or []) if name not in trained]
        report["balance"] = _balance(trained)
    return report


def _balance(counts: dict[str, int]) -> dict | None:
    total = sum(counts.values())
    if not total:
        return None
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    names = [name for name in counts if name]
    negative = negative_index("auto", names)  # as eval.negative_label=auto would pick it
    share = lambda name: round(counts[name] / total, 4)  # noqa: E731
    return {"largest": [ordered[0][0], share(ordered[0][0])],
            "smallest": [ordered[-1][0], share(ordered[-1][0])],
            "negative": [names[negative], share(names[negative])] if negative is not None else None}


def report_lines(report: dict) -> list[str]:
    """The report in a few lines for a log: the balance, then each thing worth a look."""
    lines = []
    balance = report.get("balance")
    if balance:
        (big, big_share), (small, small_share) = balance["largest"], balance["smallest"]
        text = (f"relations in train: each {big_share:.1%}" if big_share == small_share else
                f"relations in train: largest {big} {big_share:.1%}, smallest {small} "
                f"{small_share:.1%}")
        if balance["negative"]:
            text += f"; the negative relation {balance['negative'][0]} {balance['negative'][1]:.1%}"
        lines.append(text)
    for name, split in report["splits"].items():
        if split.get("bad_rows"):  # cache entries written before the count have none
            lines.append(f"{split['bad_rows']} row(s) of {name} cannot be read and are left out "
                         f"of these counts; first: " + "; ".join(split["bad_examples"]))
        if split["duplicate_rows"]:
            lines.append(f"{split['duplicate_rows']} row(s) of {name} repeat an earlier row exactly")
        if split["conflicting_rows"]:
            lines.append(f"{split['conflicting_rows']} row(s) of {name} repeat an earlier example "
                         f"with another relation (a JSON list of relations gives one pair "
                         f"several: model.multi_label)")
        if split.get("several_relations"):
            lines.append(f"{split['several_relations']} row(s) of {name} give several relations "
                         f"(model.multi_label)")
    for name, count in report.get("sentences_in_train", {}).items():
        if count:
            lines.append(f"{count} of {report['splits'][name]['rows']} {name} row(s) have a "
                         f"sentence that is also in train: their score says less about new text")
    missing = report.get("labels_without_training_rows")
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
        lines.append(f"relations of the label file with no training row (the model can never "
                     f"learn them): {shown}")
    return lines
