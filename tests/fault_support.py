"""Real faults for the ledger's fault-injection tests (import as ``fault_support``).

- :func:`throwaway_cluster`: a PostgreSQL cluster of the test's own — ``initdb`` and
  ``pg_ctl`` from the machine's PostgreSQL binaries (``/usr/lib/postgresql/*/bin``, the newest)
  in a temporary directory, listening on a free port of 127.0.0.1 — that a test may stop
  (``pg_ctl stop -m immediate``: a crash, as the OOM killer or a lost machine would) and
  start again under load. Skipped with the reason when the binaries are missing, unless
  ``VEIL_REQUIRE_POSTGRES`` is set (then it fails). Run as root, the cluster runs as the
  ``postgres`` user (``initdb`` refuses root).
- :func:`small_disk`: a tmpfs of a few MiB mounted on a temporary directory, so that SQLite's
  writes meet a real ``ENOSPC`` from the kernel, and :func:`fill` takes every byte left on it.
  Mounting needs root (or ``CAP_SYS_ADMIN``): without, the test skips with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Cluster", "fill", "small_disk", "throwaway_cluster"]


def _required() -> bool:
    return os.environ.get("VEIL_REQUIRE_POSTGRES", "") not in ("", "0")


def _binaries() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


@dataclass
class Cluster:
    """A running throwaway cluster: ``url`` names its database ``veil``."""

    bin: Path
    data: Path
    port: int
    user: pwd.struct_passwd | None  # whom to run as (None: this process's user)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/veil"

    def _run(self, *args: str) -> None:
        def become() -> None:
            if self.user is not None:
                os.setgid(self.user.pw_gid)
                os.setuid(self.user.pw_uid)

        done = subprocess.run(
            args, capture_output=True, text=True, preexec_fn=become, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"
        log = str(self.data.parent / "postgres.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log,
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        """Stop it as a crash would: no shutdown checkpoint, connections cut."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                  "stop")  # fmt: skip


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """A new PostgreSQL cluster with a database ``veil``, stopped and deleted afterwards."""
    binaries = _binaries()
    if binaries is None:
        reason = "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (initdb, pg_ctl)"
        if _required():
            pytest.fail(f"VEIL_REQUIRE_POSTGRES is set but there are {reason}")
        pytest.skip(f"SKIPPING the PostgreSQL fault test: {reason}")
    psycopg = pytest.importorskip("psycopg")
    from service.server import free_port

    user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="veil-pg-"))
    data = root / "data"
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    cluster = Cluster(binaries, data, free_port(), user)
    try:
        cluster._run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
                     "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        cluster.start()
        admin = psycopg.connect(
            f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres", autocommit=True
        )
        admin.execute("CREATE DATABASE veil")
        admin.close()
        yield cluster
    finally:
        with contextlib.suppress(RuntimeError):
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def small_disk(size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB mounted on a new directory, unmounted afterwards."""
    where = Path(tempfile.mkdtemp(prefix="veil-disk-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(
            "SKIPPING the full-disk test: it mounts a small tmpfs for a real ENOSPC, which "
            f"needs root or CAP_SYS_ADMIN ({done.stderr.strip()})"
        )
    try:
        yield where
    finally:
        for _ in range(50):  # the server may still be letting go of its files
            if (
                subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode
                == 0
            ):
                break
            time.sleep(0.2)
        shutil.rmtree(where, ignore_errors=True)


def fill(disk: Path) -> Path:
    """Take every byte left on ``disk`` with a file (delete it to free them); its path."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):  # big writes, then the last pages and bytes
            chunk = b"\0" * size
            while True:
                try:
                    if os.write(fd, chunk) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler
