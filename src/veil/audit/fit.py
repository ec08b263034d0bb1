"""Goodness of fit of a sampler against its exact pmf: Pearson's χ² and explicit tail masses.

Black-box auditors see the bulk of a distribution and miss small-probability failures (a tail
cut short, a spike far out), so both are checked:

- :func:`chi_square`: the integer outputs binned so that every bin's expected count is at least
  max(5, n/200) (each tail pooled into the outermost bin), Pearson's statistic and its upper
  tail P(χ²_{bins−1} ≥ X²) from the regularized incomplete gamma function Q(df/2, X²/2)
  (series and continued fraction, Numerical Recipes §6.2).
- :func:`tail_mass`: for each m in ``multiples``, the observed share of |noise| ≥ m·scale
  against the exact tail mass, which must lie in the exact two-sided Clopper–Pearson interval
  (Bonferroni over all tails).

A conforming sampler fails each check with probability at most ``1 − confidence``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from veil.audit.query_stats import binomial_lower, binomial_upper

__all__ = ["chi_square", "gamma_upper", "noise_fit", "tail_mass"]


def gamma_upper(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x), a > 0, x ≥ 0."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(100_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 100_000):  # continued fraction for Q(a, x) (modified Lentz)
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = b + an / c
        c = c if abs(c) > 1e-300 else 1e-300
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h


Pmf = Callable[[NDArray[np.int64]], NDArray[np.float64]]


def chi_square(noise: NDArray[np.int64], pmf: Pmf, reach: int) -> tuple[float, int, float]:
    """Pearson's X², its degrees of freedom and p-value of integer ``noise`` against ``pmf``
    (exact probabilities of integers, negligible beyond ±``reach``): consecutive integers are
    grouped left to right into bins of expected count at least max(5, n/200), so about 200 bins
    at most; the values beyond the first and last bins are pooled into them (the tails)."""
    n = noise.size
    support = np.arange(-reach, reach + 1)
    expected = pmf(support) * n
    target = max(5.0, n / 200)
    edges, acc = [], 0.0
    for i, e in enumerate(expected):
        acc += float(e)
        if acc >= target:
            edges.append(i)
            acc = 0.0
    if not edges:
        return 0.0, 0, 1.0
    edges[-1] = support.size - 1  # the remainder joins the last bin
    which = np.searchsorted(np.asarray(edges), np.clip(noise, -reach, reach) + reach)
    counts = np.bincount(which, minlength=len(edges))
    sums = np.add.reduceat(expected, np.concatenate([[0], np.asarray(edges[:-1]) + 1]))
    stat = float((((counts - sums) ** 2) / sums).sum())
    df = len(edges) - 1
    return stat, df, gamma_upper(df / 2, stat / 2) if df > 0 else 1.0


def tail_mass(
    noise: NDArray[np.int64],
    tail: Callable[[int], float],
    scale: float,
    multiples: Sequence[float],
    confidence: float,
) -> str | None:
    """Whether the share of |noise| ≥ ⌈m·scale⌉ matches the exact ``tail(t) = P(|N| ≥ t)`` for
    each m; the failed check, or None."""
    each = 1 - (1 - confidence) / (2 * len(multiples))
    n = noise.size
    for m in multiples:
        t = math.ceil(m * scale)
        hits = int((np.abs(noise) >= t).sum())
        lo, hi = binomial_lower(hits, n, each), binomial_upper(hits, n, each)
        exact = tail(t)
        if not lo <= exact <= hi:
            return (
                f"the tail |noise| ≥ {t} ({m:g}·scale) came out {hits / n:.3g}, the exact mass "
                f"is {exact:.3g} (exact interval [{lo:.3g}, {hi:.3g}]): a tail is wrong"
            )
    return None


def noise_fit(noise: NDArray[np.int64], pmf: Pmf, scale: float, confidence: float) -> str | None:
    """χ² (at 1 − (1 − confidence)/2) and the tails at 2, 4, 6 and 8 scales (the other half of
    the level) of integer ``noise`` against ``pmf``: the failed check, or None."""
    stat, df, p = chi_square(noise, pmf, math.ceil(40 * scale) + 10)
    alpha = (1 - confidence) / 2
    if p < alpha:
        return (
            f"χ² = {stat:.1f} on {df} degrees of freedom (p = {p:.2g} < {alpha:g}): the noise "
            "does not follow the exact pmf"
        )

    def tail(t: int) -> float:
        return 2 * float(pmf(np.arange(t, t + 1000 * math.ceil(scale) + 1000)).sum())

    return tail_mass(noise, tail, scale, (2, 4, 6, 8), 1 - alpha)
