"""An audit as a picture: the two output distributions of each neighbouring pair (``--plot``).

One panel per pair of a mechanism audit, or per neighbour of a query audit (its worst cell),
with the ε lower bound found against the claim in its title and the verdict above; the
statement that passing does not prove privacy is printed under every picture. Needs the
``plot`` extra (matplotlib), through :mod:`veil.plots`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from veil.audit.histograms import Histogram
from veil.audit.mechanisms import NOT_PROOF, MechanismAudit
from veil.audit.query import QueryAudit
from veil.plots import figure, save

__all__ = ["plot_audit"]

MAX_PANELS = 6
COLOURS = ("#1f77b4", "#d62728")  # first side, second side


def _panel(ax: Any, h: Histogram | None, title: str, first: str, second: str) -> None:
    ax.set_title(title, fontsize=9)
    if h is None:
        ax.text(0.5, 0.5, "no released value on either side", ha="center", va="center")
        ax.set_axis_off()
        return
    for shares, colour, label, missing in (
        (h.first, COLOURS[0], first, h.first_missing),
        (h.second, COLOURS[1], second, h.second_missing),
    ):
        text = label if not missing else f"{label} ({missing:.1%} not released)"
        ax.stairs(shares, h.edges, color=colour, fill=True, alpha=0.35, label=text)
        ax.stairs(shares, h.edges, color=colour, linewidth=1.2)
    ax.set_xlabel("released value (central 98 %; beyond it in the end bins)", fontsize=8)
    ax.set_ylabel("share of releases", fontsize=8)
    ax.legend(fontsize=7)


def _grid(panels: int) -> tuple[Any, list[Any]]:
    cols = 1 if panels == 1 else 2
    rows = math.ceil(panels / cols)
    fig, axes = figure(6.0 * cols, 3.4 * rows + 0.6, rows=rows, cols=cols)
    flat = [ax for row in axes for ax in row]
    for ax in flat[panels:]:
        ax.set_axis_off()
    return fig, flat


def _mechanism(audit: MechanismAudit, path: Path) -> Path:
    pairs = audit.pairs[:MAX_PANELS]
    fig, axes = _grid(len(pairs))
    for ax, p in zip(axes, pairs, strict=False):
        title = (
            f"inputs {p.a!r} vs {p.b!r}: ε ≥ {p.bound.epsilon:.3g} (claimed {audit.epsilon:g})\n"
            f"event: {p.bound.event}"
        )
        _panel(ax, p.histogram, title, f"input {p.a!r}", f"input {p.b!r}")
    head = f"audit of {_short(audit.name)}: {audit.verdict}  ({audit.samples} samples per side)"
    if audit.failures:
        head += "\n" + _short(audit.failures[0], 110)
    return _finish(fig, head, path)


def _query(audit: QueryAudit, path: Path) -> Path:
    shown = [(n, n.worst) for n in audit.neighbours if n.worst is not None][:MAX_PANELS]
    fig, axes = _grid(max(len(shown), 1))
    if not shown:
        axes[0].text(0.5, 0.5, "no neighbour released a cell", ha="center", va="center")
        axes[0].set_axis_off()
    for ax, (n, worst) in zip(axes, shown, strict=False):
        title = (
            f"{n.name}: {worst.cell}\nε ≥ {worst.epsilon:.3g} "
            f"(claimed {float(audit.epsilon):g}){'  FAIL' if n.problems else ''}"
        )
        _panel(ax, n.histogram, title, "D", "D′ (" + n.name + ")")
    head = f"audit of {_short(audit.sql)}: {audit.verdict}  ({audit.releases} releases per side)"
    return _finish(fig, head, path)


def _short(text: str, limit: int = 72) -> str:
    """``text`` cut in the middle to ``limit`` characters (a long command line or query)."""
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return text[:keep] + "…" + text[-keep:]


def _finish(fig: Any, head: str, path: Path) -> Path:
    fig.suptitle(head, fontsize=10)
    fig.text(0.5, 0.005, NOT_PROOF, ha="center", va="bottom", fontsize=7, style="italic")
    return save(fig, path, rect=(0, 0.03, 1, 0.95))


def plot_audit(audit: MechanismAudit | QueryAudit, path: str | Path) -> Path:
    """Write the picture of ``audit`` to ``path`` (a .png) and return it."""
    if isinstance(audit, QueryAudit):
        return _query(audit, Path(path))
    return _mechanism(audit, Path(path))
