"""Accuracy first: the smallest ε whose error bars meet stated targets, found without data."""

from __future__ import annotations

from veil.accuracy.curves import Curve, accuracy_curve
from veil.accuracy.search import Choice, choose_epsilon, target_bars
from veil.accuracy.targets import Target, parse_target, parse_targets
from veil.accuracy.workload import Planned, WorkItem, plan_workload

__all__ = [
    "Choice",
    "Curve",
    "Planned",
    "Target",
    "WorkItem",
    "accuracy_curve",
    "choose_epsilon",
    "parse_target",
    "parse_targets",
    "plan_workload",
    "target_bars",
]
