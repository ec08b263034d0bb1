"""Deprecated: the old path of :mod:`veil.client.errors`.

A re-export kept for one release; import :mod:`veil.client.errors` instead.
"""

from __future__ import annotations

from veil.client.errors import *  # noqa: F403
from veil.client.errors import __all__ as __all__
