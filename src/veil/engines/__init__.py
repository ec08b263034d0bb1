"""Engines run one SQL tree and return exact aggregates as Arrow; they know nothing of DP."""

from __future__ import annotations

from veil.engines.base import Engine, Progress, ProgressReporting, SchemaNotes

__all__ = ["Engine", "Progress", "ProgressReporting", "SchemaNotes"]
