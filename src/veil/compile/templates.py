"""Lowered statements remembered by what the lowering reads, the salt left as a parameter.

The SQL of an aggregation (:func:`veil.compile.lower.lower`) depends on its plan, keys,
aggregates, unit, contribution limits, bounds and on each measurement's fixed-point grid
(statistic, column, centre, step, limit, …) — never on the privacy parameters: a
measurement's budget, noise scale and sensitivity, and partition selection's threshold, only
decide the noise added afterwards in Python. A new ε for the same question therefore writes
the same statements, and a session asking it again (a dashboard refreshing at a new ε, a
benchmark) need not lower and generate the SQL again.

:func:`template` lowers the aggregation *without* those fields — the key it is remembered by
is all that the lowered trees are computed from, so a remembered template is by construction
the one the key would lower to — and with the per-query salt as the placeholder ``salt``,
which an engine binds as a statement parameter (:class:`veil.engines.base.Preparing`). The
salt stays secret and fresh per query; only its place in the SQL is shared.

The trees of a template are shared by every query that uses it: nothing may change them (an
engine generates their text from a copy, once).
"""

from __future__ import annotations

import dataclasses
import threading
from fractions import Fraction
from typing import Any

from veil.accounting.budget import Budget
from veil.compile.dialect import Dialect
from veil.compile.lower import Lowered, lower
from veil.plan.domain import domain_digest
from veil.plan.nodes import Aggregate, Measurement

__all__ = ["template"]

_SIZE = 256
_TEMPLATES: dict[Any, Lowered] = {}
_LOCK = threading.Lock()
_NO_BUDGET = Budget(epsilon=0)


def _grid(m: Measurement) -> tuple[Any, ...]:
    """What the lowering reads of measurement ``m``: every field but its budget, noise scale
    and sensitivity (``Measurement``'s fields, minus those three, in order)."""
    return tuple(
        getattr(m, f.name)
        for f in dataclasses.fields(m)
        if f.name not in ("budget", "scale", "sensitivity")
    )


def _without_privacy(agg: Aggregate) -> Aggregate:
    """``agg`` with no budget, no selection and neutral noise parameters on each measurement:
    the aggregation :func:`template` lowers (its SQL is ``agg``'s)."""
    neutral = tuple(
        dataclasses.replace(m, budget=_NO_BUDGET, scale=Fraction(1), sensitivity=Fraction(0))
        for m in agg.measurements
    )
    return dataclasses.replace(agg, budget=None, selection=None, measurements=neutral)


def _exact_labels(agg: Aggregate) -> tuple[object, ...]:
    """The values the lowering writes as constants that ``==`` on ``agg`` conflates
    (``1 == 1.0 == True``, ``0.0 == -0.0``): each declared domain's digest (keys, then MODE
    candidates) and each per-group bound's labels with their types and reprs."""
    keys = tuple(domain_digest(k.domain) for k in agg.keys if k.domain is not None)
    modes = tuple(domain_digest(a.domain) for a in agg.aggregates if a.domain is not None)
    groups = tuple(tuple((type(g), repr(g)) for g, _, _ in b.groups) for b in agg.bounds)
    return keys, modes, groups


def template(agg: Aggregate, dialect: Dialect, *, exact_sums: bool = False) -> Lowered:
    """The statements computing compiled ``agg``'s exact statistics, with the bounding salt as
    the placeholder ``salt`` (see the module docstring); remembered by what they are lowered
    from. Raises what :func:`~veil.compile.lower.lower` raises (before anything is charged).

    Postcondition: equal to ``lower(agg, dialect, salt=None, exact_sums=exact_sums)``, since
    the lowering reads no privacy parameter (a test lowers both ways over the query shapes).
    """
    key = (
        dialect,
        exact_sums,
        agg.child,
        agg.keys,
        agg.aggregates,
        agg.privacy_unit,
        agg.contribution,
        agg.bounds,
        tuple(_grid(m) for m in agg.measurements),
        _exact_labels(agg),  # the constants as written: 1 and 1.0, 0.0 and -0.0 apart
    )
    found = _TEMPLATES.get(key)
    if found is not None:
        return found
    lowered = lower(_without_privacy(agg), dialect, salt=None, exact_sums=exact_sums)
    with _LOCK:
        _TEMPLATES[key] = lowered
        while len(_TEMPLATES) > _SIZE:
            _TEMPLATES.pop(next(iter(_TEMPLATES)))
    return lowered
