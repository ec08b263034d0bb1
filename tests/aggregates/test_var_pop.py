"""VAR_POP and STDDEV_POP: the population spread kinds (``veil.aggregates.var_pop``)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from support import SeededSource
from system.prenoise import compile_query, exact
from veil import Budget, Session
from veil.aggregates import kind
from veil.aggregates.base import Group
from veil.engines.duckdb import DuckDBEngine
from veil.release.estimators import column_models, noise_models

LO, HI = 0.0, 100.0


def frame(n: int = 4000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {"g": rng.choice(["a", "b"], n), "x": rng.normal(40, 25, n)}  # some values clamp
    )


def test_the_sql_names_parse_to_the_population_kinds() -> None:
    with Session.local({"t": frame()}, bounds={"x": (LO, HI)}) as s:
        plan = s.explain("SELECT VAR_POP(x) AS v, STDDEV_POP(x) AS sd FROM t", epsilon=1).plan
    text = str(plan)
    assert "'var_pop'" in text
    assert "'stddev_pop'" in text


def test_on_exact_statistics_the_estimate_is_the_population_variance_of_clamped_values() -> None:
    df = frame()
    engine = DuckDBEngine({"t": df})
    agg = compile_query(
        engine,
        "SELECT g, VAR_POP(x) AS v, STDDEV_POP(x) AS sd, VARIANCE(x) AS vs FROM t GROUP BY g",
        budget=Budget(epsilon=1),
        bounds={"x": (LO, HI)},
        domains={"g": ["a", "b"]},
    )
    stats = exact(engine, agg).stats
    models, noise = column_models(agg), noise_models(agg)
    clamped = df.assign(c=df.x.clip(LO, HI))
    for (key,), group in clamped.groupby("g"):
        row = stats[(key,)]
        v, sd, vs = (kind(m.function).estimate(Group(m, row, noise)) for m in models)
        # the fixed-point grid rounds each row by at most half a step of 2^-30 of the width
        assert v == pytest.approx(np.var(group.c, ddof=0), rel=1e-6)
        assert sd == pytest.approx(math.sqrt(np.var(group.c, ddof=0)), rel=1e-6)
        n = len(group)
        assert v == pytest.approx(vs * (n - 1) / n, rel=1e-9)  # the same statistics


def test_a_noisy_release_is_post_processing_of_the_same_measurements_as_variance() -> None:
    with Session.local({"t": frame()}, bounds={"x": (LO, HI)}, budget=Budget(epsilon=10)) as s:
        r = s.sql(
            "SELECT VAR_POP(x) AS v, VARIANCE(x) AS vs, STDDEV_POP(x) AS sd FROM t",
            epsilon=1,
            source=SeededSource(3),
        )
    ((v, vs, sd),) = r.rows
    n = 4000
    assert v == pytest.approx(vs * (n - 1) / n, rel=1e-3)  # n̂ within a few rows of n
    assert sd == pytest.approx(math.sqrt(v), rel=1e-12)
    (bars,) = r.error_bars()
    assert all(b is not None and b > 0 for b in bars)


def test_error_bars_cover_the_noise_at_their_level() -> None:
    """Empirical coverage of the 90 % bar over 150 seeded releases of a 4,000-row table.

    The bar is the delta method's (first order in 1/n): with n = 4,000 its coverage is within
    a percent of the level. Threshold: ≥ 0.82 of 150 (the binomial 0.1 % lower tail at 0.9 is
    about 0.83), so a bar that ignored a noise term or the count's noise would fail.
    """
    df = frame()
    truth = float(np.var(df.x.clip(LO, HI), ddof=0))
    hits = 0
    runs = 150
    with Session.local({"t": df}, bounds={"x": (LO, HI)}, budget=Budget(epsilon=runs * 1)) as s:
        for seed in range(runs):
            r = s.sql(
                f"SELECT VAR_POP(x) AS v FROM t WHERE {seed} >= 0",  # a new query each time
                epsilon=0.5,
                source=SeededSource(1000 + seed),
            )
            ((v,),) = r.rows
            ((bar,),) = r.error_bars(0.9)
            hits += abs(v - truth) <= bar
    assert hits / runs >= 0.82


def test_the_kind_reads_what_variance_reads_and_splits_the_budget_alike() -> None:
    df = frame()
    engine = DuckDBEngine({"t": df})
    pop = compile_query(
        engine, "SELECT VAR_POP(x) FROM t", budget=Budget(epsilon=1), bounds={"x": (LO, HI)}
    )
    samp = compile_query(
        engine, "SELECT VARIANCE(x) FROM t", budget=Budget(epsilon=1), bounds={"x": (LO, HI)}
    )
    assert [(m.name, m.budget) for m in pop.measurements] == [
        (m.name, m.budget) for m in samp.measurements
    ]
    assert sum((m.budget.eps for m in pop.measurements), Fraction(0)) == 1
