"""The query plan: engine-neutral, immutable data (DESIGN §3).

A plan is a chain of frozen nodes, leaf first::

    Scan(table, columns) ─► [Filter(predicate)] ─► Aggregate(keys, aggregates, …)
        ─► [Having(predicate) | Sort(keys) | Limit(count) | Project(columns)]*

Predicates are sqlglot expressions. ``Aggregate`` is the privacy boundary; nodes above it read
only released values (post-processing). Each node validates itself on construction and states
its output schema (``node.schema()``). ``canonical(plan)`` / ``fingerprint(plan)`` give the
serialisable form and its hash (the ledger's cache key). Visitors subclass ``PlanVisitor[T]``.

Example — ``SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people
WHERE age >= 18 GROUP BY state HAVING n > 100 ORDER BY n DESC LIMIT 5`` with privacy unit
``user_id`` and ``bounds={"income": (0, 1_000_000)}`` is::

    >>> import sqlglot
    >>> from veil.plan import *
    >>> people = Scan("people", (Field("user_id", "integer"), Field("state", "string"),
    ...                          Field("age", "integer"), Field("income", "real")))
    >>> agg = Aggregate(
    ...     Filter(people, sqlglot.parse_one("age >= 18")),
    ...     keys=(GroupKey("state"),),          # GroupKey("state", domain=("CA", "NY")) if public
    ...     aggregates=(AggregateCall("n", "count"),
    ...                 AggregateCall("avg_income", "avg", "income")),
    ...     privacy_unit="user_id",
    ...     contribution=Contribution(max_groups=1, max_rows_per_group=1),
    ...     bounds=(ColumnBounds("income", 0, 1_000_000),),
    ... )
    >>> plan = Limit(Sort(Having(agg, sqlglot.parse_one("n > 100")), (SortKey("n", True),)), 5)
    >>> [f.name for f in plan.schema()]
    ['state', 'n', 'avg_income']
    >>> len(fingerprint(plan))
    64

Mapping from SQL: COUNT(*) → ``AggregateCall(a, "count")``; COUNT(col) → ``"count"`` with
``column`` (NULL rule below); COUNT(DISTINCT unit) → ``"count_distinct"``; SUM/AVG →
``"sum"``/``"avg"``; VARIANCE/VAR_SAMP → ``"variance"``; STDDEV → ``"stddev"``; MEDIAN(x) →
``"quantile"`` with ``quantile=1/2``; QUANTILE(x, q)/PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY
x) → ``"quantile"``; MIN/MAX → ``"min"``/``"max"`` (extreme quantiles). A histogram is a COUNT
grouped by ``GroupKey(col, edges=(e0, …, en))``. The SELECT order, if it differs from keys
then aggregates, is a ``Project`` on top; a grouped column absent from SELECT is dropped there.
Budget weights: ``AggregateCall(..., weight=2)``.

NULL rule: rows where a column read by an aggregate (other than COUNT(*)) is NULL or NaN are
left out of the whole aggregation, as if ``WHERE col IS NOT NULL`` had been written — so
COUNT(*), SUM, AVG of one query describe the same rows; a NULL group key is a group of its own
(unknown keys) or dropped (public domain, histogram).
"""

from veil.plan.canonical import canonical, fingerprint
from veil.plan.nodes import (
    AGGREGATE_FUNCTIONS,
    Aggregate,
    AggregateCall,
    AggregateFunction,
    ColumnBounds,
    ColumnType,
    Contribution,
    Field,
    Filter,
    GroupKey,
    Having,
    KeyValue,
    Limit,
    Measurement,
    Mechanism,
    Plan,
    Project,
    Scan,
    Selection,
    Sort,
    SortKey,
    Statistic,
)
from veil.plan.tree import aggregate_of, fields_from_arrow, replace_aggregate
from veil.plan.visitor import PlanVisitor

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "Aggregate",
    "AggregateCall",
    "AggregateFunction",
    "ColumnBounds",
    "ColumnType",
    "Contribution",
    "Field",
    "Filter",
    "GroupKey",
    "Having",
    "KeyValue",
    "Limit",
    "Measurement",
    "Mechanism",
    "Plan",
    "PlanVisitor",
    "Project",
    "Scan",
    "Selection",
    "Sort",
    "SortKey",
    "Statistic",
    "aggregate_of",
    "canonical",
    "fields_from_arrow",
    "fingerprint",
    "replace_aggregate",
]
