"""Query jobs do not pile up: a job is deleted ``job_keep_s`` after it ended (or started, if it
never ended), by the next job created; ``job_keep_s`` may not be shorter than ``job_ttl_s``."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from support import Clock
from veil.errors import InvalidArgumentError
from veil.service import jobs as jobs_module
from veil.service.config import ServiceLimits
from veil.service.jobs import JobStore, jobs


def _rows(store: JobStore) -> int:
    with store._engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(jobs)).scalar_one())


def test_jobs_past_their_keep_time_are_deleted_by_the_next_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    clock.install(monkeypatch, jobs_module)
    store = JobStore(create_engine(f"sqlite:///{tmp_path / 'j.db'}"), ttl_s=0.1, keep_s=0.3)
    done = store.create("alice", "people")
    store.finish(done, 200, {"rows": [[1]]})
    never = store.create("alice", "people")  # its worker died: it stays "running"
    fresh = store.create("alice", "people")
    assert store.get(done, "alice") is not None
    clock.advance(0.4)
    store.finish(fresh, 200, {"rows": [[2]]})  # ended just now: kept
    store.create("bob", "people")  # deletes what is due
    assert store.get(done, "alice") is None
    assert store.get(never, "alice") is None
    kept = store.get(fresh, "alice")
    assert kept is not None
    assert kept.body == {"rows": [[2]]}
    assert _rows(store) == 2


def test_a_keep_time_shorter_than_the_ttl_is_refused_naming_the_fix() -> None:
    with pytest.raises(InvalidArgumentError, match=r"job_keep_s = 60 is shorter.*job_ttl_s = 3600"):
        ServiceLimits(job_ttl_s=3600, job_keep_s=60)
    assert ServiceLimits(job_ttl_s=60, job_keep_s=60).job_keep_s == 60
