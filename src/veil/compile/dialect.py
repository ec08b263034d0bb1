"""Dialect differences as data: one record per engine, read by the one lowering module."""

from __future__ import annotations

from dataclasses import dataclass

from veil.errors import InvalidArgumentError

__all__ = ["DIALECTS", "Dialect", "dialect"]


@dataclass(frozen=True)
class Dialect:
    """What the lowering needs to know about an engine's SQL.

    ``name`` is the sqlglot dialect; ``hash_function`` a multi-argument 64-bit hash (keyed by
    putting the secret salt first); ``wide_integer`` the exact integer type sums are accumulated
    in (``None`` when summing BIGINT already widens exactly, as DuckDB's HUGEINT does);
    ``real_type`` the double type values are clamped in; ``text_type`` the string type keys are
    cast to for their lossless transport; ``sum_wraps`` whether a BIGINT sum wraps silently on
    overflow (the session then certifies, from the exact row count, that no partial sum could
    have left the 64-bit range, and otherwise runs the statement again with its sums in
    ``exact_sum_type``); ``try_wrapper`` whether ``TRY(e)`` turns any error raised while
    evaluating ``e`` on a row into NULL (else the lowering rewrites casts and arithmetic of row
    conditions into their ``TRY_`` forms).
    """

    name: str
    hash_function: str
    wide_integer: str | None
    integer_type: str = "BIGINT"
    real_type: str = "DOUBLE"
    text_type: str = "VARCHAR"
    exact_sum_type: str = "DECIMAL(38, 0)"
    sum_wraps: bool = False
    try_wrapper: bool = False


DIALECTS: dict[str, Dialect] = {
    # DuckDB: SUM(BIGINT) returns HUGEINT (128-bit) and raises on overflow.
    "duckdb": Dialect(name="duckdb", hash_function="HASH", wide_integer=None, try_wrapper=True),
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
