"""What a session reuses between identical questions: only what depends on public inputs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veil import Budget, Catalog, Result, Session, VeilError
from veil.catalog import Source
from veil.errors import InvalidArgumentError
from veil.plan.tree import aggregate_of


def test_domains_that_compare_equal_but_differ_in_type_get_their_own_plans() -> None:
    table = pa.table({"k": [1, 1, 0], "x": [1.0, 2.0, 3.0]})
    with Session.local({"t": table}, budget=Budget(epsilon=10)) as s:
        sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
        as_ints = s.plan(sql, domains={"k": [1, 0]})
        as_bools = s.plan(sql, domains={"k": [True, False]})
        assert aggregate_of(as_ints).keys[0].domain == (1, 0)
        assert aggregate_of(as_bools).keys[0].domain == (True, False)
        assert s.plan(sql, domains={"k": [1, 0]}) is as_ints  # the same inputs: reused


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0]}), path)
    with Session.local({"t": str(path)}, budget=Budget(epsilon=10)) as s:
        assert [f.name for f in s.engine.schema("t")] == ["x"]
        pq.write_table(pa.table({"x": [1.0], "y": [2.0]}), path)
        assert [f.name for f in s.engine.schema("t")] == ["x", "y"]
        e = s.explain("SELECT SUM(y) AS s FROM t", epsilon=1, bounds={"y": (0, 5)})
        assert "y" in e.sql


def test_a_lent_engine_outlives_its_session(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"uid": [1, 2, 3], "x": [1.0, 2.0, 3.0]}), path)
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    catalog.add_dataset("t", source=Source("file", path=str(path)), privacy_unit="uid")
    catalog.ledger.grant("alice", "t", Budget(epsilon=2))
    engine = catalog.open_engine("t")
    for _ in range(2):
        with Session.from_catalog(catalog, "t", analyst="alice", engine=engine) as s:
            assert s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1).rows
    assert engine.schema("t").names == ["uid", "x"]  # still open
    engine.close()


def test_a_compiled_plan_is_reused_only_for_the_same_plan_and_context() -> None:
    table = pa.table({"uid": [1, 2, 3, 3], "x": [1.0, 2.0, 3.0, 4.0]})
    sql = "SELECT SUM(x) AS s FROM t"
    opts = {"budget": Budget(epsilon=10), "privacy_unit": "uid"}
    with Session.local({"t": table}, bounds={"x": (0, 10)}, **opts) as a:
        first = a.explain(sql, epsilon=1)
        again = a.explain(sql, epsilon=1)
        assert again.usage == first.usage  # reused: the same design
        narrower = a.explain(sql, epsilon=1, bounds={"x": (0, 5)})
        cheaper = a.explain(sql, epsilon="1/2")
        more_rows = a.explain(sql, epsilon=1, max_rows_per_group=2)
    with Session.local({"t": table}, bounds={"x": (0, 20)}, **opts) as b:
        wider = b.explain(sql, epsilon=1)
    with Session.local({"t": table}, bounds={"x": (0, 10)}, budget=Budget(epsilon=10)) as c:
        per_row = c.explain(sql, epsilon=1)
    base = first.usage[0].sensitivity
    # each change of the context is compiled anew: its own sensitivity or split
    assert narrower.usage[0].sensitivity != base
    assert wider.usage[0].sensitivity != base
    assert more_rows.usage[0].sensitivity != base
    assert cheaper.cost != first.cost
    assert per_row.contribution != first.contribution


def test_domains_that_compare_equal_are_compiled_and_answered_apart() -> None:
    """1 and 1.0, 0.0 and -0.0 compare equal (and so do plans holding them), but each domain
    is its own question: its own plan, compiled plan, fingerprint and labels — never the
    other's cached answer."""
    table = pa.table({"x": [1.0, 2.0, -0.0, 0.0], "u": [1, 2, 3, 4]})
    sql = "SELECT x, COUNT(*) AS n FROM t GROUP BY x"
    with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
        for first, second in (([1.0, 2.0], [1, 2]), ([0.0, 2.0], [-0.0, 2.0])):
            a = s.sql(sql, epsilon=1, domains={"x": first})
            b = s.sql(sql, epsilon=1, domains={"x": second})
            assert not b.cached
            assert a.fingerprint != b.fingerprint
            labels = [row[0] for row in b.rows]
            assert [(type(v), repr(v)) for v in labels] == [(type(v), repr(v)) for v in second]
            again = s.sql(sql, epsilon=1, domains={"x": list(second)})
            assert again.cached  # the same domain again (another list): its own answer
            assert again.fingerprint == b.fingerprint


def test_bounds_that_compare_equal_but_differ_in_type_are_each_checked() -> None:
    import pytest

    from veil.errors import InvalidArgumentError

    table = pa.table({"x": [1.0, 2.0, 3.0]})
    sql = "SELECT SUM(x) AS s FROM t"
    with Session.local({"t": table}, budget=Budget(epsilon=10)) as s:
        first = s.explain(sql, epsilon=1, bounds={"x": (0, 1)})
        assert s.explain(sql, epsilon=1, bounds={"x": (0, 1)}).usage == first.usage
        # True == 1, but a bool is not a bound: refused, however often (0, 1) was asked
        for _ in range(2):
            with pytest.raises(InvalidArgumentError, match="upper bound of 'x' must be a number"):
                s.explain(sql, epsilon=1, bounds={"x": (0, True)})
        wider = s.explain(sql, epsilon=1, bounds={"x": (0, 1.5)})
        assert wider.usage != first.usage  # 1.5, not the remembered 1


def test_an_engine_swapped_under_a_session_is_asked_again_what_it_implements() -> None:
    table = pa.table({"x": [1.0, 2.0, 3.0]})
    with Session.local({"t": table}, budget=Budget(epsilon=10)) as s:
        first = s._engine_roles()
        assert first.preparing is s.engine
        assert first.declared
        assert s._engine_roles() is first  # decided once per engine

        class Plain:  # the narrow Engine contract only: no prepare, no declared types
            def __init__(self, inner: object) -> None:
                self._inner = inner

            def __getattr__(self, name: str) -> object:
                if name in ("prepare", "declared", "unreadable_columns", "notes"):
                    raise AttributeError(name)
                return getattr(self._inner, name)

        inner = s.engine
        s.engine = Plain(inner)  # type: ignore[assignment]
        try:
            roles = s._engine_roles()
            assert roles is not first
            assert roles.preparing is None
            assert roles.stored is None
            assert not roles.declared
            assert s.sql("SELECT SUM(x) AS s FROM t", epsilon=1, bounds={"x": (0, 5)}).rows
        finally:
            s.engine = inner


def test_a_question_at_a_new_epsilon_is_shaped_once_and_a_refusal_every_time() -> None:
    import pytest

    from veil.compile.rules import Context
    from veil.errors import BoundsError
    from veil.plan.nodes import ColumnBounds
    from veil.session import _shaped

    table = pa.table({"x": [1.0, 2.0, 3.0]})
    with Session.local({"t": table}, budget=Budget(epsilon=10)) as s:
        plan = s.plan("SELECT SUM(x) AS s FROM t")
        bounded = {"x": ColumnBounds("x", 0, 5)}
        first = _shaped(plan, Context(budget=Budget(epsilon=1), bounds=bounded))
        again = _shaped(plan, Context(budget=Budget(epsilon="1/3"), bounds=bounded))
        assert again is first  # the budget is not read before the split
        narrower = _shaped(
            plan, Context(budget=Budget(epsilon=1), bounds={"x": ColumnBounds("x", 0, 2)})
        )
        assert aggregate_of(narrower).bounds[0].upper == 2
        assert aggregate_of(first).bounds[0].upper == 5
        for _ in range(2):  # no bounds for the sum: refused each time, never remembered
            with pytest.raises(BoundsError, match="bounds for 'x'"):
                _shaped(plan, Context(budget=Budget(epsilon=1)))


def test_an_unhashable_bound_is_refused_as_any_other_non_number() -> None:
    import pytest

    from veil.errors import InvalidArgumentError

    table = pa.table({"x": [1.0, 2.0, 3.0]})
    with (
        Session.local({"t": table}, budget=Budget(epsilon=10)) as s,
        pytest.raises(
            InvalidArgumentError, match="upper bound of 'x' must be a number, got \\[5\\]"
        ),
    ):
        s.explain("SELECT SUM(x) AS s FROM t", epsilon=1, bounds={"x": (0, [5])})


def _sum_by_k(s: Session, labels: tuple[object, object], domain: list[object]) -> Result | str:
    """SUM(x) by k over ``domain``, each group bounded by its label in ``labels``: the
    answer, or the name of the refusal."""
    bounds = {"x": {labels[0]: (0, 10), labels[1]: (0, 5)}}
    sql = "SELECT k, SUM(x) AS s FROM t GROUP BY k"
    try:
        return s.sql(sql, epsilon=1, domains={"k": domain}, bounds=bounds)
    except VeilError as exc:
        return type(exc).__name__


def test_per_group_bounds_whose_labels_compare_equal_are_planned_and_compiled_apart() -> None:
    """Per-group bounds name their groups by value and type (1, 1.0 and True are different
    groups): bounds labelled 1.0 or True for the groups of a key whose domain is [1, 2] are
    refused, before or after the same bounds labelled 1 were answered — never answered (or
    refused) as the earlier, equal-comparing bounds were."""
    table = pa.table({"k": [1, 2, 1, 2], "x": [1.0, 5.0, 3.0, 4.0], "u": [1, 2, 3, 4]})
    for other in ((1.0, 2.0), (True, 2)):
        for order in (((1, 2), other), (other, (1, 2))):
            with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
                # a list, not a dict: (1, 2) and (1.0, 2.0) are one dict key
                got = [(labels, _sum_by_k(s, labels, [1, 2])) for labels in order]
            for labels, outcome in got:
                if labels is other:
                    assert outcome == "BoundsError", (order, outcome)
                else:
                    assert isinstance(outcome, Result), (order, outcome)


def test_per_group_bounds_of_a_zero_and_a_negative_zero_are_their_own_questions() -> None:
    """0.0 and -0.0 name the same group but are written apart in the fingerprint: each label
    gets its own plan, compiled plan and answer, in either order, through SQL and through a
    plan compiled with bounds given at run time."""
    table = pa.table({"k": [0.0, 2.0, 0.0], "x": [1.0, 5.0, 3.0], "u": [1, 2, 3]})
    domain: list[object] = [0.0, 2.0]
    for order in (((0.0, 2.0), (-0.0, 2.0)), ((-0.0, 2.0), (0.0, 2.0))):
        with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
            first, second = (_sum_by_k(s, labels, domain) for labels in order)
            assert isinstance(first, Result)
            assert isinstance(second, Result)
            assert not second.cached
            assert first.fingerprint != second.fingerprint
            again = _sum_by_k(s, order[1], list(domain))
            assert isinstance(again, Result)
            assert again.cached
            assert again.fingerprint == second.fingerprint
            plan = s.plan("SELECT k, SUM(x) AS s FROM t GROUP BY k", domains={"k": domain})
            runs = [s.run(plan, epsilon=1, bounds={"x": {a: (0, 10), b: (0, 5)}}) for a, b in order]
            assert [r.fingerprint for r in runs] == [first.fingerprint, second.fingerprint]


def test_bounds_pairs_that_compare_equal_are_the_same_bounds_and_booleans_are_refused() -> None:
    """(0, 10) and (0.0, 10.0) are the same exact bounds (one fingerprint, the second a cache
    hit); (False, True) compares equal to (0, 1) but is no pair of numbers: refused, before
    and after (0, 1) was answered — never answered from its memo."""
    table = pa.table({"x": [0.0, 1.0, 1.0], "u": [1, 2, 3]})
    sql = "SELECT SUM(x) AS s FROM t"
    with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
        with pytest.raises(InvalidArgumentError, match="must be a number"):
            s.sql(sql, epsilon=1, bounds={"x": (False, True)})
        ints = s.sql(sql, epsilon=1, bounds={"x": (0, 1)})
        floats = s.sql(sql, epsilon=1, bounds={"x": (0.0, 1.0)})
        assert floats.cached
        assert floats.fingerprint == ints.fingerprint
        with pytest.raises(InvalidArgumentError, match="must be a number"):
            s.sql(sql, epsilon=1, bounds={"x": (False, True)})


def test_domains_of_mixed_types_get_their_own_plans_and_the_same_inputs_reuse_one() -> None:
    table = pa.table({"x": [1.0, 2.5, 0.0], "u": [1, 2, 3]})
    sql = "SELECT x, COUNT(*) AS n FROM t GROUP BY x"
    with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
        domains = ([1, 2.5], [1.0, 2.5], [True, 2.5], [2.5, 1], [0.0, 2], [-0.0, 2])
        plans = [s.plan(sql, domains={"x": d}) for d in domains]
        for d, p in zip(domains, plans, strict=True):
            held = aggregate_of(p).keys[0].domain
            assert held is not None
            assert [(type(v), repr(v)) for v in held] == [(type(v), repr(v)) for v in d]
            assert s.plan(sql, domains={"x": list(d)}) is p  # the same values: reused
        assert len({id(p) for p in plans}) == len(domains)


def test_a_domain_marshalled_alike_but_of_other_types_is_never_answered_with_its_plan() -> None:
    """A plain domain's plan is remembered by its marshal bytes; marshal writes a NumPy scalar
    (or any buffer) as bytes, so a domain of such values is remembered value by value: the
    int64s or bytes whose bytes are those floats' are refused, not given the floats' plan."""
    import marshal

    import numpy as np

    table = pa.table({"x": [1.0, 2.0], "u": [1, 2]})
    sql = "SELECT x, COUNT(*) AS n FROM t GROUP BY x"
    with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
        floats = [np.float64(1.0), np.float64(2.0)]
        plan = s.plan(sql, domains={"x": floats})
        assert s.plan(sql, domains={"x": list(floats)}) is plan  # remembered, value by value
        plain = s.plan(sql, domains={"x": [1.0, 2.0]})
        assert plain is not plan
        assert s.plan(sql, domains={"x": [1.0, 2.0]}) is plain
        as_tuple = s.plan(sql, domains={"x": (1.0, 2.0)})
        assert aggregate_of(as_tuple).keys == aggregate_of(plain).keys
        for alike in ([f.view(np.int64) for f in floats], [f.tobytes() for f in floats]):
            assert marshal.dumps(alike, 2) == marshal.dumps(floats, 2)
            with pytest.raises(InvalidArgumentError, match="must hold str/int/float/bool/None"):
                s.plan(sql, domains={"x": alike})


def test_a_domain_marshal_refuses_is_remembered_value_by_value() -> None:
    """A str subclass is not written by marshal: such a domain is keyed by its values and
    their types, its own plan (apart from the plain strings') and reused."""

    class Label(str):
        __slots__ = ()

    table = pa.table({"k": ["a", "b"], "u": [1, 2]})
    sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
    with Session.local({"t": table}, budget=Budget(epsilon=10), privacy_unit="u") as s:
        labelled = s.plan(sql, domains={"k": [Label("a"), "b"]})
        assert s.plan(sql, domains={"k": [Label("a"), "b"]}) is labelled
        plain = s.plan(sql, domains={"k": ["a", "b"]})
        assert plain is not labelled
        held = aggregate_of(labelled).keys[0].domain
        assert held is not None
        assert type(held[0]) is Label
