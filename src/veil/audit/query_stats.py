"""The statistics of ``veil audit query``: exact binomial confidence bounds and an empirical
lower bound on ε (and δ) from releases on two neighbouring datasets.

NOT a proof of privacy: a lower bound that exceeds the claim proves a violation (at the stated
confidence); one that does not proves nothing, and :func:`detectable` says how large a
violation these samples could have shown.

- :func:`binomial_lower` / :func:`binomial_upper`: one-sided Clopper–Pearson bounds (1934), the
  exact beta quantiles, by bisection on the regularized incomplete beta function
  I_p(k, n − k + 1) = P(Binomial(n, p) ≥ k) (Lentz's continued fraction, as in Numerical
  Recipes §6.4), to 1e-12.
- :func:`epsilon_lower_bound`, DP-Sniper style (Bichsel et al. 2021) with DP-Auditorium's split:
  the samples of each side are cut in halves; on the first halves the event E is chosen among
  "absent" (the group was not released), "value ≥ t" and "value ≤ t" for thresholds t at
  quantiles of the pooled values, in both directions (D against D′ and D′ against D), as the
  one whose first-half lower bound is largest — and, for reachability (Mironov 2012: outputs
  possible from one input and impossible from its neighbour), "the value lies on a grid of
  2^e or coarser / finer" (:func:`lowest_bit`), which separates outputs whose float
  granularity depends on the input (a float Laplace's low bits); on the second halves,
  independent of that choice, p_lo = binomial_lower(E on one side) and q_hi =
  binomial_upper(E on the other), each at confidence 1 − α/2 (Bonferroni), and
  ε_lb = ln((p_lo − δ)/q_hi), δ_lb = p_lo − e^ε·q_hi.
  (ε, δ)-DP implies P(E | D) ≤ e^ε·P(E | D′) + δ for every event, so with probability at
  least 1 − α the bounds do not exceed the true ε and δ: the false-alarm rate of a FAIL is at
  most α = 1 − confidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EXIT_CODES",
    "Bound",
    "Verdict",
    "binomial_lower",
    "binomial_upper",
    "detectable",
    "epsilon_lower_bound",
    "lowest_bit",
    "significantly_below",
]

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
EXIT_CODES: dict[Verdict, int] = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}  # of every audit

_THRESHOLDS = 64  # candidate thresholds per test (quantiles of the pooled first halves)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _beta_quantile(a: float, b: float, target: float) -> float:
    lo, hi = 0.0, 1.0
    while hi - lo > max(1e-15, 1e-10 * hi):
        mid = (lo + hi) / 2
        if _ibeta(a, b, mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _check(k: int, n: int, confidence: float) -> None:
    if not 0 <= k <= n or n < 1 or not 0 < confidence < 1:
        raise ValueError(
            f"need 0 <= k <= n, n >= 1, 0 < confidence < 1 (got {k}, {n}, {confidence})"
        )


def binomial_lower(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper–Pearson lower bound on p from k successes in n trials:
    P(p ≥ bound) ≥ confidence."""
    _check(k, n, confidence)
    return 0.0 if k == 0 else _beta_quantile(k, n - k + 1, 1 - confidence)


def binomial_upper(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper–Pearson upper bound on p: P(p ≤ bound) ≥ confidence."""
    _check(k, n, confidence)
    return 1.0 if k == n else _beta_quantile(k + 1, n - k, confidence)


@dataclass(frozen=True)
class Bound:
    """An empirical lower bound on the privacy loss between two output samples.

    ``epsilon`` (≥ 0) and ``delta`` (at the claimed ε, ≥ 0) hold with probability at least
    ``confidence``; ``event`` is the distinguishing event chosen on the first halves,
    ``p`` and ``q`` its observed frequencies on the second halves (on the side it favours and
    on the other), ``samples`` the releases per side.
    """

    epsilon: float
    delta: float
    event: str
    p: float
    q: float
    samples: int
    confidence: float


Event = tuple[str, float]  # ("absent" | ">=" | "<=" | "lsb>=" | "lsb<=", threshold)


def lowest_bit(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """The exponent e of each value's least significant set bit (x = odd · 2^e): the finest
    power-of-two grid it lies on; +inf for 0, NaN for NaN and ±inf. Exact (frexp and integer
    arithmetic on the 53-bit significand)."""
    x = np.asarray(values, dtype=float)
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(x)
    mantissa, exponent = np.frexp(x[ok])
    significand = np.abs(mantissa * 2.0**53).astype(np.int64)  # exact: |mantissa| < 1
    low = significand & -significand
    with np.errstate(divide="ignore"):
        bits = np.where(low > 0, np.log2(np.maximum(low, 1)), np.inf)
    out[ok] = np.where(significand == 0, np.inf, exponent - 53 + bits)
    return out


def _hits(values: NDArray[np.float64], event: Event) -> int:
    kind, t = event
    if kind == "absent":
        return int(np.isnan(values).sum())
    if kind.startswith("lsb"):
        values = lowest_bit(values)
        kind = kind[3:]
    if kind == ">=":
        return int((values >= t).sum())
    return int((values <= t).sum())


def _bound(p_hits: int, n_p: int, q_hits: int, n_q: int, delta: float, conf: float) -> float:
    p_lo = binomial_lower(p_hits, n_p, conf)
    q_hi = binomial_upper(q_hits, n_q, conf)
    return math.log((p_lo - delta) / q_hi) if p_lo > delta and q_hi > 0 else 0.0


def _events(a: NDArray[np.float64], b: NDArray[np.float64]) -> list[Event]:
    pooled = np.concatenate([a, b])
    present = pooled[~np.isnan(pooled)]
    out: list[Event] = [("absent", math.nan)] if len(present) < len(pooled) else []
    if len(present):
        qs = np.unique(np.quantile(present, np.linspace(0, 1, _THRESHOLDS + 1)))
        for t in qs:
            out += [(">=", float(t)), ("<=", float(t))]
        bits = np.unique(lowest_bit(present))
        for e in bits[np.isfinite(bits)][:_THRESHOLDS]:
            out += [("lsb>=", float(e)), ("lsb<=", float(e))]
    return out


def _wilson(hits: NDArray[np.float64], n: int, z: float, sign: float) -> NDArray[np.float64]:
    """Wilson's score bound (vectorised): only to rank candidate events on the first halves."""
    p = hits / n
    centre = p + z * z / (2 * n)
    spread = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.asarray(np.clip((centre + sign * spread) / (1 + z * z / n), 0.0, 1.0))


def _choose(
    x: NDArray[np.float64], y: NDArray[np.float64], delta: float, conf: float
) -> tuple[Event, bool]:
    """The event and direction with the largest (approximate) lower bound on ``x``, ``y``."""
    events = _events(x, y)
    hx = np.asarray([_hits(x, e) for e in events], dtype=float)
    hy = np.asarray([_hits(y, e) for e in events], dtype=float)
    z = _normal_quantile(conf)
    best, chosen = -math.inf, (events[0], True)
    for forward in (True, False):
        p, q = (hx, hy) if forward else (hy, hx)
        n_p, n_q = (len(x), len(y)) if forward else (len(y), len(x))
        p_lo = _wilson(p, n_p, z, -1.0) - delta
        q_hi = _wilson(q, n_q, z, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(p_lo > 0, np.log(np.maximum(p_lo, 1e-300) / q_hi), -math.inf)
        i = int(np.argmax(score))
        if score[i] > best:
            best, chosen = float(score[i]), (events[i], forward)
    return chosen


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erfc (for ranking only)."""
    lo, hi = -40.0, 40.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _describe(event: Event) -> str:
    kind, t = event
    if kind == "absent":
        return "not released"
    if kind.startswith("lsb"):
        return f"value on a grid of 2^{t:g} {'or coarser' if kind == 'lsb>=' else 'or finer'}"
    return f"value {kind} {t:.6g}"


def epsilon_lower_bound(
    a: Sequence[float] | NDArray[np.float64],
    b: Sequence[float] | NDArray[np.float64],
    *,
    epsilon: float,
    delta: float,
    confidence: float,
) -> Bound:
    """Lower bounds on ε and on δ (at ``epsilon``) from releases ``a`` on D and ``b`` on D′
    (NaN: the cell was not released), at ``confidence`` (see the module docstring).

    Precondition: ``a`` and ``b`` are independent releases, at least 4 each.
    Postcondition: P(bound.epsilon > true ε) ≤ 1 − confidence, likewise for δ.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 4 or len(y) < 4:
        raise ValueError("an ε lower bound needs at least 4 releases on each side")
    hx, hy = len(x) // 2, len(y) // 2
    x1, x2, y1, y2 = x[:hx], x[hx:], y[:hy], y[hy:]
    conf = 1 - (1 - confidence) / 2  # Bonferroni over the two bounds combined
    event, forward = _choose(x1, y1, delta, conf)
    p_side, q_side = (x2, y2) if forward else (y2, x2)
    p_hits, q_hits = _hits(p_side, event), _hits(q_side, event)
    eps_lb = _bound(p_hits, len(p_side), q_hits, len(q_side), delta, conf)
    p_lo = binomial_lower(p_hits, len(p_side), conf)
    q_hi = binomial_upper(q_hits, len(q_side), conf)
    delta_lb = max(0.0, p_lo - math.exp(epsilon) * q_hi)
    direction = "D over D′" if forward else "D′ over D"
    return Bound(
        epsilon=max(0.0, eps_lb),
        delta=delta_lb,
        event=f"{_describe(event)} ({direction})",
        p=p_hits / len(p_side),
        q=q_hits / len(q_side),
        samples=min(len(x), len(y)),
        confidence=confidence,
    )


def detectable(epsilon: float, samples: int, confidence: float) -> float:
    """The smallest ε′ > ``epsilon`` that ``samples`` releases per side would show at
    ``confidence`` with the most favourable event of probability 1/2 (a shift of the output
    distribution): the ε′ whose expected second-half frequencies p = 1/2, q = e^{−ε′}/2 give
    ε_lb > ``epsilon``. ``inf`` when none does (too few samples). The power statement: a
    violation smaller than this could pass unseen."""
    half = samples // 2
    conf = 1 - (1 - confidence) / 2
    if half < 2:
        return math.inf
    p_lo = binomial_lower(half // 2, half, conf)
    lo, hi = epsilon, epsilon + 30.0
    if math.log(p_lo / binomial_upper(round(half * math.exp(-hi) / 2), half, conf)) <= epsilon:
        return math.inf
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        q_hi = binomial_upper(round(half * math.exp(-mid) / 2), half, conf)
        if math.log(p_lo / q_hi) > epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def significantly_below(k: int, n: int, level: float, confidence: float) -> bool:
    """Whether a coverage of ``k`` in ``n`` is significantly below ``level``: its one-sided
    Clopper–Pearson upper bound at ``confidence`` is below ``level`` (a calibrated bar then
    fails with probability at most 1 − confidence)."""
    return n > 0 and binomial_upper(k, n, confidence) < level
