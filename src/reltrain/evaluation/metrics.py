"""Classification metrics computed once, on the complete (gathered) predictions."""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from reltrain.runtime.errors import UserError



def resolve_select(setting: str, negative: int | None, labels: list[str],
                   multi: bool = False) -> str:
    """The validation figure ``train.select_metric`` names; ``auto``: positive micro-F1 where
    there is a negative relation or a pair may have none (``multi``: several relations a pair;
    docs/benchmarks.md has the measurement), else macro-F1."""
    if setting == "auto":
        return "positive_micro_f1" if negative is not None or multi else "macro_f1"
    if multi and setting == "semeval_macro_f1":
        raise UserError("train.select_metric=semeval_macro_f1 scores one relation a pair; this "
                        "run gives several (model.multi_label)")
    if setting.startswith("positive_") and negative is None and not multi:
        raise UserError(f"train.select_metric={setting} needs a negative relation: none of the "
                        f"labels is named like one; set eval.negative_label=LABEL")
    if setting == "semeval_macro_f1" and not any(map(DIRECTED.fullmatch, labels)):
        raise UserError("train.select_metric=semeval_macro_f1 needs directed labels such as "
                        "Cause-Effect(e1,e2) and Cause-Effect(e2,e1) (SemEval-2010 Task 8's)")
    return setting


def better(metric: str, new: float, old: float) -> bool:
    """Whether ``new`` improves on ``old``: lower for the loss, higher for every other figure."""
    return new < old if metric == "loss" else new > old


def compute_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str],
                    negative: int | None = None) -> dict:
    """Macro/micro precision, recall, F1, accuracy and per-class report counted as scikit-learn does
    (tests/test_metrics.py), without importing it: that cost a sixth of a CNN run's memory.
    ``negative``: the index of the "no relation" label, for the positive figures (below)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    present = np.union1d(y_true, y_pred)
    hit = y_pred[y_true == y_pred]
    tp, predicted, gold = (np.array([np.count_nonzero(a == k) for k in present], dtype=np.float64)
                           for a in (hit, y_pred, y_true))
    p, r, f = _prf(tp, predicted, gold)
    micro = _prf(tp.sum(), predicted.sum(), gold.sum())
    per_class = {labels[k]: {"precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]),
                             "support": int(gold[i])} for i, k in enumerate(present)}
    out = {
        "macro_f1": float(f.mean()), "macro_precision": float(p.mean()),
        "macro_recall": float(r.mean()), "micro_f1": float(micro[2]),
        "micro_precision": float(micro[0]), "micro_recall": float(micro[1]),
        "accuracy": float((y_true == y_pred).mean()), "num_examples": int(len(y_true)),
        "negative_label": labels[negative] if negative is not None else None,
    }
    if negative is not None:
        out.update(positive_metrics(y_true, y_pred, negative))
        others = present != negative
        out["positive_macro_f1"] = float(f[others].mean()) if others.any() else 0.0
    kinds = [m.group(1) if (m := DIRECTED.fullmatch(name)) else None for name in labels]
    if any(kinds):
        out["semeval_macro_f1"] = semeval_macro_f1(y_true, y_pred, kinds)
    out["per_class"] = per_class
    return out


def positive_metrics(y_true: np.ndarray, y_pred: np.ndarray, negative: int) -> dict:
    """Micro P/R/F1 as TACRED's scorer counts them: a prediction of the negative relation is no
    guess, and a gold negative is no gold item; only a right positive answer is correct."""
    guessed, gold = y_pred != negative, y_true != negative
    correct = np.count_nonzero(guessed & (y_pred == y_true))
    p, r, f = _prf(np.float64(correct), np.count_nonzero(guessed), np.count_nonzero(gold))
    return {"positive_micro_precision": float(p), "positive_micro_recall": float(r),
            "positive_micro_f1": float(f)}


def multi_label_metrics(gold: np.ndarray, answered: np.ndarray, labels: list[str],
                        negative: int | None = None) -> dict:
    """The figures of ``compute_metrics`` where a pair may have several relations: ``gold`` and
    ``answered`` (N, C) 0/1, each (pair, relation) counted once; the negative label is no
    relation, so the positive figures are the micro and macro ones; accuracy is the share of
    pairs whose answered set is the gold one."""
    keep = np.arange(len(labels)) != (-1 if negative is None else negative)
    g, a = gold[:, keep].astype(bool), answered[:, keep].astype(bool)
    names = [name for name, k in zip(labels, keep) if k]
    tp, predicted, support = ((g & a).sum(0), a.sum(0), g.sum(0))
    p, r, f = _prf(tp.astype(np.float64), predicted, support)
    micro = _prf(np.float64(tp.sum()), predicted.sum(), support.sum())
    present = np.flatnonzero((support + predicted) > 0)
    macro = [float(x[present].mean()) if present.size else 0.0 for x in (p, r, f)]
    figures = {"precision": float(micro[0]), "recall": float(micro[1]), "f1": float(micro[2])}
    return {
        "macro_f1": macro[2], "macro_precision": macro[0], "macro_recall": macro[1],
        **{f"micro_{k}": v for k, v in figures.items()},
        **{f"positive_micro_{k}": v for k, v in figures.items()},
        "positive_macro_f1": macro[2], "accuracy": float((g == a).all(axis=1).mean()),
        "num_examples": int(len(g)), "multi_label": True,
        "negative_label": labels[negative] if negative is not None else None,
        "per_class": {names[i]: {"precision": float(p[i]), "recall": float(r[i]),
                                 "f1": float(f[i]), "support": int(support[i])} for i in present},
    }


# Thresholds a relation may get, nearest 0.5 first: a tie goes to the one nearer 0.5.
GRID = sorted(np.round(np.arange(0.05, 0.951, 0.05), 2), key=lambda t: (abs(t - 0.5), t))


def tune_label_thresholds(gold: np.ndarray, probs: np.ndarray, negative: int | None) -> np.ndarray:
    """Each relation's threshold from ``GRID`` with its best F1 on ``gold`` (N, C) 0/1 and
    ``probs`` (N, C); a relation without gold or answers there keeps 0.5."""
    g = gold.astype(bool)
    f1 = np.stack([2 * (g & (probs >= t)).sum(0) / np.maximum((probs >= t).sum(0) + g.sum(0), 1)
                   for t in GRID])  # (len(GRID), C)
    chosen = np.asarray(GRID, dtype=np.float32)[f1.argmax(axis=0)]
    if negative is not None:
        chosen[negative] = 1.0  # never answered
    return chosen


# A directed label of SemEval-2010 Task 8: the relation type, then the direction.
DIRECTED = re.compile(r"(.+)\((?:e1,e2|e2,e1)\)")


def semeval_macro_f1(y_true: np.ndarray, y_pred: np.ndarray, kinds: list[str | None]) -> float:
    """SemEval-2010 Task 8's official score (scorer v1.2, "(9+1)-way evaluation with
    directionality taken into account"): per relation type, both directions together, an answer
    is correct only with the right direction, precision divides by every answer of the type and
    recall by every gold example of it; F1 per type, averaged over the types that occur in the
    gold or the answers. Undirected labels (``kinds`` None: Other) are left out."""
    kind = np.array([k or "" for k in kinds], dtype=object)
    gold, guess = kind[y_true], kind[y_pred]
    f1s = []
    for name in sorted((set(gold) | set(guess)) - {""}):
        correct = np.count_nonzero((y_true == y_pred) & (gold == name))
        p, r, f = _prf(np.float64(correct), np.count_nonzero(guess == name),
                       np.count_nonzero(gold == name))
        f1s.append(float(f))
    return float(np.mean(f1s)) if f1s else 0.0


def _prf(tp, predicted, gold):
    """Precision, recall and F1 (2tp / (predicted + gold)) from counts; 0 where undefined."""
    def ratio(a, b):
        return np.divide(a, b, out=np.zeros_like(np.asarray(a, dtype=np.float64)), where=b > 0)

    return ratio(tp, predicted), ratio(tp, gold), ratio(2 * tp, predicted + gold)


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
    if metrics.get("negative_label") is not None:
        gold = sum(m["support"] for name, m in metrics["per_class"].items()
                   if name != metrics["negative_label"])
        rows.append(f"{pad('positive', width)}{metrics['positive_micro_precision']:>8.4f}"
                    f"{metrics['positive_micro_recall']:>8.4f}{metrics['positive_micro_f1']:>8.4f}"
                    f"{gold:>7}  (micro, without {metrics['negative_label']})")
    return "\n".join(rows)


def headline(metrics: dict) -> str:
    """The figures of a metrics dict in one line, the positive ones first when there are any."""
    parts = []
    if metrics.get("negative_label") is not None:
        parts += [f"positive micro-F1 {metrics['positive_micro_f1']:.4f}",
                  f"P {metrics['positive_micro_precision']:.4f}",
                  f"R {metrics['positive_micro_recall']:.4f}",
                  f"positive macro-F1 {metrics['positive_macro_f1']:.4f}"]
    if "semeval_macro_f1" in metrics:
        parts.append(f"SemEval macro-F1 {metrics['semeval_macro_f1']:.4f}")
    parts += [f"macro-F1 {metrics['macro_f1']:.4f}", f"micro-F1 {metrics['micro_f1']:.4f}"]
    return "  ".join(parts)


def display_width(text: str) -> int:
    """Terminal columns of ``text``: wide (CJK) and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(width - display_width(text), 0)
