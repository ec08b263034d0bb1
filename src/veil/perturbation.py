"""Deprecated: the old home of :func:`veil.perturb`, now :mod:`veil.local.perturb`.

A re-export kept for one release; import ``veil.perturb`` or :mod:`veil.local.perturb`.
"""

from __future__ import annotations

from veil.local.perturb import *  # noqa: F403
from veil.local.perturb import __all__ as __all__
