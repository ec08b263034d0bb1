"""The request bodies of the service (pydantic models: they are the OpenAPI schema too).

Numbers that set a privacy cost or a bound are JSON numbers or exact decimal / fraction strings
(``"0.1"``, ``"1/3"``); strings carry no exponent, so no input can ask for a 10^(10^9) integer.
Every number, integer and flag is strict: ``true`` is not the number 1, ``"2"`` is not the
integer 2 and ``"true"`` or ``1`` is not a flag (422 naming the field) — a string is a number
only in the exact form above. No string anywhere in a body may hold a lone surrogate (a
``\ud800`` escape that encodes no character): 422. Unknown fields are refused (422), so a
misspelt option is never silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, StringConstraints, model_validator

__all__ = [
    "AggregateSpec",
    "AnalystCreate",
    "AutoPerGroup",
    "BoundsRequest",
    "DatasetCreate",
    "ExplainRequest",
    "ExponentialRequest",
    "GaussianRequest",
    "GrantRequest",
    "GroupSpec",
    "LaplaceRequest",
    "PlanBody",
    "Problem",
    "QueryRequest",
    "RandomizedResponseRequest",
    "SortSpec",
]

ExactText = Annotated[
    str, StringConstraints(pattern=r"^\s*-?\d{1,30}(\.\d{1,30})?(/\d{1,30})?\s*$", max_length=64)
]
Float = Annotated[float, Strict()]  # a JSON number (an integer too), never true or "1"
Int = Annotated[int, Strict()]  # a JSON integer, never true, 2.0 or "2"
Bool = Annotated[bool, Strict()]  # true or false, never 1 or "true"
Num = Float | ExactText
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Column = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Scalar = Annotated[str, StringConstraints(max_length=1000)] | Int | Float | Bool | None

MAX_VALUES = 100_000


def _lone_surrogate(value: object) -> str | None:
    """The first string in ``value`` (a JSON document) that holds a lone surrogate, if any:
    JSON may escape one (``"\\ud800"``), but it is no character and cannot be encoded."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        bad = _lone_surrogate(data)
        if bad is not None:
            shown = bad.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            raise ValueError(
                f"the text «{shown[:80]}» holds a lone surrogate escape, which is no "
                "character; send valid Unicode text"
            )
        return data


class FieldError(BaseModel):
    """Where a request does not match the schema (a member of ``errors``)."""

    loc: list[str]
    msg: str


class Problem(BaseModel):
    """An RFC 9457 problem document (``application/problem+json``), the body of every error
    response; ``type`` is one of ``GET /problems``. Members beyond RFC 9457's are the
    extensions of some types; others may be added (they are allowed)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="the problem type's URN, `urn:veil:problem:<slug>`")
    title: str = Field(description="the problem type's title")
    status: int = Field(ge=400, le=599, description="the response's HTTP status")
    detail: str = Field(description="what went wrong, in words")
    instance: str | None = Field(default=None, description="the request's path")
    requested: dict[str, Any] | None = Field(
        default=None, description="budget-exhausted: what the query would cost"
    )
    remaining: dict[str, Any] | None = Field(
        default=None, description="budget-exhausted: what remains of the grant"
    )
    line: int | None = Field(
        default=None, description="unsupported-query: the offending construct's line"
    )
    column: int | None = Field(
        default=None, description="unsupported-query: the offending construct's column"
    )
    errors: list[FieldError] | None = Field(
        default=None, description="invalid-request: where the request does not match"
    )


class AggregateSpec(_Body):
    """One aggregate of a JSON plan: the builder's ``agg(function, column, alias, quantile=)``."""

    function: Name = Field(description="count, count_distinct, sum, avg, variance, stddev, "
                           "var_pop, stddev_pop, quantile, median, min, max")  # fmt: skip
    column: Column | None = Field(default=None, description="none for COUNT(*)")
    alias: Column | None = None
    quantile: Num | None = Field(default=None, description="the quantile function's q")


class GroupSpec(_Body):
    """A grouping key of a JSON plan: a column; with ``keys`` its public list of keys (every
    key released, no δ spent), with ``bins`` histogram bins over the edges."""

    column: Column
    alias: Column | None = None
    keys: list[Scalar] | None = Field(default=None, max_length=MAX_VALUES)
    bins: list[Num] | None = Field(default=None, min_length=2, max_length=10_000)


class SortSpec(_Body):
    column: Column
    descending: Bool = False


Predicate = Annotated[str, StringConstraints(min_length=1, max_length=20_000)]


class PlanBody(_Body):
    """A query as the Python builder's calls (``Session.query``), in JSON: the same plans,
    fingerprints and charges as the equivalent SQL. Its table is the dataset."""

    where: list[Predicate] = Field(
        default_factory=list, max_length=64, description="row conditions, combined with AND"
    )
    group_by: list[Column | GroupSpec] = Field(default_factory=list, max_length=16)
    aggregates: list[AggregateSpec] = Field(min_length=1, max_length=64)
    having: Predicate | None = None
    order_by: list[Column | SortSpec] = Field(default_factory=list, max_length=16)
    limit: Int | None = Field(default=None, ge=0, le=1_000_000_000)
    offset: Int = Field(default=0, ge=0, le=1_000_000_000)
    select: list[Column] | None = Field(default=None, max_length=128)


class AutoPerGroup(_Body):
    """``{"auto": KEY}``: clamping bounds found under DP for each group of the query's public
    GROUP BY key ``KEY`` (its alias or column; a declared domain or a BIN), in one histogram
    over (group, bin) — the groups compose in parallel."""

    auto: Name = Field(description="the public GROUP BY key whose groups get their own bounds")


Auto = Literal["auto"]
AutoLimits = Literal["auto", "auto_groups"]
ColumnBoundsSpec = tuple[Num, Num] | Auto | AutoPerGroup


class ExplainRequest(_Body):
    """A query to explain: its cost and expected error, without reading any data. The query
    is ``sql`` or ``plan`` (exactly one)."""

    dataset: Name
    sql: str | None = Field(
        default=None, description="a query in veil's SQL subset; its one table is the dataset"
    )
    plan: PlanBody | None = Field(default=None, description="the query as builder calls")
    epsilon: Num | None = Field(default=None, description="the query's ε (default for explain: 1)")
    delta: Num | None = None
    bounds: dict[Column, ColumnBoundsSpec] | Auto | None = Field(
        default=None,
        description="narrower clamping bounds than the owner's (never wider): per column a "
        "pair [lower, upper], or 'auto' (found under DP from a share of epsilon, within the "
        "owner's), or {'auto': KEY} (found per group of the public GROUP BY key KEY); 'auto' "
        "alone: every column the query clamps (for sql and plan alike)",
    )
    bounds_share: Num | None = Field(
        default=None,
        description="with 'auto' bounds and epsilon: the share of epsilon spent finding them, "
        "strictly between 0 and 1 (default 0.1)",
    )
    max_groups: Int | None = Field(default=None, ge=1, le=1_000_000)
    max_rows_per_group: Int | None = Field(default=None, ge=1, le=1_000_000)
    max_rows: Int | None = Field(
        default=None, ge=1, le=1_000_000, description="rows one unit may contribute in all groups"
    )
    limits: AutoLimits | None = Field(
        default=None,
        description="'auto': max_rows chosen under DP from a share of epsilon (a noisy "
        "histogram of rows per unit on a public grid, never above the owner's limits); "
        "'auto_groups': max_groups, max_rows_per_group and max_rows chosen so (one noisy joint "
        "histogram of distinct groups × rows per unit; needs a GROUP BY); not with max_groups, "
        "max_rows_per_group or max_rows",
    )
    limits_share: Num | None = Field(
        default=None,
        description="with limits 'auto' and epsilon: the share of epsilon spent choosing them, "
        "strictly between 0 and 1 (default 0.1)",
    )
    privacy_unit: Name | None = Field(
        default=None,
        description="the data owner's privacy unit; any other value is refused (it is not "
        "the analyst's to change)",
    )
    target: list[Annotated[str, StringConstraints(min_length=1, max_length=300)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="accuracy targets instead of epsilon ('n=±50', 'mean=±2%', 'n=±50@90%'): "
        "the query is explained or run at the smallest ε meeting every one (sql only); with "
        "limits 'auto', at the limits chosen, after a limits step whose ε the targets set; "
        "with bounds 'auto', at the bounds chosen within the declared range, after a bounds "
        "step whose ε the targets set",
    )
    references: dict[Column, Float] | None = Field(
        default=None, description="the public value each relative (%) target is taken of"
    )
    min_group_size: Int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="the public smallest group size assumed for the bar of an AVG target",
    )
    weights: Name | Literal[False] | None = Field(
        default=None,
        description="a survey-weights column (its bounds the owner's) weighting COUNT(*), SUM "
        "and AVG; false: unweighted; omitted: the dataset's own weights, if it has any",
    )

    @model_validator(mode="after")
    def _one_query(self) -> ExplainRequest:
        if (self.sql is None) == (self.plan is None):
            raise ValueError("give the query as exactly one of sql (text) or plan (JSON)")
        return self


class QueryRequest(ExplainRequest):
    """A query to answer with noise, error bars and a charged budget."""

    epsilon: Num | None = Field(default=None, description="the query's ε (required)")
    consistent: Bool = Field(
        default=False, description="make released group counts add up to their noisy total"
    )


class BoundsRequest(_Body):
    """Clamping bounds for columns found under DP (``veil bounds``): one noisy log-scale
    histogram per column (per group of ``by`` where given), charged like a query."""

    dataset: Name
    columns: list[Column] = Field(min_length=1, max_length=64, description="numeric columns")
    epsilon: Num = Field(description="the whole cost, split evenly between the columns")
    where: Predicate | None = Field(default=None, description="only the rows matching this")
    within: dict[Column, tuple[Num, Num]] | None = Field(
        default=None, description="outer ranges the bounds must stay in (narrowing the owner's)"
    )
    by: Annotated[str, StringConstraints(min_length=1, max_length=2000)] | None = Field(
        default=None,
        description="a public key to find the bounds per group of: a column with a declared "
        "domain, or 'BIN(col, e0, e1, …) AS name'",
    )
    max_groups: Int | None = Field(default=None, ge=1, le=1_000_000)
    max_rows_per_group: Int | None = Field(default=None, ge=1, le=1_000_000)
    max_rows: Int | None = Field(default=None, ge=1, le=1_000_000)


class _Mechanism(_Body):
    dataset: Name = Field(description="the grant to charge (an administrator grants it)")
    sensitivity: Num = Field(
        description="YOUR claim of the values' sensitivity; privacy rests entirely on it"
    )


class LaplaceRequest(_Mechanism):
    values: Num | list[Num] = Field(description="the true value(s) you computed")
    epsilon: Num
    integer: Bool = Field(
        default=False, description="integer values: discrete Laplace noise, integer output"
    )


class GaussianRequest(_Mechanism):
    values: Num | list[Num]
    epsilon: Num | None = None
    delta: Num | None = None
    rho: Num | None = None


class ExponentialRequest(_Mechanism):
    candidates: list[Scalar] = Field(min_length=1, max_length=MAX_VALUES)
    scores: list[Num] = Field(min_length=1, max_length=MAX_VALUES)
    epsilon: Num


class RandomizedResponseRequest(_Body):
    dataset: Name
    values: list[Scalar] = Field(min_length=1, max_length=MAX_VALUES)
    categories: list[Scalar] = Field(min_length=2, max_length=10_000)
    epsilon: Num


class AnalystCreate(_Body):
    name: Name
    role: str = Field(default="analyst", pattern="^(admin|analyst)$")


class GrantRequest(_Body):
    analyst: Name
    dataset: Name
    epsilon: Num | None = None
    delta: Num | None = None
    rho: Num | None = None


class SourceBody(_Body):
    kind: str = Field(pattern="^(file|duckdb|postgres|spark)$")
    path: str | None = None
    table: str | None = None
    url: str | None = None


class DatasetCreate(_Body):
    """A dataset for the catalog (see ``veil.catalog.Catalog.add_dataset``)."""

    name: Name
    source: SourceBody
    privacy_unit: Column | None = None
    max_groups: Int = Field(default=1, ge=1, le=1_000_000)
    max_rows_per_group: Int = Field(default=1, ge=1, le=1_000_000)
    max_rows: Int | None = Field(
        default=None, ge=1, le=1_000_000, description="rows one unit may contribute in all groups"
    )
    contributions: Int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="without a privacy unit: rows one person has at most (declared)",
    )
    bounds: dict[Column, tuple[Num, Num]] = Field(default_factory=dict)
    domains: dict[Column, list[Scalar]] = Field(default_factory=dict)
    schema_: dict[Column, str] = Field(default_factory=dict, alias="schema")
    max_epsilon: Num | None = None
    max_delta: Num | None = None
    total_epsilon: Num | None = None
    total_delta: Num | None = None
    total_rho: Num | None = None
    min_response_ms: Int = Field(default=0, ge=0, le=600_000)
    replace: Bool = False
    weights: Name | None = Field(
        default=None,
        description="the survey-weights column every query's COUNT(*), SUM and AVG are "
        "weighted by (its bounds, from 0 up, in bounds)",
    )

    def options(self) -> dict[str, Any]:
        return {
            "privacy_unit": self.privacy_unit,
            "max_groups": self.max_groups,
            "max_rows_per_group": self.max_rows_per_group,
            "max_rows": self.max_rows,
            "contributions": self.contributions,
            "bounds": {c: tuple(b) for c, b in self.bounds.items()},
            "domains": self.domains,
            "schema": self.schema_,
            "max_epsilon": self.max_epsilon,
            "max_delta": self.max_delta,
            "min_response_ms": self.min_response_ms,
            "replace": self.replace,
            "weights": self.weights,
        }
