"""VAR_POP(x) and STDDEV_POP(x): the population variance (Q − S²/n)/n of the clamped values and
its square root — the spread kinds of :mod:`veil.aggregates.variance` with divisor n (and
n = max(n̂, 1)); the same statistics, budget split and delta-method error bar.
"""

from __future__ import annotations

from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.variance import Spread


@register
class VarPop(Spread):
    name = "var_pop"
    rank = 6
    sql = ("VAR_POP",)
    sql_nodes = (exp.VariancePop,)
    ddof = 0


@register
class StddevPop(Spread):
    name = "stddev_pop"
    rank = 7
    sql = ("STDDEV_POP",)
    sql_nodes = (exp.StddevPop,)
    ddof = 0
    root = True
