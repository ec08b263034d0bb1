"""MODE(col): the most frequent value of an integer-coded column, chosen by the exponential
mechanism among the public candidates of its declared bounds (``veil.release.modes``, where
the sensitivity proof is). The released value is the chosen candidate.

Its confidence statement is a margin in counts, not a value interval: a value whose count
exceeds every other candidate's by at least m = T·ln((K − 1)/(1 − level)) is released with
probability ≥ level (T the temperature, K the candidates; :func:`veil.noise.margins.
mode_margin`). It depends on the plan alone, so ``explain`` shows it before anything is spent,
and the released answer carries the same words (``Result.notes``). The value bar is ``None``:
a mode has no ± (the chosen value is a category, right or wrong).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.base import AggregateKind, Call, Expected, Group, Read
from veil.noise.margins import mode_margin


@register
class Mode(AggregateKind):
    name = "mode"
    rank = 11
    constant_bar = True
    sql = ("MODE(col)",)
    sql_nodes = (exp.Mode,)
    output = "integer"

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("mode", "mode"),)

    def estimate(self, g: Group) -> Any:
        """The chosen candidate: its public label, or the integer ``centre + index``."""
        m = g.noise("mode")
        if g.model.labels is not None:
            return g.model.labels[g.value("mode")]
        return int(m.centre + m.step * g.value("mode"))

    def halfwidth(self, g: Group, value: float, level: float) -> None:
        return None

    def expected(self, e: Expected, level: float) -> str:
        m = e.noise("mode")
        margin = mode_margin(m.scale, m.limit, level)
        return (
            f"a value whose count exceeds every other of the {m.limit} candidates by "
            f"≥ {margin:.3g} is chosen with probability ≥ {level:.0%} (exponential mechanism)"
        )
