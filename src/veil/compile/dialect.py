"""Dialect differences as data: one record per engine, read by the one lowering module.

Lowering for a new engine means adding a :class:`Dialect` here; ``veil.compile.lower`` reads
only these fields and has no branch on an engine's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from veil.errors import InvalidArgumentError

__all__ = ["DIALECTS", "Conditions", "Dialect", "HashStyle", "dialect"]

Conditions = Literal["try", "try_functions", "pure"]
"""How a row condition (WHERE) is made total, so that whether the statement fails never
depends on a value: ``"try"`` wraps it in ``TRY(…)`` (any error on a row is NULL: the row is
left out); ``"try_functions"`` rewrites casts, divisions and the operators of
``Dialect.try_functions`` into their NULL-on-error forms; ``"pure"`` (a dialect with neither)
accepts only conditions that cannot raise on any value — comparisons with literals, logic,
``IN``, ``BETWEEN``, ``IS NULL``, ``LIKE`` with a checked literal pattern, constant
arithmetic — and refuses every other one when it is lowered, before anything is charged."""

HashStyle = Literal["variadic", "text"]
"""How the keyed row hash is written: ``"variadic"`` is ``H(salt, H(salt, c1, c2, …))`` with a
multi-argument hash; ``"text"`` is ``H(CAST(ROW(c1, c2, …) AS text), salt)`` with a seeded
hash of one text — the row's record text, which is injective for a fixed list of typed
columns (NULL is an empty field, an empty string ``""``, separators and quotes inside a value
are quoted)."""


@dataclass(frozen=True)
class Dialect:
    """What the lowering needs to know about an engine's SQL.

    ``name`` is the sqlglot dialect; ``hash_function`` a 64-bit hash written as
    ``hash_style`` says (keyed by the secret salt); ``wide_integer`` the exact integer type
    sums are accumulated in (``None`` when summing BIGINT already widens exactly, as DuckDB's
    HUGEINT and PostgreSQL's NUMERIC do); ``real_type`` the double type values are clamped in;
    ``text_type`` the string type keys are cast to for their lossless transport; ``sum_wraps``
    whether a BIGINT sum wraps silently on overflow (the session then certifies, from the exact
    row count, that no partial sum could have left the 64-bit range, and otherwise runs the
    statement again with its sums in ``exact_sum_type``); ``conditions`` how a row condition is
    made total (:data:`Conditions`), with ``try_functions`` the NULL-on-error functions of
    binary operators by sqlglot node key (``"add"`` → ``TRY_ADD``); ``nan_function`` a
    function testing a double for NaN (``None``: compare with a NaN literal, for an engine in
    which NaN equals itself); ``real_cast_may_fail`` whether casting a non-integer number
    column to ``real_type`` can raise on a value (an arbitrary-precision NUMERIC of 1e400):
    the lowering then maps NaN and magnitudes beyond the double range to NaN and ±inf before
    the cast; ``float_underflow_raises`` whether a double product that rounds to zero raises
    (PostgreSQL's "value out of range: underflow"): the lowering then writes every per-row
    fixed-point scaling so that no product can underflow. ``cells_as_rows``: the one
    statement of the statistics and the quantile cells returns each bounded row's cell of a
    fine grid, in a list per group beside the group's statistics (one aggregation of the
    bounded rows), instead of counting the cells in the engine (``GROUPING SETS``): for
    DuckDB, whose hash aggregation over a million cells costs more than Python's sort of
    them. ``case_clamps``: a column's value (never NULL there: the NULL rule removed the
    row) is clamped by comparisons, ``CASE WHEN x < lo THEN lo WHEN x > hi THEN hi ELSE x
    END``, instead of ``LEAST(GREATEST(x, lo), hi)`` — the same double for every non-NULL
    value (NaN sorts above every number in the engines, so both give ``hi``; ±inf meet an
    end): for DuckDB, whose ``LEAST`` and ``GREATEST`` cost more per row than the rest of a
    quantile's cell (see ``_Lowering.clamp``).
    """

    name: str
    hash_function: str
    wide_integer: str | None
    integer_type: str = "BIGINT"
    real_type: str = "DOUBLE"
    text_type: str = "VARCHAR"
    exact_sum_type: str = "DECIMAL(38, 0)"
    sum_wraps: bool = False
    hash_style: HashStyle = "variadic"
    conditions: Conditions = "try_functions"
    try_functions: tuple[tuple[str, str], ...] = ()
    nan_function: str | None = "ISNAN"
    real_cast_may_fail: bool = False
    float_underflow_raises: bool = False
    cells_as_rows: bool = False
    case_clamps: bool = False

    @property
    def try_wrapper(self) -> bool:
        """Whether ``TRY(e)`` turns any error raised while evaluating ``e`` into NULL."""
        return self.conditions == "try"


DIALECTS: dict[str, Dialect] = {
    # DuckDB: SUM(BIGINT) returns HUGEINT (128-bit) and raises on overflow.
    "duckdb": Dialect(
        name="duckdb",
        hash_function="HASH",
        wide_integer=None,
        conditions="try",
        cells_as_rows=True,
        case_clamps=True,
    ),
    # Spark: SUM(BIGINT) is BIGINT and wraps (queries run with ANSI mode off). A DECIMAL(38, 0)
    # sum would be exact but is several times slower in Spark; BIGINT is exact whenever
    # rows·limit < 2^63 — every term is within ±limit, so no partial sum can wrap — which the
    # session checks from the exact row count before releasing anything (`sum_wraps`).
    "spark": Dialect(
        name="spark",
        hash_function="XXHASH64",
        wide_integer=None,
        text_type="STRING",
        sum_wraps=True,
        conditions="try_functions",
        try_functions=(
            ("add", "TRY_ADD"),
            ("sub", "TRY_SUBTRACT"),
            ("mul", "TRY_MULTIPLY"),
            ("mod", "TRY_MOD"),
        ),
    ),
    # PostgreSQL (≥ 13): SUM(BIGINT) is NUMERIC (exact, unbounded). No TRY: conditions must be
    # pure. hashtextextended(text, seed) is a seeded 64-bit hash (PostgreSQL ≥ 11). NaN equals
    # itself and sorts above every number; a NUMERIC may exceed the double range; a double
    # product that underflows to zero raises.
    "postgres": Dialect(
        name="postgres",
        hash_function="HASHTEXTEXTENDED",
        wide_integer=None,
        real_type="DOUBLE PRECISION",
        text_type="TEXT",
        exact_sum_type="NUMERIC",
        hash_style="text",
        conditions="pure",
        nan_function=None,
        real_cast_may_fail=True,
        float_underflow_raises=True,
    ),
}


def dialect(name: str) -> Dialect:
    """The dialect record for an engine's dialect name."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise InvalidArgumentError(
            f"no SQL dialect {name!r}; veil lowers to {', '.join(sorted(DIALECTS))}"
        ) from None
