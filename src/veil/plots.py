"""Pictures for ``--plot FILE.png``: matplotlib (the ``plot`` extra) on its file-only backend.

Everything plotted here is already released or public (noisy outputs an audit drew, error bars
computed from public parameters): a plot is post-processing and reads no private value.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from veil.errors import InvalidArgumentError, MissingDependencyError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["INSTALL_HINT", "check_path", "figure", "save"]

INSTALL_HINT = "pip install 'veil[plot]'"


def check_path(path: str | Path) -> Path:
    """``path`` as a PNG file that can be written, refused before any work or spending: its
    name ends in ``.png`` and its folder exists."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise InvalidArgumentError(f"--plot {str(path)!r} must name a .png file (e.g. audit.png)")
    if not p.parent.is_dir():
        raise InvalidArgumentError(
            f"--plot {str(path)!r}: the folder {str(p.parent)!r} does not exist; create it first"
        )
    _pyplot()
    return p


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingDependencyError(f"--plot needs matplotlib: {INSTALL_HINT}") from exc
    matplotlib.use("Agg")  # files only: never opens a window, works without a display
    import matplotlib.pyplot as plt

    return plt


def figure(width: float = 8.0, height: float = 4.5, *, rows: int = 1, cols: int = 1) -> Any:
    """A new figure and its axes (``plt.subplots``) on the file-only backend."""
    return _pyplot().subplots(rows, cols, figsize=(width, height), squeeze=False)


def save(
    fig: Figure, path: str | Path, *, rect: tuple[float, float, float, float] = (0, 0, 1, 1)
) -> Path:
    """Write ``fig`` to ``path`` (checked with :func:`check_path`) and free it; the panels are
    laid out inside ``rect`` (figure fractions: room for a title or a footnote)."""
    p = check_path(path)
    fig.tight_layout(rect=rect)
    fig.savefig(p, dpi=120)
    _pyplot().close(fig)
    return p
