"""Accuracy first: the smallest ε whose error bars meet stated targets, found without data."""

from __future__ import annotations

from veil.accuracy.curves import Curve, accuracy_curve
from veil.accuracy.search import Choice, choose_epsilon, target_bars
from veil.accuracy.targets import Target, parse_target, parse_targets

__all__ = [
    "Choice",
    "Curve",
    "Target",
    "accuracy_curve",
    "choose_epsilon",
    "parse_target",
    "parse_targets",
    "target_bars",
]
