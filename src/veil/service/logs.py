"""The service's logs, for its operator: one JSON object a line (or plain text), configured by
``veil serve`` from the config's ``[logging]`` table and its ``--log-level`` / ``--log-file``
flags, in every worker (uvicorn's ``log_config``).

Each line has ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``pid`` and ``message``, and,
while a request is being answered, its ``request_id`` (the proxy's ``X-Request-ID`` when it
sends a plain one, else a random one; answered in ``X-Request-ID``), ``analyst``, ``dataset``,
``fingerprint`` and ``outcome`` as far as they are known. Fields a record carries as
``veil_<name>`` extras are written as ``<name>`` (the withheld engine error of
:func:`veil.errors.log_withheld`: ``query``, ``reservation``), and a record's exception as
``exception`` (its traceback). One line per request on the logger ``veil.access`` (INFO):
``method``, ``path``, ``status``, ``duration_ms`` and the fields above.

These lines hold what the analyst is never told — the engine's error, the ledger's URL or path,
the query text — so they are for the operator only.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from veil.random import token_hex

__all__ = [
    "ACCESS_LOGGER",
    "JsonFormatter",
    "LineHandler",
    "RequestFilter",
    "RequestLog",
    "TextFormatter",
    "access",
    "begin",
    "end",
    "log_config",
    "note",
]

ACCESS_LOGGER = "veil.access"

_REQUEST: contextvars.ContextVar[RequestLog | None] = contextvars.ContextVar(
    "veil_request", default=None
)
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_FIELDS = ("request_id", "analyst", "dataset", "fingerprint", "outcome")


@dataclass
class RequestLog:
    """What the logs know of the request being answered (filled in as it is answered)."""

    request_id: str
    analyst: str | None = None
    dataset: str | None = None
    fingerprint: str | None = None
    outcome: str | None = None

    def fields(self) -> dict[str, str]:
        return {f: v for f in _FIELDS if (v := getattr(self, f)) is not None}


def begin(proposed: str | None) -> tuple[RequestLog, contextvars.Token[RequestLog | None]]:
    """Start the log context of a request: the proxy's id ``proposed`` if it is plain (letters,
    digits, ``._:-``, at most 64), else a random one. Threads the request hands work to see
    it when they run in a copy of this context (:class:`veil.service.state.ContextPool`)."""
    rid = proposed if proposed is not None and _PLAIN_ID.fullmatch(proposed) else None
    record = RequestLog(rid or token_hex(8))
    return record, _REQUEST.set(record)


def end(token: contextvars.Token[RequestLog | None]) -> None:
    _REQUEST.reset(token)


def note(**values: str | None) -> None:
    """Record what is now known of the request being answered (no request: nothing)."""
    record = _REQUEST.get()
    if record is None:
        return
    known = {f.name for f in fields(RequestLog)}
    for name, value in values.items():
        if name not in known:
            raise TypeError(f"no request log field {name!r}")
        if value is not None:
            setattr(record, name, value)


class RequestFilter(logging.Filter):
    """Puts the request's fields on each record logged while it is answered (``veil_request``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _REQUEST.get()
        if current is not None and not hasattr(record, "veil_request"):
            record.veil_request = current.fields()
        return True


_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _payload(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname,
        "logger": record.name,
        "pid": record.process,
        "message": record.getMessage(),
    }
    out.update(getattr(record, "veil_request", {}))
    for name, value in vars(record).items():
        if name.startswith("veil_") and name != "veil_request" and name not in _STANDARD:
            out[name.removeprefix("veil_")] = value
    if record.exc_info:
        out["exception"] = formatter.formatException(record.exc_info)
    elif record.exc_text:
        out["exception"] = record.exc_text
    return out


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_payload(record, self), ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger [request_id] message key=value …``, then the traceback (for a
    person at a terminal)."""

    def format(self, record: logging.LogRecord) -> str:
        payload = _payload(record, self)
        head = [payload.pop(k) for k in ("time", "level", "logger")]
        payload.pop("pid")
        message = payload.pop("message")
        rid = payload.pop("request_id", None)
        exception = payload.pop("exception", None)
        line = " ".join(str(h) for h in head) + (f" [{rid}]" if rid else "") + f" {message}"
        rest = " ".join(f"{k}={v!r}" for k, v in payload.items())
        text = f"{line} {rest}" if rest else line
        return f"{text}\n{exception}" if exception else text


REOPEN_CHECK_S = 1.0
"""How often a log file's path is checked for rotation (a ``stat``, not one per line)."""


class LineHandler(logging.Handler):
    """Writes each record as one ``write`` to standard error or, with ``path``, to a file
    opened for appending — so that the lines of several worker processes never interleave in
    the file — reopened when it was moved away (log rotation by renaming; noticed within
    :data:`REOPEN_CHECK_S`)."""

    def __init__(
        self, path: str | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.path = path
        self._clock = clock
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._checked = -REOPEN_CHECK_S
        self._io = threading.Lock()

    def _target(self) -> int:
        if self.path is None:
            return sys.stderr.fileno()
        now = self._clock()
        if self._fd is not None and now < self._checked + REOPEN_CHECK_S:
            return self._fd
        self._checked = now
        try:
            found = os.stat(self.path)
            current: tuple[int, int] | None = (found.st_dev, found.st_ino)
        except FileNotFoundError:
            current = None
        if self._fd is None or current != self._identity:
            if self._fd is not None:
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            opened = os.fstat(self._fd)
            self._identity = (opened.st_dev, opened.st_ino)
        return self._fd

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
            with self._io:
                fd = self._target()
                while data:
                    data = data[os.write(fd, data) :]
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        with self._io:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        super().close()


def log_config(level: str = "info", file: str | None = None, fmt: str = "json") -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of the service (uvicorn's ``log_config``): every
    logger's records — veil's, uvicorn's, the libraries' — at ``level`` or above, formatted
    ``fmt``, to ``file`` (appended) or standard error."""
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request": {"()": RequestFilter}},
        "formatters": {"veil": {"()": formatter}},
        "handlers": {
            "veil": {"()": LineHandler, "path": file, "filters": ["request"], "formatter": "veil"}
        },
        "root": {"level": level.upper(), "handlers": ["veil"]},
        "loggers": {
            # uvicorn's own handlers replaced by the root's; its access log is veil.access
            "uvicorn": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "uvicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }


def access(record: RequestLog, method: str, path: str, status: int, seconds: float) -> None:
    """The request's line on ``veil.access``."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.isEnabledFor(logging.INFO):
        return
    outcome = record.outcome or ("ok" if status < 400 else str(status))
    logger.info(
        "%s %s %d %s",
        method,
        path,
        status,
        outcome,
        extra={
            "veil_request": record.fields() | {"outcome": outcome},
            "veil_method": method,
            "veil_path": path,
            "veil_status": status,
            "veil_duration_ms": round(seconds * 1000, 3),
        },
    )
