"""Accuracy versus ε as a picture (``--plot FILE.png``): one panel per query, a line per column.

Every bar drawn is computed from public parameters (bounds, contribution limits, ε and the
stated assumptions): the picture reads no private value. Needs the ``plot`` extra (matplotlib),
through :mod:`veil.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from veil.accuracy.curves import Curve
from veil.plots import figure, save

__all__ = ["MAX_PANELS", "Panel", "plot_curves"]

MAX_PANELS = 6
FOOTER = "error bars from public parameters only: nothing read, nothing charged"


@dataclass(frozen=True)
class Panel:
    """One query's curve; ``limits``: each targeted column's target (a dashed line);
    ``chosen``: the ε chosen or given (a dotted line)."""

    title: str
    curve: Curve
    limits: Mapping[str, float] = field(default_factory=dict)
    chosen: Fraction | None = None


def plot_curves(panels: Sequence[Panel], path: str | Path) -> Path:
    """Draw ``panels`` (the first :data:`MAX_PANELS`) on log-log axes to the PNG ``path``."""
    shown = list(panels[:MAX_PANELS])
    cols = 1 if len(shown) == 1 else 2
    rows = math.ceil(len(shown) / cols)
    fig, axes = figure(6.0 * cols, 3.6 * rows + 0.4, rows=rows, cols=cols)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(shown) :]:
        ax.set_axis_off()
    for ax, panel in zip(flat, shown, strict=False):
        eps = [float(e) for e in panel.curve.epsilons]
        for i, column in enumerate(panel.curve.columns):
            colour = f"C{i % 10}"
            points = [
                (e, b[column])
                for e, b in zip(eps, panel.curve.bars, strict=True)
                if math.isfinite(b[column]) and b[column] > 0
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", color=colour, label=f"{column}: expected bar")
            if column in panel.limits:
                ax.axhline(
                    panel.limits[column],
                    color=colour,
                    linestyle="--",
                    linewidth=1,
                    label=f"{column}: target ± {panel.limits[column]:.4g}",
                )
        if panel.chosen is not None:
            ax.axvline(
                float(panel.chosen),
                color="grey",
                linestyle=":",
                label=f"ε = {float(panel.chosen):.4g}",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ε", fontsize=9)
        ax.set_ylabel("error bar (half-width)", fontsize=9)
        ax.set_title(panel.title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"accuracy versus ε\n{FOOTER}", fontsize=9)
    return save(fig, path)
