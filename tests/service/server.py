"""Real veil servers for the process tests, the fuzzing and the benchmark (import as
``service.server``; ``benchmarks/bench_service.py`` puts ``tests/`` on its path).

:class:`Deployment` writes what a data owner would write in a temporary directory — generated
Parquet tables (never real data), a ``veil.toml`` naming them and the ledger — registers the
datasets, creates API keys and grants budgets. :func:`serve` then starts **real uvicorn**
(``veil serve --config veil.toml --workers N``) on a free port of 127.0.0.1, waits until every
worker has started and ``/healthz`` answers, and always stops it.

Every server runs in a process group of its own (led by the server, its workers and a small
watchdog in it): when the process that started it dies (even by SIGKILL) or ``lifetime_s``
passes, the watchdog SIGKILLs the whole group, so no server outlives a test run.
:meth:`Server.stop` stops it (SIGTERM, then SIGKILL to the group), and :meth:`Server.kill`
SIGKILLs all its processes at once, as an operator's ``kill -9`` or the OOM killer would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "PG_URL",
    "Deployment",
    "Server",
    "free_port",
    "people_table",
    "postgres_ledger",
    "serve",
    "start",
]

PG_URL = os.environ.get("VEIL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

STATES = ("CA", "NY", "TX", "WA")
INCOME = (0, 1_000_000)

# The watchdog, in the server's process group, SIGKILLs the group when its parent (the
# test process) is gone or its lifetime is over. argv: parent pid, lifetime in seconds.
_WATCHDOG = """
import os, signal, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < deadline:
    time.sleep(0.2)
os.killpg(os.getpgrp(), signal.SIGKILL)
"""


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres_ledger() -> Iterator[str]:
    """A PostgreSQL ledger URL whose tables live in a fresh schema, dropped afterwards; skips
    without a server (fails when ``VEIL_REQUIRE_POSTGRES`` is set)."""
    import pytest

    required = os.environ.get("VEIL_REQUIRE_POSTGRES", "") not in ("", "0")
    try:
        import psycopg
    except ImportError:
        if required:
            pytest.fail("VEIL_REQUIRE_POSTGRES is set but psycopg 3 is not installed")
        pytest.skip("psycopg 3 is not installed (pip install 'veil[postgres]')")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL is not reachable at {PG_URL} ({exc}); set VEIL_TEST_POSTGRES_URL"
        if required:
            pytest.fail(f"VEIL_REQUIRE_POSTGRES is set but {message}")
        pytest.skip(f"SKIPPING PostgreSQL service test: {message}")
    schema = f"veil_service_{uuid.uuid4().hex[:16]}"
    admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        admin.close()


def people_table(rows: int, *, seed: int = 0, users: int | None = None) -> pa.Table:
    """A generated ``people`` table: ``user_id``, ``state``, ``age``, ``income`` (``users``
    distinct ids, one row each by default)."""
    rng = np.random.default_rng(seed)  # test data, not noise
    ids = np.arange(rows) % (users or rows)
    return pa.table(
        {
            "user_id": pa.array(ids, pa.int64()),
            "state": pa.array(np.array(STATES)[rng.integers(0, len(STATES), rows)]),
            "age": pa.array(rng.integers(18, 90, rows), pa.int64()),
            "income": pa.array(rng.integers(0, 200_000, rows).astype(np.float64)),
        }
    )


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


@dataclass
class Deployment:
    """A data owner's directory: tables, ``veil.toml``, the ledger, keys and grants.

    ``ledger``: a ledger URL (a PostgreSQL schema, say); default a SQLite file in ``root``.
    """

    root: Path
    ledger: str | None = None
    service: dict[str, Any] = field(default_factory=dict)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.ledger is None:
            self.ledger = f"sqlite:///{self.root / 'veil-ledger.db'}"

    @property
    def url(self) -> str:
        assert self.ledger is not None
        return self.ledger

    @property
    def config(self) -> Path:
        return self.root / "veil.toml"

    def add_table(
        self,
        name: str,
        rows: int = 1000,
        *,
        seed: int = 0,
        users: int | None = None,
        **metadata: Any,
    ) -> None:
        """Write a generated table ``name.parquet`` and declare dataset ``name`` on it, with
        bounds on income, the states as a public domain and ``metadata`` (TOML keys of a
        ``[[datasets]]`` entry) over these defaults."""
        pq.write_table(people_table(rows, seed=seed, users=users), self.root / f"{name}.parquet")
        entry: dict[str, Any] = {
            "name": name,
            "source": {"kind": "file", "path": f"{name}.parquet"},
            "privacy_unit": "user_id",
            "max_groups": 1,
            "max_rows_per_group": 1,
            "bounds": {"income": list(INCOME), "age": [0, 120]},
            "domains": {"state": list(STATES)},
            "max_epsilon": 1.0,
            "max_delta": 1e-6,
        }
        entry.update(metadata)
        self.datasets.append(entry)

    def write(self) -> Path:
        """Write ``veil.toml`` and register its datasets in the ledger (as ``veil serve`` does
        at start: idempotent)."""
        lines = [f"ledger = {_toml(self.url)}", "", "[service]"]
        lines += [f"{k} = {_toml(v)}" for k, v in self.service.items()]
        for entry in self.datasets:
            lines += ["", "[[datasets]]"]
            lines += [f"{k} = {_toml(v)}" for k, v in entry.items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        from veil.catalog import Catalog

        catalog = Catalog(self.url)
        try:
            catalog.load_toml(self.config)
        finally:
            catalog.ledger.close()
        return self.config

    def add_key(self, name: str, role: str = "analyst", *, cli: bool = False) -> str:
        """Create principal ``name`` and return its key (kept in ``keys``); with ``cli``, as an
        administrator does: ``veil admin analyst add NAME [--role admin] --config veil.toml``
        (the key printed once, read from its JSON)."""
        if cli:
            done = subprocess.run(
                [sys.executable, "-m", "veil.cli", "admin", "analyst", "add", name,
                 "--role", role, "--config", str(self.config), "--format", "json"],
                capture_output=True, text=True, check=False, cwd=self.root,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"veil admin analyst add {name} failed: {done.stderr}")
            key = str(json.loads(done.stdout)["key"])
        else:
            from veil.service.principals import Principals

            with Principals(self.url) as principals:
                key = principals.add(name, role)  # type: ignore[arg-type]
        self.keys[name] = key
        return key

    def grant(self, analyst: str, dataset: str, epsilon: float | str, delta: float = 0) -> None:
        import veil

        with veil.Ledger(self.url) as ledger:
            ledger.grant(analyst, dataset, veil.Budget(epsilon=epsilon, delta=delta))


@dataclass
class Server:
    """A running server: its URL, its processes and its log."""

    base_url: str
    process: subprocess.Popen[bytes]
    watchdog: subprocess.Popen[bytes]
    log: Path
    workers: int

    @property
    def pgid(self) -> int:
        return self.process.pid

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        kwargs.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.base_url, headers=headers, **kwargs)

    def worker_pids(self) -> list[int]:
        """The processes that serve requests: the workers (children of the server), or the
        server itself when it runs one worker in its own process."""
        workers = [pid for pid, cmd in _children(self.process.pid) if "spawn_main" in cmd]
        return workers if self.workers > 1 else [self.process.pid]

    def kill(self) -> None:
        """SIGKILL the server and its workers at once (the watchdog too): ``kill -9``."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        self._reap()

    def stop(self) -> None:
        """Stop the server (SIGTERM to its group, SIGKILL after 10 s)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        self.kill()

    def _reap(self) -> None:
        for p in (self.process, self.watchdog):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        # the group's orphans (workers whose supervisor died first) are init's to reap; wait
        # until none is left so a restart on the same port and ledger starts clean
        deadline = time.monotonic() + 10
        while _group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _proc_stat(pid: str) -> tuple[int, int] | None:
    """(ppid, pgrp) of ``pid`` from /proc, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[2])


def _children(parent: int) -> list[tuple[int, str]]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _proc_stat(entry)) is not None and st[0] == parent:
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            out.append((int(entry), cmd))
    return out


def _group_members(pgid: int) -> list[int]:
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and (st := _proc_stat(e)) is not None and st[1] == pgid
    ]


def _command(config: Path, port: int, workers: int) -> list[str]:
    return [
        sys.executable, "-m", "veil.cli", "serve", "--config", str(config),
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
    ]  # fmt: skip


@contextlib.contextmanager
def serve(
    config: Path,
    *,
    workers: int = 2,
    lifetime_s: float = 3600.0,
    startup_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Iterator[Server]:
    """Run the service on ``config`` with ``workers`` uvicorn workers until the block ends."""
    server = start(
        config, workers=workers, lifetime_s=lifetime_s, startup_s=startup_s, env=env, port=port
    )
    try:
        yield server
    finally:
        server.stop()


def start(
    config: Path,
    *,
    workers: int = 2,
    lifetime_s: float = 3600.0,
    startup_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Server:
    """Start the service (see :func:`serve`); the caller stops it."""
    from veil.service.config import CONFIG_ENV

    last = ""
    for _attempt in range(3):
        chosen = port or free_port()
        log = config.parent / f"server-{chosen}-{time.monotonic_ns()}.log"
        environment = {**os.environ, CONFIG_ENV: str(config), "PYTHONUNBUFFERED": "1"}
        environment.update(env or {})
        with log.open("wb") as out:
            process = subprocess.Popen(
                _command(config, chosen, workers),
                cwd=config.parent,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                process_group=0,  # a group of its own, led by the server
            )
        watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(lifetime_s)],
            process_group=process.pid,
        )
        server = Server(f"http://127.0.0.1:{chosen}", process, watchdog, log, workers)
        try:
            _wait_ready(server, startup_s)
            return server
        except RuntimeError as exc:
            server.kill()
            last = str(exc)
            if "address already in use" not in last.lower() or port is not None:
                raise
    raise RuntimeError(last)


def _wait_ready(server: Server, within_s: float) -> None:
    """Until every worker says it started and ``/healthz`` answers 200."""
    deadline = time.monotonic() + within_s
    with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {server.process.returncode}:\n{server.log_text()}"
                )
            started = server.log_text().count("Application startup complete")
            if started >= server.workers:
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/healthz").status_code == 200:
                        return
            time.sleep(0.1)
    raise RuntimeError(f"the server was not ready in {within_s} s:\n{server.log_text()}")
