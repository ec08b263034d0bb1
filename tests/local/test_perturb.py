"""Per-record perturbation on the Arrow / DuckDB path (the Spark path: test_perturb_spark.py).

Statistical tests draw from an injected ``SeededSource`` (fixed seeds, so they are repeatable)
and compare against the distribution the mechanism declares; thresholds are stated per test.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

import veil
from support import SeededSource
from veil import mechanisms
from veil.errors import BoundsError, InvalidArgumentError, SchemaError
from veil.local.perturb import laplace_calibration, perturb

N = 20_000


def _discrete_laplace_pmf(z: np.ndarray, t: float) -> np.ndarray:
    """P(Z = z) for the discrete Laplace distribution with P(z) ∝ exp(-|z| / t)."""
    a = math.exp(-1 / t)
    return (1 - a) / (1 + a) * a ** np.abs(z)


def test_per_record_calibration_is_the_scalar_laplace_mechanisms() -> None:
    for sensitivity, epsilon in [(Fraction(1), Fraction(1)), (Fraction(10**6), Fraction(1, 10))]:
        release = mechanisms.laplace(
            0.0, sensitivity=sensitivity, epsilon=epsilon, source=SeededSource(0)
        )
        assert laplace_calibration(sensitivity, epsilon) == (release.grid, release.noise_scale)


def test_numeric_noise_lies_on_the_grid_and_follows_the_declared_discrete_laplace() -> None:
    table = pa.table({"x": np.full(N, 0.3)})
    out = perturb(table, epsilon=1, bounds={"x": (0, 1)}, source=SeededSource(1))
    k, scale = laplace_calibration(Fraction(1), Fraction(1))
    steps = np.ldexp(out.data.column("x").to_numpy(), -k)
    assert np.all(steps == np.round(steps)), "every output lies on the 2^k grid"
    noise = steps - round(0.3 * 2.0**-k)
    t = float(scale)
    # chi-square goodness of fit, 12 bins of width t/2 over ±3t plus two tail bins. With the
    # fixed seed this is deterministic; p > 1e-3 holds for the right law, while a scale off by
    # 10% (or a batch-sized calibration) gives p < 1e-10 at N = 20 000.
    inner = np.linspace(-3 * t, 3 * t, 13)
    z = np.arange(-40 * math.ceil(t), 40 * math.ceil(t) + 1)  # mass beyond is < e^-40
    expected = np.bincount(
        np.searchsorted(inner, z, side="right"), _discrete_laplace_pmf(z, t), len(inner) + 1
    )
    observed = np.bincount(np.searchsorted(inner, noise, side="right"), minlength=len(inner) + 1)
    assert stats.chisquare(observed, expected / expected.sum() * N).pvalue > 1e-3


def test_values_are_clamped_to_the_bounds_and_nulls_become_the_lower_bound() -> None:
    table = pa.table({"x": pa.array([1e9] * N + [None] * N + [-5.0] * N, pa.float64())})
    out = perturb(table, epsilon=2, bounds={"x": (10, 20)}, source=SeededSource(2))
    k, units = laplace_calibration(Fraction(10), Fraction(2))
    scale = float(units) * 2.0**k
    x = out.data.column("x").to_numpy()
    # each mean has standard error sqrt(2)·scale/sqrt(N); 5 standard errors is the tolerance
    tol = 5 * math.sqrt(2) * scale / math.sqrt(N)
    assert abs(x[:N].mean() - 20) < tol
    assert abs(x[N : 2 * N].mean() - 10) < tol
    assert abs(x[2 * N :].mean() - 10) < tol


def test_categorical_column_goes_through_randomized_response() -> None:
    cats = ["a", "b", "c", "d"]
    table = pa.table({"c": ["b"] * N})
    out = perturb(table, epsilon=1, categories={"c": cats}, source=SeededSource(3))
    values = out.data.column("c").to_pylist()
    assert set(values) <= set(cats)
    # k-ary randomized response keeps the true value with p = e^ε / (e^ε + k - 1); 5 sigma
    p = math.e / (math.e + 3)
    kept = values.count("b") / N
    assert abs(kept - p) < 5 * math.sqrt(p * (1 - p) / N)
    others = [values.count(c) / N for c in ("a", "c", "d")]
    q = 1 / (math.e + 3)
    assert all(abs(f - q) < 5 * math.sqrt(q * (1 - q) / N) for f in others)


def test_the_release_holds_only_the_perturbed_columns_in_row_order() -> None:
    table = pa.table(
        {"user_id": [1, 2, 3], "secret": ["x", "y", "z"], "age": [10, 50, 90], "s": ["p", "q", "p"]}
    )
    out = perturb(
        table,
        epsilon=1,
        bounds={"age": (0, 100)},
        categories={"s": ["p", "q"]},
        source=SeededSource(4),
    )
    assert out.data.column_names == ["age", "s"]
    assert out.data.num_rows == 3
    assert out.loss == veil.Budget(epsilon=1)
    assert [c.epsilon for c in out.columns] == [Fraction(1, 2), Fraction(1, 2)]
    assert out.columns[0].sensitivity == 100


def test_each_record_is_perturbed_independently() -> None:
    table = pa.table({"x": np.full(N, 0.5)})
    x = perturb(table, epsilon=1, bounds={"x": (0, 1)}, source=SeededSource(5)).data["x"]
    noise = x.to_numpy() - 0.5
    # neighbouring records' noise is uncorrelated: |r| < 5/sqrt(N)
    assert abs(np.corrcoef(noise[:-1], noise[1:])[0, 1]) < 5 / math.sqrt(N)


def test_duckdb_relations_and_parquet_paths_are_streamed_in_batches(tmp_path: Path) -> None:
    con = duckdb.connect()
    rel = con.sql("SELECT i AS user_id, (i % 7)::DOUBLE AS v FROM range(150000) t(i)")
    out = perturb(rel, epsilon=1, bounds={"v": (0, 6)}, source=SeededSource(6))
    assert out.data.num_rows == 150_000
    assert out.data.column_names == ["v"]
    assert out.data.column("v").to_numpy().std() > 1  # noise was added

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0]}), path)
    assert perturb(path, epsilon=1, bounds={"v": (0, 6)}).data.num_rows == 3


def test_a_ledger_is_charged_epsilon_once_for_the_whole_table() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=3))
    table = pa.table({"x": np.zeros(1000), "c": ["a"] * 1000})
    out = perturb(
        table,
        epsilon=1,
        bounds={"x": (0, 1)},
        categories={"c": ["a", "b"]},
        ledger=ledger,
        analyst="alice",
        dataset="people",
    )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=2)
    assert out.reservation_id is not None
    assert [r.status for r in ledger.history("alice", "people")][-1] == "committed"


def test_a_perturbation_beyond_the_budget_is_refused_and_nothing_is_released() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    table = pa.table({"x": np.zeros(10)})
    with pytest.raises(veil.BudgetExhaustedError):
        perturb(
            table, epsilon=2, bounds={"x": (0, 1)}, ledger=ledger, analyst="alice", dataset="people"
        )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)


def test_charging_without_analyst_or_dataset_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="needs the analyst and the dataset"):
        perturb(
            pa.table({"x": [1.0]}), epsilon=1, bounds={"x": (0, 1)}, ledger=veil.Ledger("sqlite://")
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"bounds": {"x": (1, 0)}}, BoundsError, r"bounds for 'x' must satisfy lower < upper"),
        ({"bounds": {"x": (0, float("inf"))}}, BoundsError, r"bounds for 'x' must be two finite"),
        ({"bounds": {"nope": (0, 1)}}, SchemaError, r"unknown column 'nope'"),
        ({"bounds": {"s": (0, 1)}}, SchemaError, r"column 's' has type string, not a number"),
        ({"categories": {"s": ["a"]}}, InvalidArgumentError, r"at least two distinct"),
        ({}, InvalidArgumentError, r"nothing to perturb"),
        (
            {"bounds": {"x": (0, 1)}, "epsilon": 0},
            InvalidArgumentError,
            r"epsilon must be positive",
        ),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    table = pa.table({"x": [0.5, 0.7], "s": ["a", "zzz"]})
    args: dict[str, object] = {"epsilon": 1, **kwargs}
    with pytest.raises(error, match=message):
        perturb(table, source=SeededSource(7), **args)  # type: ignore[arg-type]


def test_an_unsupported_input_type_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cannot perturb a list"):
        perturb([1, 2, 3], epsilon=1, bounds={"x": (0, 1)})


def test_a_perturbation_refused_for_its_schema_charges_nothing() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    table = pa.table({"s": ["a", "b"]})
    with pytest.raises(SchemaError, match="not a number"):
        perturb(
            table, epsilon=1, bounds={"s": (0, 1)}, ledger=ledger, analyst="alice", dataset="people"
        )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)


def test_a_row_level_session_is_charged_for_a_perturbation() -> None:
    table = pa.table({"x": np.zeros(100)})
    session = veil.Session.local({"t": table}, budget=veil.Budget(epsilon=1), analyst="bob")
    perturb(table, epsilon=0.25, bounds={"x": (0, 1)}, session=session, source=SeededSource(8))
    assert session.remaining() == veil.Budget(epsilon=0.75)


def test_a_session_with_a_privacy_unit_is_refused_because_perturb_protects_records() -> None:
    table = pa.table({"user_id": [1, 1], "x": [0.0, 1.0]})
    session = veil.Session.local(
        {"t": table}, privacy_unit="user_id", budget=veil.Budget(epsilon=1)
    )
    with pytest.raises(InvalidArgumentError, match=r"protects each record on its own"):
        perturb(table, epsilon=0.5, bounds={"x": (0, 1)}, session=session)
    assert session.remaining() == veil.Budget(epsilon=1)


def test_dictionary_encoded_categories_are_perturbed_and_released_decoded() -> None:
    table = pa.table({"c": pa.array(["a", "b"] * 50).dictionary_encode()})
    out = perturb(table, epsilon=1, categories={"c": ["a", "b"]}, source=SeededSource(9))
    assert out.data.schema.field("c").type == pa.string()
    assert set(out.data.column("c").to_pylist()) <= {"a", "b"}
