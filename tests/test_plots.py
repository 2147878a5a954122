"""The pictures and tables a run writes, checked for what a reader needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reltrain.training import plots
from reltrain.evaluation.metrics import compute_metrics, display_width, format_report

ZH = ["导演", "国籍", "所在城市", "none"]


@pytest.fixture
def figures(monkeypatch) -> list:
    saved = []
    real = Figure.savefig

    def keep(fig, path, *a, **k):
        saved.append(fig)
        return real(fig, path, *a, **k)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_f1_of_one_is_off_the_frame_with_whole_epochs_and_the_legend_off_the_data(figures, tmp_path):
    history = [{"epoch": e, "train_loss": 0.5 / e, "valid": {"macro_f1": 1.0, "micro_f1": 1.0}}
               for e in (1, 2, 3)]
    plots.plot_curves(history, tmp_path)
    loss, f1 = figures
    ax = f1.axes[0]
    assert ax.get_ylim()[1] > 1.0 and ax.get_ylim()[0] < 0.0
    assert ax.get_xlim()[0] < 1 and ax.get_xlim()[1] > 3
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks == [1, 2, 3]
    renderer = FigureCanvasAgg(f1).get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y1 <= ax.get_window_extent(renderer).y0  # below the axes, not over the curves
    assert (tmp_path / "f1.png").is_file() and (tmp_path / "loss.png").is_file()


def test_chinese_names_without_a_font_become_indices_with_a_key(figures, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(plots, "_font_covering", lambda codepoints: None)
    matrix = np.array([[3, 1, 0, 0], [0, 2, 0, 0], [0, 0, 0, 0], [1, 0, 0, 4]])
    plots.plot_confusion(matrix, ZH, tmp_path / "confusion_test.png", "Test")
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "3"]
    assert (tmp_path / "confusion_test.txt").read_text(encoding="utf-8") == "0\t导演\n1\t国籍\n3\tnone\n"
    assert "no installed font draws these relation names" in caplog.text


@pytest.mark.filterwarnings("ignore:Glyph")  # DejaVu stands in for a CJK font: no such glyphs
def test_chinese_names_with_a_font_are_drawn_in_it(figures, tmp_path, monkeypatch):
    import matplotlib

    dejavu = str(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf")
    monkeypatch.setattr(plots, "_font_covering", lambda codepoints: dejavu)  # stands in for a CJK font
    plots.plot_confusion(np.eye(4, dtype=int), ZH, tmp_path / "c.png", "Test")
    labels = figures[0].axes[0].get_xticklabels()
    assert [t.get_text() for t in labels] == ZH and labels[0].get_fontproperties().get_file() == dejavu
    assert not (tmp_path / "c.txt").exists()


def test_the_per_class_report_lines_up_with_double_width_names():
    y = np.array([0, 1, 2, 3, 0, 2])
    text = format_report(compute_metrics(y, y, ZH))
    widths = {display_width(line) for line in text.splitlines()}
    assert len(widths) == 1, text
    assert display_width("所在城市") == 8
