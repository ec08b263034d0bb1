from __future__ import annotations

from fractions import Fraction

import pytest
import sqlglot

from support import PEOPLE
from veil.errors import BoundsError, InvalidArgumentError, SchemaError, UnsupportedQueryError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Field,
    Filter,
    GroupKey,
    Having,
    Limit,
    Project,
    Sort,
    SortKey,
    aggregate_of,
    replace_aggregate,
)


def agg(**kw: object) -> Aggregate:
    args: dict[str, object] = {
        "keys": (GroupKey("state"),),
        "aggregates": (AggregateCall("n", "count"),),
        "privacy_unit": "user_id",
    }
    args.update(kw)
    return Aggregate(PEOPLE, **args)  # type: ignore[arg-type]


def test_aggregate_schema_lists_keys_then_aggregates() -> None:
    a = agg(
        aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "income")),
        bounds=(ColumnBounds("income", 0, 10),),
    )
    assert a.schema() == (Field("state", "string"), Field("n", "integer"), Field("m", "real"))


def test_an_aggregates_schema_is_made_once_and_a_replaced_node_has_its_own() -> None:
    import dataclasses

    a = agg(aggregates=(AggregateCall("n", "count"), AggregateCall("s", "sum", "age")),
            bounds=(ColumnBounds("age", 0, 10),))  # fmt: skip
    assert a.schema() is a.schema()  # remembered by the (immutable) node
    b = dataclasses.replace(a, aggregates=(AggregateCall("m", "avg", "income"),),
                            bounds=(ColumnBounds("income", 0, 10),))  # fmt: skip
    assert b.schema() == (Field("state", "string"), Field("m", "real"))
    assert [f.name for f in a.schema()] == ["state", "n", "s"]
    assert a.schema() == agg(aggregates=a.aggregates, bounds=a.bounds).schema()
    assert a == agg(aggregates=a.aggregates, bounds=a.bounds)  # equality and hash ignore it
    assert hash(a) == hash(agg(aggregates=a.aggregates, bounds=a.bounds))


def test_histogram_key_is_a_string_bin_label() -> None:
    a = agg(keys=(GroupKey("age", edges=(0, 18, 65, 120), alias="band"),))
    assert a.schema()[0] == Field("band", "string")
    assert a.keys[0].labels() == ("[0, 18)", "[18, 65)", "[65, 120]")
    assert a.public_keys


def test_unknown_column_in_where_is_a_schema_error_naming_the_column() -> None:
    with pytest.raises(SchemaError, match="unknown column 'salary'"):
        Filter(PEOPLE, sqlglot.parse_one("salary > 3"))


def test_unknown_column_suggests_the_column_with_other_case() -> None:
    with pytest.raises(SchemaError, match="did you mean 'income'"):
        agg(aggregates=(AggregateCall("s", "sum", "Income"),))


def test_sum_of_a_string_column_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"needs a numeric column.*'state' is string"):
        agg(keys=(), aggregates=(AggregateCall("s", "sum", "state"),))


def test_count_distinct_only_on_the_privacy_unit() -> None:
    with pytest.raises(UnsupportedQueryError, match="only supported on the privacy unit"):
        agg(aggregates=(AggregateCall("d", "count_distinct", "state"),))
    ok = agg(aggregates=(AggregateCall("d", "count_distinct", "user_id"),))
    assert ok.aggregates[0].function == "count_distinct"


def test_grouping_by_the_privacy_unit_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="privacy unit 'user_id'"):
        agg(keys=(GroupKey("user_id"),))


def test_bounds_must_not_be_empty() -> None:
    with pytest.raises(BoundsError, match="lower 10 > upper 0"):
        ColumnBounds("income", 10, 0)


def test_bounds_must_be_finite() -> None:
    with pytest.raises(BoundsError, match="finite"):
        ColumnBounds("income", 0, float("inf"))


def test_bounds_are_the_exact_doubles_the_engine_clamps_to() -> None:
    b = ColumnBounds("income", 0.1, 2)
    assert b.lower == Fraction(0.1) != Fraction(1, 10)  # the double 0.1, not the decimal
    assert b.midpoint == (Fraction(0.1) + 2) / 2
    assert ColumnBounds("income", Fraction(1, 10), "2").lower == Fraction(0.1)
    assert ColumnBounds("income", 2**53 + 1, 2**60 + 1).upper == 2**60  # integral doubles
    assert ColumnBounds("income", 2**53 + 1, 2**60 + 1).lower == 2**53


def test_contribution_limits_must_be_positive_integers() -> None:
    with pytest.raises(InvalidArgumentError, match="max_groups must be a positive integer"):
        Contribution(max_groups=0)
    assert Contribution() == Contribution(1, 1)


def test_quantile_must_lie_in_unit_interval() -> None:
    with pytest.raises(InvalidArgumentError, match=r"must lie in \[0, 1\]"):
        AggregateCall("q", "quantile", "age", quantile=Fraction(3, 2))
    assert AggregateCall("lo", "min", "age").q == 0
    assert AggregateCall("hi", "max", "age").q == 1


def test_unknown_aggregate_function_is_unsupported() -> None:
    with pytest.raises(UnsupportedQueryError, match="'kurtosis' is not supported"):
        AggregateCall("x", "kurtosis", "age")  # type: ignore[arg-type]


def test_duplicate_output_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"\['n'\] used twice"):
        agg(aggregates=(AggregateCall("n", "count"), AggregateCall("n", "count")))


def test_public_domain_must_not_repeat_keys() -> None:
    with pytest.raises(InvalidArgumentError, match="repeats a key"):
        GroupKey("state", domain=("CA", "CA"))


def test_histogram_edges_must_increase() -> None:
    with pytest.raises(InvalidArgumentError, match="strictly increasing"):
        GroupKey("age", edges=(0, 10, 10))


def test_post_processing_on_private_rows_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="ORDER BY on private rows"):
        Sort(PEOPLE, (SortKey("age"),))
    with pytest.raises(UnsupportedQueryError, match="LIMIT on private rows"):
        Limit(PEOPLE, 3)


def test_where_over_an_aggregate_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="use HAVING"):
        Filter(PEOPLE, sqlglot.parse_one("SUM(income) > 3"))


def test_having_reads_only_released_columns() -> None:
    with pytest.raises(SchemaError, match="unknown column 'income'"):
        Having(agg(), sqlglot.parse_one("income > 3"))
    assert Having(agg(), sqlglot.parse_one("n > 3")).schema() == agg().schema()


def test_project_reorders_and_drops_columns() -> None:
    p = Project(agg(), ("n",))
    assert p.schema() == (Field("n", "integer"),)


def test_aggregate_of_finds_the_aggregate_and_replace_rebuilds_the_chain() -> None:
    a = agg()
    plan = Limit(Sort(a, (SortKey("n", descending=True),)), 2)
    assert aggregate_of(plan) is a
    b = agg(contribution=Contribution(max_groups=3))
    new = replace_aggregate(plan, b)
    assert isinstance(new, Limit)
    assert aggregate_of(new) is b


def test_plans_without_aggregation_are_refused_when_compiled() -> None:
    with pytest.raises(UnsupportedQueryError, match="exactly one aggregation"):
        aggregate_of(PEOPLE)


# ── hashes (a plan is a memo key on every query) ─────────────────────────────────────────────


_UNIT_KEY = GroupKey("u", edges=(0, 1, 2), per_unit=True, within=("a",))
_MODE = AggregateCall("m", "mode", "a", domain=("x", "y"))
_ONE_FIELD_APART = [
    ("column", GroupKey("a", domain=(1, 2)), GroupKey("b", domain=(1, 2), alias="a")),
    ("domain", GroupKey("a", domain=(1, 2)), GroupKey("a", domain=(1, 3))),
    ("edges", GroupKey("a", edges=(0, 1)), GroupKey("a", edges=(0, 2))),
    ("alias", GroupKey("a", domain=(1, 2)), GroupKey("a", domain=(1, 2), alias="c")),
    ("per_unit", GroupKey("u", edges=(0, 1)), GroupKey("u", edges=(0, 1), per_unit=True)),
    ("within", _UNIT_KEY, GroupKey("u", edges=(0, 1, 2), per_unit=True, within=("b",))),
    ("distinct", _UNIT_KEY, GroupKey("u", edges=(0, 1, 2), per_unit=True, within=("a",),
                                     distinct=True)),
    ("alias", _MODE, AggregateCall("n", "mode", "a", domain=("x", "y"))),
    ("function", AggregateCall("q", "min", "a"), AggregateCall("q", "max", "a")),
    ("column", _MODE, AggregateCall("m", "mode", "b", domain=("x", "y"))),
    ("quantile", AggregateCall("q", "quantile", "a", quantile=Fraction(1, 2)),
     AggregateCall("q", "quantile", "a", quantile=Fraction(1, 4))),
    ("weight", _MODE, AggregateCall("m", "mode", "a", domain=("x", "y"), weight=Fraction(2))),
    ("domain", _MODE, AggregateCall("m", "mode", "a", domain=("x", "z"))),
    ("top", AggregateCall("t", "top_k", "a", top=(1, 2)),
     AggregateCall("t", "top_k", "a", top=(2, 2))),
    ("weights", AggregateCall("w", "wsum", "a", weights="w"),
     AggregateCall("w", "wsum", "a", weights="v")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "node", "other"), _ONE_FIELD_APART)
def test_a_key_or_call_hashes_every_field(name: str, node: object, other: object) -> None:
    import dataclasses

    apart = [
        f.name
        for f in dataclasses.fields(node)  # type: ignore[arg-type]
        if getattr(node, f.name) != getattr(other, f.name)
    ]
    assert apart == [name]
    assert other != node
    assert hash(other) != hash(node)


def test_every_field_of_a_key_and_a_call_has_a_hash_case() -> None:
    import dataclasses

    for node in (GroupKey, AggregateCall):
        cases = {name for name, n, _ in _ONE_FIELD_APART if type(n) is node}
        # a new field: add it to the node's __hash__ and a case here
        assert cases == {f.name for f in dataclasses.fields(node)}


def test_keys_whose_domains_compare_equal_hash_equal_and_a_domain_hashes_once() -> None:
    ints, bools = GroupKey("a", domain=(1, 0)), GroupKey("a", domain=(True, False))
    assert ints == bools  # == conflates them: the memos add the domains' digests
    assert hash(ints) == hash(bools)
    big = tuple(range(10**5))
    key = GroupKey("a", domain=big)
    assert hash(key) == hash(GroupKey("a", domain=tuple(big)))
    assert hash(key) == hash(
        ("a", hash(big), None, "a", False, (), False)
    )  # the domain's hash, not the domain
