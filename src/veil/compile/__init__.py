"""Compilation: rewrite rules, sensitivity, budget split, and lowering to SQL.

``compile_plan(plan, context)`` applies :data:`RULES`; ``lower(aggregate, dialect, salt=…)``
turns the compiled aggregation into sqlglot trees; ``check_loss`` re-checks the guarantee.
"""

from veil.compile.dialect import DIALECTS, Dialect, dialect
from veil.compile.lower import Lowered, lower, to_sql
from veil.compile.rules import RULES, Context, Rule, apply_rules
from veil.compile.verify import check_loss, recompute_loss

compile_plan = apply_rules

__all__ = [
    "DIALECTS",
    "RULES",
    "Context",
    "Dialect",
    "Lowered",
    "Rule",
    "apply_rules",
    "check_loss",
    "compile_plan",
    "dialect",
    "lower",
    "recompute_loss",
    "to_sql",
]
