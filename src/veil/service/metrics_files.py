"""Values shared by a server's worker processes: one memory-mapped file per process, in a
directory of the server's own (prometheus_client's multiprocess design, without its package).

A process writes only its own file (:class:`ValueFile`): a key, once, then its value in place,
an 8-byte double at an 8-byte-aligned offset; a scrape in any process reads every file of the
directory (:func:`read_all`). Layout: bytes 0–3 the used length (little-endian ``uint32``,
written after the entry it covers, so a reader sees whole entries only), bytes 4–7 zero, then
entries of ``uint32`` key length, the UTF-8 key padded with spaces to end on a multiple of 8,
and the ``float64`` value.

**Liveness.** A process holds an exclusive ``flock`` on its own file while it lives (the kernel
drops it when the process dies, however it dies), so a reader tells a live worker's file from
a dead one's without trusting process ids, which are reused.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from veil.errors import InternalError
from veil.random import token_hex

__all__ = ["SUFFIX", "FileValues", "ValueFile", "read_all"]

SUFFIX = ".db"
_HEADER = 8
_INITIAL = 1 << 16


class ValueFile:
    """This process's values (key → float) in a new file of ``directory`` (thread-safe)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"worker-{os.getpid()}-{token_hex(4)}{SUFFIX}"
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # held while this process lives
        os.ftruncate(self._fd, _INITIAL)
        self._map: mmap.mmap | None = mmap.mmap(self._fd, _INITIAL)
        self._used = _HEADER
        struct.pack_into("<I", self._map, 0, self._used)
        self._offsets: dict[str, int] = {}

    def add(self, key: str, amount: float) -> None:
        """Add ``amount`` to ``key``'s value (a counter); nothing once closed (a query thread
        may finish after its server stopped)."""
        with self._lock:
            if self._map is None:
                return
            offset = self._offset(key)
            m = self._mapped()
            (value,) = struct.unpack_from("<d", m, offset)
            struct.pack_into("<d", m, offset, value + amount)

    def set(self, key: str, value: float) -> None:
        """Set ``key``'s value (a gauge); nothing once closed."""
        with self._lock:
            if self._map is None:
                return
            offset = self._offset(key)
            struct.pack_into("<d", self._mapped(), offset, value)

    def close(self) -> None:
        """Unmap the file and release its lock: its counters stay, counted as a dead process's."""
        with self._lock:
            if self._map is None:
                return
            self._map.close()
            self._map = None
            os.close(self._fd)

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            raise InternalError("a metric was recorded after the service closed its metrics")
        return self._map

    def _offset(self, key: str) -> int:
        offset = self._offsets.get(key)
        if offset is not None:
            return offset
        m = self._mapped()
        encoded = key.encode("utf-8")
        padded = encoded + b" " * ((8 - (len(encoded) + 4) % 8) % 8)
        size = 4 + len(padded) + 8
        if self._used + size > len(m):
            m = self._grow(self._used + size)
        struct.pack_into(f"<I{len(padded)}s", m, self._used, len(encoded), padded)
        offset = self._used + 4 + len(padded)
        struct.pack_into("<d", m, offset, 0.0)
        self._used += size
        struct.pack_into("<I", m, 0, self._used)  # published after the entry is whole
        self._offsets[key] = offset
        return offset

    def _grow(self, needed: int) -> mmap.mmap:
        size = len(self._mapped())
        while size < needed:
            size *= 2
        self._mapped().close()
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        return self._map


@dataclass(frozen=True)
class FileValues:
    """What one process's file holds, and whether that process still lives."""

    values: dict[str, float]
    live: bool


def read_all(directory: Path) -> list[FileValues]:
    """Every process's values in ``directory`` (files that vanish or are cut short while
    being read are read as far as they are whole)."""
    out = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            with path.open("rb") as f:
                live = _locked(f.fileno())
                data = f.read()
        except FileNotFoundError:
            continue
        out.append(FileValues(_parse(data), live))
    return out


def _locked(fd: int) -> bool:
    """Whether another open file holds the file's lock (its process lives)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _parse(data: bytes) -> dict[str, float]:
    if len(data) < _HEADER:
        return {}
    (used,) = struct.unpack_from("<I", data, 0)
    used = min(used, len(data))
    values: dict[str, float] = {}
    pos = _HEADER
    while pos + 4 <= used:
        (length,) = struct.unpack_from("<I", data, pos)
        padded = length + (8 - (length + 4) % 8) % 8
        end = pos + 4 + padded + 8
        if end > used:
            break
        key = data[pos + 4 : pos + 4 + length].decode("utf-8")
        (values[key],) = struct.unpack_from("<d", data, pos + 4 + padded)
        pos = end
    return values
