"""The tables a run prints, checked for what a reader needs."""

from __future__ import annotations

import numpy as np

from reltrain.evaluation.metrics import compute_metrics, display_width, format_report

ZH = ["导演", "国籍", "所在城市", "none"]


def test_the_per_class_report_lines_up_with_double_width_names():
    y = np.array([0, 1, 2, 3, 0, 2])
    text = format_report(compute_metrics(y, y, ZH))
    widths = {display_width(line) for line in text.splitlines()}
    assert len(widths) == 1, text
    assert display_width("所在城市") == 8
