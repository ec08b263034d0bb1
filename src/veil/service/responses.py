"""The bodies of the service's successful responses, as pydantic models: they are the OpenAPI
document's schemas (``ok(Model)`` declares one for a route), so that a client can be generated
from the document and the fuzzing test checks every answer against them.

They describe what the handlers return; they are not used to build or filter it (a route
declares ``response_model=None``), so a field added to a payload must be added here too — the
fuzzing test fails on an answer that does not match. Every model allows members it does not
name (a client must ignore what it does not know).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ok"]

JSONScalar = str | int | float | bool | None


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class ExactBudget(_Out):
    """The exact fractions, as strings (``"1/3"``), for auditing."""

    epsilon: str | None = None
    delta: str | None = None
    rho: str | None = None


class BudgetOut(_Out):
    """A privacy loss or budget: floats for reading, the exact fractions in ``exact``."""

    kind: Literal["pure", "approx", "zcdp"]
    epsilon: float | None = Field(default=None, description="pure and approx kinds")
    delta: float | None = Field(default=None, description="pure and approx kinds")
    rho: float | None = Field(default=None, description="the zcdp kind")
    exact: ExactBudget


class Usage(_Out):
    """What one part of the budget paid for."""

    measurement: str
    mechanism: str
    loss: BudgetOut
    sensitivity: str
    noise: str
    used_by: list[str] = Field(description="the output columns this measurement serves")


class TargetMet(_Out):
    """One accuracy target and the expected bar at the chosen ε."""

    column: str
    halfwidth: float | None = Field(description="an absolute target (± this)")
    relative: float | None = Field(description="a relative target, of `reference`")
    reference: float | None
    limit: float = Field(description="the half-width the bar must not exceed")
    level: float
    min_group_size: int | None = Field(description="the public group size assumed (AVG)")
    expected_bar: float | None = Field(description="the bar at the chosen ε (null: unbounded)")
    met: bool


class CandidateLimits(_Out):
    """One candidate of auto limits."""

    max_rows: int
    max_groups: int
    max_rows_per_group: int


class TargetLimits(_Out):
    """Accuracy targets with auto limits: the limits step's ε, and the range of the query's
    smallest ε meeting the targets over the candidate limits (found before reading data)."""

    mode: str = Field(description="'auto' or 'auto_groups'")
    limits_epsilon: float = Field(description="ε of the limits step (ε_L)")
    limits_epsilon_exact: str
    epsilon_min: float = Field(description="the query's ε at the smallest candidate")
    epsilon_min_exact: str
    epsilon_max: float | None = Field(
        description="the query's ε at the largest candidate (null: above the cap)"
    )
    epsilon_max_exact: str | None
    cheapest: CandidateLimits
    dearest: CandidateLimits
    covers_cheapest: bool | None = Field(
        description="whether the grant covered ε_L and the query at the cheapest candidate"
    )
    covers_dearest: bool | None = Field(
        description="… at the dearest: if so the query cannot stop for lack of budget after "
        "the limits step"
    )


class Range(_Out):
    """A column's clamping range."""

    lower: float
    upper: float


class TargetBounds(_Out):
    """Accuracy targets with auto bounds: the bounds step's ε, and the range of the query's
    smallest ε meeting the targets from one bin to the declared range (found before reading
    data)."""

    bounds_epsilon: float = Field(description="ε of the bounds step (ε_B = ε_max/9)")
    bounds_epsilon_exact: str
    epsilon_min: float = Field(description="the query's ε at the narrowest bin of each grid")
    epsilon_min_exact: str
    epsilon_max: float = Field(description="the query's ε at the declared ranges")
    epsilon_max_exact: str
    narrowest: dict[str, Range]
    widest: dict[str, Range] = Field(description="the declared ranges")
    chosen: dict[str, Range] | None = Field(
        description="the bounds chosen (their hull when per group; null in an explanation)"
    )
    covers_cheapest: bool | None = Field(
        description="whether the grant covered ε_B and the query at one bin"
    )
    covers_dearest: bool | None = Field(
        description="… at the declared range: if so the query cannot stop for lack of budget "
        "after the bounds step"
    )


class Targeted(_Out):
    """The smallest ε meeting every target (found without reading data or charging); with
    auto limits, at the limits chosen (in an explanation: at the dearest candidate), and
    ``limits`` says the range; with auto bounds, at the bounds chosen (in an explanation: at
    the declared range), and ``bounds`` says the range."""

    epsilon: float
    epsilon_exact: str
    cost: BudgetOut
    targets: list[TargetMet]
    assumptions: list[str] = Field(description="the public assumptions the bars rest on")
    limits: TargetLimits | None = Field(default=None, description="with auto limits")
    bounds: TargetBounds | None = Field(default=None, description="with auto bounds")


class GroupBoundsOut(_Out):
    """The bounds found for one group (per-group auto bounds)."""

    group: JSONScalar = Field(description="the group's key (a domain value or a bin label)")
    lower: float
    upper: float
    clamped_below: float
    clamped_above: float
    clamped_bar: float
    rows: int = Field(description="the group's noisy row count (clipped at 0)")


class ChosenBoundsOut(_Out):
    """Clamping bounds found under DP for one column, and what finding them cost."""

    column: str
    lower: float = Field(description="per group: the groups' lowest lower bound")
    upper: float = Field(description="per group: the groups' highest upper bound")
    clamped_share: float = Field(description="noisy estimate of the rows clamped (share)")
    clamped_below: float
    clamped_above: float
    clamped_bar: float = Field(description="≈95 % half-width of clamped_share")
    within: list[float] | None = Field(description="the outer range they stayed in, if any")
    bins: int = Field(description="the public log-scale bins of the histogram")
    threshold: int = Field(description="the noisy count a bin needs to count as occupied")
    loss: BudgetOut = Field(description="the privacy loss of the bounds step")
    cost: BudgetOut = Field(description="what it was charged now (zero when cached)")
    cached: bool
    rows: int = Field(description="the noisy count of the rows measured (clipped at 0)")
    key: str | None = Field(description="per group: the GROUP BY key whose groups they bound")
    groups: list[GroupBoundsOut] | None = None


class ChosenLimitsOut(_Out):
    """The contribution limits chosen under DP (``limits: 'auto'``) and what choosing cost."""

    max_rows: int = Field(description="the total rows per unit chosen")
    max_groups: int
    max_rows_per_group: int
    dropped: float = Field(description="the noisy share of rows the bounding is expected to drop")
    dropped_bar: float = Field(description="≈95 % half-width of dropped")
    rows: float = Field(description="the noisy count of the rows measured")
    loss: BudgetOut = Field(description="the privacy loss of the limits step")
    cost: BudgetOut = Field(description="what it was charged now (zero when cached)")
    cached: bool
    cap: int = Field(description="the largest candidate (the owner's limits cap it)")
    mode: str = Field(default="auto", description="'auto' or 'auto_groups' (as requested)")


class BoundsAnswer(_Out):
    """The bounds found per column (``veil bounds``), their cost and what is left."""

    dataset: str
    bounds: list[ChosenBoundsOut]
    cost: BudgetOut
    remaining: BudgetOut | None = None


class QueryAnswer(_Out):
    """Released values with their error bars and what they cost."""

    dataset: str
    columns: list[str]
    rows: list[list[JSONScalar]] = Field(description="one list per row, in column order")
    error_bars: list[list[float | None]] = Field(
        description="the half-width of each cell at `error_bar_level` (null: a group key "
        "or a quantile)"
    )
    error_bar_level: float
    cost: BudgetOut = Field(description="what this answer was charged (zero when cached)")
    cached: bool = Field(description="answered from the ledger's cache at no cost")
    usage: list[Usage]
    notes: list[str]
    fingerprint: str = Field(description="the measurement's cache key")
    private: bool = Field(description="false only for noise from a caller's seeded source")
    remaining: BudgetOut | None = None
    target: Targeted | None = Field(default=None, description="with accuracy targets")
    auto_bounds: list[ChosenBoundsOut] | None = Field(
        default=None, description="with 'auto' bounds: the bounds chosen, per column"
    )
    auto_limits: ChosenLimitsOut | None = Field(
        default=None, description="with limits 'auto': the contribution limits chosen"
    )


class Explanation(_Out):
    """What a query would cost and its expected error (nothing read, nothing charged)."""

    dataset: str
    plan: dict[str, Any] = Field(description="the compiled plan's canonical form")
    sql: str = Field(description="the SQL veil would send to the engine")
    quantile_sql: list[str]
    cost: BudgetOut
    contribution: str
    usage: list[Usage]
    expected_error_bars: dict[str, str]
    remaining: BudgetOut | None
    covered: bool | None = Field(description="whether the remaining budget covers the cost")
    notes: list[str]
    target: Targeted | None = Field(default=None, description="with accuracy targets")


class Column(_Out):
    name: str
    type: str


class DatasetPublic(_Out):
    """A dataset's public metadata as its data owner set it, and its columns."""

    name: str
    privacy_unit: str | None
    max_groups: int
    max_rows_per_group: int
    max_rows: int | None = Field(
        default=None,
        description="rows one unit may contribute in all groups (without a privacy unit: "
        "the rows one person has at most, declared)",
    )
    bounds: dict[str, list[str]] = Field(description="column → [lower, upper], exact strings")
    domains: dict[str, list[JSONScalar]]
    schema_: dict[str, str] = Field(alias="schema")
    max_epsilon: str | None
    max_delta: str | None
    total: dict[str, Any] | None = Field(description="the dataset-wide cap, if any")
    min_response_ms: int


class DatasetVisible(DatasetPublic):
    columns: list[Column]


class DatasetList(_Out):
    datasets: list[DatasetVisible]


class Source(_Out):
    kind: Literal["file", "duckdb", "postgres", "spark"]


class DatasetEntry(DatasetPublic):
    """A catalog entry as the administrator sees it: with its source."""

    source: Source


class DatasetEntries(_Out):
    datasets: list[DatasetEntry]


class BudgetLine(_Out):
    dataset: str
    granted: BudgetOut
    remaining: BudgetOut
    used: float = Field(description="the share spent: the largest over ε, δ and ρ (1: all)")


class BudgetAnswer(_Out):
    analyst: str
    budgets: list[BudgetLine]


class Event(_Out):
    id: int
    at: str
    event: Literal["grant", "charge", "cache_hit", "alert"] | str
    status: str | None
    loss: BudgetOut | None
    fingerprint: str | None
    detail: str | None
    query: str | None = Field(description="the query text recorded with a charge")


class HistoryAnswer(_Out):
    """A page of the caller's history on a dataset, newest first."""

    analyst: str
    dataset: str
    remaining: BudgetOut
    history: list[Event] = Field(description="at most `limit` events, newest first")
    next: str | None = Field(
        default=None,
        description="the cursor of the older events: pass it as `before` (null: none older)",
    )


class ChargeFound(Event):
    """One of the caller's charges, looked up by its reservation id (after an
    `outcome-unknown` answer): its status says what became of it."""

    dataset: str


class Job(_Out):
    """A query job; ``status`` and ``answer`` (a query answer or a problem document) once
    ``state`` is ``done``."""

    id: str
    dataset: str
    state: Literal["running", "done", "lost"]
    created_at: str
    finished_at: str | None
    status: int | None = None
    answer: dict[str, Any] | None = None


class _Released(_Out):
    dataset: str
    mechanism: str
    loss: BudgetOut
    remaining: BudgetOut
    note: str


class NoisyValues(_Released):
    """Noisy values, in the shape the true ones were sent (one number or a list)."""

    values: float | int | list[float | int]
    sensitivity: str
    scale: float | None
    error_bar: float | None = None
    error_bar_level: float | None = None


class Choice(_Released):
    index: int = Field(description="the chosen candidate's position")
    choice: JSONScalar


class Reported(_Released):
    values: list[JSONScalar]
    sensitivity: str
    scale: float | None


class Health(_Out):
    status: str


class ProblemType(_Out):
    type: str
    title: str
    status: int
    description: str


class ProblemTypes(_Out):
    problems: list[ProblemType]


class Principal(_Out):
    name: str
    role: Literal["admin", "analyst"]
    created_at: str
    revoked_at: str | None
    active: bool


class Principals(_Out):
    principals: list[Principal]


class NewKey(_Out):
    name: str
    key: str = Field(description="the API key, shown only in this answer")
    note: str
    role: Literal["admin", "analyst"] | None = None


class GrantLine(BudgetLine):
    analyst: str


class Grants(_Out):
    grants: list[GrantLine]


class Granted(_Out):
    analyst: str
    dataset: str
    granted: BudgetOut = Field(description="what this request added")
    total: BudgetOut = Field(description="the grant's total after it")
    remaining: BudgetOut


class Alert(_Out):
    analyst: str
    dataset: str
    threshold: float
    used: float
    at: str


class Alerts(_Out):
    alerts: list[Alert]


def ok(model: type[BaseModel], status: int = 200, description: str = "") -> dict[int | str, Any]:
    """``responses=`` entry declaring ``model`` as the body of a ``status`` answer."""
    return {status: {"model": model, "description": description or model.__doc__ or "OK"}}
