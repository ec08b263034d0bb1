"""Session.spark: the same plans, lowered by the same module, give the same statistics on Spark.

Two claims, two tests:

1. **Exact parity without bounding.** When bounding drops no rows (one row per unit, or
   row-level privacy), the pre-noise statistics — counts, fixed-point sums, sums of squares,
   quantile bucket counts — are *identical* integers on DuckDB and Spark: the lowered SQL uses
   only exactly-specified operations (IEEE double clamping and scaling, ROUND half away from
   zero, integer casts, exact BIGINT/DECIMAL(38) sums).
2. **Bounding selects rows with the same distribution.** The keyed hash differs per engine
   (DuckDB ``hash``, Spark ``xxhash64``), so the two engines keep *different* rows of a unit
   that has too many. Both keep, per unit, the rows with the smallest hash of (secret salt,
   unit, the row's used values): for a fresh random salt and a well-mixing hash, each of a
   unit's ``m`` distinct rows is the smallest with probability ``1/m`` whatever its values, so
   the bounded table is a uniform random choice of rows per unit on both engines — equal in
   distribution. The test checks those selection frequencies on both engines with a
   chi-square test. (Privacy does not rest on this: for *any* salt the choice depends only on
   the unit's own rows, so the sensitivity bound holds; uniformity is about unbiasedness.)
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

import veil
from spark_support import spark_session
from veil.compile import dialect, lower
from veil.engines.base import Engine
from veil.plan.nodes import Aggregate
from veil.plan.tree import aggregate_of

pytestmark = pytest.mark.spark

Key = tuple[Any, ...]


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def _exact(engine: Engine, agg: Aggregate, salt: int) -> tuple[dict[Key, dict[str, int]], Any]:
    """The pre-noise statistics of ``agg`` on ``engine`` (nothing is released or charged)."""
    lowered = lower(agg, dialect(engine.dialect), salt=salt)
    main: dict[Key, dict[str, int]] = {}
    for row in engine.execute(lowered.main).to_pylist():
        key = tuple(row[k] for k in lowered.keys)
        main[key] = {"__n": int(row["__n"])} | {n: int(row[c]) for n, c in lowered.columns}
    buckets = {}
    for name, tree in lowered.quantiles:
        rows = engine.execute(tree).to_pylist()
        buckets[name] = sorted(
            (tuple(r[k] for k in lowered.keys), int(r["__b"]), int(r["__c"])) for r in rows
        )
    return main, buckets


def _awkward_table(n: int) -> pa.Table:
    """One row per user; incomes full of values that break naive float arithmetic."""
    rng = np.random.default_rng(7)  # test data, not noise
    specials = [0.1, 0.2, 0.30000000000000004, 1e-300, -0.0, 2.5, 999_999.5, 1e6, 1e6 + 1e-9]
    income = rng.lognormal(10, 1.5, n)
    income[: len(specials)] = specials
    income[len(specials) : 2 * len(specials)] = [
        -1e300,
        1e300,
        5e5,
        5e5 + 2**-30,
        0.5,
        1.5,
        3.5,
        7,
        8,
    ]
    return pa.table(
        {
            "user_id": pa.array(rng.permutation(n), pa.int64()),
            "state": pa.array(rng.choice(["CA", "TX", "NY", "WY", "VT"], n)),
            "age": pa.array(rng.integers(0, 101, n), pa.int32()),
            "income": pa.array(income, pa.float64()),
        }
    )


QUERY = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean, "
    "STDDEV(age) AS sd_age, MEDIAN(income) AS median_income FROM people GROUP BY state"
)
BOUNDS = {"income": (0, 1_000_000), "age": (0, 100)}


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity") / "people.parquet"
    pq.write_table(_awkward_table(4000), path)
    return path


@pytest.mark.parametrize("privacy_unit", ["user_id", None])
def test_duckdb_and_spark_give_identical_pre_noise_statistics_when_bounding_drops_nothing(
    spark: Any, people: Path, privacy_unit: str | None
) -> None:
    budget = veil.Budget(epsilon=10, delta=1e-6)
    on_duckdb = veil.Session.local({"people": people}, privacy_unit=privacy_unit, budget=budget)
    on_spark = veil.Session.spark(
        spark, {"people": people}, privacy_unit=privacy_unit, budget=budget
    )
    options: dict[str, Any] = {"epsilon": 1, "delta": 1e-6, "bounds": BOUNDS}
    agg = aggregate_of(on_duckdb.explain(QUERY, **options).plan)
    assert aggregate_of(on_spark.explain(QUERY, **options).plan) == agg  # the same plan
    duck = _exact(on_duckdb.engine, agg, salt=2026)
    sparks = _exact(on_spark.engine, agg, salt=2026)
    assert sum(s["__n"] for s in duck[0].values()) == 4000  # nothing was dropped
    assert sparks == duck


def test_a_query_on_session_spark_is_answered_and_charged(spark: Any, people: Path) -> None:
    session = veil.Session.spark(
        spark, {"people": str(people)}, privacy_unit="user_id", budget=veil.Budget(epsilon=2)
    )
    result = session.sql(
        "SELECT COUNT(*) AS n, AVG(income) AS mean FROM people",
        epsilon=1,
        bounds={"income": BOUNDS["income"]},
    )
    assert result.columns == ("n", "mean")
    n, mean = result.rows[0]
    assert abs(n - 4000) < 200
    assert 0 <= mean <= 1e6
    assert session.remaining() == veil.Budget(epsilon=1)


def test_keyed_hash_bounding_selects_each_row_of_a_unit_uniformly_on_both_engines(
    spark: Any, tmp_path: Path
) -> None:
    users, m = 3000, 4
    # every user has m rows, one per value v = 0..m-1; bounding keeps one row per user
    table = pa.table(
        {
            "user_id": pa.array(np.repeat(np.arange(users), m), pa.int64()),
            "v": pa.array(np.tile(np.arange(m), users), pa.int64()),
        }
    )
    path = tmp_path / "units.parquet"
    pq.write_table(table, path)
    budget = veil.Budget(epsilon=10, delta=1e-6)
    query = "SELECT v, COUNT(*) AS n FROM people GROUP BY v"
    sessions = {
        "duckdb": veil.Session.local({"people": path}, privacy_unit="user_id", budget=budget),
        "spark": veil.Session.spark(spark, {"people": path}, privacy_unit="user_id", budget=budget),
    }
    agg = aggregate_of(sessions["duckdb"].explain(query, epsilon=1, delta=1e-6, max_groups=1).plan)
    for name, session in sessions.items():
        for salt in (1, 2**40 + 12345, 2**62 + 999):
            counts, _ = _exact(session.engine, agg, salt=salt)
            picked = [counts.get((v,), {"__n": 0})["__n"] for v in range(m)]
            assert sum(picked) == users, name  # exactly one row per user survives
            # uniform selection: a chi-square test on m - 1 = 3 degrees of freedom; p > 1e-3 for
            # uniform choices, while a hash favouring one value by 5% of the users fails it.
            p = stats.chisquare(picked).pvalue
            assert p > 1e-3, f"{name} salt={salt}: selection counts {picked} (p={p:.2g})"


# WHERE functions, histograms, public keys, NULL and date keys: each is generated per dialect
# by sqlglot, so each is a place where DuckDB and Spark could disagree.
PARITY_QUERIES = [
    "SELECT state, COUNT(*) AS n FROM people WHERE LOWER(name) LIKE '%o%' OR UPPER(name) = 'ÉLODIE'"
    " GROUP BY state",
    "SELECT state, COUNT(*) AS n FROM people WHERE LENGTH(name) > 3"
    " AND SUBSTRING(name, 2, 2) <> 'oë' OR REGEXP_MATCHES(name, 'o') GROUP BY state",
    "SELECT state, COUNT(*) AS n FROM people WHERE YEAR(day) = 2021 OR EXTRACT(MONTH FROM day) = 2"
    " OR DATE_TRUNC('month', day) = DATE '2021-03-01' GROUP BY state",
    "SELECT state, SUM(income) AS s FROM people WHERE score / 7 > 2 OR score % 7 = 3"
    " OR ROUND(income / 1000) = 22 GROUP BY state",
    "SELECT BIN(income, 0, 0.3, 2.5, 1000000) AS band, COUNT(*) AS n, AVG(age) AS a FROM people"
    " GROUP BY BIN(income, 0, 0.3, 2.5, 1000000)",
    "SELECT state, COUNT(DISTINCT user_id) AS u, VARIANCE(income) AS v, QUANTILE(income, 0.9) AS p"
    " FROM people WHERE state IN ('CA', 'NY') GROUP BY state",
    "SELECT name, day, COUNT(*) AS n, AVG(score) AS m FROM people GROUP BY name, day",
]


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)  # test data, not noise
    table = _awkward_table(3000)
    names = ["Élodie", "zoë", "ANNA", "o'brien", "x_y", "", None]
    days = np.datetime64("2020-01-01") + rng.integers(0, 1500, 3000).astype("timedelta64[D]")
    table = table.append_column("name", pa.array(rng.choice(np.array(names, object), 3000)))
    table = table.append_column("day", pa.array(days, pa.date32()))
    table = table.append_column("score", pa.array(rng.integers(-50, 50, 3000), pa.int64()))
    path = tmp_path_factory.mktemp("rich") / "people.parquet"
    pq.write_table(table, path)
    return path


PARITY_IDS = ["strings", "regex", "dates", "arithmetic", "bins", "public-keys", "null-date-keys"]


@pytest.mark.parametrize("query", PARITY_QUERIES, ids=PARITY_IDS)
def test_where_functions_bins_and_keys_give_identical_statistics_on_both_engines(
    spark: Any, rich: Path, query: str
) -> None:
    budget = veil.Budget(epsilon=10, delta=1e-3)
    on_duckdb = veil.Session.local({"people": rich}, privacy_unit="user_id", budget=budget)
    on_spark = veil.Session.spark(spark, {"people": rich}, privacy_unit="user_id", budget=budget)
    bounds = {"income": (0, 1_000_000), "age": (0, 100), "score": (-50, 50)}
    with warnings.catch_warnings():  # one bounds dict for every query: some go unused
        warnings.simplefilter("ignore", veil.VeilWarning)
        agg = aggregate_of(on_duckdb.explain(query, epsilon=1, delta=1e-6, bounds=bounds).plan)
    assert _exact(on_spark.engine, agg, salt=99) == _exact(on_duckdb.engine, agg, salt=99)


def test_veil_query_with_engine_spark_answers_on_the_active_spark_session(
    spark: Any, people: Path
) -> None:
    from typer.testing import CliRunner

    from veil.cli import app

    sql = "SELECT COUNT(*) AS n, AVG(income) AS mean FROM people"
    args = ["query", sql, "--table", f"people={people}", "--epsilon", "1", "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--engine", "spark", "--bounds", "income=0:1000000"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["columns"] == ["n", "mean"]
    assert abs(answer["rows"][0][0] - 4000) < 200
