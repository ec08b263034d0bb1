"""The release stage's invariants: each broken one is an ``InternalError`` (a bug, nothing of the
data in its message); and the small decisions of keys, post-processing, quantiles and draws."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from fractions import Fraction
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot

import support
from support import SeededSource, people
from veil.compile import dialect, lower
from veil.errors import InternalError, SchemaError
from veil.plan import (
    Aggregate,
    AggregateCall,
    Field,
    GroupKey,
    Scan,
)
from veil.plan.nodes import ColumnType, Having, Limit, Project, Sort, SortKey
from veil.release.consistency import consistent_counts
from veil.release.draw import Measured, measure
from veil.release.estimators import check_models, column_models
from veil.release.exact import bucket_counts, exact_stats, may_wrap
from veil.release.keys import decode_key, group_keys, released_key
from veil.release.post import post_process
from veil.release.quantiles import choose_quantile, split_together

PEOPLE = people("user_id", "state", "age", "income", "born")
STATES = (GroupKey("state", domain=("CA", "NY")),)


compiled = partial(
    support.compiled,
    aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "income")),
    keys=STATES,
    table=PEOPLE,
)


AGG = compiled()
SUM = next(m for m in AGG.measurements if m.statistic == "sum")
COLUMNS = {"count": "__n", SUM.name: "__m1"}


def engine_table(states: list[object], n: list[int], sums: list[object]) -> pa.Table:
    return pa.table(
        {"__k0": pa.array(states), "__n": pa.array(n, pa.int64()), "__m1": pa.array(sums)}
    )


# ── exact statistics ────────────────────────────────────────────────────────────────────────


def test_exact_statistics_are_keyed_by_the_public_key_index() -> None:
    table = engine_table(["NY", "CA"], [3, 0], [5, None])
    stats = exact_stats(AGG, table, COLUMNS, ["__k0"])
    # an empty group's SUM over no rows is NULL: 0
    assert stats == {(1,): {"count": 3, SUM.name: 5}, (0,): {"count": 0, SUM.name: 0}}


def test_a_group_returned_twice_is_an_internal_error() -> None:
    table = engine_table(["CA", "CA"], [1, 1], [0, 0])
    with pytest.raises(InternalError, match="returned one group twice"):
        exact_stats(AGG, table, COLUMNS, ["__k0"])


def test_a_null_statistic_in_a_non_empty_group_is_an_internal_error() -> None:
    table = engine_table(["CA"], [2], pa.array([None], pa.int64()))
    with pytest.raises(InternalError, match="non-empty group came back NULL"):
        exact_stats(AGG, table, COLUMNS, ["__k0"])


def test_a_sum_outside_rows_times_limit_is_an_internal_error() -> None:
    table = engine_table(["CA"], [2], [2 * SUM.limit + 1])
    with pytest.raises(InternalError, match=r"outside ±rows·limit: an integer overflow"):
        exact_stats(AGG, table, COLUMNS, ["__k0"])
    # on the bound itself it is fine
    edge = engine_table(["CA"], [2], [-2 * SUM.limit])
    assert exact_stats(AGG, edge, COLUMNS, ["__k0"])[(0,)][SUM.name] == -2 * SUM.limit


def test_an_exact_decimal_sum_is_read_as_an_integer() -> None:
    table = engine_table(["CA"], [1], pa.array([Decimal(7)], pa.decimal128(38, 0)))
    assert exact_stats(AGG, table, COLUMNS, ["__k0"])[(0,)][SUM.name] == 7


def test_a_non_integral_decimal_statistic_is_an_internal_error() -> None:
    table = engine_table(["CA"], [1], pa.array([Decimal("7.5")], pa.decimal128(38, 1)))
    with pytest.raises(InternalError, match=r"came back as 7\.5"):
        exact_stats(AGG, table, COLUMNS, ["__k0"])


def test_a_float_statistic_is_an_internal_error() -> None:
    table = engine_table(["CA"], [1], [7.0])
    with pytest.raises(InternalError, match=r"came back as 7\.0"):
        exact_stats(AGG, table, COLUMNS, ["__k0"])


def test_sums_may_wrap_only_once_rows_times_limit_reaches_2_to_63() -> None:
    limit = SUM.limit
    below = engine_table(["CA"], [(1 << 63) // limit], [0])
    above = engine_table(["CA"], [(1 << 63) // limit + 1], [0])
    assert not may_wrap(AGG, below)
    assert may_wrap(AGG, above)
    assert not may_wrap(AGG, engine_table([], [], pa.array([], pa.int64())))
    counts_only = compiled(aggregates=(AggregateCall("n", "count"),))
    assert not may_wrap(counts_only, above)


def test_bucket_counts_are_grouped_by_key_then_bucket() -> None:
    table = pa.table({"__k0": ["CA", "NY", "CA"], "__b": [3, 1, 0], "__c": [2, 9, 4]})
    got = bucket_counts(AGG, table, ["__k0"])
    assert {k: dict(zip(b.tolist(), c.tolist(), strict=True)) for k, (b, c) in got.items()} == {
        (0,): {0: 4, 3: 2},
        (1,): {1: 9},
    }


@pytest.mark.parametrize(
    ("top", "most"),
    [(2**32, 20), (2**32, 2**40), (7, 3), (1, 1), (2**40, 2**20)],
    ids=["fine-grid", "huge-count-unpacked", "small", "one-cell", "too-wide-to-pack"],
)
def test_bucket_counts_equal_a_dictionary_of_every_cell(top: int, most: int) -> None:
    """Packed sorting (group, cell, count in one integer) and the argsort fallback (a count or
    cell too wide to pack) both give every group's cells ascending with their own counts,
    over NULL and string keys and a chunked table, in any row order."""
    rng = np.random.default_rng(5)  # test data, not noise
    keys = [None, "CA", "NY", "TX", "z" * 30]
    pairs = {(keys[int(rng.integers(0, 5))], int(rng.integers(0, top))) for _ in range(3000)}
    want: dict[object, dict[int, int]] = {}
    rows = []
    for key, cell in sorted(pairs, key=lambda p: (str(p[0]), p[1])):
        count = int(rng.integers(1, most + 1))
        want.setdefault(key, {})[cell] = count
        rows.append((key, cell, count))
    rows = [rows[i] for i in rng.permutation(len(rows))]
    k, b, c = zip(*rows, strict=True)
    half = len(rows) // 2
    table = pa.Table.from_batches(
        [
            pa.record_batch({"__k0": pa.array(k[:half], pa.string()), "__b": b[:half],
                             "__c": c[:half]}),
            pa.record_batch({"__k0": pa.array(k[half:], pa.string()), "__b": b[half:],
                             "__c": c[half:]}),
        ]
    )  # fmt: skip
    unknown = compiled(keys=(GroupKey("state"),))
    got = bucket_counts(unknown, table, ["__k0"])
    assert {
        key: dict(zip(b.tolist(), c.tolist(), strict=True)) for (key,), (b, c) in got.items()
    } == want
    for cells, _ in got.values():
        assert bool(np.all(cells[1:] > cells[:-1]))


@pytest.mark.parametrize(
    ("top", "most"),
    [(2**32, 3), (2**32, 1), (2**61, 3)],
    ids=["packed", "packed-rows-of-one", "too-wide-to-pack"],
)
def test_bucket_counts_add_up_a_cell_that_comes_in_several_rows(top: int, most: int) -> None:
    """DuckDB's one statement ships a fine grid's cells as one row per bounded row
    (``cells_as_rows``, every count 1): each (group, cell) is returned once with the sum of
    its rows' counts, on the packed path (rows that all count 1 are counted, not added) and
    on the fallback."""
    rng = np.random.default_rng(3)  # test data, not noise
    keys = ["CA", "NY", None]
    want: dict[object, dict[int, int]] = {}
    rows = []
    for _ in range(2000):
        key, cell = keys[int(rng.integers(0, 3))], int(rng.integers(0, 40)) * (top // 64)
        count = int(rng.integers(1, most + 1))
        want.setdefault(key, {})[cell] = want.get(key, {}).get(cell, 0) + count
        rows.append((key, cell, count))
    k, b, c = zip(*rows, strict=True)
    table = pa.table({"__k0": pa.array(k, pa.string()), "__b": b, "__c": c})
    got = bucket_counts(compiled(keys=(GroupKey("state"),)), table, ["__k0"])
    read = {key: dict(zip(b.tolist(), c.tolist(), strict=True)) for (key,), (b, c) in got.items()}
    assert read == want
    assert sum(len(v) for v in want.values()) < len(rows)  # cells did repeat
    for cells, _ in got.values():
        assert bool(np.all(cells[1:] > cells[:-1]))


def test_bucket_counts_count_the_few_repeats_of_mostly_distinct_rows_of_one() -> None:
    """A fine grid's rows of one (``cells_as_rows``) are nearly all distinct: the repeats are
    counted where they are (the k-th repeat belongs to the distinct value before it), a cell
    repeated three times and a repeat at a group's first cell included."""
    rng = np.random.default_rng(5)  # test data, not noise
    rows = [
        (["CA", "NY"][int(rng.integers(0, 2))], int(rng.integers(0, 2**32))) for _ in range(3000)
    ]
    rows += [rows[0], rows[0], rows[7], ("NY", 0), ("NY", 0), ("CA", 2**32 - 1)]
    want: dict[object, dict[int, int]] = {}
    for key, cell in rows:
        want.setdefault(key, {})[cell] = want.get(key, {}).get(cell, 0) + 1
    k, b = zip(*rng.permutation(np.array(rows, dtype=object)).tolist(), strict=True)
    table = pa.table({"__k0": pa.array(k, pa.string()), "__b": b, "__c": [1] * len(rows)})
    got = bucket_counts(compiled(keys=(GroupKey("state"),)), table, ["__k0"])
    read = {key: dict(zip(b.tolist(), c.tolist(), strict=True)) for (key,), (b, c) in got.items()}
    assert read == want
    assert max(c for cells in want.values() for c in cells.values()) == 3


@pytest.mark.parametrize("encoded", [False, True], ids=["plain-keys", "dictionary-keys"])
def test_bucket_counts_read_every_key_of_two_key_columns(encoded: bool) -> None:
    """Two key columns (one with NULLs), plain or dictionary-encoded as ``split_together``
    hands them over: each group's keys are read back from its code (a mixed-radix number of
    the two columns' codes), never mixed up between groups."""
    rng = np.random.default_rng(11)  # test data, not noise
    first, second = [None, "CA", "NY"], ["a", "b", None, "c"]
    want: dict[tuple[object, object], dict[int, int]] = {}
    rows = []
    for _ in range(500):
        key = (first[int(rng.integers(0, 3))], second[int(rng.integers(0, 4))])
        cell = int(rng.integers(0, 1000))
        if cell in want.setdefault(key, {}):
            continue
        want[key][cell] = int(rng.integers(1, 50))
        rows.append((*key, cell, want[key][cell]))
    k0, k1, b, c = zip(*rows, strict=True)
    columns = [pa.array(k0, pa.string()), pa.array(k1, pa.string())]
    if encoded:
        columns = [pc.dictionary_encode(a, null_encoding="encode") for a in columns]
    table = pa.table({"__k0": columns[0], "__k1": columns[1], "__b": b, "__c": c})
    two = compiled(keys=(GroupKey("state"), GroupKey("born")))
    got = bucket_counts(two, table, ["__k0", "__k1"])
    read = {key: dict(zip(b.tolist(), c.tolist(), strict=True)) for key, (b, c) in got.items()}
    assert read == want


@pytest.mark.parametrize("encoded", [False, True], ids=["plain-keys", "dictionary-keys"])
def test_a_listed_column_splits_into_one_list_of_cells_per_group(encoded: bool) -> None:
    """DuckDB's one statement lists a fine grid's cells per group (``Lowered.listed``):
    ``split_together`` keeps the group rows as ``main`` and each list beside its group's keys
    (plain, or dictionary-encoded as an ENUM arrives), which ``bucket_counts`` reads as each
    group's rows — counted, a repeated cell once with its count; a NULL list (a query
    without GROUP BY over no rows) has no cell."""
    median = (AggregateCall("n", "count"), AggregateCall("m", "quantile", "income", Fraction(1, 2)))
    lowered = lower(compiled(aggregates=median), dialect("duckdb"), salt=1)
    assert lowered.listed == ("__q0",)
    keys = pa.array(["NY", "CA"])
    table = pa.table(
        {
            "__k0": pc.dictionary_encode(keys) if encoded else keys,
            "__n": pa.array([1, 3], pa.int64()),
            "__q0": pa.array([[5], [7, 3, 7]], pa.list_(pa.int64())),
        }
    )
    main, cells = split_together(lowered, table)
    assert main.column_names == ["__k0", "__n"]
    assert main.num_rows == 2
    got = bucket_counts(AGG, cells["quantile(income, 1/2)"], ["__k0"])
    read = {key: (b.tolist(), c.tolist()) for key, (b, c) in got.items()}
    assert read == {(0,): ([3, 7], [1, 2]), (1,): ([5], [1])}  # CA, NY by domain index
    alone = lower(compiled(aggregates=median, keys=()), dialect("duckdb"), salt=1)
    empty = pa.table({"__n": [0], "__q0": pa.array([None], pa.list_(pa.int64()))})
    main, cells = split_together(alone, empty)
    assert main.to_pylist() == [{"__n": 0}]
    assert cells["quantile(income, 1/2)"].num_rows == 0
    assert bucket_counts(AGG, cells["quantile(income, 1/2)"], []) == {}


def test_listed_cells_arrive_per_group_across_chunks_as_the_rows_they_listed() -> None:
    """A listed cell table in several Arrow chunks (DuckDB returns batches): each group's
    ``RowCells`` holds exactly its list's cells, in their order, whatever chunk it came in."""
    lists = pa.chunked_array(
        [pa.array([[5, 1, 5], [9]], pa.large_list(pa.int64())),
         pa.array([[2, 2, 8, 0], [], [4]], pa.large_list(pa.int64()))]
    )  # fmt: skip
    keys = pa.chunked_array([["NY", None], ["CA", "TX", "NY"]])
    table = pa.table({"__k0": keys, "__b": lists})
    unknown = compiled(keys=(GroupKey("state"),))  # a NULL key is a group of its own
    got = bucket_counts(unknown, table, ["__k0"])
    rows = {key: cells.rows.tolist() for key, cells in got.items()}
    # an empty list has no cell; a key twice (never from a GROUP BY) keeps both lists' rows
    assert rows == {("NY",): [5, 1, 5, 4], (None,): [9], ("CA",): [2, 2, 8, 0]}
    assert [c.tolist() for c in got[("CA",)]] == [[0, 2, 8], [1, 2, 1]]


@pytest.mark.parametrize("hole", ["list", "cell"])
def test_a_null_in_a_listed_cell_table_is_an_internal_error(hole: str) -> None:
    lists = [None] if hole == "list" else [[3, None]]
    table = pa.table({"__k0": ["NY"], "__b": pa.array(lists, pa.list_(pa.int64()))})
    with pytest.raises(InternalError, match="NULL"):
        bucket_counts(AGG, table, ["__k0"])


# ── keys ─────────────────────────────────────────────────────────────────────────────────────


def test_a_public_key_outside_its_domain_is_an_internal_error() -> None:
    table = pa.table({"__k0": ["TX"]})
    with pytest.raises(InternalError, match="not in its domain"):
        group_keys(AGG, table, ["__k0"])


def test_a_public_key_index_that_is_not_an_integer_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="the index of a public key arrived as 'CA'"):
        released_key(AGG, ["CA"])
    with pytest.raises(InternalError, match="arrived as True"):
        released_key(AGG, [True])
    assert released_key(AGG, [1]) == ("NY",)


@pytest.mark.parametrize(
    ("text", "value"), [("1e+16", 1e16), ("-0.0", -0.0), ("Infinity", float("inf"))]
)
def test_a_real_key_is_decoded_from_the_engines_text(text: str, value: float) -> None:
    assert decode_key("real", text) == value


def test_a_real_key_that_is_not_a_number_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="text that is not a number"):
        decode_key("real", "twelve")


def test_a_text_key_that_is_not_text_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="a temporal group key arrived as int, not text"):
        decode_key("temporal", 20240131)


def test_native_and_null_keys_are_released_as_they_are() -> None:
    assert decode_key("integer", 7) == 7
    assert decode_key("temporal", None) is None
    assert decode_key("temporal", "2024-01-31") == "2024-01-31"


def test_keys_of_every_arrow_string_and_binary_form_convert_and_stay_apart() -> None:
    """Dictionary-encoded, large and view strings, and binary of every width, convert for every
    value: a string that is not UTF-8 keeps its bytes (never merging with another group) and
    is released with them as \\xhh; a binary key as DuckDB writes a BLOB."""

    def grouped(kind: ColumnType) -> Aggregate:
        scan = Scan("people", (Field("user_id", "integer"), Field("state", kind)))
        return Aggregate(scan, keys=(GroupKey("state"),), aggregates=(AggregateCall("n", "count"),))

    bad = pa.array([b"\xff", b"\\xff", None], pa.binary()).view(pa.string())
    agg = grouped("string")
    views = (bad.cast(pa.large_string()), bad.cast(pa.string_view()))
    for column in (bad, bad.dictionary_encode(), *views):
        keys = group_keys(agg, pa.table({"__k0": column}), ["__k0"])
        assert len(set(keys)) == 3
        assert [released_key(agg, k) for k in keys] == [("\\xff",), ("\\xff",), (None,)]
    binary = grouped("binary")
    for kind in (pa.binary(2), pa.binary_view()):
        blobs = pa.array([b"\x00a", b"\\x"], kind)
        keys = group_keys(binary, pa.table({"__k0": blobs}), ["__k0"])
        assert [released_key(binary, k) for k in keys] == [("\\x00a",), ("\\x5Cx",)]


# ── models ───────────────────────────────────────────────────────────────────────────────────


def test_a_model_missing_a_measured_role_is_an_internal_error() -> None:
    models = column_models(AGG)
    assert check_models(AGG, models) is None
    broken = tuple(dataclasses.replace(m, sum=None) if m.alias == "m" else m for m in models)
    with pytest.raises(InternalError, match="'m' reads sum, which is not measured"):
        check_models(AGG, broken)


def test_a_bounded_aggregate_without_bounds_after_compiling_is_an_internal_error() -> None:
    unbounded = dataclasses.replace(AGG, bounds=())
    with pytest.raises(InternalError, match="no bounds for 'income' after compiling"):
        column_models(unbounded)


# ── post-processing ──────────────────────────────────────────────────────────────────────────


ROWS = [(0, ("CA", 5, 1.0)), (1, ("NY", 9, None)), (2, ("TX", 7, 3.0))]
NAMES = ["state", "n", "m"]


def test_having_on_no_released_rows_releases_none() -> None:
    plan = Having(AGG, sqlglot.parse_one("n > 3"))
    assert post_process(plan, NAMES, []) == (NAMES, [])


def test_having_keeps_the_rows_its_condition_holds_for_in_order() -> None:
    plan = Having(AGG, sqlglot.parse_one("n > 6"))
    assert post_process(plan, NAMES, ROWS)[1] == [ROWS[1], ROWS[2]]


def test_a_having_condition_duckdb_cannot_evaluate_is_a_schema_error() -> None:
    plan = Having(AGG, sqlglot.parse_one("state > 3"))
    with pytest.raises(SchemaError, match="cannot evaluate HAVING state > 3"):
        post_process(plan, NAMES, ROWS)


def test_sorting_puts_nulls_last_in_either_direction() -> None:
    for descending, order in ((False, [0, 2, 1]), (True, [2, 0, 1])):
        plan = Sort(AGG, (SortKey("m", descending=descending),))
        assert [i for i, _ in post_process(plan, NAMES, ROWS)[1]] == order


def test_limit_offset_then_project() -> None:
    plan = Project(Limit(AGG, count=1, offset=1), ("n", "state"))
    assert post_process(plan, NAMES, ROWS) == (["n", "state"], [(1, (9, "NY"))])


# ── quantiles, draws, consistent counts ────────────────────────────────────────────────────


MED = next(
    m
    for m in compiled(
        aggregates=(AggregateCall("med", "quantile", "income", Fraction(1, 2)),)
    ).measurements
)


def test_choose_quantile_refuses_cells_a_correct_lowering_cannot_return() -> None:
    for cells, counts in (([1, 2], [3]), ([1, 1], [2, 3]), ([MED.limit], [1]), ([0], [0])):
        with pytest.raises(InternalError, match=r"one count per|distinct, inside the grid"):
            choose_quantile(MED, cells, counts, source=SeededSource(1))
    with pytest.raises(InternalError, match="is not a quantile measurement"):
        choose_quantile(dataclasses.replace(MED, quantile=None), [0], [1])


def test_a_zero_sensitivity_quantile_releases_the_first_candidate_without_drawing() -> None:
    source = SeededSource(1)
    m = dataclasses.replace(MED, sensitivity=Fraction(0))
    assert choose_quantile(m, [0, 7], [5, 5], source=source) == 0
    assert source.bytes_drawn == 0


def test_a_cached_measurement_of_another_format_is_not_served() -> None:
    assert Measured.from_json({"groups": []}) is None
    assert Measured.from_json({"veil_measured": 0, "groups": []}) is None
    by_group = {"veil_measured": 1, "groups": [[[0], {"count": 3}]], "private": True}
    assert Measured.from_json(by_group) is None  # the by-group form of earlier releases
    m = Measured((((0,), {"count": 3}),), private=False)
    assert Measured.from_json(m.to_json()) == m


def test_a_measurement_round_trips_through_json_by_column() -> None:
    """Keys of every kind, a statistic beyond 64 bits, a group without a statistic (a
    stratum's index only in some), no group at all, and a query without GROUP BY."""
    big = 1 << 80
    m = Measured(
        (
            ((0, "a", None), {"count": 3, "sum": -big}),
            ((2, "é", True), {"count": -1, "sum": 5, "__stratum": 1}),
        )
    )
    back = Measured.from_json(json.loads(json.dumps(m.to_json())))
    assert back == m
    for empty in (Measured(()), Measured((((), {"count": 7}),))):
        assert Measured.from_json(json.loads(json.dumps(empty.to_json()))) == empty
    broken = m.to_json() | {"rows": 3}
    assert Measured.from_json(broken) is None


def test_partition_selection_without_a_noisy_count_is_an_internal_error() -> None:
    unknown = compiled(keys=(GroupKey("state"),))
    assert unknown.selection is not None
    sums = tuple(m for m in unknown.measurements if m.statistic == "sum")
    broken = dataclasses.replace(unknown, measurements=sums)
    exact = {("CA",): {sums[0].name: 0}}
    with pytest.raises(InternalError, match="partition selection without a noisy count"):
        measure(broken, exact, {}, SeededSource(1))


def test_consistent_counts_sum_to_the_clamped_noisy_total() -> None:
    assert consistent_counts([]) == []
    assert consistent_counts([-3, 1]) == [0, 0]
    out = consistent_counts([10, -2, 3, 0])
    assert sum(out) == 11
    assert min(out) >= 0
    assert out == [9, 0, 2, 0]
    # a fractional shift is rounded by largest remainders
    split = consistent_counts([5, 5, -1])
    assert sum(split) == 9
    assert sorted(split) == [0, 4, 5]


def test_a_public_keys_value_set_is_kept_per_domain_and_a_refused_one_stays_refused() -> None:
    import pyarrow as pa

    from veil.release.exact import _VALUE_SETS_HELD, _value_set

    states = ("CA", "NY", "TX")
    first = _value_set(states, pa.string())
    assert first is not None
    assert first.to_pylist() == ["CA", "NY", "TX"]
    assert _value_set(states, pa.string()) is first  # the same domain: kept
    assert _value_set(states, pa.int64()) is None  # text keys on an integer column: refused
    assert _value_set(states, pa.int64()) is None  # and again, from the memo
    huge = (1, 1 << 70)
    assert _value_set(huge, pa.int64()) is None  # beyond the column's type
    assert _value_set((1, True), pa.int64()) is None  # equal keys: Python's mapping instead
    for i in range(_VALUE_SETS_HELD + 2):  # older domains make room for newer ones
        held = (f"k{i}",)
        assert _value_set(held, pa.string()).to_pylist() == [f"k{i}"]
    again = _value_set(states, pa.string())
    assert again is not None
    assert again.equals(first)
