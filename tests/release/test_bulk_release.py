"""The release in bulk (issue 15): ``exact_stats`` keeps the engine's columns and ``measure``
adds noise to whole arrays, thresholds them on integers and converts only the released groups.

Two kinds of check: (1) given the same deterministic source, the bulk path releases exactly
what the group-by-group path releases from the same statistics as a mapping (same groups, same
order, same noisy integers), for every key type the bulk order covers and for those it hands
back to Python; (2) statistics of the bulk release against the exact noise law, with fixed
seeds and documented thresholds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal as _Decimal
from fractions import Fraction
from functools import partial

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as scipy_stats

import support
from support import SeededSource
from veil.accounting import Budget
from veil.compile import Context, apply_rules
from veil.errors import InternalError
from veil.noise.families import DISCRETE_GAUSSIAN, DISCRETE_LAPLACE
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Field,
    GroupKey,
    Measurement,
    Scan,
    aggregate_of,
)
from veil.plan.canonical import measurement_fingerprint
from veil.release.draw import Measured, finish, measure
from veil.release.exact import ExactStats, _column, _integer, exact_stats
from veil.release.measured import FORMAT, PACKED_FORMAT, PRODUCT_FORMAT

TABLE = Scan(
    "t",
    (
        Field("user_id", "integer"),
        Field("s", "string"),
        Field("a", "integer"),
        Field("b", "boolean"),
        Field("x", "real"),
        Field("d", "temporal"),
    ),
)


compiled = partial(
    support.compiled,
    aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "x")),
    table=TABLE,
    bounds=(ColumnBounds("x", 0, 10),),
)


def columns_of(agg: Aggregate) -> dict[str, str]:
    """The engine's statistic columns, named as the lowering would (one per measurement)."""
    names = [m.name for m in agg.measurements if m.statistic not in ("quantile", "mode")]
    return {name: "__n" if name == "count" else f"__m{i}" for i, name in enumerate(names)}


def engine_table(
    agg: Aggregate, keys: dict[str, pa.Array], counts: list[int], rng: np.random.Generator
) -> pa.Table:
    data: dict[str, pa.Array] = dict(keys)
    for name, col in columns_of(agg).items():
        if name == "count":
            data[col] = pa.array(counts, pa.int64())
        else:  # a sum within ±rows·limit, as a DECIMAL(38, 0) like DuckDB's HUGEINT sums
            m = next(x for x in agg.measurements if x.name == name)
            sums = [int(rng.integers(-c * m.limit, c * m.limit + 1)) if c else 0 for c in counts]
            data[col] = pa.array(sums, pa.decimal128(38, 0))
    return pa.table(data)


def both_paths(agg: Aggregate, table: pa.Table, seed: str) -> tuple[object, object, ExactStats]:
    names = [f"__k{i}" for i in range(len(agg.keys))]
    bulk = exact_stats(agg, table, columns_of(agg), names)
    mapping = {k: dict(v) for k, v in bulk.items()}  # the same statistics, group by group
    return (
        measure(agg, bulk, {}, SeededSource(seed), private=False),
        measure(agg, mapping, {}, SeededSource(seed), private=False),
        bulk,
    )


def around_threshold(agg: Aggregate, n: int, rng: np.random.Generator) -> list[int]:
    """Counts from 0 to twice the selection threshold: some groups kept, some dropped."""
    top = 2 * (agg.selection.threshold if agg.selection is not None else 10)
    return [int(c) for c in rng.integers(0, top + 1, n)]


UNKNOWN = {
    "integers": (
        (GroupKey("a"),),
        lambda rng, n: {"__k0": pa.array([None, *rng.permutation(n * 3)[: n - 1].tolist()])},
    ),
    "plain strings": (
        (GroupKey("s"),),
        lambda rng, n: {"__k0": pa.array([f"k{i} x" for i in rng.permutation(n)])},
    ),
    "strings with quotes, escapes, non-ASCII and NULL (Python's repr)": (
        (GroupKey("s"),),
        lambda rng, n: {
            "__k0": pa.array([None, "it's", 'say "hi"', "a\\b", "é", "\t", *map(str, range(n))])
        },
    ),
    "a string that is not UTF-8": (
        (GroupKey("s"),),
        lambda rng, n: {
            "__k0": pa.array(
                [b"\xff", b"ok", *(str(i).encode() for i in range(n))], pa.binary()
            ).cast(pa.string(), safe=False)
        },
    ),
    "two keys: integer and boolean": (
        (GroupKey("a"), GroupKey("b")),
        lambda rng, n: {
            "__k0": pa.array([i // 2 for i in range(n)]),
            "__k1": pa.array([None if i % 7 == 0 else bool(i % 2) for i in range(n)]),
        },
    ),
    "a temporal key as text": (
        (GroupKey("d"),),
        lambda rng, n: {"__k0": pa.array([f"2024-01-{i:05d}" for i in rng.permutation(n)])},
    ),
}


@pytest.mark.parametrize("case", list(UNKNOWN))
def test_bulk_selection_releases_what_the_group_by_group_path_releases(case: str) -> None:
    keys, make = UNKNOWN[case]
    agg = compiled(keys)
    assert agg.selection is not None
    rng = np.random.default_rng(abs(hash(case)) % 2**32)  # statistics only, not noise
    key_columns = make(rng, 400)
    n = len(next(iter(key_columns.values())))
    table = engine_table(agg, key_columns, around_threshold(agg, n, rng), rng)
    for seed in ("a", "b", "c"):
        bulk, mapping, stats = both_paths(agg, table, f"{case}-{seed}")
        assert bulk == mapping
        assert stats.order is not None
        assert 0 < len(bulk.groups) < n  # some kept, some dropped
    # the bulk visiting order is the repr order of the keys, as the mapping path's
    assert stats.keys_at(stats.order) == sorted(stats, key=repr)


def test_bulk_order_is_computed_by_arrow_for_plain_keys() -> None:
    agg = compiled((GroupKey("a"), GroupKey("s")))
    table = engine_table(
        agg,
        {"__k0": pa.array([10, 2, None, -3, 2]), "__k1": pa.array(["b", "a", "c", None, "b"])},
        [5, 5, 5, 5, 5],
        np.random.default_rng(0),
    )
    stats = exact_stats(agg, table, columns_of(agg), ["__k0", "__k1"])
    assert stats._dict is None  # nothing converted to Python yet
    assert stats.keys_at(stats.order) == sorted(stats, key=repr)


PUBLIC_TEXTS = tuple(f"s{i}" for i in range(300))
PUBLIC = {
    "one string domain": (GroupKey("s", domain=PUBLIC_TEXTS),),
    "a string domain × an integer domain": (
        GroupKey("s", domain=("x", "y", "z")),
        GroupKey("a", domain=tuple(range(-50, 50))),
    ),
    # placed by a table of the domain's span (at most 4× its size), then by Arrow's hash lookup
    "a shuffled dense integer domain": (
        GroupKey("a", domain=tuple(np.random.default_rng(5).permutation(400).tolist())),
    ),
    "a sparse integer domain": (
        GroupKey("a", domain=(-(2**63), *range(-(10**12), 10**12, 10**10), 2**63 - 1)),
    ),
}


@pytest.mark.parametrize("case", list(PUBLIC))
def test_bulk_public_keys_release_what_the_group_by_group_path_releases(case: str) -> None:
    keys = PUBLIC[case]
    agg = compiled(keys, budget=Budget(epsilon=1))
    assert agg.selection is None
    assert agg.public_keys
    rng = np.random.default_rng(7)
    # the engine returns the non-empty groups only, in any order
    every = [tuple(k.domain[i] for k, i in zip(keys, ix, strict=True)) for ix in np.ndindex(
        *(len(k.domain) for k in keys))]  # fmt: skip
    present = [every[i] for i in rng.permutation(len(every))[: len(every) // 2]]
    key_columns = {f"__k{j}": pa.array([p[j] for p in present]) for j in range(len(keys))}
    table = engine_table(agg, key_columns, [int(c) for c in rng.integers(1, 30, len(present))], rng)
    bulk, mapping, stats = both_paths(agg, table, case)
    assert stats.positions is not None
    assert bulk == mapping
    assert len(bulk.groups) == len(every)  # empty groups released too


def test_bulk_duplicate_groups_are_an_internal_error() -> None:
    agg = compiled((GroupKey("a"),))
    table = engine_table(agg, {"__k0": pa.array([1, 2, 1])}, [3, 3, 3], np.random.default_rng(0))
    with pytest.raises(InternalError, match="one group twice"):
        exact_stats(agg, table, columns_of(agg), ["__k0"])
    public = compiled((GroupKey("a", domain=(1, 2)),), budget=Budget(epsilon=1))
    with pytest.raises(InternalError, match="one group twice"):
        exact_stats(public, table, columns_of(public), ["__k0"])


def test_duplicates_among_many_public_groups_are_found_by_sorting() -> None:
    """Two keys of 1 000 × 300 groups, three rows: too many groups to mark each, so the
    positions are sorted."""
    keys = (GroupKey("a", domain=tuple(range(1000))), GroupKey("s", domain=PUBLIC_TEXTS))
    agg = compiled(keys, budget=Budget(epsilon=1))
    rng = np.random.default_rng(2)
    twice = {"__k0": pa.array([5, 999, 5]), "__k1": pa.array(["s1", "s0", "s1"])}
    with pytest.raises(InternalError, match="one group twice"):
        exact_stats(
            agg, engine_table(agg, twice, [1, 2, 3], rng), columns_of(agg), ["__k0", "__k1"]
        )
    once = {"__k0": pa.array([5, 999, 5]), "__k1": pa.array(["s1", "s0", "s2"])}
    stats = exact_stats(
        agg, engine_table(agg, once, [1, 2, 3], rng), columns_of(agg), ["__k0", "__k1"]
    )
    assert stats.positions is not None
    assert stats.positions.tolist() == [5 * 300 + 1, 999 * 300, 5 * 300 + 2]


@pytest.mark.parametrize(
    ("domain", "value"),
    [((0, 2, 3), 1), ((0, 2, 3), 4), ((0, 2, 3), -1), ((0, 10**12), 5)],
    ids=["in the span, not declared", "above", "below", "a sparse domain"],
)
def test_an_integer_key_outside_its_declared_domain_is_an_internal_error(
    domain: tuple[int, ...], value: int
) -> None:
    agg = compiled((GroupKey("a", domain=domain),), budget=Budget(epsilon=1))
    table = engine_table(
        agg, {"__k0": pa.array([domain[0], value])}, [1, 1], np.random.default_rng(0)
    )
    with pytest.raises(InternalError, match="not in its domain"):
        exact_stats(agg, table, columns_of(agg), ["__k0"])


@pytest.mark.parametrize("kind", [pa.int8(), pa.int32(), pa.uint16(), pa.uint64()])
def test_an_integer_key_of_any_width_is_placed_on_its_domain(kind: pa.DataType) -> None:
    domain = (7, 3, 100, 0)
    agg = compiled((GroupKey("a", domain=domain),), budget=Budget(epsilon=1))
    column = pa.array([100, 0, 7], type=kind)
    table = engine_table(agg, {"__k0": column}, [1, 2, 3], np.random.default_rng(0))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert stats.positions is not None
    assert stats.positions.tolist() == [2, 3, 0]


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()], ids=str)
def test_a_text_key_of_either_string_type_is_placed_on_its_domain(kind: pa.DataType) -> None:
    """DuckDB returns text as ``large_string`` where a list column rides along (a quantile's
    cells): such keys are placed on their domain in bulk too, not converted one by one (which
    took the release of 5,050 groups' medians off its bulk path)."""
    agg = compiled((GroupKey("s", domain=("CA", "NY", "TX", "é")),), budget=Budget(epsilon=1))
    column = pa.array(["TX", "é", "CA"], type=kind)
    table = engine_table(agg, {"__k0": column}, [1, 2, 3], np.random.default_rng(0))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert stats.positions is not None
    assert stats.positions.tolist() == [2, 3, 0]
    bulk, mapping, _ = both_paths(agg, table, str(kind))
    assert bulk == mapping
    outside = pa.array(["NY", "ny"], type=kind)
    wrong = engine_table(agg, {"__k0": outside}, [1, 1], np.random.default_rng(0))
    with pytest.raises(InternalError, match="not in its domain"):
        exact_stats(agg, wrong, columns_of(agg), ["__k0"])


def test_a_text_key_outside_its_declared_domain_is_an_internal_error() -> None:
    agg = compiled((GroupKey("s", domain=("CA", "NY")),), budget=Budget(epsilon=1))
    table = engine_table(agg, {"__k0": pa.array(["NY", "TX"])}, [1, 1], np.random.default_rng(0))
    with pytest.raises(InternalError, match="not in its domain"):
        exact_stats(agg, table, columns_of(agg), ["__k0"])


@pytest.mark.parametrize(
    ("key", "column"),
    [
        (GroupKey("b", domain=(True, False)), pa.array([False, True])),
        (GroupKey("a", domain=(1, 2**64 - 1)), pa.array([1, 1], type=pa.int8())),
    ],
    ids=["a boolean key", "a domain the column's type cannot hold"],
)
def test_a_public_key_arrow_cannot_place_takes_the_mapping_path(
    key: GroupKey, column: pa.Array
) -> None:
    agg = compiled((key,), budget=Budget(epsilon=1))
    table = engine_table(agg, {"__k0": column[:1]}, [4], np.random.default_rng(0))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert stats.positions is None
    bulk, mapping, _ = both_paths(agg, table, "mapping")
    assert bulk == mapping


def test_a_domain_beyond_64_signed_bits_is_placed_by_arrows_lookup() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2**64 - 1)),), budget=Budget(epsilon=1))
    column = pa.array([2**64 - 1, 1], type=pa.uint64())
    table = engine_table(agg, {"__k0": column}, [4, 5], np.random.default_rng(0))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert stats.positions is not None
    assert stats.positions.tolist() == [1, 0]
    bulk, mapping, _ = both_paths(agg, table, "wide")
    assert bulk == mapping


def test_an_unsigned_key_beyond_64_signed_bits_outside_its_domain_is_an_internal_error() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2)),), budget=Budget(epsilon=1))
    column = pa.array([2**64 - 1, 1], type=pa.uint64())
    table = engine_table(agg, {"__k0": column}, [4, 5], np.random.default_rng(0))
    with pytest.raises(InternalError, match="not in its domain"):
        exact_stats(agg, table, columns_of(agg), ["__k0"])


def test_a_query_without_group_by_reads_as_one_group_with_the_empty_key() -> None:
    """The mapping view of a scalar query's statistics holds its one row under ``()`` (Arrow's
    ``take`` on a table without columns returns no rows: the view was once empty, so the
    audit saw no change between neighbours), and both paths release the same."""
    agg = compiled(())
    table = engine_table(agg, {}, [1000], np.random.default_rng(3))
    bulk, mapping, stats = both_paths(agg, table, "scalar")
    assert list(stats) == [()]
    assert stats[()]["count"] == 1000
    assert stats.keys_at(np.array([0], dtype=np.int64)) == [()]
    assert bulk == mapping


def test_bulk_sums_beyond_64_bits_stay_exact() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2)),), budget=Budget(epsilon=1))
    sums = next(m for m in agg.measurements if m.statistic == "sum")
    rows = (1 << 62) // sums.limit + 5  # rows·limit beyond 2^62: the sums cannot be int64
    big = rows * sums.limit
    table = pa.table(
        {
            "__k0": pa.array([1, 2]),
            "__n": pa.array([rows, 1], pa.int64()),
            columns_of(agg)[sums.name]: pa.array([big, -1], pa.decimal128(38, 0)),
        }
    )
    names = ["__k0"]
    stats = exact_stats(agg, table, columns_of(agg), names)
    assert stats[(0,)][sums.name] == big
    bulk = measure(agg, stats, {}, SeededSource("big"), private=False)
    mapping = measure(agg, dict(stats.items()), {}, SeededSource("big"), private=False)
    assert bulk == mapping
    assert abs(bulk.groups[0][1][sums.name] - big) < 100 * sums.scale  # noise, not a wrap


# ── the bulk release against the exact law (fixed seeds; thresholds documented) ────────────


def test_bulk_noise_is_the_samplers_draws() -> None:
    for fam, scale in ((DISCRETE_LAPLACE, Fraction(7, 3)), (DISCRETE_GAUSSIAN, Fraction(50))):
        arr = fam.sample_array(scale, 1000, SeededSource("same"))
        assert arr.dtype == np.int64
        assert arr.tolist() == fam.sample(scale, 1000, SeededSource("same"))
        assert fam.sample_array(scale, 0, SeededSource("same")).size == 0


def test_bulk_released_counts_of_public_keys_follow_the_discrete_laplace_pmf() -> None:
    """20 000 empty public groups: each released count is one draw of the count's noise.
    Chi-square against the exact pmf P(z) = (1−p)/(1+p)·p^|z|, p = e^(−1/scale), bins with
    expected count < 5 merged into the tails; passes iff p-value > 1e-4 (fixed seed)."""
    keys = (GroupKey("s", domain=tuple(f"s{i}" for i in range(200))),)
    keys += (GroupKey("a", domain=tuple(range(100))),)
    agg = compiled(keys, aggregates=(AggregateCall("n", "count"),), budget=Budget(epsilon=1))
    count = next(m for m in agg.measurements if m.name == "count")
    assert count.mechanism == "discrete_laplace"
    table = pa.table({"__k0": pa.array([], pa.string()), "__k1": pa.array([], pa.int64()),
                      "__n": pa.array([], pa.int64())})  # fmt: skip
    stats = exact_stats(agg, table, {"count": "__n"}, ["__k0", "__k1"])
    released = measure(agg, stats, {}, SeededSource("pmf"), private=False)
    z = np.array([s["count"] for _, s in released.groups])
    assert z.size == 20_000
    p = math.exp(-1 / float(count.scale))
    support = np.arange(-60, 61)
    pmf = (1 - p) / (1 + p) * p ** np.abs(support)
    observed = np.array([np.sum(z == v) for v in support], dtype=float)
    expected = pmf * z.size
    keep = expected >= 5
    obs = np.append(observed[keep], z.size - observed[keep].sum())
    exp = np.append(expected[keep], z.size - expected[keep].sum())
    assert scipy_stats.chisquare(obs, exp).pvalue > 1e-4


def test_bulk_selection_keeps_a_group_at_the_threshold_with_the_exact_probability() -> None:
    """4 000 groups whose exact count equals the threshold t: each survives iff its noise
    Z ≥ 0, P = 1/(1+p) exactly (discrete Laplace, p = e^(−1/scale)); groups at t − 1 survive
    iff Z ≥ 1, P = p/(1+p). Passes iff each survivor count is within 5 binomial standard
    deviations (a correct release fails with probability < 1e-6; fixed seed)."""
    agg = compiled((GroupKey("a"),), aggregates=(AggregateCall("n", "count"),))
    assert agg.selection is not None
    t = agg.selection.threshold
    count = next(m for m in agg.measurements if m.name == "count")
    p = math.exp(-1 / float(count.scale))
    n = 4000
    table = pa.table(
        {"__k0": pa.array(range(2 * n)), "__n": pa.array([t] * n + [t - 1] * n, pa.int64())}
    )
    stats = exact_stats(agg, table, {"count": "__n"}, ["__k0"])
    released = measure(agg, stats, {}, SeededSource("threshold"), private=False)
    kept = [k[0] for k, _ in released.groups]
    assert all(s["count"] >= t for _, s in released.groups)
    for survivors, prob in ((sum(k < n for k in kept), 1 / (1 + p)),
                            (sum(k >= n for k in kept), p / (1 + p))):  # fmt: skip
        assert abs(survivors - n * prob) <= 5 * math.sqrt(n * prob * (1 - prob))


def test_the_bulk_overflow_check_is_exact_beyond_64_bits() -> None:
    from veil.release.exact import _outside

    empty = np.array([0, 0], dtype=np.int64)
    assert not _outside(empty, empty, 2**70)  # a limit beyond int64 with no rows: no error
    rows = np.array([3, 1], dtype=np.int64)
    assert not _outside(np.array([3 * 2**62, -(2**62)], dtype=object), rows, 2**62)
    assert _outside(np.array([3 * 2**62 + 1, 0], dtype=object), rows, 2**62)
    assert _outside(np.array([0, -8], dtype=np.int64), rows, 7)
    assert not _outside(np.array([-21, 7], dtype=np.int64), rows, 7)


EXTREMES = [0, 1, -1, 9, 10, 11, 99, 100, -10, -9, -100, 2**63 - 1, -(2**63), 10**18, None]


@pytest.mark.parametrize("seed", range(20))
def test_integer_and_boolean_keys_are_ordered_as_their_repr_without_strings(seed: int) -> None:
    from veil.release.exact import _numeric_repr_order

    rng = np.random.default_rng(seed)
    n = 80
    picks = rng.integers(0, len(EXTREMES), n)
    ints = [
        EXTREMES[i] if rng.random() < 0.5 else int(rng.integers(-(2**62), 2**62)) // 10 ** (i % 19)
        for i in picks
    ]
    bools = [None if rng.random() < 0.1 else bool(rng.random() < 0.5) for _ in range(n)]
    small = [None if v is None else v % 2_000_001 - 1_000_000 for v in ints]  # ≤ 17 digits
    cases = (
        ((GroupKey("a"),), [pa.array(ints, pa.int64())]),
        ((GroupKey("a"),), [pa.array(small, pa.int64())]),
        ((GroupKey("a"), GroupKey("b")), [pa.array(small, pa.int64()), pa.array(bools)]),
        ((GroupKey("a"), GroupKey("b")), [pa.array(ints, pa.int64()), pa.array(bools)]),
        ((GroupKey("b"), GroupKey("a")), [pa.array(bools), pa.array(ints, pa.int32())
                                          if all(v is None or abs(v) < 2**31 for v in ints)
                                          else pa.array(ints, pa.int64())]),
    )  # fmt: skip
    for keys, arrays in cases:
        table = pa.table({f"__k{j}": a for j, a in enumerate(arrays)})
        result = _numeric_repr_order(compiled(keys), table, table.column_names)
        assert result is not None
        order, duplicate = result
        rows = list(zip(*(a.to_pylist() for a in arrays), strict=True))
        assert [repr(rows[i]) for i in order] == sorted(map(repr, rows))
        assert duplicate == (len(set(rows)) != n)


# ── released values in bulk (post-processing; equal to the per-group estimates) ────────────


def bulk_against_each(
    aggregates: tuple[AggregateCall, ...],
    bounds: tuple[float, float],
    values: Callable[[Measurement], list[int]],
) -> None:
    """Each column's bulk estimate (``AggregateKind.estimates``) against ``estimate`` per
    group, value for value and type for type, on the noisy integers ``values(m)`` of each
    measurement m (one per group)."""
    from veil.aggregates import kind
    from veil.release.estimators import column_models, estimate, noise_models

    plan = Aggregate(
        TABLE,
        keys=(GroupKey("a", domain=tuple(range(8))),),
        aggregates=aggregates,
        bounds=(ColumnBounds("x", *bounds),),
        privacy_unit="user_id",
    )
    agg = aggregate_of(apply_rules(plan, Context(budget=Budget(epsilon=1), privacy_unit="user_id")))
    models, noise = column_models(agg), noise_models(agg)
    columns = {m.name: np.array(values(m), np.int64) for m in agg.measurements}
    size = {c.size for c in columns.values()}.pop()
    groups = [{n: int(c[i]) for n, c in columns.items()} for i in range(size)]
    for c in models:
        bulk = kind(c.function).estimates(c, columns, noise)
        assert bulk is not None, c.function
        want = [estimate(c, g, noise) for g in groups]
        assert bulk == want, c.function
        assert [type(v) for v in bulk] == [type(v) for v in want], c.function


EDGES = [0, -1, 1, 2, (1 << 53) + 1, -(1 << 53) - 3, (1 << 62) + 5, -(1 << 63), (1 << 63) - 1]
"""Noisy integers at the edges: negatives, zeros, values past 2^53 (where rounding to a float
first could differ if a step were not a power of two), the int64 extremes."""


def edges_and(seed: int, low: int, high: int) -> Callable[[Measurement], list[int]]:
    """Per measurement, ``EDGES`` and 300 integers in [low, high), shuffled."""
    draws = np.random.default_rng(seed)
    return lambda m: draws.permutation(EDGES + draws.integers(low, high, 300).tolist()).tolist()


@pytest.mark.parametrize("centred", [False, True])
def test_bulk_estimates_equal_each_groups_estimate(centred: bool) -> None:
    """COUNT, SUM, AVG and COUNT(DISTINCT unit) in bulk against each group's estimate."""
    aggregates = (
        AggregateCall("n", "count"),
        AggregateCall("s", "sum", "x"),
        AggregateCall("m", "avg", "x"),
        AggregateCall("u", "count_distinct", "user_id"),
    )
    bulk_against_each(aggregates, (-3 if centred else 0, 10), edges_and(5, -1000, 1000))


@pytest.mark.parametrize("bounds", [(0, 10), (-3, 1_000), (-1e-3, 7.25)], ids=str)
def test_bulk_spread_estimates_equal_each_groups_estimate(bounds: tuple[float, float]) -> None:
    """VARIANCE, STDDEV, VAR_POP and STDDEV_POP in bulk against each group's estimate: noisy
    counts, sums and sums of squares at the edges, counts below the divisor's floor included
    (each rounded to a double alike in bulk and one by one)."""
    aggregates = (
        AggregateCall("v", "variance", "x"),
        AggregateCall("sd", "stddev", "x"),
        AggregateCall("vp", "var_pop", "x"),
        AggregateCall("sp", "stddev_pop", "x"),
    )
    bulk_against_each(aggregates, bounds, edges_and(6, -50, 5_000))


@pytest.mark.parametrize("bounds", [(0, 10), (-3, 1_000_000), (-1e-3, 7.25), (0.1, 0.3)], ids=str)
def test_bulk_quantile_estimates_equal_each_groups_estimate(
    bounds: tuple[float, float],
) -> None:
    """MEDIAN, a percentile, MIN and MAX in bulk: centre + step·j as one integer ratio per
    group against ``float`` of the Fraction per group, the same double for every candidate
    tried (the grid's ends, random ones, and a step that is no power of two)."""
    aggregates = (
        AggregateCall("med", "quantile", "x", quantile=Fraction(1, 2)),
        AggregateCall("p9", "quantile", "x", quantile=Fraction(9, 10)),
        AggregateCall("lo", "min", "x"),
        AggregateCall("hi", "max", "x"),
    )
    draws = np.random.default_rng(3)

    def picks(m: Measurement) -> list[int]:
        return [0, 1, m.limit - 2, m.limit - 1, *draws.integers(0, m.limit, 300).tolist()]

    bulk_against_each(aggregates, bounds, picks)


def test_no_bulk_estimate_where_the_step_is_not_a_power_of_two() -> None:
    from veil.aggregates.base import scaled

    values = np.array([3, (1 << 60) + 1], np.int64)
    assert scaled(Fraction(3, 4), values) is None
    assert scaled(Fraction(-1, 4), values) is None
    got = scaled(Fraction(1, 1 << 20), values)
    assert got is not None
    assert got.tolist() == [float(Fraction(v, 1 << 20)) for v in values.tolist()]


# ── fallbacks from the bulk paths: the general path's answer, or an internal error ─────────


def test_exact_integers_arrive_as_ints_decimals_or_null() -> None:
    assert _integer(None) == 0
    assert _integer(_Decimal("12")) == 12
    assert _integer(7) == 7
    with pytest.raises(InternalError, match=r"came back as 2\.5"):
        _integer(_Decimal("2.5"))
    with pytest.raises(InternalError, match="came back as 'x'"):
        _integer("x")


@pytest.mark.parametrize("null", [True, False], ids=["with NULL", "without NULL"])
@pytest.mark.parametrize("precision", [38, 19, 5])
@pytest.mark.parametrize("beyond", [None, 1 << 63, -(1 << 63) - 1, 10**37])
def test_a_decimal_statistic_reads_as_its_exact_integers_in_any_chunks(
    precision: int, beyond: int | None, null: bool
) -> None:
    # read from its 128-bit words when every value fits in int64, else one by one: the same
    # integers either way, whatever the chunks and their offsets, NULL read as 0
    edges = [-(1 << 63), (1 << 63) - 1, 0, -1, 1, *([None] if null else []), 99999, -99999]
    if beyond is not None:
        edges.append(beyond)
    kind = pa.decimal128(precision, 0)
    fits = [v for v in edges if v is None or len(str(abs(v))) <= precision]
    whole = pa.array(fits, kind)
    cut = len(fits) // 2
    chunked = pa.chunked_array([whole.slice(1, cut), whole.slice(1 + cut), whole.slice(0, 1)])
    expected = [_integer(v) for v in chunked.to_pylist()]
    values, nulls = _column(chunked)
    assert [int(v) for v in values] == expected
    assert nulls.tolist() == [v is None for v in chunked.to_pylist()]
    fast = all(v is None or -(1 << 63) <= v < 1 << 63 for v in fits)
    assert values.dtype == (np.int64 if fast else object)


@pytest.mark.parametrize(
    "column",
    [
        pa.chunked_array([], pa.decimal128(38, 0)),  # no chunk at all (an empty result)
        pa.chunked_array([pa.array([], pa.decimal128(38, 0))]),
        pa.chunked_array([pa.array([None], pa.decimal128(38, 0))]),
        pa.chunked_array([pa.array([], pa.decimal128(38, 0)), pa.array([5], pa.decimal128(38, 0))]),
    ],
    ids=["no chunk", "one empty chunk", "one NULL", "an empty chunk, then a value"],
)
def test_a_decimal_statistic_of_no_rows_or_empty_chunks_reads_too(column: pa.ChunkedArray) -> None:
    values, nulls = _column(column)
    assert [int(v) for v in values] == [_integer(v) for v in column.to_pylist()]
    assert nulls.tolist() == [v is None for v in column.to_pylist()]


def test_a_public_key_column_with_null_takes_the_mapping_path() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2, None)),), budget=Budget(epsilon=1))
    table = engine_table(agg, {"__k0": pa.array([2, None, 1])}, [4, 5, 6], np.random.default_rng(1))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert stats.positions is None
    assert {k: v["count"] for k, v in stats.items()} == {(1,): 4, (2,): 5, (0,): 6}
    bulk, mapping, _ = both_paths(agg, table, "null")
    assert bulk == mapping


def test_unsigned_integer_keys_are_ordered_by_their_text() -> None:
    agg = compiled((GroupKey("a"),))
    keys = pa.array([3, 10, 2, 2**63 + 5], pa.uint64())
    table = engine_table(agg, {"__k0": keys}, [50, 50, 50, 50], np.random.default_rng(2))
    stats = exact_stats(agg, table, columns_of(agg), ["__k0"])
    assert [stats.keys_at(np.array([i]))[0] for i in stats.order.tolist()] == sorted(
        [(3,), (10,), (2,), (2**63 + 5,)], key=repr
    )
    bulk, mapping, _ = both_paths(agg, table, "uint")
    assert bulk == mapping


def _finished(agg: object, groups: tuple) -> object:
    return finish(agg, agg, Measured(groups, private=False), measurement_fingerprint(agg))  # type: ignore[arg-type]


def test_a_statistic_beyond_64_bits_is_estimated_group_by_group() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2)),), budget=Budget(epsilon=1))
    names = [m.name for m in agg.measurements]
    big = {n: 1 << 70 for n in names}
    small = dict.fromkeys(names, 3)
    result = _finished(agg, (((0,), big), ((1,), small)))
    assert result.values[0][1] == 1 << 70  # type: ignore[attr-defined]
    assert result.values[1][1] == 3  # type: ignore[attr-defined]


def test_a_public_key_index_outside_its_labels_or_of_another_type_is_an_internal_error() -> None:
    agg = compiled((GroupKey("a", domain=(1, 2)),), budget=Budget(epsilon=1))
    stats = dict.fromkeys((m.name for m in agg.measurements), 3)
    for bad in ((2,), (-1,)):
        with pytest.raises(InternalError, match="outside its labels"):
            _finished(agg, ((bad, stats),))
    for bad in (("1",), (True,)):
        with pytest.raises(InternalError, match="index of a public key arrived as"):
            _finished(agg, ((bad, stats),))


def test_measured_of_a_partial_form_is_not_served() -> None:
    m = Measured((((0,), {"count": 3}),))
    assert Measured.from_json(m.to_json() | {"keys": [[0, 1]]}) is None


def test_every_index_of_a_product_is_cached_as_its_shape() -> None:
    shape = (3, 100)
    every = np.unravel_index(np.arange(300, dtype=np.int64), shape)
    bulk = Measured.of_columns(300, list(every), {"count": np.arange(300, dtype=np.int64)})
    form = json.loads(json.dumps(bulk.to_json()))
    assert form["veil_measured"] == PRODUCT_FORMAT
    assert form["keys"] == {"product": [3, 100]}
    back = Measured.from_json(form)
    assert back is not None
    assert back == bulk
    assert back.groups == bulk.groups
    assert back.groups[101] == ((1, 1), {"count": 101})
    # the same groups as lists of Python ints (the group-by-group path): the same form
    assert Measured(bulk.groups) == bulk


@pytest.mark.parametrize(
    "keys",
    [
        [[0, 2, 1]],  # not in product order
        [[1, 0, 2]],  # the right last index, not in product order
        [[0, 1]],  # a product of 2 with a third group
        [[1, 2, 3]],  # not from index 0
        [["0", "1", "2"]],  # texts of digits
        [[False, True, True]],  # booleans
        [[0, 1, 2**64]],  # beyond 64 bits
        [np.array([0, 1, 2], dtype=np.int32)],
        [[0, 0, 1], [0, 1, 0]],  # two keys, not their product
    ],
)
def test_other_key_columns_are_cached_as_lists(keys: list[list[object]]) -> None:
    size = 3
    if len(keys[0]) != size:
        keys = [[*keys[0], 1]]
    m = Measured.of_columns(size, keys, {"count": [1, 2, 3]})  # type: ignore[arg-type]
    form = json.loads(json.dumps(m.to_json()))
    assert form["veil_measured"] == FORMAT
    back = Measured.from_json(form)
    assert back is not None
    assert back.groups == m.groups


def test_a_product_form_that_does_not_fit_its_rows_is_not_served() -> None:
    form = {"veil_measured": PRODUCT_FORMAT, "rows": 6, "stats": {"count": [0] * 6}}
    assert Measured.from_json(form | {"keys": {"product": [2, 3]}}) is not None
    for shape in ([2, 2], [6, 0], []):
        assert Measured.from_json(form | {"keys": {"product": shape}}) is None
    unknown = {"veil_measured": PACKED_FORMAT + 1}  # a form no release has written yet
    assert Measured.from_json(form | unknown | {"keys": {"product": [2, 3]}}) is None


def test_a_cell_table_shared_by_several_measurements_is_read_once() -> None:
    """``split_together`` gives a column's quantiles on one grid the same cell table: its
    cells are read once and shared (read-only); another table is read on its own."""
    from veil.release.exact import bucket_counts, cells_by_measurement
    from veil.release.quantiles import RowCells

    agg = compiled((GroupKey("s", domain=("x", "y")),), budget=Budget(epsilon=1))
    lists = pa.array([[1, 2, 2], [5]], pa.list_(pa.uint32()))
    shared = pa.table({"__k0": ["y", "x"], "__b": lists})
    other = pa.table({"__k0": ["x"], "__b": pa.array([[7, 7]], pa.list_(pa.uint32()))})
    out = cells_by_measurement(agg, {"lo": shared, "hi": shared, "age": other}, ["__k0"])
    assert out["lo"] is out["hi"]
    assert out["age"] is not out["lo"]
    want = bucket_counts(agg, shared, ["__k0"])
    assert set(out["lo"]) == set(want) == {(0,), (1,)}
    for key, cells in want.items():
        got = out["lo"][key]
        assert isinstance(got, RowCells)
        assert isinstance(cells, RowCells)
        assert got.rows.tolist() == cells.rows.tolist()
    assert [c.rows.tolist() for c in out["age"].values()] == [[7, 7]]
