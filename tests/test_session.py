"""The session flow: ledger protocol, cache, refusals, results, explain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil.engines.fake import FakeEngine
from veil.errors import (
    BoundsError,
    BudgetExhaustedError,
    SchemaError,
    UnsupportedQueryError,
)

Q = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean "
    "FROM people GROUP BY state"
)
BOUNDS = {"income": (0, 1000)}
STATES = ("CA", "NY", "TX", "WA")


def people(n: int = 3000, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "user_id": np.arange(n),
            "state": rng.choice(list(STATES[:3]), n),
            "age": rng.integers(0, 100, n),
            "income": rng.uniform(0, 1000, n),
        }
    )


def fake_session(
    engine: FakeEngine | None = None, budget: veil.Budget | None = None
) -> tuple[veil.Session, FakeEngine]:
    eng = engine or FakeEngine({"people": people()})
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", budget or veil.Budget(epsilon=10, delta="1e-5"))
    s = veil.Session(
        eng,
        ledger=ledger,
        analyst="alice",
        dataset="people",
        privacy_unit="user_id",
        domains={"state": STATES},
        source=SeededSource(1),
    )
    return s, eng


def test_count_sum_avg_by_public_state_releases_every_key_with_error_bars() -> None:
    s, _ = fake_session()
    r = s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert r.columns == ("state", "n", "total", "mean")
    assert [row[0] for row in r.rows] == list(STATES)  # WA is empty and still released
    truth = people().to_pandas().groupby("state").size()
    for state, n, _total, mean in r.rows:
        assert n >= 0
        assert 0 <= mean <= 1000
        if state in truth:
            assert abs(n - truth[state]) < 40
            assert abs(mean - 500) < 60
    bars = r.error_bars(0.95)
    assert all(b[0] is None and b[1] is not None and b[1] > 0 for b in bars)
    assert r.cost == veil.Budget(epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=9, delta="1e-5")


def test_an_identical_query_comes_from_the_cache_at_no_cost_and_without_the_engine() -> None:
    s, eng = fake_session()
    first = s.sql(Q, epsilon=1, bounds=BOUNDS)
    calls = len(eng.calls)
    again = s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert again.cached
    assert again.rows == first.rows
    assert again.error_bars() == first.error_bars()
    assert again.cost == veil.Budget(epsilon=0)
    assert len(eng.calls) == calls
    assert s.remaining() == veil.Budget(epsilon=9, delta="1e-5")


def test_a_different_loss_is_a_fresh_charge_not_a_cache_hit() -> None:
    s, _ = fake_session()
    s.sql(Q, epsilon=1, bounds=BOUNDS)
    r = s.sql(Q, epsilon=2, bounds=BOUNDS)
    assert not r.cached
    assert s.remaining() == veil.Budget(epsilon=7, delta="1e-5")


@pytest.mark.parametrize(
    ("sql", "bounds", "error", "match"),
    [
        ("SELECT COUNT(*) FROM nobody", None, SchemaError, "nobody"),
        ("SELECT SUM(salary) FROM people", BOUNDS, SchemaError, "salary"),
        ("SELECT SUM(income) FROM people", None, BoundsError, r"bounds=\{'income'"),
        (
            "SELECT COUNT(*) FROM people a JOIN people b ON a.age = b.age",
            None,
            UnsupportedQueryError,
            "(?i)join",
        ),
        ("SELECT SUM(state) FROM people", {"state": (0, 1)}, SchemaError, "numeric"),
    ],
)
def test_refused_queries_charge_nothing_and_never_reach_the_engine(
    sql: str, bounds: dict[str, tuple[int, int]] | None, error: type[Exception], match: str
) -> None:
    s, eng = fake_session()
    with pytest.raises(error, match=match):
        s.sql(sql, epsilon=1, bounds=bounds)
    assert eng.calls == []
    assert s.remaining() == veil.Budget(epsilon=10, delta="1e-5")


def test_an_engine_failure_keeps_the_charge_and_withholds_the_engines_message() -> None:
    engine = FakeEngine({"people": people()}, fail=SchemaError("could not convert 'abc'"))
    s, _ = fake_session(engine)
    with pytest.raises(veil.QueryFailedError, match="the charge stays") as info:
        s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert "abc" not in str(info.value)
    assert len(engine.calls) == 1
    assert s.remaining() == veil.Budget(epsilon=9, delta="1e-5")


def test_the_withheld_engine_error_is_logged_for_the_operator_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = FakeEngine({"people": people()}, fail=SchemaError("could not convert 'abc'"))
    s, _ = fake_session(engine)
    with (
        caplog.at_level("ERROR", logger="veil.withheld"),
        pytest.raises(veil.QueryFailedError) as info,
    ):
        s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert "abc" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    (record,) = [r for r in caplog.records if r.name == "veil.withheld"]
    assert "could not convert 'abc'" in record.getMessage()
    assert record.veil_query == Q  # type: ignore[attr-defined]
    assert record.exc_info is not None


def test_budget_exhaustion_is_refused_before_the_engine_reads_anything() -> None:
    s, eng = fake_session(budget=veil.Budget(epsilon="0.5"))
    with pytest.raises(BudgetExhaustedError, match="requested ε=1"):
        s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert eng.calls == []


def test_unknown_keys_need_delta_and_take_the_grants_share_by_default() -> None:
    s, _ = fake_session()
    s.domains.clear()
    r = s.sql(Q, epsilon=1, bounds=BOUNDS)
    assert r.cost == veil.Budget(epsilon=1, delta="1e-6")  # 1e-5 · (1/10)
    assert sorted(row[0] for row in r.rows) == ["CA", "NY", "TX"]  # no invented keys
    assert any(u.measurement == "partition selection" for u in r.usage)


def test_explain_reads_no_data_and_charges_nothing() -> None:
    s, eng = fake_session()
    e = s.explain(Q, epsilon=1, bounds=BOUNDS)
    assert eng.calls == []
    assert e.cost == veil.Budget(epsilon=1)
    assert "ROW_NUMBER() OVER" in e.sql
    assert set(e.errors) == {"n", "total", "mean"}
    assert {u.measurement for u in e.usage} == {"count", "sum(income)"}
    assert "L1 = 1 rows" in str(e)
    assert s.remaining() == veil.Budget(epsilon=10, delta="1e-5")


def test_having_order_by_and_limit_act_on_released_values() -> None:
    s, _ = fake_session()
    r = s.sql(
        "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > 100 "
        "ORDER BY n DESC LIMIT 2",
        epsilon=1,
    )
    ns = [row[1] for row in r.rows]
    assert len(ns) == 2
    assert ns == sorted(ns, reverse=True)
    assert all(n > 100 for n in ns)
    assert len(r.error_bars()) == 2


def test_the_select_order_is_kept() -> None:
    s, _ = fake_session()
    r = s.sql("SELECT COUNT(*) AS n, state FROM people GROUP BY state", epsilon=1)
    assert r.columns == ("n", "state")
    assert r.error_bars()[0][1] is None


def test_results_convert_to_pandas_and_arrow() -> None:
    s, _ = fake_session()
    r = s.sql(Q, epsilon=1, bounds=BOUNDS)
    df = r.to_pandas()
    assert list(df.columns) == ["state", "n", "total", "mean"]
    assert r.to_arrow().schema.field("n").type == pa.int64()
    assert "cost: ε=1" in str(r)


def test_the_builder_runs_through_the_session() -> None:
    s, _ = fake_session()
    r = (
        s.query("people")
        .group_by("state")
        .count("n")
        .avg("income", "m")
        .run(epsilon=1, bounds=BOUNDS)
    )
    assert r.columns == ("state", "n", "m")


def test_a_median_with_a_large_epsilon_lands_near_the_truth() -> None:
    s, _ = fake_session(budget=veil.Budget(epsilon=100))
    with pytest.warns(veil.VeilWarning, match="epsilon=50 for one query protects little"):
        r = s.sql("SELECT MEDIAN(age) AS med FROM people", epsilon=50, bounds={"age": (0, 100)})
    truth = float(people().to_pandas().age.median())
    assert abs(r.rows[0][0] - truth) <= 2


def test_histograms_release_every_bin() -> None:
    s, _ = fake_session()
    r = s.sql(
        "SELECT BIN(age, 0, 18, 65, 120) AS band, COUNT(*) AS n FROM people GROUP BY band",
        epsilon=1,
    )
    assert [row[0] for row in r.rows] == ["[0, 18)", "[18, 65)", "[65, 120]"]


def test_session_local_reads_pandas_and_answers() -> None:
    df = people().to_pandas()
    s = veil.Session.local(
        tables={"people": df},
        privacy_unit="user_id",
        budget=veil.Budget(epsilon=1, delta="1e-6"),
        analyst="bob",
    )
    r = s.sql(Q, epsilon="0.5", bounds=BOUNDS, source=SeededSource(2))
    assert {row[0] for row in r.rows} <= {"CA", "NY", "TX"}
    assert s.remaining().eps == pytest.approx(0.5)


def test_nulls_leave_the_whole_aggregation() -> None:
    t = pa.table(
        {
            "user_id": list(range(6)),
            "state": ["CA"] * 6,
            "age": [1, 2, 3, 4, 5, 6],
            "income": [1.0, None, 3.0, float("nan"), 5.0, 6.0],
        }
    )
    s, eng = fake_session(FakeEngine({"people": t}))
    s.sql("SELECT COUNT(*) AS n, AVG(income) AS m FROM people", epsilon=1, bounds=BOUNDS)
    sql = eng.calls[0].sql(dialect="duckdb")
    assert 'NOT "income" IS NULL' in sql
    assert 'NOT ISNAN(CAST("income" AS DOUBLE))' in sql
    exact = eng.execute(eng.calls[0]).to_pydict()
    assert exact["__n"] == [4]


def test_a_closed_session_refuses_queries() -> None:
    s, _ = fake_session()
    s.close()
    with pytest.raises(veil.SessionStateError, match="closed"):
        s.sql(Q, epsilon=1, bounds=BOUNDS)


def test_consistent_counts_add_up_to_the_noisy_total() -> None:
    s, _ = fake_session()
    r = s.sql("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=1, consistent=True)
    assert all(isinstance(row[1], int) and row[1] >= 0 for row in r.rows)
    before = s.remaining()
    plain = s.sql("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=1)
    # consistent= is post-processing of the same noisy counts: served from the cache, free
    assert plain.cached
    assert s.remaining() == before
    assert r.stats == plain.stats  # the same measurement, post-processed two ways


def test_many_groups_per_unit_with_delta_use_gaussian_noise_end_to_end() -> None:
    s, _ = fake_session()
    s.domains.clear()
    r = s.sql(Q, epsilon=1, delta="1e-6", bounds=BOUNDS, max_groups=40)
    assert {u.mechanism for u in r.usage if u.measurement != "partition selection"} == {
        "discrete_gaussian"
    }
    assert r.cost.delta == pytest.approx(1e-6)
    assert r.cost.eps <= 1
    assert all(bar[1] is not None for bar in r.error_bars())


def test_explain_outlines_the_plan_and_the_budget_use() -> None:
    s, _ = fake_session()
    text = str(s.explain(Q + " HAVING n > 3 ORDER BY n DESC", epsilon=1, bounds=BOUNDS))
    assert "Aggregate by state (public): n = COUNT(*); total = SUM(income)" in text
    assert "Sort n DESC (released values)" in text
    assert "sum(income): discrete_laplace" in text


def test_an_empty_table_gives_noisy_zeros_for_public_keys() -> None:
    empty = people().slice(0, 0)
    s, _ = fake_session(FakeEngine({"people": empty}))
    r = s.sql("SELECT COUNT(*) AS n, SUM(income) AS s FROM people", epsilon=1, bounds=BOUNDS)
    assert len(r.rows) == 1
    assert r.rows[0][0] >= 0


def test_date_keys_are_released_as_iso_strings_and_cached() -> None:
    import datetime

    t = pa.table(
        {
            "user_id": [1, 2, 3],
            "state": ["CA"] * 3,
            "age": [1, 2, 3],
            "income": [1.0, 2.0, 3.0],
            "day": [datetime.date(2024, 1, d) for d in (1, 2, 2)],
        }
    )
    s, _ = fake_session(FakeEngine({"people": t}), budget=veil.Budget(epsilon=100))
    s.domains["day"] = ("2024-01-01", "2024-01-02")
    q = "SELECT day, COUNT(*) AS n FROM people GROUP BY day"
    with pytest.warns(veil.VeilWarning, match="epsilon=20"):
        r = s.sql(q, epsilon=20)
    assert [row[0] for row in r.rows] == ["2024-01-01", "2024-01-02"]
    assert [row[1] for row in r.rows] == [1, 2]  # ε = 20: the noise is almost surely 0
    with pytest.warns(veil.VeilWarning, match="epsilon=20"):
        assert s.sql(q, epsilon=20).cached


def test_non_numeric_data_in_a_summed_csv_column_is_refused_free(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text("user_id,state,income\n1,CA,10\n2,NY,abc\n3,CA,7\n")
    s = veil.Session.local(
        tables={"people": path}, privacy_unit="user_id", budget=veil.Budget(epsilon=1)
    )
    with pytest.raises(SchemaError, match="needs a numeric column"):
        s.sql("SELECT SUM(income) AS s FROM people", epsilon="0.5", bounds=BOUNDS)
    assert s.remaining() == veil.Budget(epsilon=1)


def test_a_session_is_a_context_manager_that_closes() -> None:
    with veil.Session.local(tables={"people": people()}, budget=veil.Budget(epsilon=1)) as s:
        s.sql("SELECT COUNT(*) AS n FROM people", epsilon="0.1")
    with pytest.raises(veil.SessionStateError, match="closed"):
        s.sql("SELECT COUNT(*) AS n FROM people", epsilon="0.1")


def test_explain_without_epsilon_assumes_one_and_says_so() -> None:
    s, eng = fake_session(budget=veil.Budget(epsilon=1))
    s.domains.clear()
    e = s.explain("SELECT state, COUNT(*) AS n FROM people GROUP BY state")
    assert e.cost == veil.Budget(epsilon=1, delta="1e-6")
    assert any("epsilon=1" in n for n in e.notes)
    assert any("delta=1e-6" in n for n in e.notes)
    assert eng.calls == []


def test_session_local_domains_apply_to_every_query() -> None:
    s = veil.Session.local(
        tables={"people": people()},
        budget=veil.Budget(epsilon=1),
        domains={"state": STATES},
    )
    r = s.sql("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon="0.5")
    assert [row[0] for row in r.rows] == list(STATES)
    assert r.cost == veil.Budget(epsilon="0.5")
