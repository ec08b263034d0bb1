"""The analyst's endpoints under ``/v1``: datasets, query, explain, bounds, budget, history,
jobs.

Every dataset-facing endpoint first checks, from the ledger alone, that the caller holds a
grant on the dataset; a dataset that exists but is not granted answers exactly as one that does
not exist (``not-found``, same detail, no padding). Each query opens its own session and engine
(:meth:`veil.Session.from_catalog`), in the worker's query thread pool.

**Timing padding.** A dataset with ``min_response_ms`` answers a query (success and refusal
alike) no earlier than that many milliseconds after the request arrived, so that how long it ran
does not tell the analyst about the data. Its limits: a query that runs longer than the pad is
not hidden (set the pad above the slowest query's time); load from other requests shifts times
too; a synchronous query that outlasts ``query_timeout_s`` turns into a job at that moment
(choose the pad above the timeout to hide that); and the pad hides nothing from whoever sees the
server's CPU or the engine's logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from veil.accounting.budget import Budget
from veil.accounting.ledger import Standing
from veil.accounting.pages import MAX_PAGE
from veil.accounting.records import Record
from veil.autobounds import is_auto
from veil.autobounds_target import TargetedBounds
from veil.catalog import Dataset
from veil.cli_options import budget_json
from veil.cli_output import explanation_payload, result_payload
from veil.cli_target import bounds_target_json, choice_json, limits_target_json
from veil.errors import BudgetExhaustedError, InvalidArgumentError, LedgerUnavailableError
from veil.plan.builder import Query as Builder
from veil.plan.nodes import GroupKey, SortKey
from veil.service import logs
from veil.service import responses as out
from veil.service.hot import hot_key
from veil.service.models import (
    AutoPerGroup,
    BoundsRequest,
    ExplainRequest,
    PlanBody,
    QueryRequest,
)
from veil.service.principals import Principal
from veil.service.problems import MEDIA_TYPE, Problem, from_error, responses, unknown_outcome
from veil.service.responses import ok
from veil.service.state import (
    ServiceState,
    arrival,
    authenticated,
    bearer_key,
    caller,
    state_of,
)
from veil.session import Session

if TYPE_CHECKING:
    from veil.accuracy import Choice, Target

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["analyst"])
logger = logging.getLogger("veil.service")

Caller = Annotated[Principal, Depends(caller)]
BearerKey = Annotated[str, Depends(bearer_key)]
_AUTH = (401, 429, 500, 503)  # what every endpoint here may answer: no key, rate, failures
Answer = tuple[int, dict[str, Any]]
Shown = tuple[int, bytes]  # a kept answer shown again: its body already JSON


def json_answer(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE if status >= 400 else None)


def respond(answer: Answer | Shown) -> Response:
    """The response of an answer, or of a kept answer shown again (the same bytes)."""
    status, body = answer
    if isinstance(body, bytes):
        return Response(body, status_code=status, media_type="application/json")
    return json_answer(status, body)


async def pad_until(deadline: float) -> None:
    wait = deadline - time.monotonic()
    if wait > 0:
        await asyncio.sleep(wait)


# ------------------------------------------------------------------------------ datasets


def _columns(state: ServiceState, ds: Dataset) -> list[dict[str, str]]:
    """The dataset's columns and types as the engine declares them (no row is read)."""
    with state.engines.borrow(ds) as engine:
        schema = engine.schema(ds.name)
        return [{"name": f.name, "type": str(f.type)} for f in schema]


def _public(state: ServiceState, ds: Dataset) -> dict[str, Any]:
    out = ds.public()
    out["columns"] = _columns(state, ds)
    return out


@router.get("/datasets", summary="The datasets granted to the caller, with their public metadata",
            response_model=None,
            responses={**ok(out.DatasetList), **responses(*_AUTH)})  # fmt: skip
async def list_datasets(request: Request, who: Caller) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        mine = {d for a, d in state.ledger.grants() if a == who.name}
        found = [ds for ds in state.catalog.datasets() if ds.name in mine]
        return {"datasets": [_public(state, ds) for ds in found]}

    return await state.run(go)


@router.get("/datasets/{name}", summary="One granted dataset's public metadata and schema",
            response_model=None,
            responses={**ok(out.DatasetVisible), **responses(*_AUTH, 404)})  # fmt: skip
async def show_dataset(request: Request, name: str, who: Caller) -> dict[str, Any]:
    state = state_of(request)
    return await state.run(lambda: _public(state, state.granted_dataset(who, name)))


# ------------------------------------------------------------------------------ queries


def _refuse_widening(body: ExplainRequest, ds: Dataset) -> None:
    """The analyst may not change the privacy unit (refused before anything is charged)."""
    if "privacy_unit" in body.model_fields_set and body.privacy_unit != ds.privacy_unit:
        raise InvalidArgumentError(
            f"privacy_unit={body.privacy_unit!r}: the privacy unit of dataset {ds.name!r} is "
            f"set by its data owner ({ds.privacy_unit or 'each row'}) and cannot be changed "
            "by a query; leave privacy_unit out"
        )


def _bounds(body: ExplainRequest) -> str | dict[str, Any] | None:
    """The request's bounds as :meth:`Session.sql` and :meth:`Session.run_query` take them:
    pairs, ``"auto"`` (all or per column), ``{"auto": KEY}`` per group — for a query given as
    sql or as a plan alike (the same steps, charges and cached answers)."""
    if body.bounds is None:
        return None  # (a bounds_share without auto bounds: the session refuses it)
    if isinstance(body.bounds, str):
        out: str | dict[str, Any] = body.bounds
    else:
        out = {}
        for column, spec in body.bounds.items():
            if isinstance(spec, AutoPerGroup):
                out[column] = {"auto": spec.auto}
            elif isinstance(spec, str):
                out[column] = spec
            else:
                out[column] = (spec[0], spec[1])
    return out


def _answered(
    state: ServiceState,
    who: Principal,
    ds: Dataset,
    body: ExplainRequest | BoundsRequest,
    ask: Callable[[Session], dict[str, Any]],
) -> Answer:
    """``ask`` a session on ``ds`` with a lent engine (never raises: a refusal is its problem
    document, counted in the metrics; a failure after a charge was reserved is
    ``outcome-unknown``, never "retry later")."""
    with state.ledger.tracking() as reserved:
        try:
            if isinstance(body, ExplainRequest):
                _refuse_widening(body, ds)
            with (
                state.engines.borrow(ds) as engine,
                Session.from_catalog(state.catalog, ds, analyst=who.name, engine=engine) as s,
            ):
                payload = ask(s)
            payload["dataset"] = ds.name
            fingerprint = payload.get("fingerprint")
            logs.note(
                fingerprint=fingerprint if isinstance(fingerprint, str) else None,
                outcome="cached" if payload.get("cached") is True else "answered",
            )
            return 200, payload
        except Exception as exc:
            problem = from_error(exc, reserved)
            state.metrics.refusal(ds.name, problem.slug)
            fingerprint = problem.extensions.get("fingerprint")
            logs.note(
                fingerprint=fingerprint if isinstance(fingerprint, str) else None,
                outcome=problem.slug,
            )
            return problem.type.status, problem.body()


def _remaining(session: Session) -> Budget | None:
    """What is left of the grant after an answer whose charge is committed: None when the
    ledger cannot say now (the answer is released all the same, never answered "retry")."""
    try:
        return session.remaining()
    except LedgerUnavailableError:
        return None


def _options(body: ExplainRequest) -> dict[str, Any]:
    return {
        "epsilon": body.epsilon,
        "delta": body.delta,
        "bounds": _bounds(body),
        **({} if body.bounds_share is None else {"bounds_share": body.bounds_share}),
        "max_groups": body.max_groups,
        "max_rows_per_group": body.max_rows_per_group,
        "max_rows": body.max_rows,
        "weights": body.weights,
        **({} if body.limits is None else {"limits": body.limits}),
        **({} if body.limits_share is None else {"limits_share": body.limits_share}),
    }


def _choice(session: Session, body: ExplainRequest) -> Choice | None:
    """The smallest ε meeting ``body``'s accuracy targets (None without targets): found from
    public parameters, free; refused free (a problem document) when the grant cannot pay it,
    with the cost it would need as ``requested``."""
    if body.target is None:
        if body.references is not None or body.min_group_size is not None:
            raise InvalidArgumentError(
                "references and min_group_size qualify accuracy targets; add target: ['n=±50']"
            )
        return None
    if body.epsilon is not None:
        raise InvalidArgumentError(
            f"give target or epsilon={body.epsilon}, not both: the targets choose ε"
        )
    if body.sql is None:
        raise InvalidArgumentError(
            "target is for a query given as sql; give the query as sql, or an epsilon"
        )
    if body.limits is not None or is_auto(_bounds(body)):
        return None  # chosen after the limits or bounds step: Session.sql(target=…)
    from veil.accuracy import choose_epsilon

    options = {k: v for k, v in _options(body).items() if k != "epsilon"}
    return choose_epsilon(
        session,
        body.sql,
        list(body.target),
        references=body.references,
        min_group_size=body.min_group_size,
        **options,
    )


def _stepped_targets(body: ExplainRequest) -> tuple[Target, ...] | None:
    """``body``'s targets when it asks for auto limits or auto bounds too (checked by
    :func:`_choice` first): the session chooses the limits or the bounds, then ε
    (:mod:`veil.autolimits_target`, :mod:`veil.autobounds_target`)."""
    if body.target is None or (body.limits is None and not is_auto(_bounds(body))):
        return None
    from veil.accuracy import parse_targets

    return parse_targets(
        list(body.target), references=body.references, min_group_size=body.min_group_size
    )


def _built(session: Session, table: str, plan: PlanBody) -> Builder:
    """``plan`` as builder calls on ``table`` (each call checks what it is given, as in
    Python: the same refusals, free)."""
    q = session.query(table)
    for predicate in plan.where:
        q = q.where(predicate)
    for key in plan.group_by:
        if isinstance(key, str):
            q = q.group_by(key)
        elif key.keys is not None and key.bins is not None:
            raise InvalidArgumentError(
                f"group_by {key.column!r}: give keys (a public list) or bins (edges), not both"
            )
        elif key.keys is not None:
            q = q.group_by_keys(key.column, key.keys, alias=key.alias)
        elif key.bins is not None:
            q = q.bin(key.column, *key.bins, alias=key.alias)
        else:
            q = q.group_by(GroupKey(key.column, alias=key.alias or ""))
    for a in plan.aggregates:
        if a.function != "median":
            q = q.agg(a.function, a.column, a.alias, quantile=a.quantile)
        elif a.quantile is not None:
            raise InvalidArgumentError(
                f"median is the quantile 1/2 and takes no quantile (got {a.quantile!r}); give "
                "function 'quantile' with its quantile instead"
            )
        else:  # as the builder's median(): the quantile 1/2, the plan of SQL's MEDIAN
            q = q.agg("quantile", a.column, a.alias, quantile="1/2")
    if plan.having is not None:
        q = q.having(plan.having)
    for s in plan.order_by:
        q = q.order_by(SortKey(s) if isinstance(s, str) else SortKey(s.column, s.descending))
    if plan.limit is not None:
        q = q.limit(plan.limit, plan.offset)
    if plan.select is not None:
        q = q.select(*plan.select)
    return q


def _run_query(
    state: ServiceState,
    who: Principal,
    ds: Dataset,
    body: QueryRequest,
    standing: Standing | None = None,
) -> Answer:
    """Answer ``body``: released values, error bars, cost and what is left. With the
    ``standing`` read that found ``ds``, a cached answer's body is kept for
    :func:`_shown_again`."""

    def ask(session: Session) -> dict[str, Any]:
        choice = _choice(session, body)
        if body.plan is not None:
            query = _built(session, ds.name, body.plan)
            options = _options(body) | {"consistent": body.consistent}
            result = session.run_query(query, **options)
        else:
            assert body.sql is not None  # the model holds exactly one
            options = _options(body)
            if choice is not None:
                options["epsilon"] = choice.epsilon
            targets = _stepped_targets(body)
            if targets is not None:
                options["target"] = targets
            result = session.sql(body.sql, consistent=body.consistent, **options)
        remaining = _remaining(session)
        state.metrics.query(ds.name, cached=result.cached)
        payload = result_payload(result, remaining=remaining)
        if choice is not None:
            payload["target"] = choice_json(choice)
        elif result.auto_limits is not None and result.auto_limits.targeted is not None:
            payload["target"] = limits_target_json(result.auto_limits.targeted)
        elif result.targeted is not None:
            payload["target"] = bounds_target_json(result.targeted)
        if (
            standing is not None
            and result.cached
            and result.charged is not None
            and not result.auto_bounds  # its bounds steps are cached answers of their own
            and result.auto_limits is None  # and so is its limits step
        ):
            key = hot_key(who.name, standing, body, session.engine.data_version(ds.name))
            state.hot.remember(key, payload, fingerprint=result.fingerprint, loss=result.charged)
        return payload

    return _answered(state, who, ds, body, ask)


def _shown_again(
    state: ServiceState, who: Principal, ds: Dataset, standing: Standing, body: QueryRequest
) -> Shown | None:
    """The cached answer this worker showed for the same request, grant, catalog entry and
    data version, shown again (its hit recorded), or None: see :mod:`veil.service.hot`.
    Anything unexpected is None too: the full path then answers or refuses as it would."""
    try:
        with state.engines.borrow(ds) as engine:
            version = engine.data_version(ds.name)
        payload = state.hot.answer(
            state.ledger, hot_key(who.name, standing, body, version), who.name, ds, standing
        )
    except Exception:
        return None
    if payload is None:
        return None
    state.metrics.query(ds.name, cached=True)
    logs.note(outcome="cached")
    return 200, payload


@dataclass(frozen=True)
class Checked:
    """A query request checked on the event loop: its caller, dataset and grant, and the
    cached answer shown again (None: the full path must answer)."""

    who: Principal
    ds: Dataset
    standing: Standing
    again: Shown | None


HOT_CHECKED = "veil_checked"  # the scope key under which HotQueries hands a Checked on


def check_hot(state: ServiceState, request: Request, key: str, body: QueryRequest) -> Checked:
    """For a request whose body this worker answered from the cache before (the ledger's
    reads local): the key checked (401, 429 past the rate), the SQL's size, the grant (the
    same not-found as the full path), and the kept answer shown again if there still is one.
    Raises the same problems, in the same order, as the full path's checks."""
    who = authenticated(request, key)
    _check_sql(state, body)
    ds, standing = state.standing(who, body.dataset)
    # the data version of a file is a stat; of a PostgreSQL or Spark table, a round trip
    local = ds.source.kind in ("file", "duckdb")
    again = _shown_again(state, who, ds, standing, body) if local else None
    return Checked(who, ds, standing, again)


def _precheck(state: ServiceState, who: Principal, ds: Dataset, body: QueryRequest) -> Answer:
    """What ``body``'s query would refuse before reading any data — its explanation's
    refusals, a missing ε, a cost beyond what the grant has left — as a problem document;
    ``(200, {})`` when the query may run. Reads no data, charges nothing (the charge itself is
    still decided atomically when the query reserves)."""
    if body.epsilon is None and body.target is None:
        problem = from_error(
            InvalidArgumentError(
                "a query needs epsilon (what it may cost, e.g. 0.5) or accuracy targets "
                "(target: ['n=±50'])"
            )
        )
        state.metrics.refusal(ds.name, problem.slug)
        return problem.type.status, problem.body()
    status, payload = _run_explain(state, who, ds, body)
    if status >= 400:
        return status, payload
    if payload.get("covered") is False:
        problem = from_error(
            BudgetExhaustedError(
                _shown_budget(payload["cost"]),
                _shown_budget(payload["remaining"]),
                analyst=who.name,
                dataset=ds.name,
            )
        )
        state.metrics.refusal(ds.name, problem.slug)
        return problem.type.status, problem.body()
    return 200, {}


def _shown_budget(shown: dict[str, Any]) -> Budget:
    """The exact budget of a payload's ``budget_json``."""
    exact = shown["exact"]
    if shown["kind"] == "zcdp":
        return Budget(rho=exact["rho"])
    return Budget(epsilon=exact["epsilon"], delta=exact["delta"])


def _run_explain(state: ServiceState, who: Principal, ds: Dataset, body: ExplainRequest) -> Answer:
    """What ``body`` would cost and its expected error (nothing read, nothing charged)."""

    def ask(session: Session) -> dict[str, Any]:
        choice = _choice(session, body)
        if choice is not None:  # as Session.explain(target=): the choice in words first
            said = replace(choice.explanation, notes=(*choice.lines(), *choice.explanation.notes))
            return explanation_payload(said) | {"target": choice_json(choice)}
        if body.plan is not None:
            return explanation_payload(
                session.explain_query(_built(session, ds.name, body.plan), **_options(body))
            )
        assert body.sql is not None  # the model holds exactly one
        targets = _stepped_targets(body)
        if targets is not None:  # the range over the candidate limits or bounds, the dearest
            explained = session.explain(body.sql, target=targets, **_options(body))
            shown = (
                bounds_target_json(explained.targeted)
                if isinstance(explained.targeted, TargetedBounds)
                else limits_target_json(explained.targeted)
            )
            return explanation_payload(explained) | {"target": shown}
        return explanation_payload(session.explain(body.sql, **_options(body)))

    return _answered(state, who, ds, body, ask)


def _check_sql(state: ServiceState, body: ExplainRequest) -> None:
    limit = state.config.limits.max_sql_chars
    if body.sql is not None:
        size, what = len(body.sql), "the SQL has"
    else:
        assert body.plan is not None
        size, what = len(body.plan.model_dump_json()), "the plan's JSON has"
    if size > limit:
        raise Problem("payload-too-large", f"{what} {size} characters; at most {limit}")


def _accepted(request: Request, job_id: str) -> JSONResponse:
    url = str(request.url_for("get_job", job_id=job_id).path)
    return JSONResponse(
        {"job": job_id, "url": url, "state": "running"},
        status_code=202,
        headers={"Location": url},
    )


def _finish_later(
    state: ServiceState, job_id: str, deadline: float
) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:  # an Answer, or a Shown
        body: dict[str, Any]
        try:
            status, answer = future.result()
            body = json.loads(answer) if isinstance(answer, bytes) else answer
        except Exception as exc:  # _run_query never raises; a cancelled pool might
            problem = from_error(exc)
            status, body = problem.type.status, problem.body()
        wait = deadline - time.monotonic()
        if wait > 0:  # the job's answer appears no earlier than the pad either
            time.sleep(wait)
        for attempt in range(FINISH_ATTEMPTS):  # the ledger's database may be down a while
            try:
                state.jobs.finish(job_id, status, body)
                return
            except Exception:
                logger.exception("job %s: its answer not recorded yet (attempt %d)", job_id,
                                 attempt + 1)  # fmt: skip
                time.sleep(min(8.0, 0.5 * 2**attempt))

    return done


FINISH_ATTEMPTS = 8  # a job's answer is tried for about 40 s (then it is "lost" after job_ttl_s)


_ASYNC = Query(alias="async", description="run as a job: answer 202 with a URL to poll")

_REFUSALS = responses(*_AUTH, 400, 403, 404, 413, 422)
_EXPLAIN_RESPONSES = {**ok(out.Explanation), **_REFUSALS}
_QUERY_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ok(out.QueryAnswer),
    202: {
        "description": "Running as a job: poll the URL in `Location`",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "job": {"type": "string"},
                        "url": {"type": "string"},
                        "state": {"type": "string", "enum": ["running"]},
                    },
                    "required": ["job", "url", "state"],
                }
            }
        },
        "headers": {
            "Location": {
                "description": "the job's URL",
                "required": True,
                "schema": {"type": "string"},
            }
        },
    },
    **_REFUSALS,
}


@router.post("/query", summary="Answer a query: noisy values, error bars, cost, remaining budget",
             responses=_QUERY_RESPONSES)  # fmt: skip
async def query(
    request: Request,
    body: QueryRequest,
    key: BearerKey,
    run_async: Annotated[bool, _ASYNC] = False,
) -> Response:
    state = state_of(request)
    start = arrival(request)
    if run_async:
        who = await state.run(lambda: authenticated(request, key))
        _check_sql(state, body)
        ds = await state.run(lambda: state.granted_dataset(who, body.dataset))
        deadline = start + ds.min_response_ms / 1000
        # everything decidable without data is refused here, free, as the query itself would
        # refuse it: never turned into a job whose answer is the refusal
        status, refused = await state.run(lambda: _precheck(state, who, ds, body))
        if status >= 400:
            await pad_until(deadline)
            return json_answer(status, refused)
        job_id = await state.run(lambda: state.jobs.create(who.name, ds.name))
        future = state.pool.submit(_run_query, state, who, ds, body)
        future.add_done_callback(_finish_later(state, job_id, deadline))
        return _accepted(request, job_id)
    # the grant check and the query in one hand-over to a query thread (a not-found raised
    # there answers as from the check alone: before any session, unpadded)
    identified: list[Principal] = []
    granted: list[Dataset] = []
    checked: list[Standing] = []
    seen = request.scope.pop(HOT_CHECKED, None)
    if isinstance(seen, Checked):  # checked by HotQueries, whose kept answer was gone
        identified.append(seen.who)
        granted.append(seen.ds)
        checked.append(seen.standing)
    elif state.ledger_reads_are_local and state.hot.holds(body):
        # a request this worker answered from the cache before: answered on the event loop
        # if it still is one (two local, lock-free reads), with no hand-over to a thread
        hot = check_hot(state, request, key, body)
        identified.append(hot.who)
        granted.append(hot.ds)
        checked.append(hot.standing)
        if hot.again is not None:
            await pad_until(start + hot.ds.min_response_ms / 1000)
            return respond(hot.again)

    def check_then_run() -> Answer | Shown:
        if checked:  # the key, the SQL and the grant were checked on the event loop
            return _run_query(state, identified[0], granted[0], body, checked[0])
        who = authenticated(request, key)
        identified.append(who)
        _check_sql(state, body)
        ds, standing = state.standing(who, body.dataset)
        granted.append(ds)
        again = _shown_again(state, who, ds, standing, body)
        return again if again is not None else _run_query(state, who, ds, body, standing)

    pending: Future[Answer | Shown] = state.pool.submit(check_then_run)
    try:
        answer = await asyncio.wait_for(
            asyncio.shield(asyncio.wrap_future(pending)), state.config.limits.query_timeout_s
        )
    except TimeoutError:
        try:
            if not identified:  # still queued: the job checks the key (and rate) when it starts
                found = await state.run(lambda: state.principals.authenticate(key))
                if found is None:
                    pending.cancel()
                    raise Problem("unauthorized", "the API key is no longer live") from None
                identified.append(found)
            who = identified[0]
            ds = (
                granted[0]
                if granted
                else await state.run(lambda: state.granted_dataset(who, body.dataset))
            )
            deadline = start + ds.min_response_ms / 1000
            job_id = await state.run(lambda: state.jobs.create(who.name, ds.name))
        except Exception as exc:
            if pending.cancel() or isinstance(exc, Problem):  # it will never run: nothing charged
                raise
            # it runs on (and may charge) but cannot be followed: never "retry later"
            logger.error("a running query's job could not be recorded: %s", exc)
            raise unknown_outcome(
                None,
                None,
                "the query is still running and may be charged, but the service could not "
                "record its job",
            ) from exc
        pending.add_done_callback(_finish_later(state, job_id, deadline))
        return _accepted(request, job_id)
    await pad_until(start + granted[0].min_response_ms / 1000)
    return respond(answer)


@router.post("/explain", summary="What a query would cost and its expected error (reads no data)",
             responses=_EXPLAIN_RESPONSES)  # fmt: skip
async def explain(request: Request, body: ExplainRequest, who: Caller) -> JSONResponse:
    state = state_of(request)
    _check_sql(state, body)
    ds = await state.run(lambda: state.granted_dataset(who, body.dataset))
    status, payload = await state.run(lambda: _run_explain(state, who, ds, body))
    return json_answer(status, payload)


def _run_bounds(state: ServiceState, who: Principal, ds: Dataset, body: BoundsRequest) -> Answer:
    """The bounds of ``body``'s columns (``veil bounds``): charged like a query, cached."""

    def ask(session: Session) -> dict[str, Any]:
        from veil.autobounds import find_bounds
        from veil.cli_bounds import bounds_payload

        within = None if body.within is None else {c: (b[0], b[1]) for c, b in body.within.items()}
        chosen = find_bounds(
            session, ds.name, body.columns, epsilon=body.epsilon, where=body.where,
            within=within, max_groups=body.max_groups,
            max_rows_per_group=body.max_rows_per_group, max_rows=body.max_rows, by=body.by,
        )  # fmt: skip
        state.metrics.query(ds.name, cached=all(c.cached for c in chosen))
        return bounds_payload(chosen, _remaining(session))

    return _answered(state, who, ds, body, ask)


@router.post(
    "/bounds",
    summary="Find clamping bounds for columns under DP (a noisy histogram each, charged)",
    responses={**ok(out.BoundsAnswer), **_REFUSALS},
)
async def bounds(request: Request, body: BoundsRequest, who: Caller) -> JSONResponse:
    state = state_of(request)
    start = arrival(request)
    limit = state.config.limits.max_sql_chars
    size = len(body.where or "") + len(body.by or "")
    if size > limit:
        raise Problem("payload-too-large", f"the condition and key have {size} characters; "
                      f"at most {limit}")  # fmt: skip
    ds = await state.run(lambda: state.granted_dataset(who, body.dataset))
    status, payload = await state.run(lambda: _run_bounds(state, who, ds, body))
    await pad_until(start + ds.min_response_ms / 1000)
    return json_answer(status, payload)


@router.get(
    "/jobs/{job_id}",
    name="get_job",
    summary="A query job's state and, when done, its answer",
    response_model=None,
    responses={**ok(out.Job), **responses(*_AUTH, 404)},
)
async def get_job(request: Request, job_id: str, who: Caller) -> dict[str, Any]:
    state = state_of(request)
    job = await state.run(lambda: state.jobs.get(job_id, who.name))
    if job is None:
        raise Problem("not-found", "no such job")
    return job.to_json()


# ------------------------------------------------------------------------------ budget


@router.get("/budget", summary="The caller's budgets: granted, spent share and remaining",
            response_model=None,
            responses={**ok(out.BudgetAnswer), **responses(*_AUTH)})  # fmt: skip
async def budget(request: Request, who: Caller) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        ledger = state.ledger
        rows = []
        for a, d in sorted(ledger.grants()):
            if a != who.name:
                continue
            rows.append(
                {
                    "dataset": d,
                    "granted": budget_json(ledger.granted(a, d)),
                    "remaining": budget_json(ledger.remaining(a, d)),
                    "used": float(ledger.used_share(a, d)),
                }
            )
        return {"analyst": who.name, "budgets": rows}

    return await state.run(go)


def _event(r: Record) -> dict[str, Any]:
    return {
        "id": r.id,
        "at": r.at.isoformat(),
        "event": r.event,
        "status": r.status,
        "loss": budget_json(r.loss),
        "fingerprint": r.fingerprint,
        "detail": r.detail,
        "query": r.query,
    }


_LIMIT = Query(ge=1, le=MAX_PAGE, description="events per page, newest first")
_BEFORE = Query(
    pattern=r"^[1-9][0-9]{0,17}$",
    description="a cursor: the `next` of the page before (omit it for the newest events)",
)


@router.get("/history", summary="A page of the caller's history on a dataset, newest first",
            response_model=None,
            responses={**ok(out.HistoryAnswer), **responses(*_AUTH, 404, 422)})  # fmt: skip
async def history(
    request: Request,
    who: Caller,
    dataset: Annotated[str, Query(max_length=200)],
    limit: Annotated[int, _LIMIT] = 100,
    before: Annotated[str | None, _BEFORE] = None,
) -> dict[str, Any]:
    state = state_of(request)

    def go() -> dict[str, Any]:
        ledger = state.ledger
        if not ledger.has_grant(who.name, dataset):
            raise Problem("not-found", "no such dataset")
        page = ledger.history_page(
            who.name, dataset, limit=limit, before=None if before is None else int(before)
        )
        return {
            "analyst": who.name,
            "dataset": dataset,
            "remaining": budget_json(ledger.remaining(who.name, dataset)),
            "history": [_event(r) for r in page],
            "next": None if page.next is None else str(page.next),
        }

    return await state.run(go)


@router.get("/charges/{charge_id}", summary="One of the caller's charges, by reservation id",
            response_model=None,
            responses={**ok(out.ChargeFound), **responses(*_AUTH, 404, 422)})  # fmt: skip
async def charge(
    request: Request, who: Caller, charge_id: Annotated[int, Path(ge=1, le=2**62)]
) -> dict[str, Any]:
    """What became of a charge (after an ``outcome-unknown`` answer): ``committed`` (send the
    identical query again: answered from the cache, free), ``reserved`` (still running),
    ``abandoned`` (charged, nothing released), ``refunded``; another analyst's charge answers
    exactly as one that does not exist."""
    state = state_of(request)
    found = await state.run(lambda: state.ledger.charge(charge_id))
    if found is None or found.analyst != who.name:
        raise Problem("not-found", "no such charge of yours")
    return _event(found) | {"dataset": found.dataset}
