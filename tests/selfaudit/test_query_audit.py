"""``veil audit query`` end to end: veil's representative queries PASS at their claimed
parameters on the real PUMS and LFS samples, the same SUM passes on data crafted to overflow
64 bits while a mechanism whose int64 sum wraps FAILs, and every report says plainly that the
audit is not differentially private.

Thresholds. Each audit draws 600–1000 releases per side from a seeded source (so each verdict
is fixed) and tests every cell of every neighbour with the overall confidence 0.95 split over
the tests: a correct query FAILs with probability at most 0.05 whatever the seed. The
wrapping sum's true loss is about 2ε (its wrapped sum moves by 2^63, twice the sensitivity):
with 4000 releases per side the bound at confidence 0.95 must exceed ε = 1 (measured at seed:
2.7).
"""

from __future__ import annotations

import json
import math
import zipfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pytest

from support import SeededSource
from veil.audit.query import NOT_DP, QueryAudit, judge, query
from veil.audit.query_controls import UPPER, overflow_pairs, wrapping_sum
from veil.audit.query_runs import Outcome, Run, changes, run
from veil.audit.query_stats import epsilon_lower_bound
from veil.errors import InvalidArgumentError

pytestmark = pytest.mark.statistical

PUMS_SCHEMA = {"pums": {"age": "INTEGER", "sex": "INTEGER", "educ": "INTEGER", "income": "DOUBLE"}}
INCOME = {"income": (0, 200_000)}


def _passes(audit: QueryAudit) -> None:
    problems = [p for n in audit.neighbours for p in n.problems]
    assert audit.verdict == "PASS", (problems, audit.coverage, audit.notes)
    assert audit.exit_code == 0
    for n in audit.neighbours:
        assert n.outcome == n.neighbour_outcome == "released"
        for change, sensitivity in n.changes.values():
            assert change <= sensitivity


@pytest.mark.parametrize(
    ("sql", "options"),
    [
        pytest.param("SELECT COUNT(*) AS n FROM pums", {}, id="count"),
        pytest.param("SELECT SUM(income) AS s FROM pums", {"bounds": INCOME}, id="sum"),
        pytest.param(
            "SELECT AVG(income) AS m FROM pums WHERE age >= 30", {"bounds": INCOME}, id="avg"
        ),
        pytest.param(
            "SELECT educ, COUNT(*) AS n, SUM(income) AS s FROM pums GROUP BY educ",
            {"bounds": INCOME, "delta": 1e-6},
            id="grouped-unknown-keys",
        ),
        pytest.param(
            "SELECT MEDIAN(age) AS med FROM pums",
            {"bounds": {"age": (0, 100)}, "quantile_buckets": 32},
            id="median",
        ),
    ],
)
def test_representative_queries_pass(pums: Path, sql: str, options: dict[str, Any]) -> None:
    releases = 300 if "MEDIAN" in sql else 1000
    audit = query(
        sql,
        {"pums": pums},
        schema=PUMS_SCHEMA,
        epsilon=1,
        releases_per_side=releases,
        source=SeededSource(sql),
        **options,
    )
    _passes(audit)
    names = {n.name for n in audit.neighbours}
    assert {"remove-largest", "add-upper", "add-lower"} <= names
    if "GROUP BY" in sql:
        assert {"remove-smallest-group", "add-new-group"} <= names
        new = next(n for n in audit.neighbours if n.name == "add-new-group")
        assert "selection" in new.changes  # partition selection's count moved, within bounds
    if "SUM" in sql:
        assert any(n.crafted for n in audit.neighbours)
    if "MEDIAN" not in sql:
        assert audit.coverage
        assert not any(c.failed for c in audit.coverage)
        for c in audit.coverage:  # a 95 % bar covers about 95 % of releases
            assert c.interval[0] <= 0.95 + 0.03
            assert c.interval[1] >= 0.95 - 0.03


def test_bars_cover_the_bounded_value_and_bounding_bias_shows_against_the_raw(pums: Path) -> None:
    """Incomes above 200,000 are clamped: the bars are about the clamped answer, so their
    coverage of the raw average falls well below 95 % while that of the exact bounded value
    does not."""
    audit = query(
        "SELECT educ, AVG(income) AS m FROM pums GROUP BY educ",
        {"pums": pums},
        schema=PUMS_SCHEMA,
        epsilon=1,
        delta=1e-6,
        bounds={"income": (0, 50_000)},
        releases_per_side=600,
        source=SeededSource("bias"),
    )
    (m,) = audit.coverage
    assert not m.failed
    assert m.covered / m.total >= 0.93
    assert m.raw_covered is not None
    assert m.raw_total
    assert m.raw_covered / m.raw_total < 0.8


def test_lfs_grouped_hours_pass(lfs_zip: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(lfs_zip) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".csv")]
        z.extract(name, tmp_path)
    audit = query(
        "SELECT SEX, COUNT(*) AS n, AVG(HWUSUAL) AS hours FROM lfs WHERE HWUSUAL < 99 GROUP BY SEX",
        {"lfs": tmp_path / name},
        schema={"lfs": {"SEX": "INTEGER", "HWUSUAL": "DOUBLE"}},
        epsilon=1,
        delta=1e-6,
        bounds={"HWUSUAL": (0, 60)},
        releases_per_side=800,
        source=SeededSource("lfs"),
    )
    _passes(audit)


def test_an_int64_sum_that_wraps_fails_its_crafted_neighbours() -> None:
    """The positive control: correct noise, a wrapping sum (veil.audit.query_controls)."""
    fn = wrapping_sum(Fraction(1), source=SeededSource("wrap"))
    ((d, d2),) = overflow_pairs()
    a = np.asarray(fn(d, 4000), dtype=float)
    b = np.asarray(fn(d2, 4000), dtype=float)
    bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=0.0, confidence=0.95)
    assert bound.epsilon > 1.0


def test_veil_sums_the_same_overflowing_data_exactly() -> None:
    ((d, _),) = overflow_pairs()
    table = pa.table({"x": pa.array(d, type=pa.int64())})
    audit = query(
        "SELECT SUM(x) AS s FROM t",
        {"t": table},
        epsilon=1,
        bounds={"x": (0, UPPER)},
        releases_per_side=1000,
        source=SeededSource("veil-sum"),
    )
    _passes(audit)
    by_name = {n.name: n for n in audit.neighbours}
    assert {"add-upper", "crafted-int-max", "crafted-2^53+1"} <= set(by_name)
    # adding a value at the bound takes the exact sum past 2^63 - 1: it moves by exactly
    # the sensitivity, no more (no wrap), and nothing fails
    ((change, sensitivity),) = [
        v for k, v in by_name["add-upper"].changes.items() if k.startswith("sum")
    ]
    assert change == sensitivity


def _count(pums: Path, *, epsilon: float, releases: int) -> QueryAudit:
    return query(
        "SELECT COUNT(*) AS n FROM pums",
        {"pums": pums},
        epsilon=epsilon,
        releases_per_side=releases,
        source=SeededSource(f"count-{releases}"),
    )


def test_every_output_says_the_audit_is_not_private(pums: Path) -> None:
    audit = _count(pums, epsilon=1, releases=100)
    lines = audit.lines()
    assert lines[0] == NOT_DP
    assert lines[-1] == NOT_DP
    assert "does not prove privacy" in NOT_DP
    report = json.loads(json.dumps(audit.to_json()))
    assert report["warning"] == NOT_DP
    assert report["verdict"] in ("PASS", "INCONCLUSIVE")
    assert report["false_alarm_rate"] == pytest.approx(0.05)
    assert math.isfinite(report["smallest_detectable_epsilon"])


def test_too_few_releases_for_a_large_epsilon_is_inconclusive(pums: Path) -> None:
    audit = _count(pums, epsilon=4, releases=40)
    assert audit.verdict == "INCONCLUSIVE"
    assert audit.exit_code == 2


def test_a_query_refused_on_the_data_is_inconclusive_and_says_why(pums: Path) -> None:
    audit = query(
        "SELECT SUM(income) AS s FROM pums",
        {"pums": pums},
        schema=PUMS_SCHEMA,
        epsilon=1,
        releases_per_side=100,
    )
    assert audit.verdict == "INCONCLUSIVE"
    assert any("bounds" in note and "refused" in note for note in audit.notes)


def test_the_audit_reads_only_files_the_caller_names(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"no file at .*the audit runs only on a CSV or Parquet"
    ):
        query("SELECT COUNT(*) AS n FROM t", {"t": str(tmp_path / "missing.csv")}, epsilon=1)
    with pytest.raises(InvalidArgumentError, match="releases must be at least 20 per side, got 5"):
        query(
            "SELECT COUNT(*) AS n FROM t",
            {"t": pa.table({"a": [1]})},
            epsilon=1,
            releases_per_side=5,
        )


def test_the_audit_keeps_no_ledger(pums: Path, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    query(
        "SELECT COUNT(*) AS n FROM pums",
        {"pums": pums},
        epsilon=1,
        releases_per_side=50,
        source=SeededSource("ledger"),
    )
    assert list(tmp_path.iterdir()) == []


def test_a_neighbour_whose_outcome_or_statistics_differ_fails(pums: Path) -> None:
    """The two checks made before any sampling, on real runs of the same query: a failure on
    one side only, and exact statistics that moved by more than the sensitivity (D against
    a dataset two units away, which a neighbour never is)."""
    sql = "SELECT COUNT(*) AS n FROM pums"
    table = pa.csv.read_csv(pums)
    options = {"bounds": {}}
    base = run({"pums": table}, sql, salt=1, epsilon=Fraction(1), delta=None, options=options)
    two_away = run(
        {"pums": table.slice(2)}, sql, salt=1, epsilon=Fraction(1), delta=None, options=options
    )
    assert base.agg is not None
    moved = changes(base.agg, base, two_away)
    assert moved["count"] == (2, 1)
    assert judge(base, two_away, moved) == ["count moved by 2, more than its sensitivity 1"]
    failed = Run(Outcome("failed", "QueryFailedError", "the query failed after the engine began"))
    (problem,) = judge(base, failed, {})
    assert problem.startswith("the outcome differs: D released; D′ failed: QueryFailedError")
    assert judge(base, base, changes(base.agg, base, base)) == []
