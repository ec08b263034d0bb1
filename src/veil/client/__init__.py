"""A Python client of the veil service (``veil serve``), with the library's answers and errors.

::

    from veil.client import Client, Plan

    with Client("https://veil.example.org", key) as service:
        r = service.query("people", "SELECT COUNT(*) AS n FROM people", epsilon=0.5)
        r.rows, r.error_bars(0.95), r.cost, r.remaining
        plan = Plan().where("age >= 18").group_by("state").agg("count").agg("median", "income")
        service.query("people", plan=plan, epsilon=0.5)  # the same query as builder calls

**Answers.** :meth:`Client.query` returns a :class:`veil.Result`, the library's type: values,
``error_bars(0.95)``, ``cost``, ``usage``, ``cached``, ``fingerprint``, ``notes``, ``private``,
``to_pandas()``, ``_repr_html_()``, and ``remaining`` (what was left right after it). The
service releases error bars at 95 % only, without the noisy statistics that other levels are
computed from, so ``error_bars(level)`` raises for any other level rather than guess. Column
types come from the JSON values (dates arrive as ISO strings).

**Errors.** A problem document (RFC 9457) becomes the exception the library raises in-process,
chosen by its ``type`` URN, never by its words, and worded as the service worded it:
``budget-exhausted`` → :class:`~veil.errors.BudgetExhaustedError` (``requested`` and
``remaining`` as Budgets), ``unsupported-query`` → :class:`~veil.errors.UnsupportedQueryError`
(``position``), ``not-found`` → :class:`~veil.errors.UnknownDatasetError` (unknown and not
granted alike), ``unauthorized``/``forbidden`` → :class:`~veil.errors.AuthenticationError`,
``rate-limited`` → :class:`~veil.errors.RateLimitedError` (``retry_after``), ``unavailable`` →
:class:`~veil.errors.ServiceUnavailableError`, and so on (:data:`ERRORS`).

**Retries, only where safe.** A request whose connection could not be made was never sent, and
is retried (``retries`` times, backing off). Reads (datasets, budget, history, jobs) and
``explain`` charge nothing, so they are also retried after a read timeout, a dropped connection
or a 503. A query or a mechanism call goes on a connection of its own (never a kept-alive one,
which a server may close just as the request is written), and is NEVER sent again once it may
have reached the service — it may have been charged: the client raises
:class:`~veil.errors.OutcomeUnknownError`, whose message says how to learn the outcome (the
charge in :meth:`Client.history`, a page newest first; the service answers an identical query
whose charge is committed from its cache, at no cost). When the service itself answers
``outcome-unknown`` — its ledger failed after reserving the charge — the error names the charge
(``reservation``, ``fingerprint``) for :meth:`Client.charge`. A 429 is raised, not slept on.

**Jobs.** A query still running after the service's ``query_timeout_s`` answers 202 with a
job; ``query`` polls it until done (or ``timeout``). ``wait=False`` starts the query as a job
and returns a :class:`Job` at once. Keep the client's ``timeout`` (per HTTP request) above the
service's ``query_timeout_s`` (30 s by default), so that a slow query turns into a job rather
than a read timeout.

Needs httpx (``pip install 'veil[client]'``, also in ``veil[service]``), imported when a
:class:`Client` is made.
"""

from __future__ import annotations

from veil.accounting.history import HistoryPage
from veil.client.answers import BudgetLine, Choice, DatasetInfo, Explanation, Noisy
from veil.client.errors import ERRORS
from veil.client.http import Client, Job
from veil.client.plan import Plan

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
