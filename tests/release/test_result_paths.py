"""A released Result: printout, notebook table, cached JSON form, dataframes, error bars."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil.engines.fake import FakeEngine
from veil.errors import InvalidArgumentError, MissingDependencyError
from veil.release.result import NOT_PRIVATE, Result, Usage

Q = (
    "SELECT state, COUNT(*) AS n, AVG(income) AS mean, MEDIAN(income) AS med "
    "FROM people GROUP BY state"
)
BOUNDS = {"income": (0, 1000)}
STATES = ("CA", "NY")


def people(n: int = 2000) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table(
        {
            "user_id": np.arange(n),
            "state": rng.choice(list(STATES), n),
            "income": rng.uniform(0, 1000, n),
        }
    )


def session(*, seeded: bool) -> veil.Session:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=10, delta="1e-5"))
    return veil.Session(
        FakeEngine({"people": people()}),
        ledger=ledger,
        analyst="alice",
        dataset="people",
        privacy_unit="user_id",
        domains={"state": STATES},
        source=SeededSource(4) if seeded else None,
    )


@pytest.fixture(scope="module")
def seeded() -> Result:
    return session(seeded=True).sql(Q, epsilon=1, bounds=BOUNDS)


@pytest.fixture(scope="module")
def private_and_cached() -> tuple[Result, Result]:
    s = session(seeded=False)
    first = s.sql(Q, epsilon=1, bounds=BOUNDS)
    return first, s.sql(Q, epsilon=1, bounds=BOUNDS)


def test_the_printout_shows_values_with_error_bars_the_cost_and_not_private(
    seeded: Result,
) -> None:
    lines = str(seeded).splitlines()
    assert lines[0].split() == ["state", "n", "mean", "med"]
    assert [line.split()[0] for line in lines[1:3]] == ["CA", "NY"]
    bars = seeded.error_bars()
    n, mean = seeded.rows[0][1], seeded.rows[0][2]
    assert f"{n} ± {bars[0][1]:.3g}" in lines[1]
    assert f"{mean:.6g} ± {bars[0][2]:.3g}" in lines[1]
    assert bars[0][3] is None  # a quantile has no error bar
    assert lines[3] == f"cost: {seeded.cost}"
    assert lines[4] == NOT_PRIVATE
    assert len(lines) == 5


def test_a_cached_private_answer_says_so_and_has_no_warning(
    private_and_cached: tuple[Result, Result],
) -> None:
    first, cached = private_and_cached
    assert not first.cached
    assert cached.cached
    assert cached.values == first.values
    text = str(cached)
    assert text.splitlines()[-1] == f"cost: {cached.cost} (cached answer)"
    assert NOT_PRIVATE not in text
    assert NOT_PRIVATE not in str(first)


def test_the_notebook_table_escapes_values_and_shows_bars_and_the_cost(seeded: Result) -> None:
    page = seeded._repr_html_()
    assert page.startswith("<table><thead><tr><th>state</th><th>n</th>")
    assert page.count("<tr>") == 3
    bar = seeded.error_bars()[0][1]
    assert f"<td>{seeded.rows[0][1]} <small>± {bar:.3g}</small></td>" in page
    assert "; ± 95 % error bars (noise only)" in page
    assert "NOT PRIVATE" in page
    assert "cached answer" not in page


def test_the_notebook_table_of_a_cached_answer_says_nothing_was_spent(
    private_and_cached: tuple[Result, Result],
) -> None:
    _, cached = private_and_cached
    page = cached._repr_html_()
    assert "(cached answer: nothing spent)" in page
    assert "NOT PRIVATE" not in page


def test_html_in_a_released_key_is_escaped() -> None:
    r = Result(
        columns=("k<b>",),
        types=("string",),
        values=(("<script>",),),
        cost=veil.Budget(epsilon=1),
    )
    page = r._repr_html_()
    assert "<th>k&lt;b&gt;</th>" in page
    assert "<td>&lt;script&gt;</td>" in page


def test_the_json_form_round_trips_through_text(seeded: Result) -> None:
    again = Result.from_json(json.loads(json.dumps(seeded.to_json())))
    assert again == seeded  # models and noise included
    assert again.error_bars(0.9) == seeded.error_bars(0.9)
    assert not again.private
    assert again.usage == seeded.usage
    assert all(isinstance(u, Usage) for u in again.usage)


def test_a_result_read_from_the_cache_costs_nothing(seeded: Result) -> None:
    cached = Result.from_json(seeded.to_json(), cached=True)
    assert cached.cached
    assert cached.cost == veil.Budget(epsilon=0)
    assert cached.values == seeded.values


def test_an_older_json_form_without_notes_is_private_by_default(seeded: Result) -> None:
    d = seeded.to_json()
    for key in ("fingerprint", "notes", "private"):
        del d[key]
    old = Result.from_json(d)
    assert old.private
    assert old.notes == ()
    assert old.fingerprint == ""


def test_to_pandas_and_to_polars_keep_columns_and_values(seeded: Result) -> None:
    pytest.importorskip("pandas")
    frame = seeded.to_pandas()
    assert list(frame.columns) == list(seeded.columns)
    assert frame["n"].tolist() == [row[1] for row in seeded.rows]


def test_to_pandas_without_pandas_names_the_extra(
    seeded: Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'veil\[pandas\]'"):
        seeded.to_pandas()


def test_to_polars_without_polars_says_how_to_install_it(
    seeded: Result, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(
        MissingDependencyError, match=r"to_polars\(\) needs polars: pip install polars"
    ):
        seeded.to_polars()


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, float("nan"), "0.9", None])
def test_error_bars_refuse_a_level_outside_the_open_unit_interval(
    seeded: Result, level: object
) -> None:
    with pytest.raises(InvalidArgumentError, match=r"level must lie in \(0, 1\), e\.g\. 0\.95"):
        seeded.error_bars(level)  # type: ignore[arg-type]


def test_wider_confidence_gives_wider_bars(seeded: Result) -> None:
    narrow, wide = seeded.error_bars(0.5), seeded.error_bars(0.99)
    for a, b in zip(narrow[0][1:3], wide[0][1:3], strict=True):
        assert a is not None
        assert b is not None
        assert 0 < a < b


def test_error_bars_are_computed_once_per_level_and_handed_out_as_copies() -> None:
    from veil.noise import aggregate_bars

    result = session(seeded=True).sql(Q, epsilon=1, bounds=BOUNDS)
    assert result._bars == {}  # released without its bars: they are computed when asked for
    first = result.error_bars(0.9)
    assert list(result._bars) == [0.9]
    aggregate_bars._AVG_TABLES.clear()  # the AVG column's cells: the second call must not need them
    first[0][1] = -1.0
    again = result.error_bars(0.9)
    assert aggregate_bars._AVG_TABLES == {}
    assert again[0][1] != -1.0
    # the same bars as computed afresh by a copy of the answer (no kept bars)
    fresh = Result.from_json(json.loads(json.dumps(result.to_json())))
    assert fresh.error_bars(0.9) == again
    assert aggregate_bars._AVG_TABLES  # (computing them afresh does fill the AVG's cells)
    assert str(fresh) == str(result)
    assert sorted(result._bars) == [0.9, 0.95]
    assert result.error_bars(0.99) != again


def test_a_result_has_its_rows_length_and_says_how_to_get_polars() -> None:

    result = session(seeded=True).sql(Q, epsilon=1, bounds=BOUNDS)
    assert len(result) == len(result.values) > 0
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="pip install polars"):
            result.to_polars()
    else:
        assert result.to_polars().height == len(result)


def test_a_results_usage_is_written_when_read_and_is_every_part_of_the_charge() -> None:
    import pyarrow as pa

    from veil import Budget, Session
    from veil.plan.tree import aggregate_of
    from veil.release.explain import describe_usage

    table = pa.table({"k": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    with Session.local({"t": table}, budget=Budget(epsilon=10, delta=1e-3)) as s:
        for sql, options in (
            ("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", {"bounds": {"x": (0, 5)}}),
            ("SELECT k, SUM(x) AS s FROM t GROUP BY k", {"bounds": {"x": (0, 5)}, "delta": 1e-6}),
        ):  # the second with partition selection
            result = s.sql(sql, epsilon=1, **options)
            agg = aggregate_of(s.explain(sql, epsilon=1, **options).plan)
            written = describe_usage(agg)
            assert len(result.usage) == len(written)  # known before it is written
            assert tuple(result.usage) == written
            assert result.usage == written
            assert [u.measurement for u in result.usage][-1] == written[-1].measurement
    assert any(u.measurement == "partition selection" for u in result.usage)
