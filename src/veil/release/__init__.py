"""From exact statistics to released answers: estimators and error bars, partition-selection
thresholds, quantiles by the exponential mechanism, post-processing (HAVING, ORDER BY, LIMIT,
consistent counts), the :class:`Result` and the dry-run :class:`Explanation`.

The names below are loaded on first use (PEP 562): ``veil.release.result`` is what a service's
client reads answers into, and importing it must not load the compiler behind ``explain``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veil.release.explain import Explanation
    from veil.release.result import Result, Usage

__all__ = ["Explanation", "Result", "Usage"]

_LAZY = {
    "Explanation": "veil.release.explain",
    "Result": "veil.release.result",
    "Usage": "veil.release.result",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
