"""Which noisy statistics a query needs, which mechanism, and how the budget is split.

Estimators (``veil.release.estimators`` computes them from the noisy measurements):

- COUNT(*) = n̂, the noisy row count;
- SUM(x) = Ŝ + c·n̂ (noisy *centred* sum Ŝ of clamp(x) − c, plus the centre times the noisy
  count; with c = 0 the count is not needed);
- AVG(x) = c + Ŝ/n̂ (centred noisy sum over noisy count);
- VARIANCE(x) = (Q̂ − Ŝ²/n̂)/(n̂ − 1) with Q̂ the noisy centred sum of squares; STDDEV its root;
- quantiles (MEDIAN, MIN = 0-quantile, MAX = 1-quantile) by the exponential mechanism.

One query shares one noisy count and one centred noisy sum per column between all its
aggregates (COUNT, SUM and AVG of a column cost two measurements, not three).

Budget split. Each aggregate a has a weight w_a (1 unless given) and an expected relative
variance that is a linear combination Σ_m A_am·V_m of the measurements' variances (delta
method, with the unknown mean given a uniform prior on the bounds). With V_m = D_m/ε_m²
(Laplace) the total Σ_m A_m·D_m/ε_m² under Σ ε_m = ε is minimised by ε_m ∝ (A_m·D_m)^(1/3);
with V_m = D_m/ρ_m (Gaussian, zCDP) by ρ_m ∝ (A_m·D_m)^(1/2) (Lagrange multipliers). Each
quantile takes the share w_q/Σw of the budget off the top. The centre c of each summed column
(the bounds' midpoint, or the point of the bounds nearest 0) and the mechanism (discrete
Laplace for pure ε; discrete Gaussian under zCDP when δ > 0 makes it better) are chosen by
comparing the minimised totals. All choices depend only on the plan, bounds and budget.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

from veil.accounting.budget import Budget
from veil.accounting.conversions import zcdp_to_approx
from veil.aggregates.base import Moments, measurement_name
from veil.compile.constants import DEFAULT_QUANTILE_BUCKETS, fixed_point, nearest_double
from veil.compile.statistics import (
    per_group_bound,
    reach,
    sensitivity,
    thresholded,
)
from veil.compile.strata import bins_of, strata, stratified_key
from veil.errors import BoundsError, InternalError, InvalidArgumentError
from veil.noise import MAX_SCALE
from veil.noise.families import EXPONENTIAL, Mechanism, family
from veil.plan.nodes import (
    Aggregate,
    ColumnBounds,
    Measurement,
    Selection,
    Statistic,
    Stratum,
)

__all__ = [
    "FIXED_POINT_LIMIT",
    "Design",
    "build",
    "max_rho",
]

FIXED_POINT_LIMIT = 1 << 30
"""Per-row integers of sums lie in [−2^30, 2^30]: the grid step is the smallest power of two
with width/step ≤ 2^30 (``veil.compile.constants.fixed_point``), a resolution of at least
2^−30 of the width, and sums of up to 2^96 rows fit in 128-bit integers."""

_EXACT_INTEGERS = 1 << 53  # doubles hold every integer up to here: exact integer candidates

_DENOMINATOR = 10**9


@dataclass(frozen=True)
class _Need:
    name: str
    statistic: Statistic
    column: str | None = None
    centre: Fraction = Fraction(0)
    step: Fraction = Fraction(1)
    limit: int = 1
    quantile: Fraction | None = None
    weight: float = 0.0  # A_m·D_m (moments) or the aggregate weight (quantiles)
    discrete: bool = False
    picks: int = 1


@dataclass(frozen=True)
class Design:
    """The measurements of one aggregation and the loss they cost (``charged``)."""

    measurements: tuple[Measurement, ...]
    selection: Selection | None
    charged: Budget


def _weights(agg: Aggregate) -> list[Fraction]:
    return [a.weight if a.weight is not None else Fraction(1) for a in agg.aggregates]


def _bounds(agg: Aggregate, column: str) -> ColumnBounds:
    b = agg.bounds_of(column)
    if b is None:
        raise BoundsError(
            f"bounds for {column!r} are required; pass bounds={{{column!r}: (lower, upper)}}"
        )
    return b


def _ends(b: ColumnBounds) -> tuple[Fraction, Fraction]:
    """The bounds as the engine clamps to them: the doubles nearest the declared ends."""
    return Fraction(nearest_double(b.lower)), Fraction(nearest_double(b.upper))


def _centres(b: ColumnBounds) -> list[Fraction]:
    """Candidate centres, each a double (so the lowering writes it exactly): the midpoint of
    the clamping interval, and its point nearest 0 when that differs."""
    lo, hi = _ends(b)
    mid = Fraction(nearest_double((lo + hi) / 2))
    nearest_zero = min(max(Fraction(0), lo), hi)
    return [mid] if nearest_zero == mid else [mid, nearest_zero]


def _width(b: ColumnBounds, c: Fraction) -> Fraction:
    """The largest |clamp(x) − c| over the clamping interval."""
    lo, hi = _ends(b)
    return max(hi - c, c - lo)


def _scale(b: ColumnBounds) -> Fraction:
    """The magnitude of a column's bounds (a positive number)."""
    return max(abs(b.lower), abs(b.upper), b.upper - b.lower)


def _moments(agg: Aggregate, column: str, centres: dict[str, Fraction]) -> Moments:
    """The column's :class:`Moments` in units of its own scale: every term is then a
    *relative* variance, which changes no weight, and the arithmetic stays finite for any
    bounds."""
    b = _bounds(agg, column)
    scale = _scale(b)
    c = centres[column]
    return Moments(float(b.midpoint / scale), float(b.radius / scale), float(c / scale))


def _moment_needs(agg: Aggregate, centres: dict[str, Fraction], gaussian: bool) -> list[_Need]:
    """Moment measurements with their objective weights A_m·D_m (D_m per unit budget).

    A pure function of the aggregation (before its budget is split), the centres and the
    noise family — never of ε or δ — so it is remembered: a question asked again at a new ε
    weighs its measurements once (the weights are per unit budget; the split applies ε)."""
    return list(_moment_needs_of(agg, tuple(sorted(centres.items())), gaussian))


@functools.lru_cache(maxsize=128)
def _moment_needs_of(
    agg: Aggregate, centres_items: tuple[tuple[str, Fraction], ...], gaussian: bool
) -> tuple[_Need, ...]:
    """:func:`_moment_needs` (frozen needs, in the order they are found)."""
    centres = dict(centres_items)
    rows = reach(agg)
    # L1 and L2² of a unit's rows (b = 1), and of the groups it touches (count_units)
    l1, l2 = float(rows.total), float(rows.squares)
    g = float(reach(agg, "count_units").total)
    r = rows.rows
    a: dict[str, float] = {}

    def add(name: str, value: float) -> None:
        a[name] = a.get(name, 0.0) + value

    for agg_call, w in zip(agg.aggregates, _weights(agg), strict=True):
        k = agg_call.kind
        if k.quantile != "none" or agg_call.function in ("mode", "top_k"):
            continue  # quantiles and modes take their share off the top (_quantile_needs)
        col = agg_call.value_column  # the column itself, or a weighted call's sum column
        moments: Moments | None = None
        if k.bounded:
            moments = _moments(agg, col or "", centres)
        for statistic, coef in k.split(agg_call.call(r), float(w), moments).items():
            per_column = statistic in ("sum", "sum_squares")
            add(measurement_name(statistic, col if per_column else None), coef)
        if k.weighted == "mean":  # a weighted mean reads the sum of its weights too
            weights = agg_call.weights or ""
            wm = _moments(agg, weights, centres)
            for statistic, coef in k.split_weights(agg_call.call(r), float(w), wm).items():
                per_column = statistic in ("sum", "sum_squares")
                add(measurement_name(statistic, weights if per_column else None), coef)
    if not agg.public_keys and a.get("count", 0.0) == 0:
        # partition selection thresholds a noisy count: the unit count if there is one (a
        # row count no aggregate weighs would get a vanishing share of the budget), else a
        # row count of its own weight
        if "count_units" in a:
            a.pop("count", None)
        else:
            a["count"] = 1.0
    needs: dict[str, _Need] = {}
    for name, coef in a.items():
        d: float
        if name == "count":
            d = (2 * l1**2) if not gaussian else l2 / 2
            needs[name] = _Need(name, "count", weight=coef * d)
        elif name == "count_units":
            d = 2.0 * g * g if not gaussian else g / 2
            needs[name] = _Need(name, "count_units", weight=coef * d)
        else:
            stat: Statistic = "sum" if name.startswith("sum(") else "sum_squares"
            col = name[name.index("(") + 1 : -1]
            b = _bounds(agg, col)
            c = centres[col]
            width = _width(b, c)
            wid = float(width / _scale(b))  # the column's scale, as in the weights above
            if stat == "sum":
                d = 2 * (l1 * wid) ** 2 if not gaussian else l2 * wid * wid / 2
            else:
                d = 2 * (l1 * wid * wid / 2) ** 2 if not gaussian else l2 * wid**4 / 8
            step, limit = fixed_point(width, FIXED_POINT_LIMIT)
            needs[name] = _Need(
                name,
                stat,
                column=col,
                centre=c,
                step=step,
                limit=limit,
                weight=coef * d,
            )
    _stratify_needs(agg, needs)
    # a column summed only with c = 0 and no count asked: no count needed
    if "count" in needs and needs["count"].weight == 0 and agg.public_keys:
        del needs["count"]
    return tuple(needs.values())


def _stratify_needs(agg: Aggregate, needs: dict[str, _Need]) -> None:
    """Re-weigh a sum stratified by its own bins (``veil.compile.strata``) for the split: its
    variance is that of the bins' widths, and each bin's centre times the noisy count adds the
    count's; the count is always measured (the release re-centres each bin with it). The
    weights only steer the split; the calibration does not depend on them."""
    for name, need in list(needs.items()):
        if need.statistic != "sum" or need.column is None:
            continue
        key = stratified_key(agg, need.column)
        if key is None:
            continue
        b = _bounds(agg, need.column)
        bins = bins_of(agg, need.column, key)
        half = sum(float((hi - lo) / 2) ** 2 for lo, hi in bins) / len(bins)
        mids = sum(float((hi + lo) / 2) ** 2 for lo, hi in bins) / len(bins)
        full = float(_width(b, need.centre)) ** 2
        coef = need.weight / full if full > 0 else need.weight
        needs[name] = dataclasses.replace(need, weight=coef * max(half, 1e-300))
        # the count's D per unit budget is the sum's at width 1: the same coefficient applies
        extra = coef * mids
        count = needs.get("count")
        if count is None:
            needs["count"] = _Need("count", "count", weight=max(extra, 1e-300))
        else:
            needs["count"] = dataclasses.replace(count, weight=count.weight + extra)


def _objective(needs: Sequence[_Need], gaussian: bool) -> float:
    power = 1 / 2 if gaussian else 1 / 3
    total = sum(n.weight**power for n in needs if n.weight > 0)
    return float(total ** (1 / power))


def _shares(values: Sequence[float], total: Fraction) -> list[Fraction]:
    """Exact positive parts of ``total`` in proportion to ``values`` (the last takes the rest)."""
    s = sum(values)
    if s <= 0 or not math.isfinite(s):
        return [total / len(values)] * len(values)
    parts = [Fraction(v / s).limit_denominator(_DENOMINATOR) * total for v in values[:-1]]
    last = total - sum(parts, Fraction(0))
    if last <= 0 or any(p <= 0 for p in parts):
        return [total / len(values)] * len(values)
    return [*parts, last]


@functools.lru_cache(maxsize=256)
def max_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """A large ρ whose zCDP→(ε, δ) conversion gives at most ``epsilon`` (exactly checked).

    Starts from Bun–Steinke's ρ = (sqrt(ln(1/δ) + ε) − sqrt(ln(1/δ)))², which the tighter
    CKS conversion always accepts, and bisects upward to within 2^-16 of the best ρ.
    """
    log_inv = math.log(1 / float(delta))
    guess = (math.sqrt(log_inv + float(epsilon)) - math.sqrt(log_inv)) ** 2
    lo = Fraction(guess * (1 - 1e-9)).limit_denominator(1 << 60)
    while lo > 0 and zcdp_to_approx(lo, delta).eps > epsilon:
        lo /= 2
    if lo <= 0:
        raise InvalidArgumentError(
            f"epsilon={float(epsilon):g} with delta={float(delta):g} is too small for a "
            "Gaussian measurement; raise epsilon"
        )
    hi = 2 * lo
    while zcdp_to_approx(hi, delta).eps <= epsilon:
        lo, hi = hi, 2 * hi
    for _ in range(16):
        mid = (lo + hi) / 2
        if zcdp_to_approx(mid, delta).eps <= epsilon:
            lo = mid
        else:
            hi = mid
    return Fraction(math.floor(lo * (1 << 48)), 1 << 48) or lo


def _quantile_needs(agg: Aggregate, buckets: int) -> list[_Need]:
    """One exponential-mechanism measurement per distinct quantile (column, q): a quantile
    asked twice (``MAX(x) AS a, MAX(x) AS b``, or ``MAX(x)`` and ``QUANTILE(x, 1)``) is
    measured once, with the weight of both, and released under each name — as the moments
    and modes are (a second draw would spend budget on a value nothing reads)."""
    out: dict[str, _Need] = {}
    for a, w in zip(agg.aggregates, _weights(agg), strict=True):
        if a.kind.quantile != "none":
            col = a.column or ""
            b = _bounds(agg, col)
            name = measurement_name("quantile", col, a.q)
            if name in out:
                out[name] = replace(out[name], weight=out[name].weight + float(w))
                continue
            span = b.upper - b.lower
            integral = b.lower.denominator == 1 and b.upper.denominator == 1
            small = max(abs(b.lower), abs(b.upper)) <= _EXACT_INTEGERS
            if agg.child.field(col).type == "integer" and integral and small and span < 4 * buckets:
                # integers: every value in the bounds is a candidate (no bucket edges)
                need = _Need(
                    name,
                    "quantile",
                    column=col,
                    centre=b.lower,
                    step=Fraction(1),
                    limit=int(span) + 1,
                    quantile=a.q,
                    weight=float(w),
                    discrete=True,
                )
            else:
                need = _Need(
                    name,
                    "quantile",
                    column=col,
                    centre=b.lower,
                    step=span / buckets if span > 0 else Fraction(1),
                    limit=buckets if span > 0 else 1,
                    quantile=a.q,
                    weight=float(w),
                )
            out[name] = need
    return list(out.values())


_MODE_CANDIDATES = 1 << 32  # the most candidates of one MODE (public integers of its bounds)
_MODE_MAGNITUDE = 1 << 52  # integer bounds up to here: no other integer's double is inside


_CANDIDATE_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "real": (int, float),
    "boolean": (bool,),
}


def _check_candidates(agg: Aggregate, column: str, domain: tuple[object, ...]) -> None:
    """A MODE's listed candidates must be values of its column's type (compared in SQL with
    ``=``, which must not fail on any row, nor on a candidate)."""
    kind = agg.child.field(column).type
    allowed = _CANDIDATE_TYPES.get(kind)
    if allowed is None:
        raise InvalidArgumentError(
            f"MODE({column}) over listed candidates needs a string, integer, real or boolean "
            f"column; {column!r} is {kind}"
        )
    for v in domain:
        if not isinstance(v, allowed) or (kind != "boolean" and isinstance(v, bool)):
            raise InvalidArgumentError(
                f"the candidate {v!r} of MODE({column}) is not a {kind} value like the "
                f"column's; pass domains={{{column!r}: [...]}} with {kind} values"
            )
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidArgumentError(f"the candidate {v!r} of MODE({column}) is not finite")


def _mode_needs(agg: Aggregate) -> list[_Need]:
    """One exponential-mechanism measurement per MODE column, and one per TOP_K(col, k) (its
    k columns read it, and its weight is theirs together): the candidates are the column's
    listed values, or the integers of its declared bounds (public; ``veil.release.modes``)."""
    needs: dict[str, _Need] = {}
    domains: dict[str, object] = {}
    for a, w in zip(agg.aggregates, _weights(agg), strict=True):
        if a.function not in ("mode", "top_k"):
            continue
        col = a.column or ""
        if domains.setdefault(col, a.domain) != a.domain:
            raise InvalidArgumentError(
                f"two MODE/TOP_K of {col!r} with different candidates in one query; use one list"
            )
        picks = 1 if a.top is None else a.top[1]
        name = measurement_name("mode", col, None if a.top is None else Fraction(picks))
        if name in needs:
            needs[name] = replace(needs[name], weight=needs[name].weight + float(w))
            continue
        need = _mode_candidates(agg, col, a.domain, name, float(w))
        if picks > need.limit:
            raise InvalidArgumentError(
                f"TOP_K({col}, {picks}) needs at least {picks} candidates, and {col!r} has "
                f"{need.limit}; lower k or list more candidates"
            )
        needs[name] = replace(need, picks=picks)
    return list(needs.values())


def _mode_candidates(
    agg: Aggregate, col: str, domain: tuple[object, ...] | None, name: str, weight: float
) -> _Need:
    if domain is not None:
        _check_candidates(agg, col, domain)
        return _Need(name, "mode", column=col, limit=len(domain), weight=weight)
    kind = agg.child.field(col).type
    if kind != "integer":
        scan = agg.scan()
        text = ""
        if kind == "string" and scan.declarable:  # a CSV file's codes are text
            text = (
                f"; if it holds integer codes as text (a CSV file's columns are text "
                f"unless declared), declare its type: schema={{{scan.table!r}: {{{col!r}: "
                f"'BIGINT'}}}} in Python, --column {col}:BIGINT in the CLI, and give bounds"
            )
        why = f"MODE({col}) chooses among public candidates, and {col!r} ({kind}) has none"
        raise InvalidArgumentError(
            f"{why} declared; pass domains={{{col!r}: [value, …]}} (or, for an integer-coded "
            f"column, bounds={{{col!r}: (lowest code, highest code)}}){text}",
            cli=f"{why} declared; list them with WHERE {col} IN (value, …) (or, for an "
            f"integer-coded column, --bounds {col}=LOWEST:HIGHEST){text}",
        )
    b = _bounds(agg, col)
    fix = f"bounds={{{col!r}: (lowest code, highest code)}}"
    if b.lower.denominator != 1 or b.upper.denominator != 1:
        raise BoundsError(
            f"MODE({col}) needs integer bounds (its candidates are the integers between "
            f"them), got [{float(b.lower):g}, {float(b.upper):g}]; pass {fix}"
        )
    span = int(b.upper - b.lower) + 1
    if max(abs(b.lower), abs(b.upper)) > _MODE_MAGNITUDE or span > _MODE_CANDIDATES:
        raise BoundsError(
            f"MODE({col}) allows at most 2^32 candidates within ±2^52, got bounds "
            f"[{float(b.lower):g}, {float(b.upper):g}]; pass narrower {fix}"
        )
    return _Need(
        name, "mode", column=col, centre=b.lower, step=Fraction(1), limit=span,
        weight=weight, discrete=True,
    )  # fmt: skip


def _sqrt_floor(x: Fraction) -> Fraction:
    """A rational s ≤ sqrt(x), close to it."""
    s = Fraction(math.sqrt(float(x))).limit_denominator(_DENOMINATOR)
    while s * s > x:
        s = s * (1 - Fraction(1, 10**9))
    return s


def build(agg: Aggregate, budget: Budget, *, buckets: int = DEFAULT_QUANTILE_BUCKETS) -> Design:
    """Choose measurements, mechanism, centres and split for ``agg`` under ``budget``.

    Contract: the returned measurements compose (sequentially, or in zCDP then converted with
    the charged δ) to exactly ``charged`` ≤ ``budget``; each is calibrated to the sensitivity
    of :mod:`veil.compile.statistics`. Partition selection is added when a key is not public.
    """
    selecting = not agg.public_keys
    if selecting and budget.delta == 0:
        grouped = ", ".join(repr(k.column) for k in agg.keys if not k.is_public)
        need = (
            f"grouping by {grouped} without a public list of keys needs partition selection, "
            "which needs delta > 0; pass "
        )
        raise InvalidArgumentError(
            f"{need}delta=1e-6 (or declare the keys' domain: domains={{...}})",
            cli=f"{need}--delta 1e-6 (or list the keys: WHERE col IN ('a', 'b'))",
        )
    quantiles = _quantile_needs(agg, buckets) + _mode_needs(agg)
    moment_columns = sorted(
        {
            a.value_column
            for a in agg.aggregates
            if a.needs_bounds
            and a.kind.quantile == "none"
            and a.value_column is not None
            and a.function not in ("mode", "top_k")  # a MODE's candidates need no centre
        }
        | {a.weights for a in agg.aggregates if a.kind.weighted == "mean" and a.weights}
    )
    options: list[tuple[float, bool, dict[str, Fraction]]] = []
    modes = [False]
    if budget.kind == "zcdp":
        modes = [True]
    elif budget.kind == "approx":
        modes = [False, True]
    for gaussian in modes:
        choices = [_centres(_bounds(agg, c)) for c in moment_columns]
        for combo in itertools.islice(itertools.product(*choices), 64):
            centres = dict(zip(moment_columns, combo, strict=True))
            needs = _moment_needs(agg, centres, gaussian)
            score = _objective(needs, gaussian) if needs else 0.0
            if gaussian and budget.kind == "approx":
                eps = budget.eps
                conv = budget.delta / 2 if selecting else budget.delta
                score /= float(max_rho(eps, conv))
            elif not gaussian:
                score /= float(budget.eps) ** 2
            else:
                score /= float(budget.rho or 1)
            options.append((score, gaussian, centres))
    _, gaussian, centres = min(options, key=lambda o: (o[0], o[1]))
    needs = _moment_needs(agg, centres, gaussian)
    return _calibrate(agg, budget, needs, quantiles, gaussian, selecting)


def _calibrate(
    agg: Aggregate,
    budget: Budget,
    needs: list[_Need],
    quantiles: list[_Need],
    gaussian: bool,
    selecting: bool,
) -> Design:
    spread = reach(agg)
    total_weight = sum(float(w) for w in _weights(agg))
    q_weights = [q.weight for q in quantiles]
    moment_weight = max(total_weight - sum(q_weights), 0.0)
    if needs and moment_weight == 0:
        moment_weight = 1.0  # a hidden count for partition selection
    parts_w = [*q_weights, moment_weight] if needs else q_weights
    if gaussian:
        if budget.kind == "zcdp":
            total = budget.rho or Fraction(0)
            d_sel = Fraction(0)
        else:
            d_sel = budget.delta / 2 if selecting else Fraction(0)
            total = max_rho(budget.eps, budget.delta - d_sel)
    else:
        total = budget.eps
        d_sel = budget.delta if selecting else Fraction(0)
    top = _shares(parts_w, total)
    measurements: list[Measurement] = []
    for q, share in zip(quantiles, top, strict=False):
        sens = sensitivity(agg, q.statistic, "exponential", q.limit, q.quantile)
        if gaussian:
            # ε_g-DP exponential mechanism per group is ε_g²/8-zCDP (bounded range; Cesar &
            # Rogers 2021, Lemma 3.2); a unit's groups compose to spread_squared·ε_g²/8.
            eps_g = _sqrt_floor(8 * share / spread.spread_squared)
            loss = Budget(rho=spread.spread_squared * eps_g * eps_g / 8)
        else:
            eps_g = share / spread.spread
            loss = Budget(epsilon=share)
        measurements.append(
            Measurement(
                name=q.name,
                statistic=q.statistic,
                mechanism="exponential",
                budget=loss,
                sensitivity=sens,
                scale=EXPONENTIAL.scale(sens, eps_g),
                column=q.column,
                centre=q.centre,
                step=q.step,
                limit=q.limit,
                quantile=q.quantile,
                discrete=q.discrete,
                picks=q.picks,
            )
        )
    if needs:
        moment_total = top[-1]
        mech: Mechanism = "discrete_gaussian" if gaussian else "discrete_laplace"
        noise = family(mech)
        power = 1 / 2 if gaussian else 1 / 3
        budgets = _shares([max(n.weight, 1e-300) ** power for n in needs], moment_total)
        for n, part in zip(needs, budgets, strict=True):
            limit, step = n.limit, n.step
            sens = sensitivity(agg, n.statistic, mech, limit)
            scale = noise.scale(sens, part)
            # keep the noise within the samplers' range (scale ≤ 2^48, σ ≤ 2^48) by a coarser
            # fixed-point grid: the noise then still dwarfs the rounding (≥ 2^16 grid steps)
            cap = MAX_SCALE * MAX_SCALE / 16 if gaussian else MAX_SCALE / 4
            while n.statistic in ("sum", "sum_squares") and scale > cap and limit > 1 << 10:
                limit = (limit + 1) // 2  # ceil(width / (2·step)) = ceil(ceil(width / step) / 2)
                step *= 2
                sens = sensitivity(agg, n.statistic, mech, limit)
                scale = noise.scale(sens, part)
            key = stratified_key(agg, n.column) if n.statistic == "sum" and n.column else None
            bins: tuple[Stratum, ...] = ()
            if key is not None and n.column is not None:
                bins = strata(
                    agg,
                    n.column,
                    key,
                    mechanism=mech,
                    centre=n.centre,
                    step=step,
                    limit=limit,
                    share=part,
                )
            if scale <= 0 or scale > cap or any(x.scale > cap for x in bins):
                raise InvalidArgumentError(
                    f"the noise for {n.name} would be too large to sample (scale {float(scale):.3g}"
                    "); raise epsilon or lower max_groups / max_rows_per_group / max_rows"
                )
            measurements.append(
                Measurement(
                    name=n.name,
                    statistic=n.statistic,
                    mechanism=mech,
                    budget=Budget(rho=part) if gaussian else Budget(epsilon=part),
                    sensitivity=sens,
                    scale=scale,
                    column=n.column,
                    centre=n.centre,
                    step=step,
                    limit=limit,
                    strata=bins,
                    stratum_key=key,
                )
            )
    selection = _selection(agg, measurements, d_sel) if selecting else None
    charged = loss_of(measurements, gaussian=gaussian, budget=budget, selection=selection)
    return Design(tuple(measurements), selection, charged)


def _selection(agg: Aggregate, ms: Sequence[Measurement], delta: Fraction) -> Selection:
    count = thresholded(ms)
    if count is None:
        raise InternalError("partition selection needs a count measurement")
    g = reach(agg).groups
    r = int(per_group_bound(agg, count.statistic, 1))
    tau = family(count.mechanism).threshold(count.scale, groups=g, rows=r, delta=delta)
    return Selection(
        mechanism=count.mechanism,
        budget=Budget(epsilon=0, delta=delta),
        sensitivity=count.sensitivity,
        scale=count.scale,
        threshold=Fraction(tau),
    )


def loss_of(
    measurements: Sequence[Measurement],
    *,
    gaussian: bool,
    budget: Budget,
    selection: Selection | None,
) -> Budget:
    """The loss the measurements' *budgets* compose to (what is charged)."""
    d_sel = selection.budget.delta if selection is not None else Fraction(0)
    if gaussian:
        rho = sum((m.budget.rho_value for m in measurements), Fraction(0))
        if budget.kind == "zcdp":
            return Budget(rho=rho)
        conv = zcdp_to_approx(rho, budget.delta - d_sel)
        return Budget(epsilon=conv.eps, delta=budget.delta)
    eps = sum((m.budget.eps for m in measurements), Fraction(0))
    return Budget(epsilon=eps, delta=d_sel) if d_sel > 0 else Budget(epsilon=eps)
