"""reltrain counts its metrics itself (scikit-learn's import is ~80 MB of a run's memory);
they must equal scikit-learn's, the definition DeepKE and most papers report."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, precision_recall_fscore_support as prfs

from reltrain.evaluation.metrics import compute_metrics

LABELS = [f"r{i}" for i in range(6)]


def _reference(y_true, y_pred):
    present = sorted(set(y_true) | set(y_pred))
    out = {}
    for avg in ("macro", "micro"):
        p, r, f, _ = prfs(y_true, y_pred, labels=present, average=avg, zero_division=0)
        out.update({f"{avg}_precision": p, f"{avg}_recall": r, f"{avg}_f1": f})
    p, r, f, s = prfs(y_true, y_pred, labels=present, average=None, zero_division=0)
    per_class = {LABELS[k]: (p[i], r[i], f[i], s[i]) for i, k in enumerate(present)}
    return out, per_class


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=60))
def test_metrics_equal_scikit_learn(pairs):
    y_true = [a for a, _ in pairs]
    y_pred = [b for _, b in pairs]
    got = compute_metrics(np.array(y_true), np.array(y_pred), LABELS)
    averages, per_class = _reference(y_true, y_pred)
    for key, value in averages.items():
        assert abs(got[key] - value) < 1e-12, key
    assert abs(got["accuracy"] - accuracy_score(y_true, y_pred)) < 1e-12
    assert got["num_examples"] == len(y_true)
    assert list(got["per_class"]) == list(per_class)
    for name, (p, r, f, s) in per_class.items():
        m = got["per_class"][name]
        assert max(abs(m["precision"] - p), abs(m["recall"] - r), abs(m["f1"] - f)) < 1e-12
        assert m["support"] == s


def test_a_class_never_predicted_scores_zero_not_nan():
    got = compute_metrics(np.array([0, 0, 1, 2]), np.array([0, 0, 0, 2]), LABELS)
    assert got["per_class"]["r1"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert got["macro_f1"] == (0.8 + 0.0 + 1.0) / 3
