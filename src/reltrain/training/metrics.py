"""Classification metrics computed once, on the complete (gathered) predictions."""

from __future__ import annotations

import unicodedata

import numpy as np


def compute_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict:
    """Macro and micro precision/recall/F1, accuracy and a per-class report.

    Macro averages run over the relations that occur in the gold labels or the predictions
    (scikit-learn's default, and DeepKE's), so a relation absent from a split does not count as 0.
    """
    from sklearn.metrics import precision_recall_fscore_support as prfs

    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    present = sorted(set(y_true.tolist()) | set(y_pred.tolist()))
    macro = prfs(y_true, y_pred, labels=present, average="macro", zero_division=0)
    micro = prfs(y_true, y_pred, labels=present, average="micro", zero_division=0)
    p, r, f, s = prfs(y_true, y_pred, labels=present, average=None, zero_division=0)
    per_class = {labels[k]: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]),
                             "support": int(s[i])} for i, k in enumerate(present)}
    return {
        "macro_f1": float(macro[2]), "macro_precision": float(macro[0]),
        "macro_recall": float(macro[1]), "micro_f1": float(micro[2]),
        "micro_precision": float(micro[0]), "micro_recall": float(micro[1]),
        "accuracy": float((y_true == y_pred).mean()), "num_examples": int(len(y_true)),
        "per_class": per_class,
    }


def confusion(y_true: np.ndarray, y_pred: np.ndarray, num_labels: int) -> np.ndarray:
    """(C, C) counts; row = gold, column = predicted."""
    out = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(out, (np.asarray(y_true), np.asarray(y_pred)), 1)
    return out


def format_report(metrics: dict) -> str:
    """A per-class table for the log; columns line up with Chinese names too."""
    names = [*metrics["per_class"], "relation", "macro"]
    width = max(display_width(n) for n in names) + 2
    rows = [f"{pad('relation', width)}{'P':>8}{'R':>8}{'F1':>8}{'n':>7}"]
    for name, m in metrics["per_class"].items():
        rows.append(f"{pad(name, width)}{m['precision']:>8.4f}{m['recall']:>8.4f}{m['f1']:>8.4f}"
                    f"{m['support']:>7}")
    rows.append(f"{pad('macro', width)}{metrics['macro_precision']:>8.4f}"
                f"{metrics['macro_recall']:>8.4f}{metrics['macro_f1']:>8.4f}{metrics['num_examples']:>7}")
    return "\n".join(rows)


def display_width(text: str) -> int:
    """Terminal columns of ``text``: wide (CJK) and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(width - display_width(text), 0)
