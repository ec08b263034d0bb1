"""Deprecated: the old path of :mod:`veil.client.plan`.

A re-export kept for one release; import :mod:`veil.client.plan` instead.
"""

from __future__ import annotations

from veil.client.plan import *  # noqa: F403
from veil.client.plan import __all__ as __all__
