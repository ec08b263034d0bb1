"""The cache keys on what is measured, not on the SELECT order (issue 9, the audit's gaps).

``SELECT AVG(x), COUNT(*)`` and ``SELECT COUNT(*), AVG(x)`` draw the same noisy statistics, so
the second is answered from the first's cached measurement at no cost — and, since the cache is
privacy-critical, each column must get *its own* noisy value back: the release reads a cached
measurement by statistic name, never by position.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import veil
from support import SeededSource

N = 300
TABLE = pa.table(
    {
        "uid": list(range(N)),
        "g": ["a", "b", "c"] * (N // 3),
        "x": [float(i % 10) for i in range(N)],
        "y": [float(i % 4) for i in range(N)],
    }
)
OPTIONS: dict[str, object] = {"epsilon": 1}


def session() -> veil.Session:
    return veil.Session.local(
        {"t": TABLE},
        privacy_unit="uid",
        bounds={"x": (0, 10), "y": (0, 4)},
        budget=veil.Budget(epsilon=10),
        domains={"g": ["a", "b", "c"]},
        source=SeededSource("select-order"),
    )


def by_column(result: veil.Result) -> list[dict[str, object]]:
    """Each row as column → value, and each bar as column → half-width."""
    bars = result.error_bars()
    return [
        {**dict(zip(result.columns, row, strict=True)),
         **{f"±{c}": b for c, b in zip(result.columns, bar, strict=True)}}
        for row, bar in zip(result.rows, bars, strict=True)
    ]  # fmt: skip


def events(s: veil.Session, kind: str) -> int:
    return sum(r.event == kind for r in s.ledger.history(s.analyst, s.dataset))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            "SELECT AVG(x) AS m, COUNT(*) AS n FROM t",
            "SELECT COUNT(*) AS n, AVG(x) AS m FROM t",
        ),
        (  # unaliased: the output names are the aggregates' own
            "SELECT AVG(x), COUNT(*) FROM t",
            "SELECT COUNT(*), AVG(x) FROM t",
        ),
        (  # three aggregates, grouped, the key moved too
            "SELECT g, SUM(y) AS s, AVG(x) AS m, COUNT(*) AS n FROM t GROUP BY g",
            "SELECT COUNT(*) AS n, g, AVG(x) AS m, SUM(y) AS s FROM t GROUP BY g",
        ),
        (
            "SELECT g, VARIANCE(x) AS v, MEDIAN(y) AS q FROM t GROUP BY g",
            "SELECT g, MEDIAN(y) AS q, VARIANCE(x) AS v FROM t GROUP BY g",
        ),
    ],
)
def test_reordered_aggregates_are_answered_from_the_cache_each_in_its_own_column(
    first: str, second: str
) -> None:
    s = session()
    one = s.sql(first, **OPTIONS)  # type: ignore[arg-type]
    left = s.remaining()
    two = s.sql(second, **OPTIONS)  # type: ignore[arg-type]
    assert two.cached
    assert two.fingerprint == one.fingerprint
    assert two.cost == veil.Budget(epsilon=0)
    assert s.remaining() == left
    assert (events(s, "charge"), events(s, "cache_hit")) == (1, 1)
    assert set(two.columns) == set(one.columns)
    assert two.columns != one.columns  # the second query's own order
    # the same noisy values and bars, each under its own name (not the first query's position)
    assert by_column(two) == by_column(one)


def test_the_columns_of_a_reordered_cached_answer_are_not_swapped() -> None:
    """A count and a mean on very different scales: a positional mapping would put the count
    (≈ 300) under AVG(x) (within [0, 10]) — caught here whatever the noise."""
    s = session()
    one = s.sql("SELECT AVG(x) AS m, COUNT(*) AS n FROM t", **OPTIONS)  # type: ignore[arg-type]
    two = s.sql("SELECT COUNT(*) AS n, AVG(x) AS m FROM t", **OPTIONS)  # type: ignore[arg-type]
    assert two.cached
    ((m1, n1),) = one.rows
    ((n2, m2),) = two.rows
    assert (n2, m2) == (n1, m1)
    assert 0 <= m2 <= 10
    assert n2 > 100


def test_the_same_aggregates_with_another_measurement_are_charged_again() -> None:
    s = session()
    s.sql("SELECT AVG(x) AS m, COUNT(*) AS n FROM t", **OPTIONS)  # type: ignore[arg-type]
    other = s.sql(  # reordered and over other bounds: other noise, so another charge
        "SELECT COUNT(*) AS n, AVG(x) AS m FROM t", epsilon=1, bounds={"x": (0, 20)}
    )
    assert not other.cached
    assert s.remaining() == veil.Budget(epsilon=8)
