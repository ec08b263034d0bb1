"""Deprecated: the old home of location data, now :mod:`veil.local.geo`.

A re-export kept for one release; ``from veil.local import geo`` instead.
"""

from __future__ import annotations

from veil.local.geo import *  # noqa: F403
from veil.local.geo import __all__ as __all__
from veil.local.geo import location as location
