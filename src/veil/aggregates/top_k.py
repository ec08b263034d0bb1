"""TOP_K(col, k): the k most frequent values of a column, as k columns ``top1_col`` …
``topk_col`` (most frequent first), chosen by peeling: k exponential-mechanism choices among
the public candidates not yet chosen, each at ε_g/k (``veil.release.modes``, where the
sensitivity and composition proofs are). The k columns read one measurement and cost what one
MODE at the same budget costs.

Its confidence statement, per column: given the earlier ranks, a candidate whose count
exceeds every candidate still left by at least m = k·T·ln((K − 1)/(1 − level)) is chosen at
this rank with probability ≥ level (the MODE margin at temperature k·T; K candidates). It
depends on the plan alone; the value bar is ``None``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from veil.aggregates import register
from veil.aggregates.base import AggregateKind, Call, Expected, Group, Read
from veil.errors import InternalError
from veil.noise.margins import mode_margin


@register
class TopK(AggregateKind):
    name = "top_k"
    rank = 12
    constant_bar = True
    sql = ("TOP_K(col, k)",)
    output = "integer"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return f"top_{column}"

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("mode", "mode"),)

    def estimate(self, g: Group) -> Any:
        """This column's rank's candidate: its label, or the integer ``centre + index``."""
        m = g.noise("mode")
        rank, picks = g.model.rank, g.model.picks
        if rank is None or picks is None:
            raise InternalError(f"{g.model.alias!r} is a TOP_K column without its rank")
        code = g.value("mode")
        j = (code // m.limit ** (rank - 1)) % m.limit
        if g.model.labels is not None:
            return g.model.labels[j]
        return int(m.centre + m.step * j)

    def halfwidth(self, g: Group, value: float, level: float) -> None:
        return None

    def expected(self, e: Expected, level: float) -> str:
        m = e.noise("mode")
        picks = e.model.picks or 1
        margin = mode_margin(m.scale * picks, m.limit, level)
        return (
            f"rank {e.model.rank} of {picks}: given the ranks above it, a value whose count "
            f"exceeds every other left of the {m.limit} candidates by ≥ {margin:.3g} is chosen "
            f"with probability ≥ {level:.0%} (exponential mechanism, peeling at ε/{picks} each)"
        )
