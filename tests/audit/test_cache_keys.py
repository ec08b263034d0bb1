"""Audit: the cache key (plan fingerprint) separates every pair of different questions."""

from __future__ import annotations

import pyarrow as pa
import pytest

import veil
from support import SeededSource

TABLE = pa.table({"uid": list(range(40)), "a": [i % 7 for i in range(40)], "b": [3] * 40})


def session() -> veil.Session:
    return veil.Session.local(
        {"t": TABLE}, privacy_unit="uid", budget=veil.Budget(epsilon=10), source=SeededSource(2)
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a // b > 1", "CAST(a / b AS BIGINT) > 1"),  # floor vs rounding division in DuckDB
        ("a > 1", "a >= 1"),
    ],
)
def test_two_different_filters_do_not_share_a_cached_answer(first: str, second: str) -> None:
    s = session()
    one = s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {first}", epsilon=1)
    two = s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {second}", epsilon=1)
    assert not two.cached
    assert one.fingerprint != two.fingerprint
    assert s.remaining() == veil.Budget(epsilon=8)


def test_the_same_question_with_other_bounds_or_epsilon_is_not_a_cache_hit() -> None:
    s = session()
    q = "SELECT SUM(a) AS s FROM t"
    base = s.sql(q, epsilon=1, bounds={"a": (0, 10)})
    assert s.sql(q, epsilon=1, bounds={"a": (0, 10)}).cached
    assert not s.sql(q, epsilon=1, bounds={"a": (0, 20)}).cached
    assert not s.sql(q, epsilon=2, bounds={"a": (0, 10)}).cached
    assert base.fingerprint
    assert s.remaining() == veil.Budget(epsilon=6)


GOLDEN = [
    (
        "SELECT a, COUNT(*) AS n, SUM(b) AS s FROM t WHERE b > 1 GROUP BY a",
        {"epsilon": 1, "bounds": {"b": (0, 10)}, "domains": {"a": [0, 1, 2]}},
        "1edc534d6783e637aadc6a0879a3635ac457a4d615c6052d2a94fadc3b629a3e",
    ),
    (
        "SELECT MEDIAN(b) AS m FROM t",
        {"epsilon": "0.5", "delta": 1e-6, "bounds": {"b": (0, 10)}},
        "110944ee21923fbedd49ca7283ed9a56707070c912010ebebec11a047a1f7453",
    ),
]


@pytest.mark.parametrize(("sql", "options", "expected"), GOLDEN)
def test_measurement_fingerprints_are_stable_so_existing_ledgers_keep_their_cache(
    sql: str, options: dict[str, object], expected: str
) -> None:
    """A refactor that changes a cache key silently re-charges every cached question in every
    deployed ledger. Changing one on purpose (a new measurement design) means updating these
    golden values — and saying so in the release notes."""
    from veil.plan.canonical import measurement_fingerprint
    from veil.plan.tree import aggregate_of

    plan = session().explain(sql, **options).plan  # type: ignore[arg-type]
    assert measurement_fingerprint(aggregate_of(plan)) == expected


DICTIONARY_TABLE = pa.table(
    {
        "uid": list(range(40)),
        "state": pa.array(["CA", "NY"] * 20).dictionary_encode(),
        "b": [3] * 40,
    }
)
DICTIONARY_GOLDEN = "f377430167c5658992c97ab95672dc0fa99c133ba0896185936307bda5252a2c"


def test_sql_and_the_builder_give_one_cache_key_on_a_dictionary_encoded_column() -> None:
    """One ``fields_from_arrow`` for both front ends (a dictionary-encoded column is its
    values' type): the same question asked in SQL and through the builder is one charge, and
    its key is the one existing ledgers hold."""
    from veil.plan.canonical import measurement_fingerprint
    from veil.plan.tree import aggregate_of, fields_from_arrow

    assert [f.type for f in fields_from_arrow(DICTIONARY_TABLE.schema)] == [
        "integer",
        "string",
        "integer",
    ]
    s = veil.Session.local(
        {"t": DICTIONARY_TABLE}, privacy_unit="uid", budget=veil.Budget(epsilon=10)
    )
    options = {"epsilon": 1, "bounds": {"b": (0, 10)}, "domains": {"state": ["CA", "NY"]}}
    by_sql = s.explain("SELECT state, COUNT(*) AS n, AVG(b) AS m FROM t GROUP BY state", **options)
    built = s.query("t").group_by("state").count("n").avg("b", "m").explain(**options)
    assert measurement_fingerprint(aggregate_of(by_sql.plan)) == DICTIONARY_GOLDEN
    assert measurement_fingerprint(aggregate_of(built.plan)) == DICTIONARY_GOLDEN
    first = s.sql("SELECT state, COUNT(*) AS n, AVG(b) AS m FROM t GROUP BY state", **options)
    again = s.query("t").group_by("state").count("n").avg("b", "m").run(**options)
    assert not first.cached
    assert again.cached
    assert s.remaining() == veil.Budget(epsilon=9)
