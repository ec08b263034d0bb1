"""Query jobs, shared by every worker process through the ledger database.

``POST /v1/query?async=true`` answers ``202 Accepted`` at once with a job URL; a synchronous
query still running after ``query_timeout_s`` answers the same way. The job's final answer —
the result, or the problem document the query ended with — is stored in the table
``veil_jobs`` of the ledger database, so a poll (``GET /v1/jobs/{id}``) may reach any worker.
A job is visible to its owner only; anyone else gets the same 404 as for an unknown id. Its id
is a random 128-bit token, so ids cannot be guessed either.

A worker killed while a job runs leaves it ``running``; after ``job_ttl_s`` it is reported
``lost`` (the ledger keeps whatever was reserved for it charged, as for any crash). The table
does not grow without bound: a job is deleted ``job_keep_s`` after it finished, or after it
started if it never did (each new job deletes those due); its answer stays in the ledger's
cache, so the same query asked again is answered free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    insert,
    or_,
    select,
    update,
)

from veil.accounting.records import now
from veil.random import token_hex

__all__ = ["Job", "JobStore"]

JobState = Literal["running", "done", "lost"]

_metadata = MetaData()

jobs = Table(
    "veil_jobs",
    _metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("dataset", String(200), nullable=False),
    Column("state", String(16), nullable=False),  # running | done
    Column("status_code", Integer),  # the HTTP status of the final answer
    Column("body", Text),  # the final answer as JSON
    Column("created_at", Text, nullable=False),
    Column("finished_at", Text),
)


@dataclass(frozen=True)
class Job:
    id: str
    owner: str
    dataset: str
    state: JobState
    status_code: int | None
    body: dict[str, Any] | None
    created_at: str
    finished_at: str | None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "dataset": self.dataset,
            "state": self.state,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
        }
        if self.state == "done":
            out["status"] = self.status_code
            out["answer"] = self.body
        return out


class JobStore:
    """The jobs table of the ledger database behind ``engine`` (created if missing)."""

    def __init__(self, engine: Engine, *, ttl_s: float, keep_s: float = 604_800.0) -> None:
        self._engine = engine
        self._ttl = timedelta(seconds=ttl_s)
        self._keep = timedelta(seconds=keep_s)
        _metadata.create_all(engine, checkfirst=True)

    def create(self, owner: str, dataset: str) -> str:
        job_id = token_hex(16)
        due = (datetime.now(UTC) - self._keep).isoformat(timespec="microseconds")
        with self._engine.begin() as conn:
            conn.execute(  # jobs ended (or started, if they never ended) longer ago than kept
                delete(jobs).where(
                    or_(
                        and_(jobs.c.state == "done", jobs.c.finished_at < due),
                        and_(jobs.c.state == "running", jobs.c.created_at < due),
                    )
                )
            )
            conn.execute(
                insert(jobs).values(
                    id=job_id, owner=owner, dataset=dataset, state="running", created_at=now()
                )
            )
        return job_id

    def finish(self, job_id: str, status_code: int, body: dict[str, Any]) -> None:
        with self._engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(
                    state="done",
                    status_code=status_code,
                    body=json.dumps(body, ensure_ascii=False),
                    finished_at=now(),
                )
            )

    def get(self, job_id: str, owner: str) -> Job | None:
        """The job ``job_id`` if ``owner`` owns it, else None (not found and not theirs alike)."""
        if len(job_id) != 32:
            return None
        with self._engine.connect() as conn:
            r = conn.execute(select(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner)).first()
        if r is None:
            return None
        state: JobState = "done" if r.state == "done" else "running"
        if state == "running" and datetime.fromisoformat(r.created_at) + self._ttl < datetime.now(
            UTC
        ):
            state = "lost"
        return Job(
            id=r.id,
            owner=r.owner,
            dataset=r.dataset,
            state=state,
            status_code=r.status_code,
            body=None if r.body is None else json.loads(r.body),
            created_at=r.created_at,
            finished_at=r.finished_at,
        )
