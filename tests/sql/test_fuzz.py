"""Whatever text arrives, the SQL front end answers with a plan or a veil user error — never a
crash (a KeyError, an AttributeError… would be a bug and could leak through a server)."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import people
from veil.errors import UserError
from veil.plan.nodes import Plan
from veil.sql import parse

PEOPLE = people().columns
PIECES = [
    "SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "OFFSET", "AS",
    "AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "DISTINCT", "JOIN", "ON", "UNION",
    "WITH", "OVER", "(", ")", ",", "*", "+", "-", "/", "=", "<", ">", "<>", ";", ".",
    "COUNT", "SUM", "AVG", "MEDIAN", "VARIANCE", "STDDEV", "MIN", "MAX", "QUANTILE_CONT",
    "PERCENTILE_CONT", "WITHIN GROUP", "BIN", "FILTER", "CASE", "WHEN", "THEN", "END",
    "people", "p", "user_id", "state", "age", "income", "x", "'CA'", "0", "1", "0.5", "18",
    "120", "DESC", "ASC",
]  # fmt: skip

TEMPLATE = st.sampled_from(
    [
        "SELECT {a} FROM people",
        "SELECT state, {a} FROM people GROUP BY state",
        "SELECT {a} FROM people WHERE {a}",
        "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING {a}",
        "SELECT state, COUNT(*) AS n FROM people GROUP BY {a} ORDER BY {a}",
        "{a}",
    ]
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(TEMPLATE, st.lists(st.sampled_from(PIECES), min_size=1, max_size=12))
def test_any_text_gives_a_plan_or_a_user_error(template: str, words: list[str]) -> None:
    text = template.format(a=" ".join(words))
    try:
        plan = parse(text, {"people": PEOPLE}, privacy_unit="user_id", bounds={"income": (0, 1)})
    except UserError:
        return
    assert isinstance(plan, Plan)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80))
def test_arbitrary_characters_give_a_user_error_or_a_plan(text: str) -> None:
    with contextlib.suppress(UserError):
        parse(text, {"people": PEOPLE})
