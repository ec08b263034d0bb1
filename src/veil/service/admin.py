"""The administrator's endpoints under ``/v1/admin``: the catalog, principals and their keys,
grants, the audit export and alerts. Every one needs an administrator's key (403 otherwise)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse

from veil.accounting.budget import Budget
from veil.catalog import Source
from veil.cli_options import budget_json
from veil.errors import InvalidArgumentError
from veil.service import responses as out
from veil.service.models import AnalystCreate, DatasetCreate, GrantRequest
from veil.service.principals import Principal
from veil.service.problems import responses
from veil.service.responses import ok
from veil.service.state import admin, state_of

__all__ = ["router"]

# every endpoint: a key (401, 429), an administrator's (403), failures (500, 503)
router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=responses(401, 403, 429, 500, 503))
_BODY = (400, 413, 422)  # and those with a body: out of domain, too large, not the schema

Admin = Annotated[Principal, Depends(admin)]


def _budget(epsilon: Any, delta: Any, rho: Any, what: str) -> Budget | None:
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise InvalidArgumentError(f"{what}: give either rho or epsilon [and delta], not both")
        return Budget(rho=rho)
    if epsilon is not None:
        return Budget(epsilon=epsilon, delta=delta if delta is not None else 0)
    if delta is not None:
        raise InvalidArgumentError(f"{what}: delta needs an epsilon")
    return None


# ------------------------------------------------------------------------------ datasets


@router.get("/datasets", summary="Every dataset in the catalog, with its source",
            response_model=None, responses=ok(out.DatasetEntries))  # fmt: skip
async def datasets(request: Request, _who: Admin) -> dict[str, Any]:
    state = state_of(request)
    return await state.run(lambda: {"datasets": [ds.to_json() for ds in state.catalog.datasets()]})


@router.post("/datasets", status_code=201, summary="Register a dataset in the catalog",
             response_model=None,
             responses={**ok(out.DatasetEntry, 201), **responses(*_BODY)})  # fmt: skip
async def add_dataset(request: Request, body: DatasetCreate, _who: Admin) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        source = Source(body.source.kind, body.source.path, body.source.table, body.source.url)  # type: ignore[arg-type]
        total = _budget(body.total_epsilon, body.total_delta, body.total_rho, "total")
        ds = state.catalog.add_dataset(body.name, source=source, total=total, **body.options())
        return ds.to_json()

    return await state.run(go)


@router.get("/datasets/{name}", summary="One dataset of the catalog", response_model=None,
            responses={**ok(out.DatasetEntry), **responses(404)})  # fmt: skip
async def show_dataset(request: Request, name: str, _who: Admin) -> dict[str, Any]:
    state = state_of(request)
    return await state.run(lambda: state.catalog.dataset(name).to_json())


@router.delete("/datasets/{name}", status_code=204, summary="Remove a dataset from the catalog",
               responses=responses(404))  # fmt: skip
async def remove_dataset(request: Request, name: str, _who: Admin) -> None:
    state = state_of(request)
    await state.run(lambda: state.catalog.remove(name))


# ------------------------------------------------------------------------------ principals


def _principal(p: Principal) -> dict[str, Any]:
    return {
        "name": p.name,
        "role": p.role,
        "created_at": p.created_at.isoformat(),
        "revoked_at": None if p.revoked_at is None else p.revoked_at.isoformat(),
        "active": p.active,
    }


@router.get("/principals", summary="Every analyst and administrator (never their keys)",
            response_model=None, responses=ok(out.Principals))  # fmt: skip
async def principals(request: Request, _who: Admin) -> dict[str, Any]:
    state = state_of(request)
    return await state.run(lambda: {"principals": [_principal(p) for p in state.principals.list()]})


@router.post("/principals", status_code=201, summary="Add an analyst or administrator",
             response_model=None,
             responses={**ok(out.NewKey, 201), **responses(*_BODY)})  # fmt: skip
async def add_principal(request: Request, body: AnalystCreate, _who: Admin) -> dict[str, Any]:
    state = state_of(request)
    role: Literal["admin", "analyst"] = "admin" if body.role == "admin" else "analyst"
    key = await state.run(lambda: state.principals.add(body.name, role))
    return {"name": body.name, "role": role, "key": key, "note": "the key is shown only once"}


@router.post("/principals/{name}/rotate", summary="Replace a principal's key (shown once)",
             response_model=None,
             responses={**ok(out.NewKey), **responses(400)})  # fmt: skip
async def rotate_key(request: Request, name: str, _who: Admin) -> dict[str, Any]:
    state = state_of(request)
    key = await state.run(lambda: state.principals.rotate(name))
    return {"name": name, "key": key, "note": "the key is shown only once; the old one is revoked"}


@router.delete("/principals/{name}", status_code=204, summary="Revoke a principal's key",
               responses=responses(400))  # fmt: skip
async def revoke_key(request: Request, name: str, _who: Admin) -> None:
    state = state_of(request)
    await state.run(lambda: state.principals.revoke(name))


# ------------------------------------------------------------------------------ grants


@router.get("/grants", summary="Every grant: granted, remaining and used share",
            response_model=None, responses=ok(out.Grants))  # fmt: skip
async def grants(request: Request, _who: Admin) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        ledger = state.ledger
        return {
            "grants": [
                {
                    "analyst": a,
                    "dataset": d,
                    "granted": budget_json(ledger.granted(a, d)),
                    "remaining": budget_json(ledger.remaining(a, d)),
                    "used": float(ledger.used_share(a, d)),
                }
                for a, d in sorted(ledger.grants())
            ]
        }

    return await state.run(go)


@router.post("/grants", status_code=201, summary="Grant budget to an analyst on a dataset",
             response_model=None,
             responses={**ok(out.Granted, 201), **responses(*_BODY, 404)})  # fmt: skip
async def grant(request: Request, body: GrantRequest, _who: Admin) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        budget = _budget(body.epsilon, body.delta, body.rho, "grant")
        if budget is None:
            raise InvalidArgumentError("say how much to grant: epsilon (and delta) or rho")
        total = state.ledger.grant(body.analyst, body.dataset, budget)
        return {
            "analyst": body.analyst,
            "dataset": body.dataset,
            "granted": budget_json(budget),
            "total": budget_json(total),
            "remaining": budget_json(state.ledger.remaining(body.analyst, body.dataset)),
        }

    return await state.run(go)


# ------------------------------------------------------------------------------ audit


@router.get(
    "/audit",
    summary="The ledger for an audit: JSON (everything) or CSV (every event)",
    response_model=None,
    responses={
        200: {
            "description": "The ledger: JSON (`format=json`) or CSV (`format=csv`)",
            "content": {"application/json": {}, "text/csv": {"schema": {"type": "string"}}},
        },
        **responses(422),
    },
)
async def audit(
    request: Request,
    _who: Admin,
    fmt: Annotated[Literal["json", "csv"], Query(alias="format")] = "json",
) -> PlainTextResponse | dict[str, Any]:
    state = state_of(request)
    if fmt == "csv":
        text = await state.run(state.ledger.export_csv)
        return PlainTextResponse(text, media_type="text/csv")
    dump: dict[str, Any] = json.loads(await state.run(state.ledger.export_json))
    return dump


@router.get("/alerts", summary="Every budget alert the ledger recorded",
            response_model=None, responses=ok(out.Alerts))  # fmt: skip
async def alerts(request: Request, _who: Admin) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        return {
            "alerts": [
                {
                    "analyst": analyst,
                    "dataset": dataset,
                    "threshold": float(threshold),
                    "used": float(used),
                    "at": at.isoformat(),
                }
                for analyst, dataset, threshold, used, at in state.ledger.alerts()
            ]
        }

    return await state.run(go)
