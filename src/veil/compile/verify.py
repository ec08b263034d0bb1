"""Re-check the guarantee after compiling (STYLE 5, DESIGN §3).

:func:`recompute_loss` derives the privacy loss from the mechanisms *actually built* — their
sensitivities recomputed from the plan's bounds and contribution limits, their noise scales as
they will be used to draw noise — without looking at the budgets the compiler wrote down.
:func:`check_loss` compares it with what the ledger charged; any mismatch raises
:class:`veil.PrivacyInvariantError` and nothing may be released.
"""

from __future__ import annotations

from fractions import Fraction

from veil.accounting.budget import Budget
from veil.accounting.conversions import zcdp_to_approx
from veil.compile.statistics import (
    per_group_bound,
    reach,
    sensitivity,
    thresholded,
)
from veil.compile.strata import expected_strata
from veil.errors import PrivacyInvariantError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, Measurement

__all__ = ["check_loss", "recompute_loss"]


def recompute_loss(agg: Aggregate, charged: Budget) -> Budget:
    """The loss implied by ``agg``'s measurements and selection (see the module docstring).

    ``charged`` only says which form to express it in (its kind and total δ).
    """
    if not agg.measurements:
        raise PrivacyInvariantError("the aggregation has no measurements to account for")
    eps = Fraction(0)
    rho = Fraction(0)
    pure = True  # every measurement has a pure-ε privacy map
    for m in agg.measurements:
        expected = sensitivity(agg, m.statistic, m.mechanism, m.limit, m.quantile)
        if m.sensitivity != expected:
            raise PrivacyInvariantError(
                f"measurement {m.name!r} is calibrated to sensitivity {m.sensitivity}, but the "
                f"plan's bounds and contribution limits give {expected}"
            )
        e, rho_m = family(m.mechanism).loss(m.sensitivity, m.scale, reach(agg, m.statistic))
        _check_strata(agg, m, (e, rho_m))
        pure = pure and e is not None
        eps += e or 0
        rho += rho_m
    sel = agg.selection
    d_sel = Fraction(0)
    if sel is not None:
        count = thresholded(agg.measurements)
        if count is None or count.scale != sel.scale or count.mechanism != sel.mechanism:
            raise PrivacyInvariantError("partition selection does not threshold the noisy count")
        d_sel = sel.budget.delta
        # a unit creates at most G' = min(G, T) new groups, each with ≤ R' = min(R, T) rows
        g = reach(agg).groups
        r = int(per_group_bound(agg, count.statistic, 1))
        need = family(sel.mechanism).threshold(sel.scale, groups=g, rows=r, delta=d_sel)
        if sel.threshold < need:
            raise PrivacyInvariantError(
                f"partition selection threshold {sel.threshold} is below the {need} that "
                f"δ={float(d_sel):g} requires"
            )
    elif not agg.public_keys:
        raise PrivacyInvariantError("unknown group keys would be released without selection")
    if pure and charged.kind != "zcdp":
        return Budget(epsilon=eps, delta=d_sel) if d_sel > 0 else Budget(epsilon=eps)
    if charged.kind == "zcdp":
        return Budget(rho=rho)
    if charged.delta - d_sel <= 0:
        raise PrivacyInvariantError("no δ is left for the zCDP conversion of Gaussian noise")
    conv = zcdp_to_approx(rho, charged.delta - d_sel)
    return Budget(epsilon=conv.eps, delta=charged.delta)


def _check_strata(agg: Aggregate, m: Measurement, loss: tuple[Fraction | None, Fraction]) -> None:
    """A stratified sum (``veil.compile.strata``) must carry exactly the strata the plan gives,
    each bin calibrated to its own recomputed bound at the measurement's loss: then the unit's
    loss over all bins is that loss (the strata module's proof note)."""
    if m.strata != expected_strata(agg, m):
        raise PrivacyInvariantError(
            f"measurement {m.name!r} carries strata the plan's bins and bounds do not give"
        )
    if m.strata and not any(x.statistic == "count" for x in agg.measurements):
        raise PrivacyInvariantError(f"the stratified {m.name!r} is re-centred without a count")
    for s in m.strata:
        expected = sensitivity(agg, m.statistic, m.mechanism, s.limit)
        got = family(m.mechanism).loss(s.sensitivity, s.scale, reach(agg, m.statistic))
        if s.sensitivity != expected or got != loss:
            raise PrivacyInvariantError(
                f"a stratum of {m.name!r} costs {got}, not the measurement's {loss}"
            )


def check_loss(agg: Aggregate, charged: Budget) -> Budget:
    """Raise ``PrivacyInvariantError`` unless the recomputed loss equals ``charged``."""
    actual = recompute_loss(agg, charged)
    if actual != charged:
        raise PrivacyInvariantError(
            f"the mechanisms built cost {actual}, but {charged} was charged; nothing is released"
        )
    return actual
