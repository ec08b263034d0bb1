"""Per-record perturbation on Spark: ``mapInArrow``, one CSPRNG per executor, drawn once."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest

import veil
from spark_support import spark_session
from support import SeededSource
from veil.errors import WITHHELD_LOGGER, InvalidArgumentError, QueryFailedError
from veil.local.perturb import perturb

pytestmark = pytest.mark.spark

ROWS_PER_PARTITION = 2_000


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def two_partitions(spark: Any) -> Any:
    """Two partitions holding identical values: 0.5 in every row, a category 'b'."""
    return spark.range(0, 2 * ROWS_PER_PARTITION, numPartitions=2).selectExpr(
        "id", "CAST(0.5 AS DOUBLE) AS x", "'b' AS c"
    )


def test_two_partitions_draw_different_noise(two_partitions: Any) -> None:
    out = perturb(two_partitions, epsilon=1, bounds={"x": (0, 1)})
    x = out.data.toArrow().column("x").to_numpy()
    first, second = x[:ROWS_PER_PARTITION] - 0.5, x[ROWS_PER_PARTITION:] - 0.5
    assert np.count_nonzero(first) > ROWS_PER_PARTITION // 2  # noise was added
    # a random state shipped from the driver would make both partitions' noise identical;
    # independent CSPRNGs agree on a given row only by chance, so the sequences differ almost
    # everywhere.
    assert np.mean(first == second) < 0.5
    assert abs(np.corrcoef(first, second)[0, 1]) < 5 / math.sqrt(ROWS_PER_PARTITION)


def test_the_release_is_materialised_so_every_action_sees_the_same_noise(
    two_partitions: Any,
) -> None:
    out = perturb(two_partitions, epsilon=1, bounds={"x": (0, 1)}, categories={"c": ["a", "b"]})
    once = out.data.toArrow()
    again = out.data.toArrow()
    assert once.equals(again)
    assert once.column_names == ["x", "c"]
    assert set(once.column("c").to_pylist()) == {"a", "b"}


def test_a_spark_perturbation_is_charged_once(spark: Any, two_partitions: Any) -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "events", veil.Budget(epsilon=1))
    perturb(
        two_partitions,
        epsilon=0.25,
        bounds={"x": (0, 1)},
        ledger=ledger,
        analyst="alice",
        dataset="events",
    )
    assert ledger.remaining("alice", "events") == veil.Budget(epsilon=0.75)


def test_a_random_source_cannot_be_shipped_to_executors(two_partitions: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot be shipped to Spark executors"):
        perturb(two_partitions, epsilon=1, bounds={"x": (0, 1)}, source=SeededSource(1))


def test_estimates_from_a_spark_release_match_the_arrow_path_math(two_partitions: Any) -> None:
    out = perturb(two_partitions, epsilon=2, bounds={"x": (0, 1)}, categories={"c": ["a", "b"]})
    # Spark draws from each executor's CSPRNG (no seed): bars at 1 − 1e-9, so that the three
    # checks fail together with probability below 1e-8
    mean = out.mean("x", level=1 - 1e-9)
    assert abs(mean.value - 0.5) <= mean.error_bar
    freq = out.frequencies("c", level=1 - 1e-9)
    assert abs(freq["b"].value - 2 * ROWS_PER_PARTITION) <= freq["b"].error_bar
    assert abs(freq["a"].value) <= freq["a"].error_bar


def test_an_executor_failing_on_a_value_keeps_the_charge_and_only_the_log_has_its_text(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "secret-4711"
    frame = spark.createDataFrame([("1",), (secret,)], "s string").selectExpr(
        f"IF(s = '{secret}', raise_error(concat('leak ', s)), 1.5) AS x"
    )
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "events", veil.Budget(epsilon=1))
    caplog.set_level(logging.ERROR, logger=WITHHELD_LOGGER)
    with pytest.raises(QueryFailedError, match=r"the charge stays \(ε=0.25\)") as info:
        perturb(
            frame,
            epsilon=0.25,
            bounds={"x": (0, 1)},
            ledger=ledger,
            analyst="alice",
            dataset="events",
        )
    assert secret not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    assert ledger.remaining("alice", "events") == veil.Budget(epsilon=0.75)
    (record,) = [r for r in caplog.records if r.name == WITHHELD_LOGGER]
    assert f"leak {secret}" in record.getMessage()


def test_locations_are_perturbed_on_the_executors_on_the_grid(spark: Any) -> None:
    from veil.local import geo

    box = (48.80, 2.25, 48.92, 2.45)
    frame = spark.range(0, 2 * ROWS_PER_PARTITION, numPartitions=2).selectExpr(
        "CAST(48.86 AS DOUBLE) AS lat", "CAST(2.35 AS DOUBLE) AS lon"
    )
    out = perturb(frame, locations={"home": ("lat", "lon")}, epsilon=1, box=box)
    table = out.data.toArrow()
    assert table.column_names == ["lat", "lon"]
    lat, lon = table.column("lat").to_numpy(), table.column("lon").to_numpy()
    b = geo.Box.parse(box)
    x, _y = b.plane(lat, lon, "km")
    assert np.allclose(x / 0.001, np.rint(x / 0.001), atol=1e-6)  # on the 1 m grid
    assert np.all((lat >= 48.80) & (lat <= 48.92))
    first, second = lat[:ROWS_PER_PARTITION], lat[ROWS_PER_PARTITION:]
    assert np.mean(first == second) < 0.5  # each executor drew its own noise
