"""Strict inputs in Python: whatever is passed to a session's sql, explain, query builder or
find_bounds — deep expressions, surrogates, huge integers, wrong types — only veil's own
errors come back, and a refusal charges nothing."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import veil
from veil.autobounds import find_bounds

SQL = "SELECT COUNT(*) AS n, SUM(income) AS total FROM people"
CHAIN = " AND ".join(f"income <> {i}" for i in range(1_000))
TABLE = pa.table(
    {
        "user_id": list(range(40)),
        "state": ["CA", "NY"] * 20,
        "income": [100.0 * i for i in range(40)],
    }
)


def _session() -> veil.Session:
    return veil.Session.local(
        tables={"people": TABLE},
        privacy_unit="user_id",
        budget=veil.Budget(epsilon=1_000),
        bounds={"income": (0, 10_000)},
    )


SESSION = _session()

_NUMBERS = st.sampled_from(
    [True, False, None, "1", "1/3", "1e400", "-1", "nan", "inf", "", "\ud800", 10**400,
     -(10**30), 2**63, 0, -0.0, float("nan"), float("inf"), 1e-300, [], {}, [1], object()]
)  # fmt: skip
_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            SQL,
            f"{SQL} WHERE {CHAIN}",
            f"{SQL} WHERE state = '\ud800'",
            SQL + " WHERE " + "(" * 60 + "income > 1" + ")" * 60,
            SQL + " WHERE " + " + ".join(["income"] * 300) + " > 1",
            SQL + " WHERE " + "NOT " * 1_000 + "income > 1",
            SQL + " WHERE income > " + "9" * 4_000,
            "\x00\x01\xff" * 10,
            b"SELECT 1",
            None,
            42,
        ]
    ),
)
_OPTIONS = {
    "epsilon": _NUMBERS,
    "delta": _NUMBERS,
    "max_groups": _NUMBERS,
    "max_rows_per_group": _NUMBERS,
    "bounds": st.one_of(_NUMBERS, st.just({"income": (True, "1e9")}), st.just({"\ud800": (0, 1)})),
}
_CALLS = ("sql", "explain", "query", "find_bounds")


def _call(s: veil.Session, how: str, text: Any, options: dict[str, Any]) -> object:
    if how == "sql":
        return s.sql(text, **({"epsilon": 0.5} | options))
    if how == "explain":
        return s.explain(text, **({"epsilon": 0.5} | options))
    if how == "query":
        return s.query("people").where(text).count().run(**({"epsilon": 0.5} | options))
    bounds_options = {k: v for k, v in options.items() if k not in ("delta", "bounds")}
    return find_bounds(s, "people", ["income"], where=text, **({"epsilon": 0.5} | bounds_options))


@settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    how=st.sampled_from(_CALLS),
    text=_TEXT,
    options=st.dictionaries(st.sampled_from(sorted(_OPTIONS)), st.none(), max_size=3).flatmap(
        lambda keys: st.fixed_dictionaries({k: _OPTIONS[k] for k in keys})
    ),
)
def test_any_input_gets_a_veil_error_or_an_answer_and_refusals_are_free(
    how: str, text: Any, options: dict[str, Any]
) -> None:
    before = SESSION.remaining()
    try:
        _call(SESSION, how, text, options)
    except veil.VeilError:
        assert SESSION.remaining() == before
    # anything else (a RecursionError, a UnicodeEncodeError, a TypeError) fails the test


_FIXED_TEXTS = [
    SQL,
    f"{SQL} WHERE state = '\ud800'",
    SQL + " WHERE " + "(" * 60 + "income > 1" + ")" * 60,
    b"SELECT 1",
    None,
    42,
    "\x00\x01",
]
_FIXED_OPTIONS: list[dict[str, Any]] = [
    {},
    {"bounds": "auto"},
    {"bounds": {"\ud800": (0, 1)}},
    {"bounds": {"income": (True, "1e9")}},
    {"bounds": {"income": (0, 10**400)}},
    {"epsilon": float("nan")},
    {"epsilon": "\ud800"},
    {"epsilon": object()},
    {"max_groups": 2**63},
    {"delta": "\ud800"},
]


@pytest.mark.parametrize("text", _FIXED_TEXTS, ids=repr)
@pytest.mark.parametrize("how", _CALLS)
def test_each_odd_input_gets_a_veil_error_or_an_answer(how: str, text: Any) -> None:
    # the property's corners, each tried: a raw exception fails the test
    for options in _FIXED_OPTIONS:
        before = SESSION.remaining()
        try:
            _call(SESSION, how, text, options)
        except veil.VeilError:
            assert SESSION.remaining() == before


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"epsilon": True}, "epsilon must be a number"),
        ({"epsilon": 10**400}, "epsilon"),
        ({"epsilon": Fraction(1, 2), "max_groups": "2"}, "max_groups must be a positive integer"),
        ({"epsilon": Fraction(1, 2), "max_groups": True}, "max_groups must be a positive integer"),
    ],
)
def test_wrong_types_are_refused_naming_the_argument(options: dict[str, Any], match: str) -> None:
    s = _session()
    with pytest.raises(veil.InvalidArgumentError, match=match):
        s.sql(SQL, **options)
    assert s.remaining() == veil.Budget(epsilon=1_000)
