"""Deprecated: the old path of :mod:`veil.client.answers`.

A re-export kept for one release; import :mod:`veil.client.answers` instead.
"""

from __future__ import annotations

from veil.client.answers import *  # noqa: F403
from veil.client.answers import __all__ as __all__
