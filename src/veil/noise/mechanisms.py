"""Deprecated: the old home of the stand-alone mechanisms, now :mod:`veil.mechanisms`.

A re-export kept for one release (the only module of ``noise/`` that imports above it); import
:mod:`veil.mechanisms` instead.
"""

from __future__ import annotations

from veil.mechanisms import *  # noqa: F403
from veil.mechanisms import __all__ as __all__
