"""Mechanism endpoints, for applications that compute a true value themselves (the PHP seed's
``noisyCount($trueCount)``): Laplace and Gaussian noise on caller-supplied values, the
exponential mechanism over caller-supplied scores, randomized response.

**Here privacy rests entirely on the caller's sensitivity claim.** veil never sees the data,
so it cannot bound anyone's contribution: it draws exact noise calibrated to the
``sensitivity`` you state and charges the loss to your grant on ``dataset`` (a name an
administrator grants for this purpose), before any noise is drawn
(:mod:`veil.mechanisms`). A wrong claim gives a wrong guarantee.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from veil import mechanisms
from veil.cli_options import budget_json
from veil.mechanisms import Release
from veil.service import logs
from veil.service import responses as out
from veil.service.models import (
    ExponentialRequest,
    GaussianRequest,
    LaplaceRequest,
    RandomizedResponseRequest,
)
from veil.service.principals import Principal
from veil.service.problems import Problem, from_error, responses
from veil.service.responses import ok
from veil.service.state import caller, state_of

__all__ = ["router"]

# every endpoint: a body (413, 422), a key (401, 429), a grant to charge (404, 403 when
# exhausted), arguments out of their domain (400), failures (500, 503)
router = APIRouter(
    prefix="/v1/mechanisms",
    tags=["mechanisms"],
    responses=responses(400, 401, 403, 404, 413, 422, 429, 500, 503),
)

Caller = Annotated[Principal, Depends(caller)]

NOTE = "privacy rests on the sensitivity you claimed: veil did not see the data and cannot check it"


def _plain(value: Any) -> Any:
    """A release's value (numpy scalar or array, Python number) as JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return value


async def _charged(
    request: Request, who: Principal, dataset: str, draw: Callable[[Any], Any]
) -> tuple[Any, dict[str, Any] | None]:
    """``draw(ledger)`` for ``who`` on ``dataset``'s grant (404 without one, as if unknown),
    and what is left of the grant after it. A failure after the charge was reserved (the
    ledger's database failing as it commits, or as the remaining budget is read) is
    ``outcome-unknown``: the noisy values are not released, and the charge may stand."""
    state = state_of(request)
    logs.note(dataset=dataset)

    def go() -> tuple[Any, dict[str, Any] | None]:
        with state.ledger.tracking() as reserved:
            try:
                if not state.ledger.has_grant(who.name, dataset):
                    raise Problem("not-found", "no such dataset")
                drawn = draw(state.ledger)
                return drawn, budget_json(state.ledger.remaining(who.name, dataset))
            except Exception as exc:
                raise from_error(exc, reserved) from exc

    return await state.run(go)


def _release(dataset: str, r: Release, remaining: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dataset": dataset,
        "mechanism": r.mechanism,
        "values": _plain(r.value),
        "loss": budget_json(r.loss),
        "sensitivity": str(r.sensitivity),
        "scale": None if r.scale is None else float(r.scale),
        "remaining": remaining,
        "note": NOTE,
    }
    if r.noise_scale is not None:
        out["error_bar"] = r.error_bar(0.95)
        out["error_bar_level"] = 0.95
    return out


@router.post("/laplace", summary="Laplace noise on your values (ε-DP for your sensitivity)",
             response_model=None, responses=ok(out.NoisyValues))  # fmt: skip
async def laplace(request: Request, body: LaplaceRequest, who: Caller) -> dict[str, Any]:
    fn = mechanisms.discrete_laplace if body.integer else mechanisms.laplace
    r, remaining = await _charged(
        request,
        who,
        body.dataset,
        lambda ledger: fn(
            body.values,
            sensitivity=body.sensitivity,
            epsilon=body.epsilon,
            ledger=ledger,
            analyst=who.name,
            dataset=body.dataset,
        ),
    )
    return _release(body.dataset, r, remaining)


@router.post("/gaussian", summary="Gaussian noise on your values (ρ-zCDP or (ε, δ)-DP)",
             response_model=None, responses=ok(out.NoisyValues))  # fmt: skip
async def gaussian(request: Request, body: GaussianRequest, who: Caller) -> dict[str, Any]:
    r, remaining = await _charged(
        request,
        who,
        body.dataset,
        lambda ledger: mechanisms.gaussian(
            body.values,
            sensitivity=body.sensitivity,
            epsilon=body.epsilon,
            delta=body.delta,
            rho=body.rho,
            ledger=ledger,
            analyst=who.name,
            dataset=body.dataset,
        ),
    )
    return _release(body.dataset, r, remaining)


@router.post("/exponential", summary="Choose a candidate by the exponential mechanism",
             response_model=None, responses=ok(out.Choice))  # fmt: skip
async def exponential(request: Request, body: ExponentialRequest, who: Caller) -> dict[str, Any]:
    if len(body.candidates) != len(body.scores):
        raise Problem(
            "invalid-argument",
            f"{len(body.candidates)} candidates but {len(body.scores)} scores; give one score "
            "per candidate",
        )
    index, remaining = await _charged(
        request,
        who,
        body.dataset,
        lambda ledger: mechanisms.exponential(
            list(body.scores),
            sensitivity=body.sensitivity,
            epsilon=body.epsilon,
            ledger=ledger,
            analyst=who.name,
            dataset=body.dataset,
        ),
    )
    from veil.accounting.budget import Budget

    return {
        "dataset": body.dataset,
        "mechanism": "exponential",
        "index": int(index),
        "choice": body.candidates[int(index)],
        "loss": budget_json(Budget(epsilon=body.epsilon)),
        "remaining": remaining,
        "note": NOTE,
    }


@router.post("/randomized-response", summary="k-ary randomized response of your values",
             response_model=None, responses=ok(out.Reported))  # fmt: skip
async def randomized_response(
    request: Request, body: RandomizedResponseRequest, who: Caller
) -> dict[str, Any]:
    r, remaining = await _charged(
        request,
        who,
        body.dataset,
        lambda ledger: mechanisms.randomized_response(
            list(body.values),
            categories=list(body.categories),
            epsilon=body.epsilon,
            ledger=ledger,
            analyst=who.name,
            dataset=body.dataset,
        ),
    )
    out = _release(body.dataset, r, remaining)
    out["note"] = "each reported value is ε-DP for the one value it reports (local DP)"
    return out
