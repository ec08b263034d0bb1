"""Audit: whether a query is released, refused or fails never depends on one person's rows.

DESIGN §1, "failure is an output". A property-based test hunts the whole class: hypothesis
generates a table of adversarial types and values — dates and timestamps at their extremes and
with time zones, nanoseconds (DuckDB), DECIMAL(38, s), 64-bit unsigned and 128-bit integers,
NaN, ±inf, −0.0, subnormals, blobs, UUIDs, intervals, enums, dictionary strings, odd Unicode —
adversarial bounds (subnormal, tiny and huge widths, nearly equal ends, beyond 1e308) and a
query of every aggregate, grouped (unknown keys, public keys, histogram bins) or not, with or
without WHERE. It then adds one unit whose rows hold adversarial values and checks, on every
engine of ``harness.HARNESSES``:

- the outcome on both neighbours is the same — released, refused before reserving (nothing
  charged; the same error type and message), or failed after the charge — with the same
  warnings;
- nothing fails after the charge at all: the path after the engine starts reading is total;
- no message quotes a value of the table (every string cell carries a marker).

Examples are derandomized (the same cases every run, so CI is repeatable); set
``VEIL_HYPOTHESIS_RANDOM=1`` to search new ones locally.
"""

from __future__ import annotations

import decimal
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import veil
from harness import HARNESSES, Harness
from veil.errors import QueryFailedError, UserError, VeilWarning

MARK = "sécret⁂"  # in every string cell: no message may contain it
UNIT = 10**6  # the added unit's id

RANDOM = os.environ.get("VEIL_HYPOTHESIS_RANDOM") == "1"

# -- values ---------------------------------------------------------------------------------

TINY = 5e-324
FLOATS = st.one_of(
    st.sampled_from(
        [0.0, -0.0, TINY, -TINY, 1e308, -1e308, math.inf, -math.inf, math.nan, 2.0**53 + 1]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
)
INT64 = st.one_of(
    st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 2**53 + 1]),
    st.integers(-(2**63), 2**63 - 1),
)
UINT64 = st.one_of(st.sampled_from([0, 2**64 - 1, 2**63]), st.integers(0, 2**64 - 1))
DECIMALS = st.one_of(
    st.sampled_from(["9999999999999999999999999999.9999999999", "-0.0000000001", "0"]),
    st.decimals(min_value=-(10**27), max_value=10**27, places=10, allow_nan=False),
).map(decimal.Decimal)
HUGE = st.integers(-(2**127) + 1, 2**127 - 1)  # HUGEINT's range (DuckDB)
UNICODE = st.text(
    alphabet=st.sampled_from(["a", "é", "\u0301", "\u202e", "𝔘", "\x00", "'", '"', "\\", " "]),
    max_size=4,
)
TEXT = UNICODE.map(lambda s: f"{MARK}{s}")
DAYS = st.one_of(  # date32: from year −5 877 641 to 5 881 580
    st.sampled_from([-719_162, 2_932_896, 2_932_897, 10**7, -(10**6), 0]),
    st.integers(-(10**7), 10**7),
)
MICROS = st.one_of(
    st.sampled_from([-(2**62), 2**62, 0, 253_402_300_800_000_000]), st.integers(-(2**62), 2**62)
)


@dataclass(frozen=True)
class Kind:
    """A column type: the Arrow type the values are built in, their strategy, and (for
    DuckDB-only types) the SQL that casts the Arrow column into the type under test."""

    name: str
    arrow: pa.DataType
    values: st.SearchStrategy[Any]
    cast: str | None = None  # a DuckDB expression of the column {c}
    numeric: bool = False
    domain_ok: bool = False  # a public domain of Python values can be declared for it


def _ms(days: int) -> int:
    return days * 86_400_000_000


KINDS = [
    Kind("int64", pa.int64(), INT64, numeric=True, domain_ok=True),
    Kind("uint64", pa.uint64(), UINT64, numeric=True, domain_ok=True),
    Kind("int8", pa.int8(), st.integers(-128, 127), numeric=True, domain_ok=True),
    Kind("float64", pa.float64(), FLOATS, numeric=True, domain_ok=True),
    Kind("float32", pa.float32(), st.floats(width=32), numeric=True),
    Kind("decimal", pa.decimal128(38, 10), DECIMALS, numeric=True),
    Kind("string", pa.string(), TEXT, domain_ok=True),
    Kind("dictionary", pa.dictionary(pa.int32(), pa.string()), TEXT),
    Kind("bool", pa.bool_(), st.booleans(), domain_ok=True),
    Kind("date", pa.date32(), DAYS),
    Kind("timestamp", pa.timestamp("us"), MICROS),
    Kind("timestamptz", pa.timestamp("us", tz="Asia/Kathmandu"), MICROS),
    Kind("binary", pa.binary(), st.binary(max_size=6)),
    # DuckDB only
    Kind("timestamp_ns", pa.timestamp("ns"), INT64),
    Kind("hugeint", pa.string(), HUGE.map(str), cast="CAST({c} AS HUGEINT)", numeric=True),
    Kind(
        "uhugeint", pa.string(), st.integers(0, 2**128 - 1).map(str), cast="CAST({c} AS UHUGEINT)"
    ),
    Kind("uuid", pa.string(), st.uuids().map(str), cast="CAST({c} AS UUID)"),
    Kind("interval", pa.int64(), st.integers(-(2**40), 2**40), cast="to_microseconds({c})"),
    Kind("enum", pa.string(), st.sampled_from(["a", "b"]), cast="CAST({c} AS ENUM('a', 'b'))"),
    Kind("list", pa.list_(pa.float64()), st.lists(FLOATS | st.none(), max_size=2)),
]
VALUE_KINDS = [k for k in KINDS if k.numeric]

BOUNDS = st.one_of(
    st.sampled_from(
        [
            (0, 1),
            (-1e16, 1e16),
            (0, 1e-300),
            (0, TINY),
            (1e16, 1e16 + 2),
            (1.0, math.nextafter(1.0, 2.0)),
            (-1e308, 1e308),
            (5, 5),
            (0, 1e100),
            (-1e100, -1e100 + 1e85),
            (0, 1e-100),
            (-(2**63), 2**63),
        ]
    ),
    st.tuples(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(allow_nan=False, allow_infinity=False),
    )
    .map(sorted)
    .map(tuple),
)

AGGREGATES = [
    "COUNT(*)",
    "COUNT(x)",
    "SUM(x)",
    "AVG(x)",
    "VARIANCE(x)",
    "STDDEV(x)",
    "MEDIAN(x)",
    "QUANTILE(x, 0.9)",
    "MIN(x)",
    "MAX(x)",
    "COUNT(DISTINCT uid)",
]


# -- tables and queries ---------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    key: Kind
    value: Kind
    base: list[dict[str, Any]]
    unit: list[dict[str, Any]]
    sql: str
    options: dict[str, Any]

    def table(self, with_unit: bool) -> pa.Table:
        rows = self.base + (self.unit if with_unit else [])
        return pa.table(
            {
                "uid": pa.array([r["uid"] for r in rows], pa.int64()),
                "g": _array([r["g"] for r in rows], self.key),
                "x": _array([r["x"] for r in rows], self.value),
                "w": pa.array([r["w"] for r in rows], pa.string()),
            }
        )

    def casts(self) -> dict[str, str]:
        out = {}
        for column, kind in (("g", self.key), ("x", self.value)):
            if kind.cast is not None:
                out[column] = kind.cast.format(c=f'"{column}"')
        return out


def _array(values: list[Any], kind: Kind) -> pa.Array:
    if kind.name == "date":
        return pa.array(values, pa.int32()).cast(pa.date32())
    if pa.types.is_timestamp(kind.arrow):
        return pa.array(values, pa.int64()).cast(kind.arrow)
    if pa.types.is_dictionary(kind.arrow):
        return pa.array(values, pa.string()).dictionary_encode()
    return pa.array(values, kind.arrow)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    key = draw(st.sampled_from(KINDS))
    value = draw(st.sampled_from(VALUE_KINDS))

    def row(uid: int) -> dict[str, Any]:
        return {
            "uid": uid,
            "g": draw(st.none() | key.values),
            "x": draw(st.none() | value.values),
            "w": draw(st.sampled_from(["target", "other"]) | TEXT),
        }

    base = [row(u) for u in range(draw(st.integers(1, 5))) for _ in range(draw(st.integers(1, 3)))]
    unit = [row(UNIT) for _ in range(draw(st.integers(1, 3)))]
    aggs = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
    select = [f"{a} AS a{i}" for i, a in enumerate(aggs)]
    grouping = draw(st.sampled_from(["none", "unknown", "public", "bins"]))
    options: dict[str, Any] = {
        "epsilon": draw(st.sampled_from([1, 0.25, 1e-6])),
        "bounds": {"x": draw(BOUNDS)},
        "max_groups": draw(st.sampled_from([None, 1, 2])),
        "max_rows_per_group": draw(st.sampled_from([None, 1, 2])),
    }
    group = ""
    if grouping in ("unknown", "public"):
        select.insert(0, "g")
        group = " GROUP BY g"
        options["delta"] = 1e-6
        if grouping == "public" and key.domain_ok:
            seen = [r["g"] for r in base if r["g"] is not None]
            domain = list(dict.fromkeys([*seen[:2], *draw(st.lists(key.values, max_size=2))]))
            if domain and len({type(v) for v in domain}) == 1:
                options["domains"] = {"g": domain}
                del options["delta"]
    elif grouping == "bins":
        edges = draw(st.lists(FLOATS.filter(math.isfinite), min_size=2, max_size=4, unique=True))
        text = ", ".join(repr(float(e)) for e in sorted(edges))
        select.insert(0, f"BIN(x, {text}) AS b")
        group = " GROUP BY b"
    where = draw(st.sampled_from(["", " WHERE w = 'target'", " WHERE w <> 'other' AND x > 0"]))
    sql = f"SELECT {', '.join(select)} FROM t{where}{group}"
    return Case(key, value, base, unit, sql, options)


# -- the property ---------------------------------------------------------------------------

Outcome = tuple[str, str, str, tuple[str, ...]]


def run(harness: Harness, case: Case, with_unit: bool, tmp: Path) -> Outcome | None:
    table = case.table(with_unit)
    casts = case.casts()
    if not harness.supports(table, casts):
        return None
    session = harness.session(
        table,
        casts,
        tmp,
        privacy_unit="uid",
        budget=veil.Budget(epsilon=10**6, delta="0.001"),
    )
    return outcome(session, case.sql, case.options)


def outcome(session: veil.Session, sql: str, options: dict[str, Any]) -> Outcome:
    """What the analyst learns from asking ``sql``: released, refused free (or charged), or
    failed after the charge — with the error's type and message and every warning."""
    before = session.remaining()
    with warnings.catch_warnings(record=True) as caught:  # warnings are outputs too
        warnings.simplefilter("always", VeilWarning)
        try:
            session.sql(sql, **options)
            kind, error, message = "released", "", ""
        except QueryFailedError as err:
            kind, error, message = "failed after the charge", "QueryFailedError", str(err)
        except UserError as err:
            charged = session.remaining() != before
            kind = "refused but charged" if charged else "refused free"
            error, message = type(err).__name__, str(err)
        finally:
            session.close()
    said = tuple(str(w.message) for w in caught if issubclass(w.category, VeilWarning))
    return (kind, error, message, said)


def check(harness: Harness, case: Case, tmp: Path) -> None:
    with_unit = run(harness, case, True, tmp)
    without = run(harness, case, False, tmp)
    if with_unit is None or without is None:
        return
    where = (
        f"{harness.name}: {case.sql} with {case.options} (key {case.key.name}, x {case.value.name})"
    )
    assert with_unit == without, (
        f"the outcome depends on one unit's rows — {where}: {with_unit} vs {without}"
    )
    assert with_unit[0] in ("released", "refused free"), f"{where}: {with_unit}"
    for text in (with_unit[2], *with_unit[3]):
        assert MARK not in text, f"a message quotes a value — {where}: {text}"


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_outcome_of_a_query_never_depends_on_one_units_rows(
    harness: Harness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    spark = harness.name == "spark"
    tmp = tmp_path_factory.mktemp(f"outcomes-{harness.name}")

    @settings(
        max_examples=40 if spark else 400,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=cases())
    def prop(case: Case) -> None:
        check(harness, case, tmp)

    prop()


# -- CSV sources: one adversarial *line* ----------------------------------------------------

CSV_SCHEMA = {"uid": "BIGINT", "g": "VARCHAR", "x": "DOUBLE", "d": "DATE", "w": "VARCHAR"}
ODD_CELLS = st.sampled_from(
    [
        "N/A", "", '""', '"', '"unterminated', '"1,5"', '"a""b"', '"x"y', "03/02/2001",
        "2024-02-30", "2024-01-31T25:00", "inf", "-inf", "nan", "1e999", "-0", " 12 ",
        "١٢", "0x1F", "1_000", "\x00", "target", "9" * 400, "é\u0301", "\u202e",
    ]
)  # fmt: skip
CSV_AGGREGATES = [*AGGREGATES, "COUNT(DISTINCT x)", "SUM(DISTINCT x)", "AVG(DISTINCT x)"]
POSITIONS = ("first", "middle", "last")  # where the odd line goes among the data lines


@dataclass(frozen=True)
class CsvCase:
    """A CSV (header and data lines), the neighbour's adversarial line and where it goes, a
    query and its options, and whether the columns' types are declared."""

    lines: list[str]
    odd: str
    position: str
    sql: str
    options: dict[str, Any]
    declared: bool

    def text(self, with_odd: bool) -> str:
        header, rows = self.lines[0], self.lines[1:]
        if with_odd:
            at = {"first": 0, "middle": len(rows) // 2, "last": len(rows)}[self.position]
            rows = [*rows[:at], self.odd, *rows[at:]]
        return "\n".join([header, *rows]) + "\n"


@st.composite
def csv_cases(draw: st.DrawFn) -> CsvCase:
    lines = ["uid,g,x,d,w"]
    for u in range(draw(st.integers(1, 6))):
        for _ in range(draw(st.integers(1, 3))):
            x = draw(st.sampled_from(["1.5", "-3", "1e16", "", "0.1", "7"]))
            d = draw(st.sampled_from(["2020-01-01", "2024-06-30", "", "1999-12-31"]))
            g = draw(st.sampled_from(["a", "b", '"c,d"', ""]))
            w = draw(st.sampled_from(["target", "other", f"{MARK}1"]))
            lines.append(f"{u},{g},{x},{d},{w}")
    cells = draw(st.lists(ODD_CELLS, min_size=0, max_size=7))
    if draw(st.booleans()):  # mostly a well-formed unit id in front
        cells = [str(UNIT), *cells]
    odd = ",".join(cells)
    aggs = draw(st.lists(st.sampled_from(CSV_AGGREGATES), min_size=1, max_size=3, unique=True))
    if "COUNT(DISTINCT uid)" not in aggs and draw(st.booleans()):  # units, often
        aggs = ["COUNT(DISTINCT uid)", *aggs[:2]]
    select = [f"{a} AS a{i}" for i, a in enumerate(aggs)]
    options: dict[str, Any] = {"epsilon": 1, "bounds": {"x": draw(BOUNDS)}}
    group = ""
    key = draw(st.sampled_from(["", "g", "d"]))
    if key:
        select.insert(0, key)
        group = f" GROUP BY {key}"
        options["delta"] = 1e-6
    where = draw(
        st.sampled_from(["", " WHERE w = 'target'", " WHERE d > DATE '2020-01-01'", " WHERE x > 0"])
    )
    sql = f"SELECT {', '.join(select)} FROM t{where}{group}"
    position = draw(st.sampled_from(POSITIONS))
    declared = draw(st.booleans())
    return CsvCase(lines, odd, position, sql, options, declared)


def _csv_session(engine: str, path: Path, declared: bool) -> veil.Session:
    options: dict[str, Any] = {
        "privacy_unit": "uid",
        "budget": veil.Budget(epsilon=10**6, delta="0.001"),
        "schema": {"t": CSV_SCHEMA} if declared else None,
    }
    if engine == "spark":
        from spark_support import spark_session

        return veil.Session.spark(spark_session(), {"t": str(path)}, **options)
    return veil.Session.local({"t": path}, **options)


@pytest.mark.parametrize("engine", ["duckdb", pytest.param("spark", marks=pytest.mark.spark)])
def test_on_a_csv_the_outcome_never_depends_on_one_line(
    engine: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same property on a CSV source, declared or not (every column text): the neighbour
    adds one line — first, in the middle or last among the data lines — whose cells are
    non-numeric, empty, quoted oddly, in another date format, too many or too few (a unit's
    row that the reader must take on its own, without touching other lines); the queries
    include DISTINCT aggregates."""
    tmp = tmp_path_factory.mktemp(f"csv-outcomes-{engine}")
    files = iter(range(10**6))

    @settings(
        max_examples=30 if engine == "spark" else 200,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=csv_cases())
    def prop(case: CsvCase) -> None:
        outcomes = []
        for with_odd in (True, False):
            path = tmp / f"t{next(files)}.csv"
            path.write_bytes(case.text(with_odd).encode("utf-8", "surrogatepass"))
            session = _csv_session(engine, path, case.declared)
            outcomes.append(outcome(session, case.sql, case.options))
        with_line, without = outcomes
        where = (
            f"{engine}, {'declared' if case.declared else 'undeclared'}: {case.sql} "
            f"{case.options}, line {case.odd!r} {case.position}"
        )
        assert with_line == without, f"one line changed the outcome — {where}: {outcomes}"
        assert with_line[0] in ("released", "refused free"), f"{where}: {with_line}"
        for text in (with_line[2], *with_line[3]):
            assert MARK not in text, f"a message quotes a value — {where}: {text}"

    prop()
