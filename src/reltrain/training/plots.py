"""PNG plots of a run (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def plot_curves(history: list[dict], directory: Path) -> None:
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    epochs = [r["epoch"] for r in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [r["train_loss"] for r in history], marker="o")
    ax.set(xlabel="epoch", ylabel="training loss", title="Training loss")
    fig.tight_layout()
    fig.savefig(directory / "loss.png", dpi=100)
    plt.close(fig)
    if any("valid" in r for r in history):
        fig, ax = plt.subplots(figsize=(6, 4))
        valid = [r for r in history if "valid" in r]
        for key in ("macro_f1", "micro_f1"):
            ax.plot([r["epoch"] for r in valid], [r["valid"][key] for r in valid], marker="o",
                    label=key.replace("_", "-"))
        ax.set(xlabel="epoch", ylabel="validation F1", title="Validation F1", ylim=(0, 1))
        ax.legend()
        fig.tight_layout()
        fig.savefig(directory / "f1.png", dpi=100)
        plt.close(fig)


def plot_confusion(matrix: np.ndarray, labels: list[str], path: Path, title: str) -> None:
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    used = np.flatnonzero(matrix.sum(0) + matrix.sum(1))  # hide relations absent on both sides
    m, names = matrix[np.ix_(used, used)], [labels[i] for i in used]
    # Chinese relation names need a CJK font; fall back to indices when none is installed.
    if any(ord(c) > 0x2E80 for n in names for c in n) and not _has_cjk_font():
        names = [f"{i}" for i in used]
    size = max(4.0, 0.5 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=90)
    ax.set_yticks(range(len(names)), names)
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=7,
                color="white" if v > m.max() / 2 else "black")
    ax.set(xlabel="predicted", ylabel="gold", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _has_cjk_font() -> bool:
    from matplotlib import font_manager

    return any(any(k in f.name for k in ("CJK", "Hei", "Song", "Ming", "Gothic"))
               for f in font_manager.fontManager.ttflist)
