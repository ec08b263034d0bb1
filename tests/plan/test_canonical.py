from __future__ import annotations

import json

import pytest
import sqlglot

from support import people
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Filter,
    GroupKey,
    PlanVisitor,
    Scan,
    canonical,
    fingerprint,
)
from veil.plan.nodes import Having, Limit, Project, Sort

PEOPLE = people("user_id", "age")


def build(predicate: str = "age > 3", upper: float = 100, max_groups: int = 1) -> Aggregate:
    return Aggregate(
        Filter(PEOPLE, sqlglot.parse_one(predicate)),
        keys=(GroupKey("age", edges=(0, 50, 100)),),
        aggregates=(AggregateCall("n", "count"),),
        privacy_unit="user_id",
        contribution=Contribution(max_groups=max_groups),
        bounds=(ColumnBounds("age", 0, upper),),
    )


def test_equal_plans_have_equal_fingerprints() -> None:
    assert fingerprint(build()) == fingerprint(build())
    assert fingerprint(build(predicate="age>3")) == fingerprint(build(predicate="age  >  3"))


def test_any_change_changes_the_fingerprint() -> None:
    base = fingerprint(build())
    assert fingerprint(build(predicate="age > 4")) != base
    assert fingerprint(build(upper=101)) != base
    assert fingerprint(build(max_groups=2)) != base


def test_canonical_form_is_json_with_exact_numbers() -> None:
    form = canonical(build(upper=0.1))
    text = json.dumps(form)
    assert '"3602879701896397/36028797018963968"' in text  # the double 0.1, exactly
    assert json.loads(text) == form


def test_a_visitor_missing_a_node_cannot_be_instantiated() -> None:
    class Partial(PlanVisitor[int]):
        def visit_scan(self, node: Scan) -> int:
            return 0

    with pytest.raises(TypeError, match="visit_aggregate"):
        Partial()  # type: ignore[abstract]


def test_every_node_kind_appears_in_the_canonical_form() -> None:
    from veil.plan import SortKey

    plan = Project(
        Limit(Sort(Having(build(), sqlglot.parse_one("n > 1")), (SortKey("n"),)), 3), ("n",)
    )
    text = json.dumps(canonical(plan))
    for node in ("project", "limit", "sort", "having", "aggregate", "filter", "scan"):
        assert f'"node": "{node}"' in text


def _whole_form_fingerprint(agg: Aggregate) -> str:
    """The measurement fingerprint by its definition: the SHA-256 of the whole positional
    form's sorted, compact JSON."""
    import hashlib

    from veil.plan.canonical import FORMAT_VERSION, _Canonical

    visitor = _Canonical()
    visitor.positional = True
    form = {"veil_measurement": FORMAT_VERSION, "root": visitor.visit(agg)}
    text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_measurement_fingerprint_is_the_hash_of_its_whole_form_asked_again() -> None:
    import dataclasses

    from veil.accounting.budget import Budget
    from veil.plan.canonical import measurement_fingerprint

    keyed = Aggregate(
        Filter(PEOPLE, sqlglot.parse_one("age > 3")),
        keys=(GroupKey("age", domain=(1, 2, 3)),),
        aggregates=(AggregateCall("n", "count"), AggregateCall("s", "sum", "age")),
        privacy_unit="user_id",
        bounds=(ColumnBounds("age", 0, 100),),
    )
    for agg in (build(), keyed, dataclasses.replace(keyed, budget=Budget(epsilon=1))):
        # twice: the second time from what the first remembered
        assert measurement_fingerprint(agg) == _whole_form_fingerprint(agg)
        assert measurement_fingerprint(agg) == _whole_form_fingerprint(agg)
    # keys equal to the remembered ones but of other types are written again, not reused
    as_bools = dataclasses.replace(keyed, keys=(GroupKey("age", domain=(True, 2, 3)),))
    assert measurement_fingerprint(as_bools) == _whole_form_fingerprint(as_bools)
    assert measurement_fingerprint(as_bools) != measurement_fingerprint(
        dataclasses.replace(keyed, keys=(GroupKey("age", domain=(1, 2, 3)),))
    )
