"""The canonical, serialisable form of a plan and its fingerprint (the cache key).

``canonical(plan)`` is a JSON-compatible dict: node by node from the root, exact numbers as
``"p/q"`` strings, expressions as sqlglot SQL with every identifier quoted. Two plans with the same
canonical form ask the same question; ``fingerprint(plan)`` is the SHA-256 of its sorted JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from sqlglot import exp

from veil.accounting.budget import Budget
from veil.plan.domain import domain_json
from veil.plan.nodes import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Filter,
    GroupKey,
    Having,
    KeyValue,
    Limit,
    Measurement,
    Plan,
    Project,
    Scan,
    Selection,
    Sort,
    Stratum,
)
from veil.plan.visitor import PlanVisitor

__all__ = ["call_order", "canonical", "fingerprint", "measurement_fingerprint"]

Json = dict[str, Any]
FORMAT_VERSION = 2


def _frac(x: Fraction | None) -> str | None:
    return None if x is None else f"{x.numerator}/{x.denominator}"


def _budget(b: Budget | None) -> Json | None:
    if b is None:
        return None
    return {
        "kind": b.kind,
        "epsilon": _frac(b.epsilon),
        "delta": _frac(b.delta),
        "rho": _frac(b.rho),
    }


def _expr(e: exp.Expression) -> str:
    # in the dialect queries are read in: a generic rendering can map two different DuckDB
    # expressions to one text (``a // b`` and ``CAST(a / b AS BIGINT)``), one cache key
    return e.sql(dialect="duckdb", identify=True)


def _key(k: GroupKey, alias: str, spliced: list[bytes] | None) -> Json:
    out: Json = {
        "column": k.column,
        "alias": alias,
        "domain": None if k.domain is None else _domain(k.domain, spliced),
        "edges": None if k.edges is None else [_frac(e) for e in k.edges],
    }
    if k.per_unit:  # only when set: every other plan keeps its fingerprint
        out["per_unit"] = True
    if k.within:
        out["within"] = list(k.within)
        out["distinct"] = k.distinct
    return out


def _domain(domain: tuple[KeyValue, ...], spliced: list[bytes] | None) -> object:
    """A public key's domain, each value with its type (``_value``'s form); with ``spliced``
    (the fingerprints), a placeholder whose JSON text the domain's JSON replaces (a domain
    may hold a million keys: written a column at a time, ``veil.plan.domain``)."""
    if spliced is None:
        return [[type(v).__name__, v] for v in domain]  # _value inlined
    spliced.append(domain_json(domain))
    return _placeholder(len(spliced) - 1)


def _placeholder(i: int) -> str:
    return f"<veil: the JSON of declared domain {i}>"


def _value(v: object) -> object:
    # keep the type visible: 1, 1.0, "1" and True are different keys
    return [type(v).__name__, v]


def _call(a: AggregateCall, alias: str) -> Json:
    out: Json = {
        "alias": alias,
        "function": a.function,
        "column": a.column,
        "quantile": _frac(a.quantile),
        "weight": _frac(a.weight),
    }
    if a.domain is not None:  # only then: the fingerprints of other plans are unchanged
        out["domain"] = [_value(v) for v in a.domain]
    if a.top is not None:
        out["top"] = list(a.top)
    if a.weights is not None:  # survey weights (unweighted fingerprints are unchanged)
        out["weights"] = a.weights
    return out


def _contribution(c: Contribution) -> list[int]:
    """[G, R], and the total-rows bound T after them when there is one (so the fingerprints of
    plans without it are unchanged)."""
    limits = [c.max_groups, c.max_rows_per_group]
    return limits if c.max_rows is None else [*limits, c.max_rows]


def _bounds(b: ColumnBounds) -> Json:
    form: Json = {"column": b.column, "lower": _frac(b.lower), "upper": _frac(b.upper)}
    if b.groups:  # only then: the fingerprints of plans without per-group bounds are unchanged
        form["groups"] = [[_value(k), _frac(lo), _frac(hi)] for k, lo, hi in b.groups]
    return form


def _measurement(m: Measurement) -> Json:
    form = _measurement_form(m)
    if m.strata:  # only then: the fingerprints of unstratified plans are unchanged
        form["strata"] = {"key": m.stratum_key, "bins": [_stratum(s) for s in m.strata]}
    return form


def _stratum(s: Stratum) -> Json:
    return {
        "lower": _frac(s.lower),
        "upper": _frac(s.upper),
        "centre": _frac(s.centre),
        "shift": s.shift,
        "limit": s.limit,
        "sensitivity": _frac(s.sensitivity),
        "scale": _frac(s.scale),
    }


def _measurement_form(m: Measurement) -> Json:
    return {
        "name": m.name,
        "statistic": m.statistic,
        "mechanism": m.mechanism,
        "budget": _budget(m.budget),
        "sensitivity": _frac(m.sensitivity),
        "scale": _frac(m.scale),
        "column": m.column,
        "centre": _frac(m.centre),
        "step": _frac(m.step),
        "limit": m.limit,
        "quantile": _frac(m.quantile),
        "discrete": m.discrete,
        **({"picks": m.picks} if m.picks != 1 else {}),
    }


def _selection(s: Selection | None) -> Json | None:
    if s is None:
        return None
    return {
        "mechanism": s.mechanism,
        "budget": _budget(s.budget),
        "sensitivity": _frac(s.sensitivity),
        "scale": _frac(s.scale),
        "threshold": _frac(s.threshold),
    }


class _Canonical(PlanVisitor[Json]):
    positional = False  # measurement_fingerprint's form: see there
    spliced: list[bytes] | None = None  # the fingerprints': each domain's JSON, in order

    def visit_scan(self, node: Scan) -> Json:
        return {
            "node": "scan",
            "table": node.table,
            "columns": [[f.name, f.type] for f in node.columns],
        }

    def visit_filter(self, node: Filter) -> Json:
        return {
            "node": "filter",
            "predicate": _expr(node.predicate),
            "child": self.visit(node.child),
        }

    def visit_aggregate(self, node: Aggregate) -> Json:
        return {
            "node": "aggregate",
            "keys": [
                _key(k, f"k{i}" if self.positional else k.alias, self.spliced)
                for i, k in enumerate(node.keys)
            ],
            "aggregates": [
                _call(a, f"a{i}" if self.positional else a.alias)
                for i, a in enumerate(
                    sorted(node.aggregates, key=call_order) if self.positional else node.aggregates
                )
            ],
            "privacy_unit": node.privacy_unit,
            "contribution": _contribution(node.contribution),
            "bounds": [_bounds(b) for b in node.bounds],
            "budget": _budget(node.budget),
            "measurements": [
                _measurement(m)
                for m in (
                    sorted(node.measurements, key=lambda m: m.name)
                    if self.positional
                    else node.measurements
                )
            ],
            "selection": _selection(node.selection),
            "child": self.visit(node.child),
        }

    def visit_having(self, node: Having) -> Json:
        return {
            "node": "having",
            "predicate": _expr(node.predicate),
            "child": self.visit(node.child),
        }

    def visit_sort(self, node: Sort) -> Json:
        return {
            "node": "sort",
            "keys": [[k.column, k.descending] for k in node.keys],
            "child": self.visit(node.child),
        }

    def visit_limit(self, node: Limit) -> Json:
        return {
            "node": "limit",
            "count": node.count,
            "offset": node.offset,
            "child": self.visit(node.child),
        }

    def visit_project(self, node: Project) -> Json:
        return {"node": "project", "columns": list(node.columns), "child": self.visit(node.child)}


def canonical(plan: Plan) -> Json:
    """The canonical JSON-compatible form of ``plan`` (stable across runs and machines)."""
    return {"veil_plan": FORMAT_VERSION, "root": _Canonical().visit(plan)}


def _dumps(form: Json) -> str:
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(form: Callable[[_Canonical], Json]) -> str:
    """SHA-256 (hex) of ``_dumps(form(_Canonical()))``, the declared domains' JSON written in
    bulk (``veil.plan.domain.domain_json``) and hashed in place of their placeholders: compact
    JSON writes a list the same wherever it sits, so the text hashed is the same, byte for
    byte. When a placeholder's text occurs elsewhere in the form too (a name chosen to match
    it), the form is written whole instead."""
    visitor = _Canonical()
    visitor.spliced = []
    text = _dumps(form(visitor))
    marks = [json.dumps(_placeholder(i)) for i in range(len(visitor.spliced))]
    if any(text.count(mark) != 1 for mark in marks):
        return hashlib.sha256(_dumps(form(_Canonical())).encode()).hexdigest()
    digest = hashlib.sha256()
    start = 0
    # each placeholder once, none inside another (each is a whole JSON string): in text order
    for at, i in sorted((text.index(mark), i) for i, mark in enumerate(marks)):
        digest.update(text[start:at].encode())
        digest.update(visitor.spliced[i])
        start = at + len(marks[i])
    digest.update(text[start:].encode())
    return digest.hexdigest()


def fingerprint(plan: Plan) -> str:
    """SHA-256 (hex) of the canonical form's sorted JSON: equal plans ⇔ equal fingerprints."""
    return _sha256(lambda visitor: {"veil_plan": FORMAT_VERSION, "root": visitor.visit(plan)})


def call_order(a: AggregateCall) -> tuple[str, str, str, str]:
    """Where an aggregate goes in the canonical order of what is measured: by what it
    computes (column, function, quantile, weight; ``COUNT(*)`` first), never by its alias or
    its place in the SELECT list. The budget split designs the measurements in this order
    (``veil.compile.rules.build_measurements``), so that it depends on the aggregates alone."""
    return (a.column or "", a.function, _frac(a.quantile) or "", _frac(a.weight) or "")


def measurement_fingerprint(agg: Aggregate) -> str:
    """SHA-256 (hex) of what an aggregation *measures*: its canonical form with the aggregates
    and the measurements in a canonical order (by what they compute, not where the SELECT
    lists them), the output names (aggregate and key aliases) replaced by their positions,
    and without the nodes above it (HAVING, ORDER BY, LIMIT, the SELECT order).

    Two queries with the same measurement fingerprint, data version and loss draw the same
    noisy statistics; everything that differs between them is post-processing, so the ledger
    may answer the second from the first's cached measurement at no cost. The release reads a
    cached measurement by statistic name (``Measurement.name``), never by position, so
    ``SELECT AVG(x), COUNT(*)`` and ``SELECT COUNT(*), AVG(x)`` share one measurement and
    each gets its own columns. Group keys keep their order: a group's identity is the tuple
    of its key values in that order.
    """

    # written by the visitor (positional), not by replacing the nodes: the same form, without
    # validating a million-key domain again
    def form(visitor: _Canonical) -> Json:
        visitor.positional = True
        return {"veil_measurement": FORMAT_VERSION, "root": visitor.visit(agg)}

    return _sha256(form)
