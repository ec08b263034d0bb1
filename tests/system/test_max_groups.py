"""The rows contribution bounding keeps, against its definition evaluated in Python.

Each unit (all rows with a NULL unit are one unit) keeps its first ``max_groups`` groups in
the keyed-hash order of its (unit, group) pairs, ties broken by the keys (NULL keys are a group,
sorted last), and in each kept group its first ``max_rows_per_group`` rows in the keyed
row-hash order; with ``max_rows`` T below G·R, then its first T of those rows in the row-hash
order, ties by the row's rank in its group. (G = R = 1 keeps each unit's first row.) The
lowering leaves out a bound the others imply (no group rank when T ≤ G, no row bound when
R ≥ T): the model does the same. The rows are compared as a multiset of (unit, keys, value,
rank in group), so the exact statistics — functions of those rows — are the same too.

The hashes the model orders by are read from DuckDB with the lowering's expressions
(``HASH(salt, HASH(salt, unit, keys…))``, ``HASH(salt, HASH(salt, unit, keys…, value))``). A
weak group hash (three values) makes most of a unit's groups tie, so the tie-break by the keys
— NULL keys included — decides which are kept.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

from system.prenoise import compile_query
from veil import Budget
from veil.compile import dialect, lower, to_sql
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Aggregate, Contribution

SALTS = (11, 0x5EED_F00D_1234)
LIMITS = [
    pytest.param(Contribution(g, r, t), id=f"G{g}-R{r}-T{t}")
    for g, r, t in (
        (1, 1, None), (2, 1, None), (3, 1, None), (5, 1, None), (1, 3, None), (2, 2, None),
        (3, 3, None), (3, 3, 5), (2, 3, 4), (3, 2, 2), (4, 1, 3), (2, 4, 3),
    )
]  # fmt: skip
# the group hash (inner arity 4 with two keys: salt, unit, g, h) takes three values; the row
# hash (arity 5) and the outer hash (arity 2) are DuckDB's own
WEAK = (
    "CREATE MACRO weak_hash(a, b) AS hash(a, b), (a, b, c, d) AS hash(a, b, c, d) % 3, "
    "(a, b, c, d, e) AS hash(a, b, c, d, e)"
)


def people(seed: int) -> pd.DataFrame:
    """Units of 1–9 rows over keys g (five letters and NULL) and h (0, 1 and NULL); values of
    four kinds, so identical rows (ties in the row hash) are common; every 13th unit's rows
    have a NULL unit (together, one unit of many groups); a few NULL and NaN values (left out
    by the NULL rule)."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[Any, ...]] = []
    for uid in range(240):
        unit = None if uid % 13 == 0 else uid
        for _ in range(1 + int(rng.integers(0, 9))):
            g = ("a", "b", "c", "d", "e", None)[int(rng.integers(0, 6))]
            h = (0, 1, None)[int(rng.integers(0, 3))]
            x: float | None = float(rng.integers(0, 4))
            if rng.random() < 0.02:
                x = None if rng.random() < 0.5 else float("nan")
            rows.append((unit, g, h, x))
    frame = pd.DataFrame(rows, columns=["uid", "g", "h", "x"])
    return frame.astype({"uid": "Int64", "g": "string", "h": "Int64", "x": "float64"})


Row = tuple[Any, ...]  # (unit, keys…, value, rank in group)


def _kept_by_definition(
    table: pd.DataFrame, keys: Sequence[str], c: Contribution, salt: int, hash_function: str
) -> Counter[Row]:
    con = duckdb.connect()
    con.execute(WEAK)
    con.register("t", table)
    k = ", ".join(keys)
    h = hash_function
    rows = con.sql(
        f"SELECT uid, {k}, x, {h}({salt}, {h}({salt}, uid, {k})) AS gh, "
        f"{h}({salt}, {h}({salt}, uid, {k}, x)) AS rh FROM t "
        "WHERE x IS NOT NULL AND NOT isnan(x)"
    ).fetchall()
    g, r, t = c.max_groups, c.max_rows_per_group, c.max_rows
    one = g == 1 and r == 1
    total = t is not None and not one and t < g * r  # the keys are unknown: any G is possible
    group_bound = not one and not (total and t is not None and g >= t)
    row_bound = not (total and t is not None and r >= t)
    units: dict[Any, list[Row]] = defaultdict(list)
    for row in rows:
        units[row[0]].append(row)  # None: the rows without a unit are one unit
    kept: Counter[Row] = Counter()
    width = len(keys)
    for unit_rows in units.values():
        if one:  # the unit's first row in the row-hash order
            first = min(unit_rows, key=lambda row: row[-1])
            kept[(*first[: 2 + width], 1)] += 1
            continue
        groups: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
        for row in unit_rows:
            groups[tuple(row[1 : 1 + width])].append(row)

        def order(key: tuple[Any, ...], members: dict[tuple[Any, ...], list[Row]] = groups) -> Any:
            # the group hash, then the keys, NULL last (DuckDB's ascending order)
            return (members[key][0][-2], *((v is None, v) for v in key))

        ranked = sorted(groups, key=order)
        if group_bound:
            ranked = ranked[:g]
        chosen: list[tuple[Row, int]] = []
        for key in ranked:
            members = sorted(groups[key], key=lambda row: row[-1])
            if row_bound:
                members = members[:r]
            chosen += [(row, rn) for rn, row in enumerate(members, 1)]
        if total and t is not None:
            chosen = sorted(chosen, key=lambda pair: (pair[0][-1], pair[1]))[:t]
        for row, rn in chosen:
            kept[(*row[: 2 + width], rn)] += 1
    return kept


def _kept_by_lowering(
    engine: DuckDBEngine, table: pd.DataFrame, agg: Aggregate, salt: int, hash_function: str
) -> Counter[Row]:
    d = dataclasses.replace(dialect("duckdb"), hash_function=hash_function)
    main = lower(agg, d, salt=salt).main.copy()
    columns = ["__unit", *(f"__k{i}" for i in range(len(agg.keys))), "__x0", "__rn"]
    main.set("expressions", [exp.column(c, quoted=True) for c in columns])
    main.set("group", None)  # the bounded rows themselves, not their statistics
    con = duckdb.connect()
    con.execute(WEAK)
    con.register("t", table)
    return Counter(con.sql(to_sql(main, "duckdb")).fetchall())


@pytest.mark.parametrize("contribution", LIMITS)
@pytest.mark.parametrize(
    ("keys", "hash_function"),
    [
        pytest.param(("g",), "HASH", id="one-key"),
        pytest.param(("g", "h"), "HASH", id="two-keys"),
        pytest.param(("g", "h"), "weak_hash", id="two-keys-tied-groups"),
    ],
)
def test_each_unit_keeps_the_rows_of_its_first_groups_as_defined(
    keys: tuple[str, ...], hash_function: str, contribution: Contribution
) -> None:
    table = people(seed=len(keys) + contribution.max_groups)
    engine = DuckDBEngine({"t": table})
    by = ", ".join(keys)
    agg = compile_query(
        engine,
        f"SELECT {by}, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY {by}",
        budget=Budget(epsilon=1, delta=1e-6),
        bounds={"x": (0.0, 3.0)},
        privacy_unit="uid",
        contribution=contribution,
    )
    for salt in SALTS:
        want = _kept_by_definition(table, keys, contribution, salt, hash_function)
        got = _kept_by_lowering(engine, table, agg, salt, hash_function)
        assert got == want, (
            salt,
            sorted((got - want).items())[:5],
            sorted((want - got).items())[:5],
        )
        assert any(row[0] is None for row in got)  # the rows without a unit are one unit
        assert any(None in row[1 : 1 + len(keys)] for row in got)  # NULL keys are a group
