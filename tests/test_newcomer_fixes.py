"""Rough edges a new user hit on real data (issue 9), each pinned by a test that failed before."""

from __future__ import annotations

from fractions import Fraction

import pyarrow as pa
import pytest
from rich.console import Console

import veil
from veil.accounting import even_split
from veil.cli_output import print_result
from veil.errors import BudgetExhaustedError, InvalidArgumentError, UnsupportedQueryError


def session(**kw: object) -> veil.Session:
    table = pa.table(
        {
            "uid": list(range(200)),
            "age": [120] * 100 + [30] * 100,
            "year": [2004] * 200,
            "state": ["CA", "NY"] * 100,
        }
    )
    options: dict[str, object] = {"privacy_unit": "uid", "budget": veil.Budget(epsilon=100)}
    options.update(kw)
    return veil.Session.local({"t": table}, **options)  # type: ignore[arg-type]


def test_the_last_histogram_bin_is_labelled_closed_because_it_holds_its_upper_edge() -> None:
    r = session().sql(
        "SELECT BIN(age, 0, 18, 65, 120) AS b, COUNT(*) AS n FROM t GROUP BY b", epsilon=5
    )
    assert [row[0] for row in r.rows] == ["[0, 18)", "[18, 65)", "[65, 120]"]
    assert 90 < r.rows[2][1] < 110  # age = 120 is in it


def test_group_by_with_nothing_after_it_is_refused_with_its_position() -> None:
    with pytest.raises(UnsupportedQueryError, match=r"GROUP BY lists no column.*line 1, column 24"):
        session().sql("SELECT COUNT(*) FROM t GROUP BY", epsilon=1)


def test_a_negative_limit_is_quoted_with_its_sign() -> None:
    with pytest.raises(UnsupportedQueryError, match=r"LIMIT takes a whole number ≥ 0, got -1"):
        session().sql("SELECT COUNT(*) AS n FROM t LIMIT -1", epsilon=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"epsilon": 1e-300},
            r"epsilon=1e-300 is outside the range one query may spend, \[1e-12, 1e4\]",
        ),
        ({"epsilon": 1e5}, r"epsilon=100000 is outside the range"),
        ({"epsilon": 1, "delta": 0.5}, r"delta=0.5 protects nothing"),
        ({"epsilon": 1, "delta": Fraction(3, 2)}, r"delta must lie in \[0, 1\).*got 1.5$"),
    ],
)
def test_privacy_parameters_outside_the_supported_range_are_user_errors_naming_it(
    options: dict[str, object], message: str
) -> None:
    s = session()
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql("SELECT COUNT(*) FROM t", **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=100)


def test_epsilon_accepts_the_budgets_an_allocation_policy_returns() -> None:
    s = session(budget=veil.Budget(epsilon=1, delta=1e-6))
    parts = even_split(veil.Budget(epsilon=1, delta=1e-6), 4)
    r = s.sql("SELECT state, COUNT(*) FROM t GROUP BY state", epsilon=parts[0])
    assert r.cost == parts[0]
    with pytest.raises(InvalidArgumentError, match="carries its own delta"):
        s.sql("SELECT COUNT(*) FROM t", epsilon=parts[1], delta=1e-7)


def test_a_refusal_shows_the_digits_that_explain_it() -> None:
    s = session(budget=veil.Budget(epsilon=1))
    s.sql("SELECT COUNT(*) FROM t", epsilon="0.0000003")
    with pytest.raises(BudgetExhaustedError) as info:
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert "requested ε=1, remaining ε=0.9999997, short by ε=3e-07" in str(info.value)


def test_running_out_of_delta_advises_declaring_the_keys() -> None:
    s = session(budget=veil.Budget(epsilon=10, delta=1e-6))
    s.sql("SELECT state, COUNT(*) FROM t GROUP BY state", epsilon=1, delta=1e-6)
    with pytest.raises(BudgetExhaustedError, match=r"δ ran out.*declare the keys' domain"):
        s.sql("SELECT year, COUNT(*) FROM t GROUP BY year", epsilon=1, delta=1e-6)


def test_integer_group_keys_print_without_thousands_separators() -> None:
    r = session().sql(
        "SELECT year, COUNT(*) AS n FROM t WHERE year IN (2004) GROUP BY year", epsilon=5
    )
    console = Console(record=True, width=80)
    print_result(r, veil.cli_output.OutputFormat.table, console=console)
    text = console.export_text()
    assert "2004" in text
    assert "2,004" not in text


def test_max_groups_zero_is_refused_not_silently_raised_to_one() -> None:
    with pytest.raises(InvalidArgumentError, match="max_groups must be a positive integer, got 0"):
        session(max_groups=0)


def test_a_result_shows_an_html_table_with_error_bars_in_a_notebook() -> None:
    r = session().sql(
        "SELECT state, COUNT(*) AS n FROM t WHERE state IN ('CA', '<b>') GROUP BY state",
        epsilon=1,
    )
    page = r._repr_html_()
    assert page.startswith("<table><thead><tr><th>state</th><th>n</th></tr>")
    assert "&lt;b&gt;" in page
    assert "<b>" not in page.replace("<b style", "")
    assert page.count("<small>± ") == 2
    assert "cost ε=1" in page


MECHANISMS = [
    ("laplace", lambda M, **c: M.laplace(3.5, sensitivity=1, epsilon=0.5, **c), "ε=0.5"),
    (
        "discrete_laplace",
        lambda M, **c: M.discrete_laplace([1, 2], sensitivity=1, epsilon=0.5, **c),
        "ε=0.5",
    ),
    ("gaussian", lambda M, **c: M.gaussian(3.5, sensitivity=1, rho=0.125, **c), "ρ=0.125"),
    (
        "discrete_gaussian",
        lambda M, **c: M.discrete_gaussian(7, sensitivity=1, epsilon=1, delta=1e-6, **c),
        "(ε=1, δ=1e-06)",
    ),
    (
        "exponential",
        lambda M, **c: M.exponential({"a": 3, "b": 5}, sensitivity=1, epsilon=0.5, **c),
        "ε=0.5",
    ),
    (
        "report_noisy_max",
        lambda M, **c: M.report_noisy_max([3, 5], sensitivity=1, epsilon=0.5, **c),
        "ε=0.5",
    ),
    (
        "randomized_response",
        lambda M, **c: M.randomized_response(["x"], categories=["x", "y"], epsilon=0.5, **c),
        "ε=0.5",
    ),
    (
        "object form",
        lambda M, **c: veil.LaplaceMechanism(epsilon=0.5, sensitivity=1).add_noise(1.0, **c),
        "ε=0.5",
    ),
]


@pytest.mark.parametrize(("name", "call", "loss"), MECHANISMS, ids=[m[0] for m in MECHANISMS])
def test_a_mechanism_called_directly_is_charged_to_the_ledger_it_is_given(
    name: str, call: object, loss: str
) -> None:
    from veil import mechanisms

    ledger = veil.Ledger("sqlite://")
    grant = veil.Budget(rho=1) if loss.startswith("ρ") else veil.Budget(epsilon=1, delta=1e-5)
    ledger.grant("shop", "orders", grant)
    before = ledger.remaining("shop", "orders")
    call(mechanisms, ledger=ledger, analyst="shop", dataset="orders")  # type: ignore[operator]
    history = ledger.history("shop", "orders")
    charges = [r for r in history if r.event == "charge"]
    assert len(charges) == 1
    assert charges[0].status == "committed"
    assert str(charges[0].loss) == loss
    assert charges[0].fingerprint
    assert charges[0].fingerprint.startswith("mechanism:")
    assert ledger.remaining("shop", "orders") != before


def test_a_mechanism_beyond_the_budget_draws_nothing_and_is_refused() -> None:
    from veil import mechanisms

    ledger = veil.Ledger("sqlite://")
    ledger.grant("shop", "orders", veil.Budget(epsilon=0.1))
    with pytest.raises(BudgetExhaustedError, match=r"requested ε=0\.5, remaining ε=0\.1"):
        mechanisms.laplace(
            3.0, sensitivity=1, epsilon=0.5, ledger=ledger, analyst="shop", dataset="orders"
        )
    assert ledger.remaining("shop", "orders") == veil.Budget(epsilon=0.1)
    with pytest.raises(InvalidArgumentError, match="needs ledger= too"):
        mechanisms.laplace(3.0, sensitivity=1, epsilon=0.5, analyst="shop")


def test_the_audit_trail_records_the_text_of_each_charged_query() -> None:
    s = session(budget=veil.Budget(epsilon=10, delta=1e-6))
    sql = "SELECT state, COUNT(*) AS n FROM t GROUP BY state"
    s.sql(sql, epsilon=1)
    s.query("t").count("n").run(epsilon=1)
    charges = [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]
    assert charges[0].query == sql
    assert charges[1].query is not None
    assert '"node":"aggregate"' in charges[1].query
    exported = s.ledger.export_csv()
    assert "query_text" in exported.splitlines()[0]
    assert sql in exported


def test_explain_says_whether_the_remaining_budget_covers_the_query() -> None:
    s = session(budget=veil.Budget(epsilon=1))
    ok = s.explain("SELECT COUNT(*) FROM t", epsilon=0.5)
    assert ok.covered is True
    assert "remaining ε=1: covers it" in str(ok)
    s.sql("SELECT COUNT(*) FROM t", epsilon=0.75)
    short = s.explain("SELECT COUNT(*) FROM t", epsilon=0.5)
    assert short.covered is False
    assert "remaining ε=0.25: does NOT cover it" in str(short)
    assert s.remaining() == veil.Budget(epsilon=0.25)  # explain charged nothing


@pytest.mark.parametrize(
    "variant",
    [
        "SELECT state AS s, COUNT(*) AS total FROM t GROUP BY state",  # aliases
        "SELECT COUNT(*) AS n, state FROM t GROUP BY state",  # SELECT order
        "SELECT state, COUNT(*) AS n FROM t GROUP BY state ORDER BY n DESC LIMIT 1",
        "SELECT state, COUNT(*) AS n FROM t GROUP BY state HAVING n > 10",
    ],
)
def test_changing_only_post_processing_is_answered_from_the_cache_free(variant: str) -> None:
    s = session(budget=veil.Budget(epsilon=10, delta=1e-6))
    first = s.sql("SELECT state, COUNT(*) AS n FROM t GROUP BY state", epsilon=1)
    left = s.remaining()
    again = s.sql(variant, epsilon=1)
    assert again.cached
    assert s.remaining() == left
    noisy = {row[0]: row[1] for row in first.rows}
    for row in again.rows:
        key = next(v for v in row if isinstance(v, str))
        count = next(v for v in row if isinstance(v, int))
        assert noisy[key] == count  # the same noisy counts, post-processed
    hits = [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "cache_hit"]
    assert len(hits) == 1


def test_a_different_measurement_is_charged_again() -> None:
    s = session(budget=veil.Budget(epsilon=10, delta=1e-6))
    s.sql("SELECT state, COUNT(*) AS n FROM t GROUP BY state", epsilon=1)
    other = s.sql("SELECT state, COUNT(*) AS n FROM t WHERE age > 50 GROUP BY state", epsilon=1)
    assert not other.cached
    assert s.remaining() == veil.Budget(epsilon=8, delta=8e-7)  # δ: a 1/10 share each


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 20}, r"epsilon=20 for one query protects little"),
        ({"epsilon": 1, "delta": 1e-3}, r"delta=0\.001 is large: δ must be far below 1/n"),
        ({"epsilon": 1, "bounds": {"age": (0, 99)}}, r"bounds for 'age' are ignored"),
    ],
)
def test_what_is_allowed_but_rarely_meant_gets_a_veil_warning(
    options: dict[str, object], message: str
) -> None:
    s = session()
    with pytest.warns(veil.VeilWarning, match=message):
        s.sql("SELECT COUNT(*) FROM t", **options)  # type: ignore[arg-type]


def test_explain_says_how_to_declare_the_types_of_a_csv(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "people.csv"
    path.write_text("uid,income\n1,10\n2,N/A\n")
    s = veil.Session.local({"people": path}, privacy_unit="uid", budget=veil.Budget(epsilon=1))
    text = str(s.explain("SELECT COUNT(*) FROM people", epsilon=0.5))
    assert "note: table 'people' is a CSV read without declared types" in text
    with pytest.raises(veil.SchemaError, match=r"declare its type.*--column income:DOUBLE"):
        s.sql("SELECT SUM(income) FROM people", epsilon=0.5, bounds={"income": (0, 100)})
    assert s.remaining() == veil.Budget(epsilon=1)


def test_explain_and_the_release_agree_on_the_bar_of_an_avg_over_a_small_group() -> None:
    small = pa.table({"uid": [1, 2, 3], "income": [10.0, 20.0, 30.0]})
    s = veil.Session.local({"t": small}, privacy_unit="uid", budget=veil.Budget(epsilon=1))
    sql = "SELECT AVG(income) AS m FROM t"
    expected = s.explain(sql, epsilon=0.5, bounds={"income": (0, 200_000)}).errors["m"]
    assert "± 200000 (the whole range) for a group whose noisy count is below" in expected
    r = s.sql(sql, epsilon=0.5, bounds={"income": (0, 200_000)})
    assert r.error_bars()[0][0] == 200_000  # 3 rows: the fallback explain announced
