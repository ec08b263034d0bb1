"""The reader's limits: text it cannot read and trees too deep are refused, free, with the
reason; long chains of one connective are read and answered without recursion."""

from __future__ import annotations

import pyarrow as pa
import pytest

import veil
from support import people
from veil.errors import UnsupportedQueryError
from veil.plan.builder import Query, domains_from_predicate
from veil.plan.expressions import MAX_BRACKETS, MAX_CHAIN, MAX_DEPTH, parse_expression
from veil.sql import parse

PEOPLE = people("user_id", "state", "age", "income").columns
TABLES = {"people": PEOPLE}
BOUNDS = {"income": (0, 1_000_000)}
COUNT = "SELECT COUNT(*) AS n FROM people"


def _parse(text: str) -> object:
    return parse(text, TABLES, privacy_unit="user_id", bounds=BOUNDS)


def _session() -> veil.Session:
    rows = 50
    table = pa.table(
        {
            "user_id": list(range(rows)),
            "state": ["CA", "NY"] * (rows // 2),
            "age": [float(i) for i in range(rows)],
            "income": [1000.0 * i for i in range(rows)],
        }
    )
    return veil.Session.local(
        tables={"people": table}, privacy_unit="user_id", budget=veil.Budget(epsilon=10)
    )


@pytest.mark.parametrize("terms", [1_000, MAX_CHAIN])
@pytest.mark.parametrize("connective", ["AND", "OR"])
def test_a_long_chain_of_one_connective_is_read_and_answered(terms: int, connective: str) -> None:
    # a left-deep tree as deep as it is long: read and lowered without recursion
    chain = f" {connective} ".join(f"age <> {i + 1000}" for i in range(terms))
    s = _session()
    result = s.sql(f"{COUNT} WHERE {chain}", epsilon=1)
    assert list(result.columns) == ["n"]
    assert s.remaining() == veil.Budget(epsilon=9)


@pytest.mark.parametrize("connective", ["AND", "OR"])
def test_a_chain_longer_than_the_cap_is_refused_free_with_the_cap(connective: str) -> None:
    # one term past MAX_CHAIN: Spark's planner ran out of memory on 5,000 terms after the charge
    chain = f" {connective} ".join(f"age <> {i + 1000}" for i in range(MAX_CHAIN + 1))
    s = _session()
    with pytest.raises(UnsupportedQueryError, match=f"more than {MAX_CHAIN} terms"):
        s.sql(f"{COUNT} WHERE {chain}", epsilon=1)
    with pytest.raises(UnsupportedQueryError, match=f"more than {MAX_CHAIN} terms"):
        s.sql(f"{COUNT} WHERE age > 0 GROUP BY state HAVING {chain.replace('age', 'n')}", epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=10)


def test_the_terms_of_a_long_and_chain_declare_domains() -> None:
    chain = " AND ".join(f"age > {i}" for i in range(3_000)) + " AND state IN ('CA', 'NY')"
    predicate = parse_expression(chain, "where")
    assert domains_from_predicate(predicate, PEOPLE) == {"state": ("CA", "NY")}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            COUNT + " WHERE " + "(" * (MAX_BRACKETS + 1) + "age > 1" + ")" * (MAX_BRACKETS + 1),
            f"nests brackets more than {MAX_BRACKETS} deep",
        ),
        (
            COUNT + " WHERE " + "ABS(" * (MAX_BRACKETS + 5) + "age" + ")" * (MAX_BRACKETS + 5),
            f"nests brackets more than {MAX_BRACKETS} deep",
        ),
        (
            COUNT + " WHERE " + " + ".join(["age"] * (MAX_DEPTH + 1)) + " > 1",
            f"nests more than {MAX_DEPTH} levels deep",
        ),
        (COUNT + " WHERE " + "NOT " * 2_000 + "age > 1", "nests too deeply to read"),
        (COUNT + " WHERE state = '\ud800'", r"lone surrogate \\ud800"),
    ],
)
def test_text_too_deep_or_unreadable_is_refused_with_the_reason(text: str, match: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=match):
        _parse(text)
    s = _session()
    with pytest.raises(UnsupportedQueryError, match=match):
        s.sql(text, epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=10)


def test_brackets_inside_string_literals_do_not_count() -> None:
    deep = "(" * (MAX_BRACKETS * 2)
    _parse(f"{COUNT} WHERE state <> '{deep}'")


def test_nesting_up_to_the_limits_is_read() -> None:
    inner = MAX_BRACKETS - 1
    _parse(COUNT + " WHERE " + "(" * inner + "age > 1" + ")" * inner)
    _parse(COUNT + " WHERE " + " + ".join(["age"] * (MAX_DEPTH - 2)) + " > 1")


def test_the_builder_refuses_the_same_predicates() -> None:
    q = Query.over("people", PEOPLE)
    with pytest.raises(UnsupportedQueryError, match="lone surrogate"):
        q.where("state = '\udfff'")
    with pytest.raises(UnsupportedQueryError, match=f"more than {MAX_DEPTH} levels"):
        q.where(" + ".join(["age"] * (MAX_DEPTH + 1)) + " > 1")
    with pytest.raises(UnsupportedQueryError, match=f"more than {MAX_DEPTH} levels"):
        q.count().having(" + ".join(["n"] * (MAX_DEPTH + 1)) + " > 1")
