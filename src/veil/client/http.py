"""The :class:`Client` of the veil service and its :class:`Job`: requests, retries where safe,
jobs polled, answers read as the library's types (:mod:`veil.client`, whose docstring holds the
contract)."""

from __future__ import annotations

import ipaddress
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload
from urllib.parse import quote, urlsplit

from veil import __version__
from veil.accounting.budget import Budget
from veil.accounting.history import HistoryPage, Record, check_page
from veil.autobounds_choice import ChosenBounds
from veil.client.answers import (
    BudgetLine,
    Choice,
    DatasetInfo,
    Explanation,
    Noisy,
    budget_from_json,
    chosen_from_json,
    maybe_budget,
    noisy_from_json,
    result_from_payload,
)
from veil.client.errors import ERRORS, Asked, problem_error, unknown_dataset
from veil.client.plan import Bounds, Number, Plan, number, query_body
from veil.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    OutcomeUnknownError,
    QueryFailedError,
    RateLimitedError,
    ServiceError,
    ServiceUnavailableError,
    VeilWarning,
)
from veil.release.result import Result

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ERRORS",
    "BudgetLine",
    "Choice",
    "Client",
    "DatasetInfo",
    "Explanation",
    "HistoryPage",
    "Job",
    "Noisy",
    "Plan",
]


def _httpx() -> ModuleType:
    try:
        import httpx
    except ImportError as exc:
        raise MissingDependencyError("veil.client needs httpx: pip install 'veil[client]'") from exc
    return httpx


# ------------------------------------------------------------------------------ encoding


@dataclass(frozen=True)
class Job:
    """A query running on the service as a job (``GET /v1/jobs/{id}``)."""

    id: str
    dataset: str
    client: Client = field(repr=False, compare=False)

    def state(self) -> str:
        """``"running"``, ``"done"`` or ``"lost"`` (its worker stopped; the charge stays)."""
        return str(self.client._job(self.id)["state"])

    def result(self, timeout: float | None = None) -> Result:
        """The answer, polling until it is done (at most ``timeout`` seconds; None: until
        done or lost). Raises the query's error if it was refused or failed."""
        return self.client._wait(self.id, self.dataset, timeout)


# ------------------------------------------------------------------------------ the client

_LOOPBACK = ("localhost",)


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Client:
    """The veil service at ``url``, as the analyst (or administrator) whose API key is
    ``api_key``. ``timeout``: seconds for each HTTP request (keep it above the service's
    ``query_timeout_s``); ``retries``: how often a request that is safe to resend is tried
    again; ``transport``: an httpx transport (a test's, a proxy's). Close it, or use it in a
    ``with`` block."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgumentError(
                f"url must be the service's http(s) address, e.g. https://veil.example.org; "
                f"got {url!r}"
            )
        if not isinstance(api_key, str) or not api_key.strip() or not api_key.isascii():
            raise InvalidArgumentError(
                "api_key must be the key `veil admin analyst add NAME` printed (a non-empty "
                "ASCII string)"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgumentError(
                f"timeout must be a positive number of seconds, got {timeout!r}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidArgumentError(f"retries must be a whole number ≥ 0, got {retries!r}")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            warnings.warn(
                f"{url} is plain HTTP: the API key, a bearer token, crosses the network in "
                "clear; put the service behind TLS (docs: 'Operate the service for real')",
                VeilWarning,
                stacklevel=2,
            )
        hx = _httpx()
        self.url = url.rstrip("/")
        self.retries = retries
        self._httpx = hx
        options: dict[str, Any] = {
            "base_url": self.url,
            "headers": {
                "Authorization": f"Bearer {api_key.strip()}",
                "Accept": "application/json, application/problem+json",
                "User-Agent": f"veil-client/{__version__}",
            },
            "timeout": float(timeout),
            "transport": transport,
        }
        self._http: httpx.Client = hx.Client(**options)
        # A request that may charge goes on a connection of its own, never a kept-alive one:
        # a server may close an idle connection just as a request is written to it, and that
        # request would then look lost although it never arrived.
        self._fresh: httpx.Client = hx.Client(
            **options, limits=hx.Limits(max_keepalive_connections=0)
        )

    def __repr__(self) -> str:
        return f"Client({self.url!r})"  # never the key

    def close(self) -> None:
        self._http.close()
        self._fresh.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        lost: Callable[[Exception], OutcomeUnknownError] | None = None,
    ) -> httpx.Response:
        """Send a request; ``lost`` (for a request that may charge) builds the error raised
        when it may have reached the service and its answer did not arrive — it is then never
        sent again. Without ``lost`` the request is safe to resend and is retried."""
        hx = self._httpx
        attempt = 0
        while True:
            last = attempt >= self.retries
            try:
                http = self._http if lost is None else self._fresh
                response: httpx.Response = http.request(method, path, json=body, params=params)
            except (hx.ConnectError, hx.ConnectTimeout, hx.PoolTimeout) as exc:
                if last:  # no connection: nothing was sent
                    raise ServiceUnavailableError(
                        f"cannot reach the veil service at {self.url} ({type(exc).__name__}: "
                        f"{exc}); nothing was sent, in {attempt + 1} attempt(s)"
                    ) from exc
            except hx.TransportError as exc:  # sent: perhaps received and acted upon
                if lost is not None:
                    raise lost(exc) from exc
                if last:
                    raise ServiceUnavailableError(
                        f"no answer from the veil service at {self.url} ({type(exc).__name__}: "
                        f"{exc}) in {attempt + 1} attempt(s)"
                    ) from exc
            else:
                if response.status_code != 503 or lost is not None or last:
                    return response
            time.sleep(min(2.0, 0.1 * 2**attempt))
            attempt += 1

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        lost: Callable[[Exception], OutcomeUnknownError] | None = None,
        asked: Asked | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """Send a request: its status and JSON body if it succeeded, else raise its error."""
        response = self._send(method, path, body=body, params=params, lost=lost)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code >= 400:
            raise problem_error(response.status_code, payload, response.headers, asked)
        if not isinstance(payload, dict):
            raise ServiceError(
                f"the service answered HTTP {response.status_code} with a body that is not a "
                "JSON object",
                status=response.status_code,
            )
        return response.status_code, payload

    def _get(self, path: str, asked: Asked, **params: str) -> dict[str, Any]:
        return self._call("GET", path, params=params or None, asked=asked)[1]

    # -- the catalog and budgets ------------------------------------------------------------

    def datasets(self) -> list[DatasetInfo]:
        """The datasets granted to the caller, with their public metadata and columns."""
        payload = self._get("/v1/datasets", Asked())
        return [DatasetInfo.from_json(d) for d in payload["datasets"]]

    def dataset(self, name: str) -> DatasetInfo:
        """One granted dataset (:class:`~veil.errors.UnknownDatasetError` if unknown or not
        granted: the service answers both alike)."""
        return DatasetInfo.from_json(self._get(f"/v1/datasets/{_segment(name)}", Asked(name)))

    def budget(self) -> list[BudgetLine]:
        """The caller's grants: granted, remaining and spent share per dataset."""
        payload = self._get("/v1/budget", Asked())
        return [
            BudgetLine(
                dataset=str(b["dataset"]),
                granted=budget_from_json(b["granted"]),
                remaining=budget_from_json(b["remaining"]),
                used=float(b["used"]),
            )
            for b in payload["budgets"]
        ]

    def remaining(self, dataset: str) -> Budget:
        """What is left of the caller's grant on ``dataset`` (as ``Session.remaining()``)."""
        for line in self.budget():
            if line.dataset == dataset:
                return line.remaining
        raise unknown_dataset(dataset)

    def history(self, dataset: str, *, limit: int = 100, before: int | None = None) -> HistoryPage:
        """A page of the caller's grants, charges (with their SQL and status), cache hits and
        alerts on ``dataset``, newest first, as the ledger's records (``data_version`` and
        ``answer_id`` are not sent: None): at most ``limit`` (1 … 1000) of them, older than
        the cursor ``before`` when given. Pass the page's ``next`` as ``before`` for the
        older events (None: there are none)."""
        limit, before = check_page(limit, before)
        params = {"dataset": dataset, "limit": str(limit)}
        if before is not None:
            params["before"] = str(before)
        payload = self._get("/v1/history", Asked(dataset), **params)
        analyst = str(payload["analyst"])
        cursor = payload.get("next")
        try:
            return HistoryPage(
                tuple(_record(r, analyst, dataset) for r in payload["history"]),
                None if cursor is None else int(cursor),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ServiceError(
                f"the service sent a history this client cannot read: {exc!r}"
            ) from exc

    def charge(self, reservation: int, *, fingerprint: str | None = None) -> Record | None:
        """The caller's charge ``reservation`` (the id an :class:`~veil.errors.OutcomeUnknownError`
        names), or None when there is none — or, with ``fingerprint``, when the charge under
        that id is another query's. Its ``status`` says what became of it: ``committed``
        (the identical query sent again is answered from the cache, free), ``reserved`` (still
        running), ``abandoned`` (charged, nothing released), ``refunded``."""
        try:
            payload = self._get(f"/v1/charges/{int(reservation)}", Asked())
        except ServiceError as exc:
            if exc.status == 404:
                return None
            raise
        found = _record(payload, "", str(payload.get("dataset", "")))
        if fingerprint is not None and found.fingerprint != fingerprint:
            return None
        return found

    # -- queries ------------------------------------------------------------------------------

    @overload
    def query(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        plan: Plan | Mapping[str, Any] | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        bounds: Bounds | None = None,
        bounds_share: Number | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
        limits: Literal["auto", "auto_groups"] | None = None,
        limits_share: Number | None = None,
        consistent: bool = False,
        wait: Literal[True] = True,
        timeout: float | None = None,
        target: str | Sequence[str] | None = None,
        references: Mapping[str, float] | None = None,
        min_group_size: int | None = None,
        weights: str | Literal[False] | None = None,
    ) -> Result: ...

    @overload
    def query(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        plan: Plan | Mapping[str, Any] | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        bounds: Bounds | None = None,
        bounds_share: Number | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
        limits: Literal["auto", "auto_groups"] | None = None,
        limits_share: Number | None = None,
        consistent: bool = False,
        wait: Literal[False],
        timeout: float | None = None,
        target: str | Sequence[str] | None = None,
        references: Mapping[str, float] | None = None,
        min_group_size: int | None = None,
        weights: str | Literal[False] | None = None,
    ) -> Job: ...

    def query(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        plan: Plan | Mapping[str, Any] | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        bounds: Bounds | None = None,
        bounds_share: Number | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
        limits: Literal["auto", "auto_groups"] | None = None,
        limits_share: Number | None = None,
        consistent: bool = False,
        wait: bool = True,
        timeout: float | None = None,
        target: str | Sequence[str] | None = None,
        references: Mapping[str, float] | None = None,
        min_group_size: int | None = None,
        weights: str | Literal[False] | None = None,
    ) -> Result | Job:
        """Answer ``sql`` on ``dataset`` with noise, error bars and a charged budget (the
        arguments of ``Session.sql``; bounds and limits may only narrow the owner's). Or the
        query as ``plan=``, instead of ``sql``: a :class:`Plan` (``Session.query``'s calls) or
        its JSON form — the same options, charges and cached answers as the equivalent SQL.
        ``target`` (instead of ``epsilon``): accuracy targets such as ``"n=±50"``, run at the
        smallest ε meeting them (``references``, ``min_group_size``: their public assumptions);
        with ``bounds="auto"`` at the bounds chosen within the owner's range, after a bounds
        step whose ε the targets set (the answer's ``targeted`` says the range and the choice).

        If the service turns the query into a job (202), poll it until done, or for at most
        ``timeout`` seconds (then :class:`~veil.errors.OutcomeUnknownError` names the job to
        wait for). ``wait=False``: start it as a job and return the :class:`Job` at once.
        ``weights``: a survey-weights column, or ``False`` for none (default: the dataset's).
        ``limits="auto"``: ``max_rows`` chosen under DP from a ``limits_share`` of ε (or with
        ``"auto_groups"``, ``max_groups`` and ``max_rows_per_group``; the
        answer's ``auto_limits`` says what was chosen).
        """
        body = query_body(
            dataset,
            sql,
            plan,
            epsilon=epsilon,
            delta=delta,
            bounds=bounds,
            bounds_share=bounds_share,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            max_rows=max_rows,
            limits=limits,
            limits_share=limits_share,
            target=target,
            references=references,
            min_group_size=min_group_size,
            weights=weights,
        )
        body["consistent"] = bool(consistent)
        status, payload = self._call(
            "POST",
            "/v1/query",
            body=body,
            params=None if wait else {"async": "true"},
            lost=lambda exc: self._lost_query(dataset, exc, plan=plan is not None),
            asked=Asked(dataset),
        )
        if status == 202:
            job = Job(str(payload["job"]), dataset, self)
            return job.result(timeout) if wait else job
        if not wait:
            raise ServiceError(f"the service answered HTTP {status} to an async query, not 202")
        return result_from_payload(payload)

    def explain(
        self,
        dataset: str,
        sql: str | None = None,
        *,
        plan: Plan | Mapping[str, Any] | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        bounds: Bounds | None = None,
        bounds_share: Number | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
        limits: Literal["auto", "auto_groups"] | None = None,
        limits_share: Number | None = None,
        target: str | Sequence[str] | None = None,
        references: Mapping[str, float] | None = None,
        min_group_size: int | None = None,
        weights: str | Literal[False] | None = None,
    ) -> Explanation:
        """What the query (``sql``, or ``plan=`` as in :meth:`query`) would cost and its
        expected error; reads no data, charges nothing (without ``epsilon``: shown for ε = 1;
        with ``target``: at the smallest ε meeting the accuracy targets, which ``notes``
        state; ``weights`` as in :meth:`query`)."""
        body = query_body(
            dataset,
            sql,
            plan,
            epsilon=epsilon,
            delta=delta,
            bounds=bounds,
            bounds_share=bounds_share,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            max_rows=max_rows,
            limits=limits,
            limits_share=limits_share,
            target=target,
            references=references,
            min_group_size=min_group_size,
            weights=weights,
        )
        _, payload = self._call("POST", "/v1/explain", body=body, asked=Asked(dataset))
        return Explanation.from_json(payload)

    def bounds(
        self,
        dataset: str,
        columns: Sequence[str],
        *,
        epsilon: Number,
        where: str | None = None,
        within: Mapping[str, tuple[Number, Number]] | None = None,
        by: str | None = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
    ) -> list[ChosenBounds]:
        """Clamping bounds for ``columns`` found under DP (``veil bounds``, ``POST
        /v1/bounds``): a noisy log-scale histogram per column at ``epsilon / len(columns)``,
        charged like a query; ``within`` outer ranges (narrowing the owner's), ``by`` a public
        key to find them per group of (a column with a declared domain, or ``"BIN(col, e0,
        …) AS name"``). A query with ``bounds="auto"`` over the same rows at a share of ε
        equal to a step's is answered from the cache for its bounds."""
        if isinstance(columns, str):
            columns = [columns]
        body: dict[str, Any] = {
            "dataset": dataset,
            "columns": list(columns),
            "epsilon": number(epsilon, "epsilon"),
        }
        if where is not None:
            body["where"] = where
        if within is not None:
            body["within"] = {c: [number(lo, c), number(hi, c)] for c, (lo, hi) in within.items()}
        if by is not None:
            body["by"] = by
        for name, value in (
            ("max_groups", max_groups),
            ("max_rows_per_group", max_rows_per_group),
            ("max_rows", max_rows),
        ):
            if value is not None:
                body[name] = value

        def lost(exc: Exception) -> OutcomeUnknownError:
            return self._lost_query(dataset, exc)

        _, payload = self._call("POST", "/v1/bounds", body=body, lost=lost, asked=Asked(dataset))
        try:
            return [chosen_from_json(c) for c in payload["bounds"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ServiceError(f"the service sent bounds this client cannot read: {exc!r}") from exc

    def job(self, job_id: str) -> Job:
        """The job ``job_id`` (one the caller started), to poll or wait for."""
        return Job(job_id, str(self._job(job_id)["dataset"]), self)

    def _job(self, job_id: str) -> dict[str, Any]:
        return self._get(f"/v1/jobs/{_segment(job_id)}", Asked(job=job_id))

    def _wait(self, job_id: str, dataset: str, timeout: float | None) -> Result:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.02
        while True:
            try:
                job = self._job(job_id)
            except RateLimitedError as exc:  # polling is a read: wait as told
                job, delay = {"state": "running"}, max(delay, exc.retry_after)
            except ServiceUnavailableError as exc:  # the query was sent: it may be charged
                raise OutcomeUnknownError(
                    f"the query runs on the service as job {job_id}, which cannot be read now "
                    f"({exc}); it is charged once whatever happens: wait for its answer with "
                    f"client.job({job_id!r}).result() later, and do not send the query again",
                    job=job_id,
                ) from exc
            state = job["state"]
            if state == "done":
                answer = job.get("answer")
                status = int(job.get("status") or 0)
                if status != 200 or not isinstance(answer, Mapping):
                    raise problem_error(status, answer, asked=Asked(dataset))
                return result_from_payload(answer)
            if state == "lost":
                raise QueryFailedError(
                    f"job {job_id} is lost: it has run longer than the service's job_ttl_s, so "
                    "the worker running it has most likely stopped; what it reserved stays "
                    f"charged (see history({dataset!r})). Do not send the query again: if it "
                    f"finishes after all, client.job({job_id!r}).result() returns its answer"
                )
            if deadline is not None and time.monotonic() + delay > deadline:
                raise OutcomeUnknownError(
                    f"the query is still running on the service as job {job_id} after "
                    f"{timeout:g} s; it is charged once whatever happens: wait for its answer "
                    f"with client.job({job_id!r}).result(), and do not send the query again",
                    job=job_id,
                )
            time.sleep(delay)
            delay = min(1.0, delay * 1.5)

    def _lost_query(
        self, dataset: str, exc: Exception, *, plan: bool = False
    ) -> OutcomeUnknownError:
        what = "this plan (its charge shows the plan's canonical JSON)" if plan else "this SQL"
        return OutcomeUnknownError(
            f"the query was sent to {self.url} but its answer did not arrive "
            f"({type(exc).__name__}: {exc or 'no detail'}); the service may have run and "
            "charged it, so the client does not send it again (a second send could be charged "
            f"again). To learn the outcome, find {what} among the charges of "
            f"client.history({dataset!r}) (newest first): 'committed' — it was answered, and "
            "sending the identical query again returns that answer from the service's cache at "
            "no cost; 'reserved' — it is still running: do not send it again; 'abandoned' — "
            "its worker stopped before answering (resolved after the service's "
            "reservation_ttl_s): the charge stays, nothing was released, and sending it again "
            "is charged again; no charge — it was refused at no cost or has not arrived yet "
            "(look again a little later before sending it again)"
        )

    # -- mechanisms ---------------------------------------------------------------------------

    def laplace(
        self,
        dataset: str,
        values: Number | Sequence[Number],
        *,
        sensitivity: Number,
        epsilon: Number,
        integer: bool = False,
    ) -> Noisy:
        """Laplace noise on values you computed (ε-DP for YOUR sensitivity claim), charged
        to your grant on ``dataset``; ``integer``: discrete Laplace, integer output."""
        body = {
            "dataset": dataset,
            "values": _values(values),
            "sensitivity": number(sensitivity, "sensitivity"),
            "epsilon": number(epsilon, "epsilon"),
            "integer": bool(integer),
        }
        return noisy_from_json(self._mechanism("laplace", body))

    def gaussian(
        self,
        dataset: str,
        values: Number | Sequence[Number],
        *,
        sensitivity: Number,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rho: Number | None = None,
    ) -> Noisy:
        """Gaussian noise on values you computed: ρ-zCDP (``rho``) or (ε, δ)-DP."""
        body: dict[str, Any] = {
            "dataset": dataset,
            "values": _values(values),
            "sensitivity": number(sensitivity, "sensitivity"),
        }
        for name, x in (("epsilon", epsilon), ("delta", delta), ("rho", rho)):
            if x is not None:
                body[name] = number(x, name)
        return noisy_from_json(self._mechanism("gaussian", body))

    def exponential(
        self,
        dataset: str,
        candidates: Sequence[Any],
        scores: Sequence[Number],
        *,
        sensitivity: Number,
        epsilon: Number,
    ) -> Choice:
        """Choose a candidate by the exponential mechanism (higher score: more likely)."""
        body = {
            "dataset": dataset,
            "candidates": list(candidates),
            "scores": [number(s, "a score") for s in scores],
            "sensitivity": number(sensitivity, "sensitivity"),
            "epsilon": number(epsilon, "epsilon"),
        }
        d = self._mechanism("exponential", body)
        return Choice(
            dataset=str(d["dataset"]),
            index=int(d["index"]),
            choice=d["choice"],
            loss=budget_from_json(d["loss"]),
            remaining=budget_from_json(d["remaining"]),
            note=str(d["note"]),
        )

    def randomized_response(
        self, dataset: str, values: Sequence[Any], *, categories: Sequence[Any], epsilon: Number
    ) -> Noisy:
        """k-ary randomized response of each value (local DP: ε for the one value it
        reports)."""
        body = {
            "dataset": dataset,
            "values": list(values),
            "categories": list(categories),
            "epsilon": number(epsilon, "epsilon"),
        }
        return noisy_from_json(self._mechanism("randomized-response", body))

    def _mechanism(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        dataset = str(body["dataset"])

        def lost(exc: Exception) -> OutcomeUnknownError:
            return OutcomeUnknownError(
                f"the {name} request was sent to {self.url} but its answer did not arrive "
                f"({type(exc).__name__}: {exc or 'no detail'}); the service may have drawn "
                "the noise and charged it, so the client does not send it again. "
                f"client.history({dataset!r}) shows whether it was charged (a charge "
                f"'{name.replace('-', '_')} over N value(s)…'); the service does not keep the "
                "noisy values, and sending the request again draws fresh noise and charges "
                "again"
            )

        return self._call(
            "POST", f"/v1/mechanisms/{name}", body=body, lost=lost, asked=Asked(dataset)
        )[1]


def _record(r: Mapping[str, Any], analyst: str, dataset: str) -> Record:
    """A history event (or a charge found) of the service as the ledger's record."""
    return Record(
        id=int(r["id"]),
        at=datetime.fromisoformat(r["at"]),
        analyst=analyst,
        dataset=dataset,
        event=str(r["event"]),
        status=r.get("status"),
        fingerprint=r.get("fingerprint"),
        data_version=None,
        loss=maybe_budget(r.get("loss")),
        answer_id=None,
        detail=r.get("detail"),
        query=r.get("query"),
    )


def _segment(name: str) -> str:
    """``name`` as one URL path segment."""
    return quote(name, safe="")


def _values(values: Number | Sequence[Number]) -> int | float | str | list[int | float | str]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        return number(values, "values")
    return [number(v, "values") for v in values]
