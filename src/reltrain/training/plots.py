"""PNG plots of a run (matplotlib, headless)."""

from __future__ import annotations

import logging
import textwrap
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# Families that cover Chinese, in the order they are preferred when several are installed.
_CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
                 "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC",
                 "AR PL UMing CN", "Droid Sans Fallback", "Noto Sans CJK JP", "IPAexGothic")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _epoch_axis(ax, epochs: list[int]) -> None:
    """Whole-number epoch ticks, with room so the first and last markers are not on the frame."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
    ax.grid(alpha=0.3)


def plot_curves(history: list[dict], directory: Path) -> None:
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    epochs = [r["epoch"] for r in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    losses = [r["train_loss"] for r in history]
    ax.plot(epochs, losses, marker="o")
    ax.set(xlabel="epoch", ylabel="training loss", title="Training loss")
    ax.set_ylim(-0.03 * max(max(losses), 1e-6), 1.05 * max(max(losses), 1e-6))
    _epoch_axis(ax, epochs)
    fig.tight_layout()
    fig.savefig(directory / "loss.png", dpi=100)
    plt.close(fig)
    valid = [r for r in history if "valid" in r]
    if valid:
        fig, ax = plt.subplots(figsize=(6, 4.4))
        for key, style in (("macro_f1", dict(marker="o", linestyle="-")),
                           ("micro_f1", dict(marker="s", linestyle="--", markerfacecolor="none"))):
            ax.plot([r["epoch"] for r in valid], [r["valid"][key] for r in valid],
                    label=key.replace("_", "-"), clip_on=False, **style)
        # Above 1.0 and below 0 a little room, so scores of 1.0 do not sit on the frame.
        ax.set(xlabel="epoch", ylabel="validation F1", title="Validation F1", ylim=(-0.03, 1.05))
        ax.set_yticks(np.linspace(0, 1, 6))
        _epoch_axis(ax, [r["epoch"] for r in valid])
        # Below the axes, never over the curves.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
        fig.tight_layout()
        fig.savefig(directory / "f1.png", dpi=100)
        plt.close(fig)


def plot_confusion(matrix: np.ndarray, labels: list[str], path: Path, title: str) -> None:
    """Rows gold, columns predicted; relations absent on both sides left out. Names the fonts cannot
    draw become indices, with the key beside the picture (``<name>.txt``)."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    used = np.flatnonzero(matrix.sum(0) + matrix.sum(1))
    m, names = matrix[np.ix_(used, used)], [labels[i] for i in used]
    font = None
    if any(ord(c) > 0x2E7F for n in names for c in n):
        font = _font_for("".join(names))
        if font is None:
            key = path.with_suffix(".txt")
            key.write_text("".join(f"{i}\t{labels[i]}\n" for i in used), encoding="utf-8")
            log.warning("no installed font draws these relation names: %s shows their indices, "
                        "and %s names them (install a CJK font, e.g. Debian's fonts-noto-cjk, "
                        "for names in the picture)", path.name, key)
            names = [str(i) for i in used]
            title += f" (indices: see {key.name})"
    size = max(4.5, 0.5 * len(names) + 2.5)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(m, cmap="Blues")
    fontprops = {"fontproperties": font} if font is not None else {}
    ax.set_xticks(range(len(names)), names, rotation=90, **fontprops)
    ax.set_yticks(range(len(names)), names, **fontprops)
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", fontsize=7,
                color="white" if v > m.max() / 2 else "black")
    # A title wider than a small matrix would be cut at the picture's edges: wrapped to fit.
    ax.set(xlabel="predicted", ylabel="gold", title=textwrap.fill(title, max(20, int(size * 8))))
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _font_for(text: str):
    """FontProperties of an installed font that has a glyph for every character, else None."""
    from matplotlib.font_manager import FontProperties

    path = _font_covering(frozenset(ord(c) for c in text if not c.isspace()))
    return FontProperties(fname=path) if path else None


@lru_cache(maxsize=8)
def _font_covering(codepoints: frozenset) -> str | None:
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    rank = {name: i for i, name in enumerate(_CJK_FAMILIES)}
    fonts = sorted(font_manager.fontManager.ttflist, key=lambda f: rank.get(f.name, len(rank)))
    for entry in fonts:
        if "last resort" in entry.name.lower():  # matplotlib's: a placeholder box for everything
            continue
        try:
            charmap = FT2Font(entry.fname).get_charmap()
        except (OSError, RuntimeError, ValueError):
            continue
        if codepoints <= charmap.keys():
            return entry.fname
    return None
