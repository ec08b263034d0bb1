"""MODE: the exact sampler against the exact pmf, neighbouring datasets through the whole
compiled pipeline (SQL counts, sensitivity, temperature), the public margin, and refusals.

Documented thresholds. Distribution tests draw N = 8 000 samples from a seeded source and
compare them with the exact pmf exp(c_j/T)/Σ exp(c_i/T) by a χ² goodness-of-fit test (cells
of expected count < 5 pooled), failing below p = 10⁻³; the seed is fixed, so the outcome is
too. A temperature off by a factor 2 moves a cell holding 20 % of the mass by several points,
a χ² of hundreds at this N. Neighbouring tests compare exact pmfs (no sampling): the largest
log-ratio must not exceed the per-group ε the budget charges (within 10⁻⁹ for float exp).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import veil
from release.test_quantiles import chi2_pvalue
from support import SeededSource
from system.prenoise import exact, session_aggregate
from veil.accounting import Budget
from veil.engines.duckdb import DuckDBEngine
from veil.errors import BoundsError, InternalError, InvalidArgumentError
from veil.noise.margins import mode_margin
from veil.plan import Measurement
from veil.release.modes import choose_mode, choose_top, mode_runs, mode_weights, top_ranks

N = 8_000
P_MIN = 1e-3


def measurement(eps: Fraction, limit: int, rows: int = 1) -> Measurement:
    return Measurement(
        name="mode(x)",
        statistic="mode",
        mechanism="exponential",
        budget=Budget(epsilon=eps),
        sensitivity=Fraction(rows),
        scale=2 * Fraction(rows) / eps,
        column="x",
        centre=Fraction(0),
        step=Fraction(1),
        limit=limit,
        discrete=True,
    )


def brute_pmf(m: Measurement, values: list[int]) -> np.ndarray:
    """exp(c_j/T) normalised, from the values written out (no run structure)."""
    c = np.array([sum(1 for v in values if v == j) for j in range(m.limit)], dtype=float)
    w = np.exp((c - c.max()) / float(m.scale))
    return np.asarray(w / w.sum())


def cells(values: list[int]) -> tuple[list[int], list[int]]:
    counted = Counter(values)
    return list(counted), list(counted.values())


# ── the sampler ───────────────────────────────────────────────────────────────────────────────


@pytest.mark.slow
@pytest.mark.parametrize(
    ("eps", "limit", "values"),
    [
        (Fraction(1, 2), 8, [2] * 5 + [3] * 4 + [6] * 2),  # close counts: a spread pmf
        (Fraction(2), 12, [0] * 3 + [11] * 3 + [5]),  # a tie at both ends, empty gaps
        (Fraction(1, 10), 6, [4]),  # nearly uniform
    ],
)
def test_draws_follow_the_exact_exponential_mechanism_pmf(
    eps: Fraction, limit: int, values: list[int]
) -> None:
    m = measurement(eps, limit)
    src = SeededSource(f"mode-pmf-{eps}-{limit}")
    b, c = cells(values)
    picks = [choose_mode(m, b, c, source=src) for _ in range(N)]
    observed = np.bincount(picks, minlength=limit).astype(float)
    expected = brute_pmf(m, values) * N
    assert observed.size == limit  # nothing outside the candidates
    assert chi2_pvalue(observed, expected) > P_MIN


def test_the_runs_give_every_candidate_the_distance_of_its_count() -> None:
    m = measurement(Fraction(1), 10)
    runs = mode_runs(m, [7, 2], [3, 5])  # unsorted on purpose
    distance = np.empty(10, dtype=np.int64)
    for start, length, d in zip(runs.start, runs.length, runs.distance, strict=True):
        distance[start : start + length] = d
    assert distance.tolist() == [5, 5, 0, 5, 5, 5, 5, 2, 5, 5]  # n_max − c_j
    assert int(runs.length.sum()) == 10


def test_the_exact_weights_are_the_brute_force_pmf() -> None:
    m = measurement(Fraction(3, 2), 5)
    values = [0, 1, 1, 4, 4, 4]
    dense = [values.count(j) for j in range(5)]
    assert np.allclose(mode_weights(m, dense), brute_pmf(m, values), rtol=1e-12)


def test_an_empty_group_chooses_uniformly_and_a_dominant_count_wins() -> None:
    m = measurement(Fraction(1), 4)
    src = SeededSource("mode-empty")
    assert {choose_mode(m, [], [], source=src) for _ in range(200)} == {0, 1, 2, 3}
    assert {choose_mode(m, [1, 3], [500, 2], source=src) for _ in range(200)} == {1}


def test_cells_a_correct_lowering_cannot_return_are_a_bug() -> None:
    m = measurement(Fraction(1), 4)
    for b, c in (([4], [1]), ([-1], [1]), ([1, 1], [1, 2]), ([2], [0]), ([1], [1, 2])):
        with pytest.raises(InternalError):
            choose_mode(m, b, c, source=SeededSource(0))


def test_the_margin_wins_with_at_least_its_level_in_the_worst_case() -> None:
    # worst case for a margin m: K − 1 rivals all exactly m below the winner
    for scale, k, level in ((Fraction(2), 16, 0.95), (Fraction(7, 3), 3, 0.9)):
        margin = mode_margin(scale, k, level)
        win = 1 / (1 + (k - 1) * math.exp(-margin / float(scale)))
        assert win >= level - 1e-12
        # and it is close to the least such margin: 10 % less no longer guarantees the level
        less = 1 / (1 + (k - 1) * math.exp(-(margin * 0.9) / float(scale)))
        assert less < level
    assert mode_margin(Fraction(2), 1, 0.95) == 0.0


# ── neighbouring datasets through the whole compiled pipeline ───────────────────────────────


def _people(seed: int, units: int = 30) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only: never noise
    rows = [
        (u, "ab"[int(rng.integers(2))], int(rng.integers(-1, 7)))
        for u in range(units)
        for _ in range(int(rng.integers(1, 4)))
    ]
    return pd.DataFrame(rows, columns=["uid", "g", "code"])


def _pmfs(
    frame: pd.DataFrame, sql: str, **options: object
) -> tuple[float, dict[object, np.ndarray]]:
    """(ε per group, the exact selection pmf of every group) of ``sql`` on ``frame``."""
    session = veil.Session.local({"t": frame}, privacy_unit="uid", budget=Budget(epsilon=10))
    agg = session_aggregate(session, sql, **options)
    (m,) = [m for m in agg.measurements if m.statistic == "mode"]
    engine = DuckDBEngine({"t": frame})
    try:
        counts = exact(engine, agg).buckets[m.name]
    finally:
        engine.close()
    out = {}
    for key in [("a",), ("b",)]:
        dense = [counts.get(key, {}).get(j, 0) for j in range(m.limit)]
        out[key] = np.array(mode_weights(m, dense))
    return float(2 * m.sensitivity / m.scale), out


@pytest.mark.parametrize(("rows", "seed"), [(1, 1), (2, 2), (3, 3)])
def test_adding_a_unit_moves_no_selection_probability_by_more_than_e_to_the_epsilon(
    rows: int, seed: int
) -> None:
    sql = "SELECT g, MODE(code) AS m FROM t GROUP BY g"
    options = {
        "epsilon": 1,
        "bounds": {"code": (0, 5)},
        "domains": {"g": ["a", "b"]},
        "max_rows_per_group": rows,
        "max_groups": 2,
    }
    base = _people(seed)
    # the new unit piles rows onto one candidate (the worst case), in both groups, plus rows
    # outside the candidates and rows beyond its limit that bounding must drop
    extra = [(999, g, 3) for g in "ab" for _ in range(rows + 2)] + [(999, "a", 42)]
    plus = pd.concat([base, pd.DataFrame(extra, columns=base.columns)], ignore_index=True)
    eps_a, pa_ = _pmfs(base, sql, **options)
    eps_b, pb = _pmfs(plus, sql, **options)
    assert eps_a == eps_b == 0.5  # half of ε for each of the unit's two groups
    worst = max(float(np.max(np.abs(np.log(pa_[k]) - np.log(pb[k])))) for k in pa_)
    # counts only grow when a unit is added, so the log-ratio is at most Δ/T = ε_g/2 (the
    # factor 2 veil does not take, see veil.release.modes): a unit whose rows escaped
    # bounding (R + 2 in a group) or a temperature too low would exceed it
    assert 0 < worst <= eps_a / 2 + 1e-9
    # and it is nearly attained (a unit piling its R rows onto one value)
    assert worst > 0.6 * eps_a / 2


# ── through a session: charged like any aggregate, refused for free ─────────────────────────


def _session(frame: pd.DataFrame) -> veil.Session:
    return veil.Session.local({"t": frame}, budget=Budget(epsilon=5))


FRAME = pd.DataFrame(
    {
        "code": [1, 1, 1, 1, 1, 1, 2, 2, 3, 50, 50, 50, 50, 50, 50, 50, 50, 50],
        "label": ["x"] * 18,
        "real": [0.5] * 18,
        "g": ["a", "b"] * 9,
    }
)


def test_values_outside_the_bounds_vote_for_no_candidate() -> None:
    # 9 rows hold 50, outside [1, 3]: clamping would make 3 the mode; veil leaves them out
    with _session(FRAME) as s:
        r = s.sql("SELECT MODE(code) AS m FROM t", epsilon=4, bounds={"code": (1, 3)},
                  source=SeededSource("outside"))  # fmt: skip
    assert r.rows == [[1]]


def test_a_grouped_mode_costs_epsilon_once_under_parallel_composition() -> None:
    with _session(FRAME) as s:
        r = s.sql("SELECT g, MODE(code) AS m FROM t GROUP BY g", epsilon=1,
                  bounds={"code": (1, 60)}, domains={"g": ["a", "b"]},
                  source=SeededSource("grouped"))  # fmt: skip
        assert r.cost == Budget(epsilon=1)
        assert s.remaining() == Budget(epsilon=4)
    assert [row[0] for row in r.rows] == ["a", "b"]
    assert all(isinstance(row[1], int) and 1 <= row[1] <= 60 for row in r.rows)


def test_explain_and_the_released_answer_state_the_same_margin() -> None:
    with _session(FRAME) as s:
        e = s.explain("SELECT MODE(code) AS m FROM t", epsilon=1, bounds={"code": (1, 16)})
        r = s.sql("SELECT MODE(code) AS m FROM t", epsilon=1, bounds={"code": (1, 16)})
    margin = mode_margin(Fraction(2), 16, 0.95)  # T = 2Δ/ε = 2, K = 16
    words = f"exceeds every other of the 16 candidates by ≥ {margin:.3g}"
    assert words in str(e)
    assert r.notes == (f"m: {e.errors['m']}",)
    assert words in r.notes[0]
    assert "probability ≥ 95%" in r.notes[0]
    assert r.error_bars() == [[None]]  # a category has no ± bar


def test_a_mode_over_listed_candidates_releases_one_of_them_with_the_column_type() -> None:
    frame = pd.DataFrame({"region": ["n", "s"] * 60, "edu": ["hs", "ba", "ba", "ma"] * 30})
    domains = {"region": ["n", "s"], "edu": ["phd", "ba", "hs", None]}
    with veil.Session.local({"t": frame}, budget=Budget(epsilon=5), domains=domains) as s:
        r = s.sql("SELECT region, MODE(edu) AS m FROM t GROUP BY region", epsilon=2,
                  source=SeededSource("listed"))  # fmt: skip
        e = s.explain("SELECT region, MODE(edu) AS m FROM t GROUP BY region", epsilon=2)
    # n: hs 30, ba 0, ma 30 (not a candidate); s: ba 60: the listed candidates only (NULL
    # dropped: the NULL rule leaves its rows out), 'ma' never
    assert r.types == ("string", "string")
    assert r.rows[1] == ["s", "ba"]
    assert r.rows[0][1] in ("phd", "ba", "hs")
    assert "of the 3 candidates" in e.errors["m"]
    assert r.to_arrow().column("m").type == "string"


def test_adding_a_unit_moves_no_listed_candidate_by_more_than_e_to_the_epsilon() -> None:
    sql = "SELECT g, MODE(code) AS m FROM t GROUP BY g"
    labels = [4, 0, 2, 6, 1]
    options = {"epsilon": 2, "domains": {"g": ["a", "b"], "code": labels}, "max_rows_per_group": 2}
    base = _people(7)
    extra = [(999, "a", 2)] * 4  # bounding keeps 2
    plus = pd.concat([base, pd.DataFrame(extra, columns=base.columns)], ignore_index=True)
    eps_a, pa_ = _pmfs(base, sql, **options)
    eps_b, pb = _pmfs(plus, sql, **options)
    assert eps_a == eps_b == 2
    worst = max(float(np.max(np.abs(np.log(pa_[k]) - np.log(pb[k])))) for k in pa_)
    assert 0.5 * eps_a / 2 < worst <= eps_a / 2 + 1e-9


REFUSED = [
    ("SELECT MODE(code) FROM t", {}, BoundsError, r"bounds for 'code' are required"),
    (
        "SELECT MODE(label) FROM t",
        {},
        InvalidArgumentError,
        r"MODE\(label\) chooses among public candidates, and 'label' \(string\) has none "
        r"declared; pass domains=\{'label': \[value, …\]\}",
    ),
    (
        "SELECT MODE(label) FROM t",
        {"domains": {"label": [1, 2]}},
        InvalidArgumentError,
        r"the candidate 1 of MODE\(label\) is not a string value",
    ),
    (
        "SELECT MODE(label) FROM t",
        {"domains": {"label": ["x", "x"]}},
        InvalidArgumentError,
        r"repeat a value",
    ),
    (
        "SELECT MODE(real) FROM t",
        {"bounds": {"real": (0, 1)}},
        InvalidArgumentError,
        r"MODE\(real\) chooses among public candidates, and 'real' \(real\) has none",
    ),
    (
        "SELECT MODE(code) FROM t",
        {"bounds": {"code": (0.5, 3)}},
        BoundsError,
        r"MODE\(code\) needs integer bounds .* pass bounds=\{'code': \(lowest code",
    ),
    (
        "SELECT MODE(code) FROM t",
        {"bounds": {"code": (0, 2**33)}},
        BoundsError,
        r"at most 2\^32 candidates",
    ),
    (
        "SELECT g, MODE(code) FROM t GROUP BY g",
        {"bounds": {"code": (1, 3)}},
        InvalidArgumentError,
        r"partition selection, which needs delta > 0",
    ),
]


@pytest.mark.parametrize(("sql", "options", "error", "message"), REFUSED)
def test_a_mode_without_public_candidates_is_refused_before_anything_is_charged(
    sql: str, options: dict[str, object], error: type[Exception], message: str
) -> None:
    with _session(FRAME) as s:
        before = s.remaining()
        with pytest.raises(error, match=message):
            s.sql(sql, epsilon=1, **options)  # type: ignore[arg-type]
        assert s.remaining() == before


# ── TOP_K: peeling ───────────────────────────────────────────────────────────────────────────


def top_measurement(eps: Fraction, limit: int, picks: int, rows: int = 1) -> Measurement:
    return dataclasses.replace(measurement(eps, limit, rows), name="top(x, 2)", picks=picks)


def peel_pmf(m: Measurement, values: list[int]) -> dict[tuple[int, ...], float]:
    """The exact probability of every ordered k-tuple: each pick ∝ exp(c_j/(k·T)) among the
    candidates left, written out by enumeration."""
    c = [values.count(j) for j in range(m.limit)]
    t = float(m.scale) * m.picks
    out = {}
    for tup in itertools.permutations(range(m.limit), m.picks):
        p, left = 1.0, list(range(m.limit))
        for j in tup:
            z = sum(math.exp(c[i] / t) for i in left)
            p *= math.exp(c[j] / t) / z
            left.remove(j)
        out[tup] = p
    return out


@pytest.mark.slow
def test_top_k_draws_follow_the_exact_peeling_pmf() -> None:
    m = top_measurement(Fraction(2), 5, 2)
    values = [0] * 6 + [3] * 5 + [4] * 2
    pmf = peel_pmf(m, values)
    tuples = list(pmf)
    src = SeededSource("top-pmf")
    b, c = cells(values)
    observed: Counter[tuple[int, ...]] = Counter()
    for _ in range(4_000):
        code = choose_top(m, b, c, source=src)
        observed[tuple(top_ranks(code, 5, 2))] += 1
    assert set(observed) <= set(tuples)  # two distinct candidates, always
    obs = np.array([observed[t] for t in tuples], dtype=float)
    expected = np.array([pmf[t] for t in tuples]) * 4_000
    assert chi2_pvalue(obs, expected) > P_MIN


def test_top_k_picks_k_distinct_candidates_even_without_data() -> None:
    m = top_measurement(Fraction(1), 4, 4)
    src = SeededSource("top-distinct")
    for _ in range(50):
        assert sorted(top_ranks(choose_top(m, [], [], source=src), 4, 4)) == [0, 1, 2, 3]


def test_adding_a_unit_moves_no_top_k_tuple_by_more_than_e_to_the_epsilon() -> None:
    sql = "SELECT g, TOP_K(code, 2) AS t FROM t GROUP BY g"
    options = {"epsilon": 2, "bounds": {"code": (0, 4)}, "domains": {"g": ["a", "b"]}}
    base = _people(11)
    plus = pd.concat([base, pd.DataFrame([(999, "b", 1)], columns=base.columns)], ignore_index=True)
    pmfs = []
    for frame in (base, plus):
        session = veil.Session.local({"t": frame}, privacy_unit="uid", budget=Budget(epsilon=10))
        agg = session_aggregate(session, sql, **options)
        (m,) = agg.measurements
        assert (m.picks, m.limit) == (2, 5)
        engine = DuckDBEngine({"t": frame})
        try:
            counts = exact(engine, agg).buckets[m.name]
        finally:
            engine.close()
        dense = counts.get(("b",), {})
        values = [j for j, n in dense.items() for _ in range(n)]
        pmfs.append(peel_pmf(m, values))
    eps_g = float(2 * m.sensitivity / m.scale)
    assert eps_g == 2  # the whole budget, as one MODE: the two picks at 1 each
    worst = max(abs(math.log(pmfs[0][t]) - math.log(pmfs[1][t])) for t in pmfs[0])
    assert 0 < worst <= eps_g / 2 + 1e-9  # monotone counts: Δ/(k·T) per pick, k picks


def test_top_k_through_a_session_costs_epsilon_and_names_k_columns() -> None:
    with _session(FRAME) as s:
        r = s.sql("SELECT TOP_K(code, 3) FROM t", epsilon=3, bounds={"code": (1, 3)},
                  source=SeededSource("top-session"))  # fmt: skip
        assert r.cost == Budget(epsilon=3)
        assert r.columns == ("top1_code", "top2_code", "top3_code")
        assert sorted(r.rows[0]) == [1, 2, 3]
        for sql, message in (
            ("SELECT TOP_K(code, 4) FROM t", r"TOP_K\(code, 4\) needs at least 4 candidates"),
            ("SELECT TOP_K(code, 0) FROM t", r"k of TOP_K must be an integer in \[1, 64\]"),
            ("SELECT TOP_K(code, 1.5) FROM t", r"k of TOP_K must be an integer"),
            ("SELECT TOP_K(code) FROM t", r"TOP_K takes a column and k"),
        ):
            before = s.remaining()
            with pytest.raises((InvalidArgumentError, veil.UnsupportedQueryError), match=message):
                s.sql(sql, epsilon=1, bounds={"code": (1, 3)})
            assert s.remaining() == before


def test_the_query_audit_measures_a_mode_by_its_largest_count_change() -> None:
    from veil.audit.query_runs import changes, run

    sql = "SELECT MODE(code) AS m FROM t"
    base = pd.DataFrame({"code": [1, 1, 2, 3, 3, 3]})
    three_away = base.iloc[3:]  # the rows 1, 1, 2 gone (not a neighbour): candidate 1 moves by 2
    options = {"bounds": {"code": (1, 3)}}
    a = run({"t": base}, sql, salt=1, epsilon=Fraction(1), delta=None, options=options)
    b = run({"t": three_away}, sql, salt=1, epsilon=Fraction(1), delta=None, options=options)
    assert a.agg is not None
    assert changes(a.agg, a, b) == {"mode(code)": (Fraction(2), Fraction(1))}
    assert changes(a.agg, a, a) == {"mode(code)": (Fraction(0), Fraction(1))}
