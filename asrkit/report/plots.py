"""Training-curve plots as PNG bytes (matplotlib, headless Agg backend)."""

from __future__ import annotations

import io


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def line_plot_png(series: dict[str, tuple[list[float], list[float]]], title: str, xlabel: str,
                  ylabel: str, logy: bool = False) -> bytes:
    """Plot ``name -> (xs, ys)`` lines on one axis; returns PNG bytes (empty series skipped)."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    for name, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
