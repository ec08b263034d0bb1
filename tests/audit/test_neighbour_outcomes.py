"""Audit: whether a query is released, refused or fails never depends on one person's rows.

DESIGN §1, "failure is an output". A property-based test hunts the whole class: hypothesis
generates a table of adversarial types and values — dates and timestamps at their extremes and
with time zones, nanoseconds (DuckDB), TIMESTAMP_NTZ and day-time intervals (Spark), DECIMAL(38,
s) for s = 0, 10, 20, 38, 64-bit unsigned and 128-bit integers, NaN, ±inf, −0.0, subnormals,
blobs (alone and in lists), strings that are not UTF-8 (Spark; and in a Parquet file written
without validation, on DuckDB and Spark), DECIMAL(38, s) stored beyond its precision (such a Parquet
file), PostgreSQL NUMERICs of any magnitude (1e±400, the midpoints of the double range), UUIDs,
intervals, enums, dictionary strings, odd Unicode — adversarial bounds (subnormal, tiny and
huge widths, nearly equal ends, beyond 1e308), a query of every spelling of every registered
aggregate kind (``veil.aggregates``: a new kind is hunted when it is registered), grouped
(unknown keys, public keys, histogram bins) or not, with or without WHERE — on other columns or
on the key, often the unit's own key — and a session's ``quantile_buckets`` from 1 to 4096.
Each engine draws the kinds it has (types Arrow cannot carry are cast in its SQL). It then
adds one unit whose rows hold adversarial values and checks, on every engine of
``harness.HARNESSES``:

- the outcome on both neighbours is the same — released, refused before reserving (nothing
  charged; the same error type and message), or failed after the charge — with the same
  warnings;
- nothing fails after the charge at all: the path after the engine starts reading is total;
- no message quotes a value of the table: every string cell carries a marker, and no number
  of the table (planted ones among them) appears as an engine or Python would write it.

Examples are derandomized (the same cases every run, so CI is repeatable); set
``VEIL_HYPOTHESIS_RANDOM=1`` to search new ones locally.
"""

from __future__ import annotations

import datetime
import decimal
import math
import os
import re
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
from parquet_support import raw_decimals, unchecked_strings
from veil.aggregates import kinds
from veil.errors import QueryFailedError, UserError, VeilWarning
from veil.plan.tree import aggregate_of

pytestmark = pytest.mark.slow  # hunts neighbours over every engine

MARK = "sécret⁂"  # in every string cell: no message may contain it
UNIT = 10**6  # the added unit's id
PLANTED = (7_654_321.987_125, 7_654_321_987)  # numbers of the tables no message may quote

RANDOM = os.environ.get("VEIL_HYPOTHESIS_RANDOM") == "1"

# -- values ---------------------------------------------------------------------------------

TINY = 5e-324
FLOATS = st.one_of(
    st.sampled_from(
        [0.0, -0.0, TINY, -TINY, 1e308, -1e308, math.inf, -math.inf, math.nan, 2.0**53 + 1]
    ),
    st.just(PLANTED[0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
INT64 = st.one_of(
    st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 2**53 + 1, PLANTED[1]]),
    st.integers(-(2**63), 2**63 - 1),
)
UINT64 = st.one_of(st.sampled_from([0, 2**64 - 1, 2**63]), st.integers(0, 2**64 - 1))


def _decimals(scale: int) -> st.SearchStrategy[decimal.Decimal]:
    """Values of DECIMAL(38, scale): both ends, the smallest step, zero, and any between (as an
    integer of 38 digits scaled exactly: a Decimal context would round it to 28)."""
    exact = decimal.Context(prec=40)
    top = 10**38 - 1
    return st.one_of(st.sampled_from([top, -top, 1, -1, 0]), st.integers(-top, top)).map(
        lambda n: decimal.Decimal(n).scaleb(-scale, context=exact)
    )


DECIMAL_SCALES = (0, 10, 20, 38)
RAW_DECIMALS = st.one_of(  # a DECIMAL(38, s)'s stored integer: any 128 bits, not 38 digits
    st.sampled_from([-(2**127), 2**127 - 1, 10**38, -(10**38), 10**38 - 1, 0]),
    st.integers(-(2**127), 2**127 - 1),
)
_HALF = f"{5**1075}e-1075"  # half the smallest subnormal: the cast to double refused it
WIDE_NUMERICS = st.one_of(
    st.sampled_from(["1e-400", "-1e-400", _HALF, f"-{_HALF}", "1e400", "-1e400", "NaN",
                     "Infinity", "-Infinity", "0", str(2**1024 - 2**970), "5e-324", "2.5e-324"]),
    st.builds("{}e{}".format, st.integers(-(10**6), 10**6), st.integers(-1100, 1100)),
)  # fmt: skip
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
    """A column type: the Arrow type the values are built in, their strategy, and (for types
    Arrow does not carry) the SQL that casts the Arrow column into the type under test, per
    engine; a kind with casts runs only on the engines it has one for."""

    name: str
    arrow: pa.DataType
    values: st.SearchStrategy[Any]
    cast: str | None = None  # a DuckDB expression of the column {c}
    numeric: bool = False
    domain_ok: bool = False  # a public domain of Python values can be declared for it
    spark: str | None = None  # a Spark SQL expression of the column {c}
    postgres: str | None = None  # a PostgreSQL expression of the column {c}
    parquet: bool = False  # only as a Parquet file holds it, unvalidated (duckdb-parquet, spark)

    def cast_for(self, engine: str) -> str | None:
        return {"duckdb": self.cast, "spark": self.spark, "postgres": self.postgres}.get(engine)

    def held_by(self, engine: str) -> bool:
        """Whether ``engine`` holds this kind: natively, through a cast, or (a Parquet-only
        kind) as the Parquet file the ``duckdb-parquet`` and ``spark`` harnesses write."""
        if self.parquet:
            return engine in ("duckdb-parquet", "spark")
        return self.native or self.cast_for(engine) is not None

    @property
    def native(self) -> bool:
        """Whether every engine reads the Arrow values as the type under test."""
        return self.cast is None and self.spark is None and self.postgres is None


def _ms(days: int) -> int:
    return days * 86_400_000_000


KINDS = [
    Kind("int64", pa.int64(), INT64, numeric=True, domain_ok=True),
    Kind("uint64", pa.uint64(), UINT64, numeric=True, domain_ok=True),
    Kind("int8", pa.int8(), st.integers(-128, 127), numeric=True, domain_ok=True),
    Kind("float64", pa.float64(), FLOATS, numeric=True, domain_ok=True),
    Kind("float32", pa.float32(), st.floats(width=32), numeric=True),
    *(
        Kind(f"decimal38_{s}", pa.decimal128(38, s), _decimals(s), numeric=True)
        for s in DECIMAL_SCALES
    ),
    Kind("string", pa.string(), TEXT, domain_ok=True),
    Kind("dictionary", pa.dictionary(pa.int32(), pa.string()), TEXT),
    Kind("bool", pa.bool_(), st.booleans(), domain_ok=True),
    Kind("date", pa.date32(), DAYS),
    Kind("timestamp", pa.timestamp("us"), MICROS),
    Kind("timestamptz", pa.timestamp("us", tz="Asia/Kathmandu"), MICROS),
    Kind("binary", pa.binary(), st.binary(max_size=6)),
    Kind(
        "list_binary",
        pa.list_(pa.binary()),
        st.lists(st.binary(max_size=3) | st.none(), max_size=2),
    ),
    # DuckDB only
    Kind("timestamp_ns", pa.timestamp("ns"), INT64),
    Kind("hugeint", pa.string(), HUGE.map(str), cast="CAST({c} AS HUGEINT)", numeric=True),
    Kind(
        "uhugeint", pa.string(), st.integers(0, 2**128 - 1).map(str), cast="CAST({c} AS UHUGEINT)"
    ),
    Kind("uuid", pa.string(), st.uuids().map(str), cast="CAST({c} AS UUID)"),
    Kind(
        "interval",
        pa.int64(),
        st.integers(-(2**40), 2**40),
        cast="to_microseconds({c})",
        spark="{c} * INTERVAL 1 MICROSECOND",
    ),
    Kind("enum", pa.string(), st.sampled_from(["a", "b"]), cast="CAST({c} AS ENUM('a', 'b'))"),
    Kind("list", pa.list_(pa.float64()), st.lists(FLOATS | st.none(), max_size=2)),
    # Spark only
    Kind("timestamp_ntz", pa.timestamp("us"), MICROS, spark="CAST({c} AS TIMESTAMP_NTZ)"),
    # a STRING that is not UTF-8: Spark never checks (DuckDB refuses to store one)
    Kind("string_bytes", pa.binary(), st.binary(max_size=4), spark="CAST({c} AS STRING)"),
    # PostgreSQL only: a NUMERIC of any magnitude (1e-400 failed the cast to double)
    Kind("numeric_wide", pa.string(), WIDE_NUMERICS, numeric=True,
         postgres="CAST({c} AS NUMERIC)"),
    # Parquet as writers that do not validate write it (issue 33): a STRING that is not UTF-8,
    # a DECIMAL(38, s) stored beyond its precision
    Kind("string_unchecked", pa.string(), st.binary(max_size=4).map(lambda b: MARK.encode() + b),
         parquet=True),
    *(Kind(f"decimal_raw_{s}", pa.decimal128(38, s), RAW_DECIMALS, numeric=True, parquet=True)
      for s in (0, 10)),
]  # fmt: skip

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


def _calls(spelling: str) -> list[str]:
    """The calls of the aggregate column ``x`` (or the unit ``uid``) one documented spelling of
    a registered kind writes: ``SUM`` → ``SUM(x)``, ``QUANTILE_CONT(col, q)`` with q = 0.9 and
    0.01 (``COUNT(*)`` as it is)."""
    text = re.sub(r"\bcol\b", "x", spelling.replace("<privacy unit>", "uid"))
    text = re.sub(r"\bk\b", "2", text)  # TOP_K(col, k)
    if "(" not in text:
        text = f"{text}(x)"
    if re.search(r"\bq\b", text) is None:
        return [text]
    return [re.sub(r"\bq\b", q, text) for q in ("0.9", "0.01")]


AGGREGATES = [
    call for k in kinds() if k.weighted == "none" for spelling in k.sql for call in _calls(spelling)
]
"""Every spelling of every registered aggregate kind (``veil.aggregates``): a new kind is
hunted as soon as it is registered. The survey-weighted kinds are these calls with
``weights=`` (:data:`WEIGHTABLE`)."""
WEIGHTABLE = ["COUNT(*)", "SUM(x)", "AVG(x)"]  # with weights="x": wcount, wsum, wavg


# -- tables and queries ---------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    key: Kind
    value: Kind
    base: list[dict[str, Any]]
    unit: list[dict[str, Any]]
    sql: str
    options: dict[str, Any]
    buckets: int = 1024  # the session's quantile_buckets

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

    def casts(self, engine: str) -> dict[str, str] | None:
        """The casts into the kinds under test on ``engine``; None if it has no such type."""
        out = {}
        quote = "`" if engine == "spark" else '"'
        for column, kind in (("g", self.key), ("x", self.value)):
            if not kind.held_by(engine):
                return None
            cast = kind.cast_for(engine)
            if cast is not None:
                out[column] = cast.format(c=f"{quote}{column}{quote}")
        return out

    def values(self) -> list[Any]:
        """Every key and value of the tables (what no message may quote)."""
        return [r[c] for r in self.base + self.unit for c in ("g", "x") if r[c] is not None]


def _array(values: list[Any], kind: Kind) -> pa.Array:
    if kind.name == "string_unchecked":
        return unchecked_strings(values)
    if kind.name.startswith("decimal_raw"):
        return _raw_decimal_column(values, int(kind.name.rsplit("_", 1)[1]))
    if kind.name == "date":
        return pa.array(values, pa.int32()).cast(pa.date32())
    if pa.types.is_timestamp(kind.arrow):
        return pa.array(values, pa.int64()).cast(kind.arrow)
    if pa.types.is_dictionary(kind.arrow):
        return pa.array(values, pa.string()).dictionary_encode()
    return pa.array(values, kind.arrow)


def _raw_decimal_column(values: list[Any], scale: int) -> pa.Array:
    """DECIMAL(38, ``scale``) of the stored integers ``values`` (None: NULL)."""
    stored = raw_decimals(38, scale, [0 if v is None else v for v in values])
    valid = pa.array([v is not None for v in values], pa.bool_())
    return pa.Array.from_buffers(
        stored.type, len(values), [valid.buffers()[1], stored.buffers()[1]]
    )


def kinds_on(engine: str, numeric: bool = False) -> list[Kind]:
    """The kinds ``engine`` can hold (those without a cast, those with one for it, and on the
    ``duckdb-parquet`` harness the kinds only a Parquet file holds)."""
    return [k for k in KINDS if k.held_by(engine) and (k.numeric or not numeric)]


@st.composite
def cases(draw: st.DrawFn, engine: str = "duckdb") -> Case:
    """A case for ``engine``: its key and value kinds are types it has."""
    key = draw(st.sampled_from(kinds_on(engine)))
    value = draw(st.sampled_from(kinds_on(engine, numeric=True)))

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
        "max_rows": draw(st.sampled_from([None, None, 1, 2, 3])),
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
    if draw(st.booleans()):  # a filter on the key column, often on the unit's own key
        rows = unit if draw(st.booleans()) else base
        seen = [r["g"] for r in rows if r["g"] is not None] or [draw(key.values)]
        where = _key_filter(key, draw(st.sampled_from(seen)), draw(st.sampled_from(KEY_FILTERS)))
    sql = f"SELECT {', '.join(select)} FROM t{where}{group}"
    # the supported range's top (MAX_QUANTILE_BUCKETS) costs ~1 s a query to score here: it
    # has its own test on every engine (test_failure_oracles); the hunt varies the rest
    buckets = draw(st.sampled_from([1024, 1024, 1024, 1, 2, 3, 7, 100, 4096]))
    if draw(st.integers(0, 3)) == 0:  # survey weights: the adversarial x weights itself
        options["weights"] = "x"
        weighted = draw(st.lists(st.sampled_from(WEIGHTABLE), min_size=1, max_size=3, unique=True))
        if draw(st.booleans()):  # most often weightable only (else refused free, both sides)
            calls = [c for c in select if " AS a" in c]
            select = [c for c in select if " AS a" not in c]
            select += [f"{a} AS a{i}" for i, a in enumerate(weighted)][: len(calls) or 1]
        lo, hi = options["bounds"]["x"]
        if draw(st.booleans()) and hi >= 0:  # weights need a lower bound ≥ 0
            options["bounds"] = {"x": (max(lo, 0), hi)}
        sql = f"SELECT {', '.join(select)} FROM t{where}{group}"
    return Case(key, value, base, unit, sql, options, buckets)


KEY_FILTERS = (
    " WHERE g = {v}",
    " WHERE g <> {v} OR g IS NULL",
    " WHERE g > {v}",
    " WHERE g IN ({v}, {v})",
    " WHERE NOT (g = {v}) AND w = 'target'",
    " WHERE g IS NULL",
    " WHERE g IS NOT NULL AND x > 0",
    " WHERE g = g",
)


def _key_filter(kind: Kind, value: Any, template: str) -> str:
    """``template`` with ``{v}`` the SQL literal of ``value`` in the key's kind (a kind or
    value without one takes the filters that need no literal)."""
    text = _literal(kind, value)
    if "{v}" in template and text is None:
        return " WHERE g IS NOT NULL"
    return template.format(v=text)


def _literal(kind: Kind, value: Any) -> str | None:
    """The SQL literal of a key value, one every engine reads alike; None when there is none
    (NULL, non-finite floats, blobs, intervals, nested values, dates outside years 1-9999)."""
    if value is None or kind.name in ("interval", "timestamp_ns") or isinstance(value, bytes):
        return None
    if kind.name == "bool":
        return "TRUE" if value else "FALSE"
    if kind.name == "date":
        if not -719_162 <= value < 2_932_897:
            return None
        return f"DATE '{EPOCH.date() + datetime.timedelta(days=value)}'"
    if kind.name.startswith("timestamp"):
        if not -62_135_596_800_000_000 <= value < 253_402_300_800_000_000:
            return None
        return f"TIMESTAMP '{EPOCH + datetime.timedelta(microseconds=value)}'"
    if isinstance(value, decimal.Decimal):
        return f"{value:f}"  # exact, without an exponent (8.192E-7 would read as a double)
    if kind.name in ("hugeint", "uhugeint") or isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):  # the analyst's own literal, not a value of the table: no MARK
        return "'" + value.removeprefix(MARK).replace("'", "''") + "'"
    return None


EPOCH = datetime.datetime(1970, 1, 1)


# -- the property ---------------------------------------------------------------------------

Outcome = tuple[str, str, str, tuple[str, ...]]


def run(harness: Harness, case: Case, with_unit: bool, tmp: Path) -> Outcome | None:
    table = case.table(with_unit)
    casts = case.casts(harness.name)
    if casts is None or not harness.supports(table, casts):
        return None
    session = harness.session(
        table,
        casts,
        tmp,
        privacy_unit="uid",
        budget=veil.Budget(epsilon=10**6, delta="0.001"),
        quantile_buckets=case.buckets,
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
        f"{harness.name}: {case.sql} with {case.options}, {case.buckets} buckets (key "
        f"{case.key.name}, x {case.value.name})"
    )
    assert with_unit == without, (
        f"the outcome depends on one unit's rows — {where}: {with_unit} vs {without}"
    )
    assert with_unit[0] in ("released", "refused free"), f"{where}: {with_unit}"
    bounds = [v for pair in case.options["bounds"].values() for v in pair]
    asked = " ".join([case.sql, repr(case.options), *(t for v in bounds for t in _spellings(v))])
    for text in (with_unit[2], *with_unit[3]):
        assert MARK not in text, f"a message quotes a value — {where}: {text}"
        quoted = quoted_value(text, case.values(), asked)
        assert quoted is None, f"a message quotes the value {quoted} — {where}: {text}"


def _spellings(value: Any) -> set[str]:
    """How an engine or Python may write ``value`` in a message: ``str``, ``repr``, 17
    digits, Java's ``Double.toString`` (Spark: ``7.654321987125E6``), a DECIMAL without its
    trailing zeros; a HUGEINT or UUID travels as its text."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        return set()
    texts = {str(value), repr(value)}
    if isinstance(value, decimal.Decimal):
        texts.add(str(value.normalize()))
    if isinstance(value, float) and math.isfinite(value):
        texts.add(f"{value:.17g}")
        sign, digits, exponent = decimal.Decimal(repr(value)).as_tuple()
        mantissa = "".join(map(str, digits)).rstrip("0") or "0"
        power = len(digits) + int(exponent) - 1
        texts.add(f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}")
    return texts


def quoted_value(message: str, values: list[Any], asked: str) -> str | None:
    """A value of the table that ``message`` quotes — written with at least six digits (so a
    bound, an ε or a count that merely looks the same is not taken for one) and not part of
    what the analyst asked (``asked``) — or None."""
    lowered = message.lower()
    for value in values:
        for text in _spellings(value):
            digits = sum(ch.isdigit() for ch in text)
            if digits >= 6 and text.lower() in lowered and text.lower() not in asked.lower():
                return text
    return None


def test_every_registered_aggregate_kind_is_hunted() -> None:
    """Each kind of the registry (``veil.aggregates``) is asked by some call of AGGREGATES:
    a kind whose spellings the test cannot write fails here, not silently."""
    table = pa.table({"uid": [1], "x": [1.0]})
    session = veil.Session.local({"t": table}, privacy_unit="uid")
    asked = set()
    for call in AGGREGATES:
        plan = session.plan(f"SELECT {call} AS a FROM t")
        asked.update(a.function for a in aggregate_of(plan).aggregates)
    for call in WEIGHTABLE:
        plan = session.plan(f"SELECT {call} AS a FROM t", weights="x")
        asked.update(a.function for a in aggregate_of(plan).aggregates)
    assert asked == {k.name for k in kinds()}


def test_the_quoted_value_check_sees_numbers_as_engines_write_them() -> None:
    """The check itself: a message quoting a table's number is caught however it is written."""
    values: list[Any] = [*PLANTED, decimal.Decimal("12345678.9000"), 5e-324, 12]
    for message in (
        "Conversion Error: 7654321.987125 is out of range",
        "Overflow: 7.654321987125E6 * 2",
        "Value 7654321987 not in range",
        "could not convert 12345678.9 to INTEGER",
    ):
        assert quoted_value(message, values, "SELECT COUNT(*) FROM t") is not None, message
    assert quoted_value("granted (ε=1000000, δ=0.001); 12 rows", values, "") is None
    assert quoted_value("bounds (0, 7654321987)", values, "bounds={'x': (0, 7654321987)}") is None


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_outcome_of_a_query_never_depends_on_one_units_rows(
    harness: Harness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp(f"outcomes-{harness.name}")

    @settings(
        max_examples={"spark": 60, "duckdb-parquet": 200}.get(harness.name, 400),
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=cases(harness.name))
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
