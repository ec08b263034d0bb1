"""MODE by the exponential mechanism over public candidates, scored by counts.

**Candidates.** The integers ``centre, centre + 1, …, centre + limit − 1`` of the column's
declared bounds (``veil.compile.measure``): public, fixed by the plan, never read from the
data. A row of value x counts for candidate j = x − centre when x lies in the bounds, and for
none otherwise (no clamping: a value outside the bounds is not a vote for an end).

**Score.** u_j = c_j, the number of the group's bounded rows equal to candidate j.

**Sensitivity** (proof note). Neighbouring datasets differ by all rows of one unit
(DESIGN §1); after contribution bounding the unit keeps c_g ≤ R' rows in group g, chosen by an
order that depends on its own rows only, so the other units' bounded rows are the same on
both sides. Each of the unit's rows adds 1 to the count of at most one candidate (its value),
so each u_j moves by at most c_g ≤ R' — however the unit's rows spread over the candidates:
a unit touching several candidates moves several counts, but by at most c_g in all, and the
exponential mechanism's sensitivity is the largest move of *one* score,
Δ = max_j |u_j(D) − u_j(D')| ≤ R' (the ``mode`` per-row bound 1 times R'; ``veil.compile.
statistics``). Choosing j with probability ∝ exp(u_j/T), T = 2Δ/ε_g (the measurement's
``scale``), is ε_g-DP (McSherry & Talwar 2007, Thm 6) and ε_g²/8-zCDP (bounded range; Cesar
& Rogers 2021); the groups compose as for quantiles (:class:`veil.noise.reach.Reach`,
``spread``). The counts are monotone in the data (adding a unit never lowers one), which
would allow T = Δ/ε_g; veil does not take that factor 2 (one privacy map for every
exponential measurement).

**Exact sampling.** With n_max the largest count, candidate j has the integer distance
s_j = n_max − c_j ≥ 0, and exp(u_j/T) ∝ exp(−s_j/T). The candidates are handled as runs of
equal distance (each occupied candidate, and the gaps of empty ones between them, at distance
n_max) and drawn by :func:`veil.release.quantiles.sample_runs`, the quantiles' exact sampler:
an integer-weighted proposal 2^−f and an exact Bernoulli acceptance exp(−s/T)·2^f, so the
released index has probability exactly ∝ exp(c_j/T). No float decides an outcome, and the
work is per occupied candidate, not per candidate.

**TOP_K(col, k)** peels: it chooses k distinct candidates one after another, each by the
mechanism above over the candidates not yet chosen, at temperature k·T, so each choice is
ε_g/k-DP whatever the earlier ones were (the candidate set left is a function of earlier
outputs only) and the k compose to ε_g (adaptive sequential composition; Dwork & Roth 2014,
Thm 3.16) — the cost of one MODE at ε_g. The measurement records T (``scale``) and k
(``picks``), so the privacy map is the MODE's; its released statistic is the k indices in
mixed radix K (:func:`top_ranks` decodes them).

**Guarantee shown before anything is spent** (``veil.noise.margins.mode_margin``). If one
candidate's count exceeds every other's by at least m, each of the K − 1 others is drawn
with probability at most exp(−m/T) relative to it, so P(another is chosen) ≤
(K − 1)·exp(−m/T) = 1 − level for
m = T·ln((K − 1)/(1 − level)). The probability that the *true* mode is chosen depends on the
data; this margin depends on the plan alone.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from veil.errors import InternalError
from veil.noise._exact import resolve_source
from veil.noise.margins import mode_margin
from veil.plan.nodes import Measurement
from veil.random import RandomSource
from veil.release.quantiles import Runs, sample_runs

__all__ = ["choose_mode", "choose_top", "mode_margin", "mode_runs", "mode_weights", "top_ranks"]


def _check(m: Measurement) -> None:
    if m.statistic != "mode":
        raise InternalError(f"{m.name!r} is not a mode measurement")


def _cells(m: Measurement, cells: Any, counts: Any) -> tuple[Any, Any]:
    b = np.asarray(cells, dtype=np.int64).reshape(-1)
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if b.shape != c.shape:
        raise InternalError("one count per occupied mode candidate")
    if b.size > 1:
        order = np.argsort(b, kind="stable")
        b, c = b[order], c[order]
    if b.size and (b[0] < 0 or b[-1] >= m.limit or np.any(b[1:] <= b[:-1]) or np.any(c <= 0)):
        raise InternalError("mode candidates must be distinct, inside the domain, counts ≥ 1")
    return b, c


def mode_runs(m: Measurement, cells: Any, counts: Any) -> Runs:
    """The candidates of one group as runs of equal distance n_max − c_j.

    Precondition: ``cells`` are distinct integers in [0, m.limit) and ``counts`` ≥ 1 (the
    engine's exact GROUP BY); anything else is an :class:`InternalError`.
    """
    _check(m)
    b, c = _cells(m, cells, counts)
    return _runs(m, b, c)


def _runs(m: Measurement, b: Any, c: Any, removed: Any = None) -> Runs:
    """Runs of candidates [0, limit) with the occupied cells ``b`` (counts ``c``, 0 allowed
    for a removed candidate) and the candidates flagged in ``removed`` taking no mass."""
    gone = np.zeros(b.size, dtype=bool) if removed is None else removed
    kept = c[~gone]
    top = int(kept.max()) if kept.size else 0
    # runs in candidate order: gap 0, cell 0, gap 1, …, cell M−1, gap M (a gap may be empty)
    start = np.empty(2 * b.size + 1, dtype=np.int64)
    start[0] = 0
    start[1::2] = b
    start[2::2] = b + 1
    length = np.ones(2 * b.size + 1, dtype=np.int64)
    length[0::2] = np.append(b, m.limit) - start[0::2]
    length[1::2] = np.where(gone, 0, 1)  # a removed candidate is a run of length 0
    distance = np.full(2 * b.size + 1, top, dtype=np.int64)
    distance[1::2] = np.where(gone, 0, top - c)
    return Runs(start, length, distance, 1)


def choose_mode(
    m: Measurement, cells: Any, counts: Any, *, source: RandomSource | None = None
) -> int:
    """The index j of the released candidate (value ``m.centre + j``).

    Contract: ``m`` is a compiled mode measurement; ``cells``/``counts`` are one group's
    occupied candidates and their exact row counts. Postcondition: j is drawn with probability
    exactly ∝ exp(c_j/m.scale), which is ε_g-DP for ε_g = 2Δ/scale (module proof note).
    """
    runs = mode_runs(m, cells, counts)
    if m.sensitivity == 0:
        return 0
    return sample_runs(runs, m.scale, resolve_source(source))


def choose_top(
    m: Measurement, cells: Any, counts: Any, *, source: RandomSource | None = None
) -> int:
    """TOP_K's k = ``m.picks`` distinct candidates, peeled one after another at temperature
    k·scale over the candidates left (module docstring), as Σ_r j_r·K^(r−1) (K = ``m.limit``).

    Contract: each pick has probability exactly ∝ exp(c_j/(k·scale)) among the candidates not
    yet picked; k ≤ K (checked by the compiler).
    """
    _check(m)
    b, c = _cells(m, cells, counts)
    k, size = m.picks, m.limit
    if k > size:
        raise InternalError("more picks than candidates")
    src = resolve_source(source)
    temperature = m.scale * k
    chosen: list[int] = []
    for _ in range(k):
        # every chosen candidate joins the cells as a removed one (count 0, no mass)
        extra = np.array(sorted(set(chosen) - set(b.tolist())), dtype=np.int64)
        cells_all = np.concatenate((b, extra))
        counts_all = np.concatenate((c, np.zeros(extra.size, dtype=np.int64)))
        order = np.argsort(cells_all, kind="stable")
        cells_all, counts_all = cells_all[order], counts_all[order]
        removed = np.isin(cells_all, np.array(chosen, dtype=np.int64))
        runs = _runs(m, cells_all, counts_all, removed)
        pick = 0 if m.sensitivity == 0 else sample_runs(runs, temperature, src)
        if m.sensitivity == 0:  # no data can move the scores: the first candidates left
            pick = next(j for j in range(size) if j not in chosen)
        chosen.append(pick)
    return sum(j * size**r for r, j in enumerate(chosen))


def top_ranks(code: int, candidates: int, picks: int) -> list[int]:
    """The k candidate indices, most frequent first, of a TOP_K's released statistic."""
    out = []
    for _ in range(picks):
        code, j = divmod(code, candidates)
        out.append(j)
    return out


def mode_weights(m: Measurement, counts: list[int]) -> list[Fraction | float]:
    """The exact selection probabilities of every candidate from a dense count vector — for
    tests and audits of small domains (floats: exp is irrational)."""
    _check(m)
    if len(counts) != m.limit:
        raise InternalError("one count per candidate")
    top = max(counts)
    w = [math.exp(-(top - c) / float(m.scale)) for c in counts]
    total = sum(w)
    return [x / total for x in w]
