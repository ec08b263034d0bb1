"""STDDEV / STDDEV_SAMP(x): the square root of the sample variance (see
:mod:`veil.aggregates.variance`; its error bar is the variance's interval mapped through sqrt).
"""

from __future__ import annotations

from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.variance import Spread


@register
class Stddev(Spread):
    name = "stddev"
    rank = 5
    sql = ("STDDEV", "STDDEV_SAMP")
    sql_nodes = (exp.Stddev, exp.StddevSamp)
    root = True
