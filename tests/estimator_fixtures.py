"""One bounded column's noise models and exact statistics, shared by the estimator tests
(``tests/release/test_estimators.py``) and their coverage by simulation
(``tests/statistical/test_estimator_coverage.py``): values in [0, 1000] centred at 500, on
the 2^-30 fixed-point grid, with discrete Laplace noise."""

from __future__ import annotations

from fractions import Fraction

from veil.release.estimators import ColumnModel, NoiseModel

K = 1 << 30
W = Fraction(500)  # bounds [0, 1000], centre 500
STEP = W / K
NOISE = {
    "count": NoiseModel(
        "count", "count", "discrete_laplace", Fraction(2), Fraction(0), Fraction(1), 1
    ),
    "sum(x)": NoiseModel(
        "sum(x)", "sum", "discrete_laplace", Fraction(K) * 2, Fraction(500), STEP, K
    ),
    "sum_squares(x)": NoiseModel(
        "sum_squares(x)", "sum_squares", "discrete_laplace", Fraction(K) * 2, Fraction(500), STEP, K
    ),
}
LO, HI = Fraction(0), Fraction(1000)


def model(function: str) -> ColumnModel:
    return ColumnModel(
        "c",
        function,
        LO,
        HI,
        count="count",
        sum="sum(x)",
        squares="sum_squares(x)" if function in ("variance", "stddev") else None,
    )


def stats_for(values: list[float]) -> dict[str, int]:
    v = [round((x - 500) / float(STEP)) for x in values]
    w = [round(((x - 500) / 500) ** 2 * K) for x in values]
    return {
        "count": len(values),
        "sum(x)": sum(v),
        "sum_squares(x)": sum(2 * wi - K for wi in w),
    }
