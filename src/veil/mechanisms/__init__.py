"""Stand-alone mechanisms: noise on values the caller computed, charged to a ledger if asked.

Laplace and Gaussian on the 2^k grid, their discrete twins, the exponential mechanism,
report-noisy-max and randomized response, and the object forms :class:`LaplaceMechanism` and
:class:`GaussianMechanism` (:mod:`veil.mechanisms.standalone`). They draw from the exact
samplers of :mod:`veil.noise` and reserve and commit on :mod:`veil.accounting`'s ledgers — which
is why they live here, above both, and not in ``noise/``.
"""

from __future__ import annotations

from veil.mechanisms.standalone import (
    GaussianMechanism,
    LaplaceMechanism,
    Release,
    check_representable,
    discrete_gaussian,
    discrete_laplace,
    exponential,
    gaussian,
    laplace,
    pure_epsilon,
    randomized_response,
    report_noisy_max,
)

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "Release",
    "check_representable",
    "discrete_gaussian",
    "discrete_laplace",
    "exponential",
    "gaussian",
    "laplace",
    "pure_epsilon",
    "randomized_response",
    "report_noisy_max",
]
