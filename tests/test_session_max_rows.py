"""``max_rows`` and ``contributions=k`` through the public surface: Session arguments, per-query
options, the builder, the catalog (an analyst may narrow, never widen), the CLI, perturbation —
and every refusal decided before anything is charged."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from cli_support import invoke
from support import SeededSource
from veil import Budget, Catalog, Session
from veil.accounting.conversions import group_privacy
from veil.catalog import Source
from veil.compile.statistics import reach
from veil.errors import InvalidArgumentError
from veil.plan.nodes import Contribution
from veil.plan.tree import aggregate_of

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
BOUNDS = {"x": (0.0, 10.0)}


def table() -> pa.Table:
    uid = [u for u in range(60) for _ in range(1 + u % 9)]
    return pa.table(
        {
            "uid": uid,
            "g": ["abc"[(u + i) % 3] for i, u in enumerate(uid)],
            "x": [float(i % 11) for i in range(len(uid))],
        }
    )


def session(**options: Any) -> Session:
    options.setdefault("budget", Budget(epsilon=10, delta=1e-5))
    return Session.local({"t": table()}, **options)


def contribution(s: Session, **options: Any) -> Contribution:
    e = s.explain(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS, **options)
    return aggregate_of(e.plan).contribution


def test_max_rows_alone_bounds_groups_and_rows_by_itself() -> None:
    with session(privacy_unit="uid", max_rows=4) as s:
        assert contribution(s) == Contribution(4, 4, 4)
        e = s.explain(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS)
        assert e.contribution == (
            "privacy unit uid: at most 4 group(s) and 4 row(s) per group, 4 row(s) in all"
        )
        assert "L1 = 4 rows" in str(e)
        r = s.sql(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS, source=SeededSource(3))
        assert r.cost == Budget(epsilon=1, delta=1e-6)


def test_the_three_bounds_together_and_per_query_narrowing() -> None:
    with session(privacy_unit="uid", max_groups=3, max_rows_per_group=5, max_rows=8) as s:
        assert contribution(s) == Contribution(3, 5, 8)
        assert "L1 = 8 rows" in str(s.explain(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS))
        # a limit the query does not give keeps the session's
        assert contribution(s, max_rows=6) == Contribution(3, 5, 6)
        assert contribution(s, max_groups=1) == Contribution(1, 5, 8)
    with session(privacy_unit="uid") as s:  # nothing declared: a total per query bounds alone
        assert contribution(s, max_rows=2) == Contribution(2, 2, 2)


def test_the_builder_takes_the_sessions_max_rows() -> None:
    with session(privacy_unit="uid", max_groups=2, max_rows_per_group=3, max_rows=4) as s:
        q = s.query("t").group_by("g").count("n").sum("x", alias="s")
        e = q.explain(epsilon=1, delta=1e-6, bounds=BOUNDS)
        assert aggregate_of(e.plan).contribution == Contribution(2, 3, 4)
        e = q.explain(epsilon=1, delta=1e-6, bounds=BOUNDS, max_rows=2)
        assert aggregate_of(e.plan).contribution == Contribution(2, 3, 2)


def test_contributions_declare_rows_per_person_without_an_id_column() -> None:
    with session(contributions=36) as s:
        e = s.explain(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS)
        agg = aggregate_of(e.plan)
        assert agg.privacy_unit is None
        assert reach(agg).total == 36
        assert "each person: at most 36 row(s), declared (contributions=36" in e.contribution
        assert "L1 = 36 rows" in str(e)
        assert "≤ 36 group(s) per unit, ≤ 36 row(s) each" in str(e)  # partition selection


REFUSALS = [
    ({"privacy_unit": "uid", "max_rows": 0}, "max_rows must be a positive integer, got 0"),
    ({"privacy_unit": "uid", "max_rows": True}, "max_rows must be a positive integer"),
    ({"privacy_unit": "uid", "max_rows": "8"}, "max_rows must be a positive integer"),
    ({"max_rows": 5}, r"max_rows=5 bounds the rows of a privacy unit, but none is declared"),
    ({"privacy_unit": "uid", "contributions": 5}, r"pass max_rows=5 instead"),
    ({"contributions": 0}, "max_rows must be a positive integer, got 0"),
]


@pytest.mark.parametrize(("options", "message"), REFUSALS)
def test_bad_limits_are_refused_when_the_session_opens(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        session(**options)


@pytest.mark.parametrize(
    ("opened", "asked", "message"),
    [
        ({"privacy_unit": "uid"}, {"max_rows": 0}, "max_rows must be a positive integer"),
        ({}, {"max_rows": 3}, "max_rows=3 bounds the rows of a privacy unit"),
        ({"contributions": 3}, {"max_rows": 1}, "for a table without an id column declare"),
    ],
)
def test_bad_per_query_limits_are_refused_free(
    opened: dict[str, Any], asked: dict[str, Any], message: str
) -> None:
    with session(**opened) as s:
        before = s.remaining()
        with pytest.raises(InvalidArgumentError, match=message):
            s.sql(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS, **asked)
        assert s.remaining() == before


@pytest.fixture
def people(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    return path


def owner(tmp_path: Path, people: Path, **limits: Any) -> Catalog:
    c = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    c.add_dataset("t", source=Source("file", path=str(people)), bounds={"x": (0, 10)}, **limits)
    c.ledger.grant("alice", "t", Budget(epsilon=5, delta=1e-5))
    return c


def test_an_analyst_may_narrow_the_owners_max_rows_never_widen_it(
    tmp_path: Path, people: Path
) -> None:
    c = owner(tmp_path, people, privacy_unit="uid", max_groups=3, max_rows_per_group=5, max_rows=8)
    assert c.dataset("t").max_rows == 8
    assert Catalog(c.ledger).dataset("t").public()["max_rows"] == 8
    with Session.from_catalog(c, "t", analyst="alice") as s:
        assert contribution(s) == Contribution(3, 5, 8)
        assert contribution(s, max_rows=2) == Contribution(3, 5, 2)
        before = s.remaining()
        with pytest.raises(InvalidArgumentError, match="max_rows=9 raises the owner's limit of 8"):
            s.sql(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS, max_rows=9)
        assert s.remaining() == before


def test_a_total_the_owner_did_not_set_is_always_a_narrowing(tmp_path: Path, people: Path) -> None:
    c = owner(tmp_path, people, privacy_unit="uid", max_groups=3, max_rows_per_group=5)
    assert "max_rows" not in c.dataset("t").to_json()  # old entries read back unchanged
    with Session.from_catalog(c, "t", analyst="alice") as s:
        # max_rows alone per query keeps the owner's G and R: it never widens them to T
        assert contribution(s, max_rows=12) == Contribution(3, 5, 12)
        # … and one above G × R = 15 would bound nothing: refused, free, with the fix
        with pytest.raises(
            InvalidArgumentError,
            match=r"max_rows=20 bounds nothing here: the "
            r"data owner's limits max_groups=3 × max_rows_per_group=5",
        ):
            contribution(s, max_rows=20)


def test_an_owner_declares_contributions_for_a_table_without_an_id(
    tmp_path: Path, people: Path
) -> None:
    c = owner(tmp_path, people, contributions=9)
    assert c.dataset("t").max_rows == 9
    with Session.from_catalog(c, "t", analyst="alice") as s:
        assert reach(aggregate_of(s.explain(SQL, epsilon=1, delta=1e-6).plan)).total == 9
        before = s.remaining()
        with pytest.raises(InvalidArgumentError, match="max_rows=1 bounds the rows of a privacy"):
            s.sql(SQL, epsilon=1, delta=1e-6, max_rows=1)  # lowering a fact would be a lie
        assert s.remaining() == before


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"privacy_unit": "uid", "contributions": 3}, "pass max_rows=3"),
        ({"max_rows": 3}, "declare privacy_unit=… or contributions=3"),
        ({"privacy_unit": "uid", "max_rows": 0}, "max_rows must be a positive integer"),
    ],
)
def test_the_catalog_refuses_inconsistent_limits(
    tmp_path: Path, people: Path, limits: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        owner(tmp_path, people, **limits)


def test_the_cli_takes_max_rows_and_contributions(tmp_path: Path, people: Path) -> None:
    base = ["--table", f"t={people}", "--epsilon", "1", "--delta", "1e-6", "--bounds", "x=0:10"]
    code, out, _ = invoke(
        "explain", SQL, *base, "--privacy-unit", "uid", "--max-rows", "3", "--format", "json"
    )
    assert code == 0, out
    assert "3 row(s) in all" in json.loads(out)["contribution"]
    code, out, _ = invoke("explain", SQL, *base, "--contributions", "4", "--format", "json")
    assert code == 0, out
    assert "contributions=4" in json.loads(out)["contribution"]
    code, out, err = invoke("query", SQL, *base, "--max-rows", "3")
    assert code != 0
    assert "--max-rows 3 bounds the rows of a privacy unit" in out + err
    assert "--privacy-unit user_id" in out + err


def test_the_cli_registers_and_shows_max_rows(tmp_path: Path, people: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'cli.db'}"
    code, out, _ = invoke(
        "catalog", "add", "t", "--ledger", ledger, "--path", str(people), "--privacy-unit", "uid",
        "--max-groups", "3", "--max-rows-per-group", "5", "--max-rows", "8",
    )  # fmt: skip
    assert code == 0, out
    code, out, _ = invoke("catalog", "show", "--ledger", ledger, "--format", "json")
    (shown,) = json.loads(out)["datasets"]
    assert (shown["max_groups"], shown["max_rows_per_group"], shown["max_rows"]) == (3, 5, 8)
    code, out, err = invoke(
        "catalog", "add", "u", "--ledger", ledger, "--path", str(people), "--max-rows", "8"
    )
    assert code != 0
    assert "--max-rows needs --privacy-unit" in out + err


def test_group_privacy_converts_each_kind_of_loss() -> None:
    assert group_privacy(Budget(epsilon="1/2"), 4) == Budget(epsilon=2)
    assert group_privacy(Budget(rho="1/10"), 3) == Budget(rho="9/10")
    assert group_privacy(Budget(epsilon=1, delta=1e-6), 1) == Budget(epsilon=1, delta=1e-6)
    approx = group_privacy(Budget(epsilon="1/2", delta="1/1000000000"), 3)
    assert approx.eps == Fraction(3, 2)
    exact = 3 * 2.718281828459045 * 1e-9  # k·e^((k−1)ε)·δ, e^1
    assert exact <= float(approx.delta) <= exact * (1 + 1e-11)
    with pytest.raises(InvalidArgumentError, match=r"≥ 1, which protects nothing"):
        group_privacy(Budget(epsilon=1, delta="1/10"), 10)
    with pytest.raises(InvalidArgumentError, match="k must be an integer ≥ 1"):
        group_privacy(Budget(epsilon=1), 0)


def test_perturbing_a_table_of_k_rows_per_person_charges_k_epsilon() -> None:
    t = pa.table({"x": [1.0, 2.0, 3.0, 4.0]})
    with Session.local({"t": t}, budget=Budget(epsilon=10), contributions=3) as s:
        out = veil.perturb(t, epsilon="1/2", bounds={"x": (0, 5)}, session=s)
        assert out.loss == Budget(epsilon="3/2")
        assert s.remaining() == Budget(epsilon="17/2")


def test_a_toml_catalog_declares_max_rows_and_contributions(tmp_path: Path, people: Path) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(
        f"""
[[datasets]]
name = "t"
source = {{ kind = "file", path = "{people.name}" }}
privacy_unit = "uid"
max_groups = 3
max_rows_per_group = 5
max_rows = 8

[[datasets]]
name = "rows"
source = {{ kind = "file", path = "copy.parquet" }}
contributions = 4
""",
        encoding="utf-8",
    )
    (tmp_path / "copy.parquet").write_bytes(people.read_bytes())
    c = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    t, rows = c.load_toml(config)
    c.load_toml(config)  # idempotent: the stored max_rows reads back the same
    assert (t.max_groups, t.max_rows_per_group, t.max_rows) == (3, 5, 8)
    assert (rows.privacy_unit, rows.max_rows) == (None, 4)
