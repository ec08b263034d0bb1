"""What the OpenAPI document says beyond what FastAPI derives from the routes: the bearer key
(so that Swagger UI and generated clients send it), one stable operation id per endpoint,
request examples, and the rule that a query is exactly one of ``sql`` or ``plan``.

The operation ids are the names generated clients give their methods: they are part of the API
and never change with a function's name. A new route without one is refused when the app is
built (:func:`operation_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from veil.errors import InternalError

if TYPE_CHECKING:
    from fastapi.routing import APIRoute

__all__ = ["OPERATION_IDS", "SECURITY_SCHEME", "complete", "operation_id"]

SECURITY_SCHEME = "bearerAuth"

OPERATION_IDS: Mapping[tuple[str, str], str] = {
    ("GET", "/healthz"): "health",
    ("GET", "/metrics"): "metrics",
    ("GET", "/problems"): "listProblemTypes",
    ("GET", "/v1/datasets"): "listDatasets",
    ("GET", "/v1/datasets/{name}"): "getDataset",
    ("POST", "/v1/query"): "query",
    ("POST", "/v1/explain"): "explain",
    ("POST", "/v1/bounds"): "findBounds",
    ("GET", "/v1/jobs/{job_id}"): "getJob",
    ("GET", "/v1/budget"): "getBudget",
    ("GET", "/v1/history"): "getHistory",
    ("GET", "/v1/charges/{charge_id}"): "getCharge",
    ("POST", "/v1/mechanisms/laplace"): "laplace",
    ("POST", "/v1/mechanisms/gaussian"): "gaussian",
    ("POST", "/v1/mechanisms/exponential"): "exponential",
    ("POST", "/v1/mechanisms/randomized-response"): "randomizedResponse",
    ("GET", "/v1/admin/datasets"): "adminListDatasets",
    ("POST", "/v1/admin/datasets"): "adminAddDataset",
    ("GET", "/v1/admin/datasets/{name}"): "adminGetDataset",
    ("DELETE", "/v1/admin/datasets/{name}"): "adminRemoveDataset",
    ("GET", "/v1/admin/principals"): "adminListPrincipals",
    ("POST", "/v1/admin/principals"): "adminAddPrincipal",
    ("POST", "/v1/admin/principals/{name}/rotate"): "adminRotateKey",
    ("DELETE", "/v1/admin/principals/{name}"): "adminRevokeKey",
    ("GET", "/v1/admin/grants"): "adminListGrants",
    ("POST", "/v1/admin/grants"): "adminGrant",
    ("GET", "/v1/admin/audit"): "adminAudit",
    ("GET", "/v1/admin/alerts"): "adminListAlerts",
}
"""Each endpoint's operation id (method, path → id)."""


def operation_id(route: APIRoute) -> str:
    """The stable operation id of ``route`` (FastAPI's ``generate_unique_id_function``);
    routes outside the document (the dashboard's) keep their function's name."""
    if not route.include_in_schema:
        return route.name
    methods = sorted(route.methods or ())
    method = methods[0] if len(methods) == 1 else ",".join(methods)
    found = OPERATION_IDS.get((method, route.path_format))
    if found is None:
        raise InternalError(
            f"{method} {route.path_format} has no operation id: add one to "
            "veil.service.apidoc.OPERATION_IDS (this is a bug in veil)"
        )
    return found


_SQL = "SELECT state, COUNT(*) AS n, AVG(income) AS mean_income FROM people GROUP BY state"
_PLAN = {
    "where": ["income >= 1000"],
    "group_by": ["state"],
    "aggregates": [
        {"function": "count", "alias": "n"},
        {"function": "avg", "column": "income", "alias": "mean_income"},
    ],
}
_QUERY_EXAMPLES = {
    "sql": {
        "summary": "A query in SQL",
        "value": {"dataset": "people", "sql": _SQL, "epsilon": 0.5},
    },
    "plan": {
        "summary": "The same kind of query as a plan (the Python builder's calls)",
        "value": {"dataset": "people", "plan": _PLAN, "epsilon": 0.5, "delta": 1e-7},
    },
    "target": {
        "summary": "The smallest ε meeting an accuracy target",
        "value": {"dataset": "people", "sql": "SELECT COUNT(*) AS n FROM people",
                  "target": ["n=±50"]},
    },
}  # fmt: skip
EXAMPLES: Mapping[str, Mapping[str, Any]] = {
    "query": _QUERY_EXAMPLES,
    "explain": _QUERY_EXAMPLES,
    "findBounds": {
        "income": {
            "summary": "Bounds for one column",
            "value": {"dataset": "people", "columns": ["income"], "epsilon": 0.1},
        }
    },
    "laplace": {
        "count": {
            "summary": "A count you computed (sensitivity 1)",
            "value": {"dataset": "app", "values": 1234, "sensitivity": 1, "epsilon": 0.5,
                      "integer": True},
        }
    },
    "gaussian": {
        "sums": {
            "summary": "Two sums you computed, under (ε, δ)-DP",
            "value": {"dataset": "app", "values": [10.5, 20.25], "sensitivity": 1,
                      "epsilon": 0.5, "delta": 1e-6},
        }
    },
    "exponential": {
        "choice": {
            "summary": "Choose a candidate by its score",
            "value": {"dataset": "app", "candidates": ["a", "b", "c"], "scores": [3, 1, 2],
                      "sensitivity": 1, "epsilon": 1},
        }
    },
    "randomizedResponse": {
        "answers": {
            "summary": "Randomise each record's category",
            "value": {"dataset": "app", "values": ["yes", "no", "yes"],
                      "categories": ["yes", "no"], "epsilon": 1},
        }
    },
    "adminGrant": {
        "epsilon": {
            "summary": "Grant ε = 2 to an analyst on a dataset",
            "value": {"analyst": "alice", "dataset": "people", "epsilon": 2},
        }
    },
    "adminAddPrincipal": {
        "analyst": {"summary": "A new analyst", "value": {"name": "alice"}},
    },
}  # fmt: skip
"""Request body examples, by operation id."""

_ONE_QUERY = (
    "The query is exactly one of `sql` (text) or `plan` (JSON builder calls); a request with "
    "both or neither is refused (422)."
)


def _one_of_sql_or_plan(schema: dict[str, Any]) -> None:
    """Say, in words and as JSON Schema, that exactly one of ``sql`` and ``plan`` is given (a
    property left out or null is not given)."""
    props = schema.get("properties", {})
    if "sql" not in props or "plan" not in props:
        raise InternalError("a query schema without sql and plan (this is a bug in veil)")
    text = schema.get("description", "")
    if _ONE_QUERY not in text:
        schema["description"] = f"{text}\n\n{_ONE_QUERY}".strip()
    schema["oneOf"] = [
        {"required": ["sql"], "properties": {"sql": {"type": "string"}, "plan": {"type": "null"}}},
        {"required": ["plan"], "properties": {"plan": {"type": "object"}, "sql": {"type": "null"}}},
    ]


def complete(doc: dict[str, Any]) -> None:
    """Add the security scheme (required by every operation that may answer 401), the
    examples, and the sql/plan rule to the OpenAPI document ``doc``, in place."""
    components = doc.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "an API key from `veil admin analyst add NAME` (an administrator's for "
        "`/v1/admin/…` and `/metrics`), sent as `Authorization: Bearer <key>`",
    }
    for ops in doc.get("paths", {}).values():
        for operation in ops.values():
            if "401" in operation.get("responses", {}):
                operation["security"] = [{SECURITY_SCHEME: []}]
            examples = EXAMPLES.get(operation.get("operationId", ""))
            if examples is not None:
                media = operation["requestBody"]["content"]["application/json"]
                media["examples"] = {name: dict(example) for name, example in examples.items()}
    schemas = components.get("schemas", {})
    for name in ("ExplainRequest", "QueryRequest"):
        _one_of_sql_or_plan(schemas[name])
