"""The smallest ε whose data-independent error bars meet every target (APEx, Ge et al.
SIGMOD 2019, for one query).

Contract of :func:`choose_epsilon`:

- Preconditions: ``targets`` name output columns of ``query``; each kind's bar is
  computable from public parameters (COUNT, COUNT(DISTINCT), SUM: constant bars; AVG: the bar
  of a group whose noisy count is the stated public ``min_group_size`` and whose mean lies at a
  bound, the worst case; a weighted AVG: the widest bar over means in the bounds of a group
  whose noisy total weight is ``min_group_size``, the bar being a function of those two alone);
  quantile kinds are refused (their bar is a rank statement), MODE and TOP_K too (a margin).
- Search: every bar is a nonincreasing function of ε (each noise scale is
  sensitivity·share/ε, and each bar is monotone in the scales), so the set of ε meeting the
  targets is an interval [ε*, ∞). A doubling bracket then a geometric bisection returns ε with
  ε* ≤ ε ≤ ε*·(1 + tolerance): ε meets every target and ε/(1 + tolerance) does not.
- δ is not searched: it is the one the query would use anyway (the grant's or the stated
  ``delta``; none with public keys), so only ε is minimised.
- Nothing is read or charged: each probe is :meth:`Session.explain`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget
from veil.accuracy.targets import Target, parse_targets
from veil.aggregates import kind
from veil.aggregates.base import Group, stratum_name
from veil.errors import BudgetExhaustedError, InvalidArgumentError, UnsupportedQueryError
from veil.plan.nodes import Plan, as_fraction
from veil.plan.tree import aggregate_of
from veil.release.estimators import column_models, noise_models
from veil.release.explain import Explanation

if TYPE_CHECKING:
    from veil.session import Session

__all__ = [
    "Choice",
    "check_targets",
    "choose_epsilon",
    "highest_epsilon",
    "probing",
    "quietly",
    "smallest_epsilon",
    "target_bars",
]

_QUIET: ContextVar[bool] = ContextVar("veil_quiet_probes", default=False)


def probing() -> bool:
    """Whether a quiet search is probing (:func:`smallest_epsilon` with ``quiet=True``): its
    explanations at ε it will not run warn nothing (per thread and task, a context variable)."""
    return _QUIET.get()


@contextmanager
def quietly(on: bool = True) -> Iterator[None]:
    """Within: compilations at an ε that may not run warn nothing (:func:`probing`)."""
    token = _QUIET.set(on or _QUIET.get())
    try:
        yield
    finally:
        _QUIET.reset(token)


_CONSTANT = ("count", "count_distinct", "sum", "wcount", "wsum")  # w…: survey weights
_LOWEST = Fraction(1, 10**6)
_HIGHEST = Fraction(10**4)


@dataclass(frozen=True)
class Choice:
    """The chosen ε, the bar of each targeted column there, and the explanation at that cost."""

    epsilon: Fraction
    bars: dict[str, float]
    targets: tuple[Target, ...]
    explanation: Explanation
    assumptions: tuple[str, ...]

    def lines(self) -> tuple[str, ...]:
        """The choice in words: ε, each target against its bar, the public assumptions."""
        out = [f"smallest epsilon meeting every target: {float(self.epsilon):.6g}"]
        for t in self.targets:
            out.append(f"target {t}: bar ± {self.bars[t.column]:.6g} (limit ± {t.limit:.6g})")
        out += [f"assumption: {a}" for a in self.assumptions]
        return tuple(out)

    def __str__(self) -> str:
        return "\n".join([*self.lines(), str(self.explanation)])


def check_targets(plan: Plan, targets: tuple[Target, ...]) -> list[str]:
    """Refuse targets decidable as wrong without data; return the assumptions in words."""
    agg = aggregate_of(plan)
    calls = {a.alias: a for a in agg.aggregates}
    notes: list[str] = []
    for t in targets:
        a = calls.get(t.column)
        if a is None:
            raise InvalidArgumentError(
                f"target for unknown column {t.column!r}; the query's aggregates are "
                f"{', '.join(sorted(calls))}: name one of them (the output column name)"
            )
        if a.function not in (*_CONSTANT, "avg", "wavg"):
            rank = "its error bar is a rank statement"
            why = {
                "quantile": rank,
                "min": rank,
                "max": rank,
                "mode": "a MODE has no error bar, only a public margin",
                "top_k": "a TOP_K has no error bar, only a public margin",
            }.get(a.function, "its error bar is not searched yet")
            raise UnsupportedQueryError(
                f"a target on {t.column!r} ({a.function.upper()}) is not supported yet: {why}; "
                "target COUNT, SUM or AVG columns (weighted or not)"
            )
        if t.relative is not None and t.reference is None:
            why = (
                f"relative target on {t.column!r} needs a public reference value (a relative "
                "error of the private value would read data); pass "
            )
            raise InvalidArgumentError(
                f"{why}references={{{t.column!r}: 1000}} (say) or an absolute target like "
                f"'{t.column}=±50'",
                cli=f"{why}--reference {t.column}=1000 (say) or an absolute target like "
                f"--target '{t.column}=±50'",
            )
        if t.relative is not None:
            notes.append(
                f"{t.column}: ±{100 * t.relative:g}% taken of the public reference value "
                f"{t.reference:g}"
            )
        if a.function in ("avg", "wavg"):
            size = "size" if a.function == "avg" else "total weight (the sum of its weights)"
            if t.min_group_size is None:
                why = (
                    f"the error of {'weighted ' if a.function == 'wavg' else ''}AVG column "
                    f"{t.column!r} depends on the group's {size}, which is private; state a "
                    "public assumption: "
                )
                say = "100" if a.function == "avg" else "100000"
                raise InvalidArgumentError(
                    f"{why}min_group_size={say} (say)", cli=f"{why}--min-group-size {say} (say)"
                )
            if a.function == "avg":
                notes.append(
                    f"{t.column}: bar of a group whose noisy count is {t.min_group_size} "
                    "(min_group_size, a public assumption) with its mean at a bound"
                )
            else:
                notes.append(
                    f"{t.column}: bar of a group whose noisy total weight is "
                    f"{t.min_group_size} (min_group_size, for a weighted AVG the group's total "
                    "weight: a public assumption) with its mean where the bar is widest"
                )
    return notes


def target_bars(explanation: Explanation, targets: Iterable[Target]) -> dict[str, float]:
    """The released bar of each targeted column under ``explanation``'s compiled plan."""
    agg = aggregate_of(explanation.plan)
    noise = noise_models(agg)
    models = {c.alias: c for c in column_models(agg)}
    out: dict[str, float] = {}
    for t in targets:
        model = models[t.column]
        k = kind(model.function)
        summed = model.reads("sum")
        # a sum stratified by its groups (veil.compile.strata): the widest bar of any stratum
        strata = noise[summed].strata if summed is not None else ()
        bars: list[float | None] = []
        for stratum in range(len(strata)) if strata else [None]:
            where = {} if stratum is None else {stratum_name(summed or ""): stratum}
            if model.function == "avg":
                assert t.min_group_size is not None
                n = t.min_group_size
                g = Group(model, where, noise)
                sm = g.noise("sum")
                lo, hi = g.lower, g.upper
                far = hi if abs(hi - float(sm.centre)) >= abs(lo - float(sm.centre)) else lo
                # the noisy centred sum of n rows all at the far bound, in grid steps
                stats = {
                    **where,
                    model.reads("count") or "": n,
                    summed or "": round((far - float(sm.centre)) * n / float(sm.step)),
                }
                bars.append(k.halfwidth(Group(model, stats, noise), far, t.level))
            elif model.function == "wavg":
                assert t.min_group_size is not None
                bars.append(_weighted_avg_bar(model, where, noise, t.min_group_size, t.level))
            else:  # constant bars read no released value
                bars.append(k.halfwidth(Group(model, where, noise), 0.0, t.level))
        out[t.column] = (
            math.inf if any(b is None for b in bars) else max(float(b or 0) for b in bars)
        )
    return out


_MEANS = 64  # the weighted AVG bar's worst case is sought over this many means per bound pair


def _weighted_avg_bar(
    model: Any, where: Mapping[str, int], noise: Mapping[str, Any], total: int, level: float
) -> float | None:
    """The widest released bar of a weighted AVG (:mod:`veil.aggregates.wavg`) over groups
    whose noisy total weight is ``total`` and whose noisy mean m̂ lies anywhere in the bounds
    (65 means from lower to upper, both bounds included). The bar is a function of Ŵ and m̂
    alone (the noisy sums enter only as P̂ = m̂·Ŵ and Ŵ), so each probe group states
    Ŵ = ``total`` through the weights' grid sum (with a count of 0 where the sum is centred:
    only the total s_W·V̂_W + c_W·n̂ matters) and P̂ = m̂·Ŵ through the products' grid sum."""
    k = kind("wavg")
    g = Group(model, where, noise)
    sm, wm = g.noise("sum"), g.noise("total")
    lo, hi = g.lower, g.upper
    groups: list[Group] = []
    values: list[float] = []
    for i in range(_MEANS + 1):
        m = lo + (hi - lo) * i / _MEANS if i < _MEANS else hi
        stats: dict[str, int] = {**where}
        count = model.reads("count")
        if count is not None:
            stats[count] = 0
        stats[model.reads("total") or ""] = round(total / float(wm.step))
        stats[model.reads("sum") or ""] = round(m * total / float(sm.step))
        probe = Group(model, stats, noise)
        groups.append(probe)
        values.append(k.estimate(probe))
    bars = k.halfwidths(groups, values, level)
    return None if any(b is None for b in bars) else max(float(b or 0) for b in bars)


def _meets(bars: Mapping[str, float], targets: tuple[Target, ...]) -> bool:
    return all(bars[t.column] <= (t.limit or 0) for t in targets)


def choose_epsilon(
    session: Session,
    query: str | Plan,
    target: Any,
    *,
    references: Mapping[str, float] | None = None,
    min_group_size: int | None = None,
    tolerance: float = 0.001,
    start: Any = None,
    **options: Any,
) -> Choice:
    """The smallest ε (to ``tolerance``, relative) meeting every target; see the module's
    contract. ``options``: those of :meth:`Session.explain` but ``epsilon``; ``start``: a
    public guess of the answer where the search begins (it changes the probes, not the
    contract). Refuses, at no cost, targets not met below ε = 10⁴ or not covered by the
    remaining budget (with the ε they need)."""
    if "epsilon" in options:
        raise InvalidArgumentError("pass target= or epsilon=, not both: the target chooses ε")
    _check_tolerance(tolerance)
    targets = parse_targets(target, references=references, min_group_size=min_group_size)
    domains = options.pop("domains", None)
    plan = (
        query
        if not isinstance(query, str)
        else session.plan(
            query, bounds=options.get("bounds"), domains=domains, weights=options.get("weights")
        )
    )
    assumptions = check_targets(plan, targets)
    found = smallest_epsilon(session, plan, targets, tolerance=tolerance, start=start, **options)
    if found is None:
        raise InvalidArgumentError(
            f"the targets ({'; '.join(map(str, targets))}) need more than "
            f"{highest_epsilon(session)[1]}; loosen them (nothing was charged)"
        )
    best, eps, bars = found
    if best.covered is False and best.remaining is not None:
        raise _short(best.cost, best.remaining, targets)
    return Choice(eps, bars, targets, best, tuple(assumptions))


def highest_epsilon(session: Session) -> tuple[Fraction, str]:
    """The largest ε a search may try, and its name: 10⁴, or the data owner's largest cost
    of one query."""
    owner = session.owner
    if owner is not None and owner.max_epsilon is not None and owner.max_epsilon < _HIGHEST:
        return owner.max_epsilon, (
            f"epsilon={float(owner.max_epsilon):g}, the largest cost of one query on dataset "
            f"{owner.name!r}"
        )
    return _HIGHEST, f"epsilon={float(_HIGHEST):g}"


def smallest_epsilon(
    session: Session,
    plan: Plan,
    targets: tuple[Target, ...],
    *,
    tolerance: float = 0.001,
    start: Any = None,
    highest: Fraction | None = None,
    quiet: bool = False,
    **options: Any,
) -> tuple[Explanation, Fraction, dict[str, float]] | None:
    """The search of :func:`choose_epsilon` on a checked plan and targets: the explanation at
    the smallest ε meeting every target (to ``tolerance``), that ε and the targets' bars there;
    ``None`` when they are not met at ``highest`` (default :func:`highest_epsilon`). Whether
    the budget covers it is the caller's to say. ``options``: :meth:`Session.explain`'s;
    ``quiet``: no probe warns (:func:`probing`), the explanation returned included."""
    _check_tolerance(tolerance)
    if highest is None:
        highest = highest_epsilon(session)[0]

    def probe(eps: Fraction) -> tuple[bool, Explanation, dict[str, float]]:
        with quietly(quiet):
            e = session.explain(plan, epsilon=eps, **options)
        bars = target_bars(e, targets)
        return _meets(bars, targets), e, bars

    # the bracket: from ε = 1 by doubling, or from a public hint ``start`` by steps growing
    # from 4·tolerance (squared each time: a good hint brackets ε* in a few probes)
    hi = min(Fraction(1), highest)
    if start is not None:
        hi = min(highest, max(_LOWEST, as_fraction(start, "start").limit_denominator(10**12)))
    step = Fraction(2) if start is None else Fraction(1 + 4 * tolerance).limit_denominator(10**6)
    ok, best, bars = probe(hi)
    lo = hi
    if ok:
        while True:
            if hi <= _LOWEST:  # met even at the floor: the floor is the answer
                return best, hi, bars
            lo = max(_LOWEST, (hi / step).limit_denominator(10**12))
            l_ok, l_best, l_bars = probe(lo)
            if not l_ok:
                break
            hi, best, bars = lo, l_best, l_bars
            if start is not None:
                step = (step * step).limit_denominator(10**6)
    else:
        while not ok:
            lo = hi
            if hi >= highest:
                return None
            hi = min(highest, (hi * step).limit_denominator(10**12))
            ok, best, bars = probe(hi)
            if start is not None:
                step = (step * step).limit_denominator(10**6)
    ratio = Fraction(1 + tolerance).limit_denominator(10**9)
    while hi > lo * ratio:
        mid = Fraction(math.sqrt(lo * hi)).limit_denominator(10**12)
        if not (lo < mid < hi):
            break
        m_ok, m_e, m_bars = probe(mid)
        if m_ok:
            hi, best, bars = mid, m_e, m_bars
        else:
            lo = mid
    return best, hi, bars


def _check_tolerance(tolerance: float) -> None:
    if not (0 < tolerance < 1):
        raise InvalidArgumentError(f"tolerance={tolerance!r} must be in (0, 1); 0.001 is 0.1 %")


def _short(cost: Budget, remaining: Budget, targets: tuple[Target, ...]) -> BudgetExhaustedError:
    err = BudgetExhaustedError(cost, remaining)
    facts = (
        f"the targets ({'; '.join(map(str, targets))}) need {cost} ({cost.precise()} "
        f"exactly), but the remaining budget is {remaining.precise()}; "
    )
    err.args = (f"{facts}loosen the targets or ask for more budget (nothing was charged)",)
    err.cli = (
        f"{facts}loosen the --target values or ask an administrator to grant more (veil budget "
        "grant); nothing was charged"
    )
    return err
