"""Survey weights on the French LFS sample: usual weekly hours by sex weighted by ``COEFF``
(row-level privacy, ε = 1), against the exact weighted values computed by pandas on the
clamped data.

- Pre-noise: the engine's fixed-point sums of the weights and of the products, in value
  units, equal pandas' Σ clamp(w) and Σ clamp(w)·clamp(x) to within the grid's rounding
  (half a step per row).
- Releases: 400 seeded releases through veil's own release path (``measure`` then ``finish``,
  on the engine's exact statistics, so the 50 000 rows are read once) and 10 end-to-end
  ``Session.sql`` runs: each weighted COUNT(*), SUM and AVG is inside its 95 % bar of the exact
  weighted value.

Documented thresholds. A 95 % bar covers with probability ≥ 0.95. With 400 draws per cell,
P(coverage < 0.91 | p = 0.95) ≈ 5e-4 (binomial), and the draws are seeded, so the outcome is
fixed. Pooled over a column's cells, coverage must be at least 0.95 − 3·sqrt(0.95·0.05/N).
Every bar is built from the exact quantiles of its noise (the weighted mean's through AVG's
bar when both sums are centred at 0, through a cell-wise joint bound otherwise,
``veil.aggregates.wavg``), so across cells the 95th percentile of |error| / half-width must
lie in [0.8, 1.1] — tight, not vacuous. Measured at seed (pooled coverage / 95th percentile):
Laplace n 0.954 / 0.96, total 0.951 / 0.98, hours 0.963 / 0.90; Gaussian (sums centred at
the midpoints) n 0.951 / 0.99, total 0.958 / 0.99, hours 0.938 / 1.04; weights bounds above 0
(centred weights) hours 0.958 / 0.91. Over 8000 draws the centred bars cover 0.950 (Gaussian)
and 0.949 (weights above 0).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

import veil
from support import SeededSource
from veil.compile import dialect, lower
from veil.plan.tree import aggregate_of
from veil.release.draw import finish, measure
from veil.release.keys import group_keys

HOURS = (0, 60)
COEFF = (0, 5)  # the sample's weights lie in [0, 10.5]; 99.9 % of them below 4.2
COEFF_ABOVE_0 = (0.1, 5)  # a weights sum centred away from 0: the cell-wise joint bar
SQL = (
    "SELECT SEX, COUNT(*) AS n, SUM(HWUSUAL) AS total, AVG(HWUSUAL) AS hours "
    "FROM lfs WHERE HWUSUAL < 99 GROUP BY SEX"
)
BOUNDS = {"HWUSUAL": HOURS, "COEFF": COEFF}
DOMAINS = {"SEX": [1, 2]}
REPS = 400
MIN_COVERAGE = 0.91
LEVEL = 0.95


@pytest.fixture(scope="module")
def lfs(lfs_csv: Path) -> pd.DataFrame:
    return pd.read_csv(lfs_csv, usecols=["SEX", "HWUSUAL", "COEFF"])


def exact_weighted(lfs: pd.DataFrame, coeff: tuple[float, float]) -> pd.DataFrame:
    rows = lfs[lfs["HWUSUAL"] < 99]
    w = rows["COEFF"].clip(*coeff)
    x = rows["HWUSUAL"].clip(*HOURS)
    out = pd.DataFrame({"SEX": rows["SEX"], "w": w, "wx": w * x}).groupby("SEX").sum()
    out["hours"] = out["wx"] / out["w"]
    return out


@pytest.fixture(scope="module")
def truth(lfs: pd.DataFrame) -> pd.DataFrame:
    return exact_weighted(lfs, COEFF)


def session(lfs: pd.DataFrame, coeff: tuple[float, float] = COEFF) -> veil.Session:
    return veil.Session.local(
        tables={"lfs": lfs},
        budget=veil.Budget(epsilon=100),
        bounds={**BOUNDS, "COEFF": coeff},
        domains=DOMAINS,
    )


def test_weighted_sums_before_noise_equal_pandas(lfs: pd.DataFrame, truth: pd.DataFrame) -> None:
    s = session(lfs)
    agg = aggregate_of(s.explain(SQL, epsilon=1, weights="COEFF").plan)
    lowered = lower(agg, dialect(s.engine.dialect), salt=7)
    main = s.engine.execute(lowered.main)
    columns = dict(lowered.columns)
    by_name = {m.name: m for m in agg.measurements}
    for row in main.to_pylist():
        sex = row["__k0"]  # a public key of a native type travels as its value
        for name, column in (("sum(COEFF)", "w"), ("sum(HWUSUAL * COEFF)", "wx")):
            m = by_name[name]
            value = m.step * int(row[columns[name]]) + m.centre * int(row["__n"])
            expected = float(truth.loc[sex, column])
            assert float(value) == pytest.approx(expected, abs=float(m.step) * row["__n"] / 2)


def test_explain_shows_the_weighted_sensitivities_and_bars(lfs: pd.DataFrame) -> None:
    e = session(lfs).explain(SQL, epsilon=1, weights="COEFF")
    text = str(e)
    assert "n = COUNT(*) weighted by COEFF" in text
    assert "hours = AVG(HWUSUAL) weighted by COEFF" in text
    usage = {u.measurement: u for u in e.usage}
    assert set(usage) == {"sum(COEFF)", "sum(HWUSUAL * COEFF)"}
    # one row moves Σw by at most w_max = 5 and Σw·x by at most 5·60 = 300 (value units)
    assert "L1 = 5 (value units)" in usage["sum(COEFF)"].sensitivity
    assert "L1 = 300 (value units)" in usage["sum(HWUSUAL * COEFF)"].sensitivity
    assert e.errors["n"].startswith("± ")
    assert "total weight" in e.errors["hours"]


def _releases(
    lfs: pd.DataFrame, coeff: tuple[float, float] = COEFF, budget: Any = 1
) -> list[veil.Result]:
    s = session(lfs, coeff)
    plan = s.explain(SQL, epsilon=budget, weights="COEFF").plan
    agg = aggregate_of(plan)
    lowered = lower(agg, dialect(s.engine.dialect), salt=11)
    main = s.engine.execute(lowered.main)
    stats: dict[Any, dict[str, int]] = {}
    for key, row in zip(group_keys(agg, main, lowered.keys), main.to_pylist(), strict=True):
        stats[key] = {name: int(row[col]) for name, col in lowered.columns}
    return [
        finish(plan, agg, measure(agg, stats, {}, SeededSource(f"weights-{i}"), private=False), "")
        for i in range(REPS)
    ]


def _coverage(
    releases: list[veil.Result], truth: pd.DataFrame
) -> tuple[dict[tuple[str, int], list[bool]], dict[str, list[float]]]:
    inside: dict[tuple[str, int], list[bool]] = {}
    ratios: dict[str, list[float]] = {}
    exact = {"n": "w", "total": "wx", "hours": "hours"}
    for r in releases:
        assert r.columns == ("SEX", "n", "total", "hours")
        for row, bars in zip(r.rows, r.error_bars(LEVEL), strict=True):
            for j, col in enumerate(("n", "total", "hours"), start=1):
                bar = bars[j]
                assert bar is not None
                assert bar > 0
                err = abs(float(row[j]) - float(truth.loc[row[0], exact[col]]))
                inside.setdefault((col, row[0]), []).append(err <= bar)
                ratios.setdefault(col, []).append(err / bar)
    assert len(inside) == 6
    for cell, hits in inside.items():
        assert sum(hits) / len(hits) >= MIN_COVERAGE, f"{cell}: inside {sum(hits)}/{len(hits)}"
    for col, rs in ratios.items():
        pooled = float(np.mean(np.asarray(rs) <= 1))
        floor = LEVEL - 3 * math.sqrt(LEVEL * (1 - LEVEL) / len(rs))
        assert pooled >= floor, f"{col}: inside its bars {pooled:.1%}"
    return inside, ratios


def _q95(ratios: list[float]) -> float:
    return float(np.quantile(ratios, 0.95))


@pytest.mark.parametrize(
    "budget", [pytest.param(1, id="laplace"), pytest.param(veil.Budget(rho=0.1), id="gaussian")]
)
def test_weighted_estimates_fall_inside_their_bars_of_the_exact_weighted_values(
    lfs: pd.DataFrame, truth: pd.DataFrame, budget: Any
) -> None:
    releases = _releases(lfs, budget=budget)
    mechanisms = {m for r in releases[:1] for m in (n.mechanism for n in r.noise.values())}
    assert mechanisms == {"discrete_laplace" if budget == 1 else "discrete_gaussian"}
    _, ratios = _coverage(releases, truth)
    for col, rs in ratios.items():
        assert 0.8 <= _q95(rs) <= 1.1, f"{col}: q95 of err/bar {_q95(rs):.2f}"


def test_weighted_bars_with_weights_above_zero_cover_tightly(lfs: pd.DataFrame) -> None:
    s = session(lfs, COEFF_ABOVE_0)
    agg = aggregate_of(s.explain(SQL, epsilon=1, weights="COEFF").plan)
    weights_sum = next(m for m in agg.measurements if m.name == "sum(COEFF)")
    assert weights_sum.centre != 0  # the path under test: a sum centred away from 0
    _, ratios = _coverage(_releases(lfs, COEFF_ABOVE_0), exact_weighted(lfs, COEFF_ABOVE_0))
    for col, rs in ratios.items():
        assert 0.8 <= _q95(rs) <= 1.1, f"{col}: q95 of err/bar {_q95(rs):.2f}"


def test_weighted_hours_by_sex_end_to_end_are_inside_their_bars(
    lfs: pd.DataFrame, truth: pd.DataFrame
) -> None:
    con = duckdb.connect()
    ledger = veil.Ledger("sqlite://")
    ledger.grant("weights-test", "lfs", veil.Budget(epsilon=100))
    misses = 0
    for i in range(10):
        # a fresh registration of the data each time: a new cache key, so fresh noise
        s = veil.Session.local(
            tables={"lfs": lfs},
            ledger=ledger,
            analyst="weights-test",
            dataset="lfs",
            connection=con,
            bounds=BOUNDS,
            domains=DOMAINS,
        )
        r = s.sql(SQL, epsilon=1, weights="COEFF", source=SeededSource(f"lfs-weights-{i}"))
        assert not r.cached
        for row, bars in zip(r.rows, r.error_bars(LEVEL), strict=True):
            hours, bar = float(row[3]), bars[3]
            assert bar is not None
            misses += abs(hours - float(truth.loc[row[0], "hours"])) > bar
            # weighted and unweighted differ: the weighted mean is the weighted one
            assert abs(hours - float(truth.loc[row[0], "hours"])) < 2
    con.close()
    assert ledger.remaining("weights-test", "lfs").eps == 90  # ε = 1 charged per run
    assert misses <= 2  # 20 cells at 95 %: P(> 2 misses) ≈ 0.075 without seeds; seeded: fixed
