"""The service's configuration: one TOML file (``veil.toml``).

::

    ledger = "sqlite:///veil-ledger.db"   # or postgresql://user@host:5432/veil

    [service]
    rate_limit = 600            # requests per minute per API key, in each worker process
    max_request_bytes = 1048576 # larger bodies are refused (413)
    max_sql_chars = 20000       # longer SQL is refused (413)
    query_timeout_s = 30        # a query still running then answers 202 with its job URL
    job_ttl_s = 86400           # a job still "running" after this is reported lost
    job_keep_s = 604800         # a job's stored answer is deleted this long after it ended
    ledger_check_s = 300        # the ledger's running sums checked against its charges
    reservation_ttl_s = 3600    # a charge still "reserved" this long after: "abandoned"

    [logging]                   # the operator's log (veil.service.logs); veil serve's
    level = "info"              # --log-level and --log-file override these
    file = "/var/log/veil/veil.jsonl"   # appended; default: standard error
    format = "json"             # one JSON object a line; "text" for a person at a terminal

    [[datasets]]                # the catalog (veil.catalog.Catalog.load_toml), loaded at start
    name = "people"
    ...

A relative SQLite path in ``ledger`` (and a relative log ``file``) is relative to the file's
directory, as dataset sources are.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from veil.catalog import config_ledger_url
from veil.errors import InvalidArgumentError

__all__ = ["CONFIG_ENV", "LogSettings", "ServiceConfig", "ServiceLimits"]

CONFIG_ENV = "VEIL_SERVICE_CONFIG"
"""The environment variable that names the config file for :func:`create_app_from_env`."""


@dataclass(frozen=True)
class ServiceLimits:
    """What one request may ask of the service (see the module docstring)."""

    rate_limit: int = 600
    max_request_bytes: int = 1 << 20
    max_sql_chars: int = 20_000
    query_timeout_s: float = 30.0
    job_ttl_s: float = 86_400.0
    job_keep_s: float = 604_800.0
    ledger_check_s: float = 300.0
    reservation_ttl_s: float = 3_600.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise InvalidArgumentError(
                    f"[service] {f.name} must be a positive number, got {value!r}"
                )
        if self.job_keep_s < self.job_ttl_s:
            raise InvalidArgumentError(
                f"[service] job_keep_s = {self.job_keep_s:g} is shorter than job_ttl_s = "
                f"{self.job_ttl_s:g}: a job would be deleted while it may still finish; set "
                f"job_keep_s = {self.job_ttl_s:g} or more"
            )

    @staticmethod
    def from_toml(table: object) -> ServiceLimits:
        if not isinstance(table, Mapping):
            raise InvalidArgumentError(f"[service] must be a table, got {table!r}")
        known = {f.name for f in fields(ServiceLimits)}
        unknown = set(table) - known
        if unknown:
            raise InvalidArgumentError(
                f"[service]: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
            )
        return ServiceLimits(**dict(table))


LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("json", "text")


@dataclass(frozen=True)
class LogSettings:
    """Where the service logs, at which level, in which format (see the module docstring)."""

    level: str = "info"
    file: str | None = None
    format: str = "json"

    def __post_init__(self) -> None:
        if not isinstance(self.level, str) or self.level.lower() not in LEVELS:
            raise InvalidArgumentError(
                f"[logging] level must be one of {', '.join(LEVELS)}, got {self.level!r}"
            )
        if self.file is not None and (not isinstance(self.file, str) or not self.file.strip()):
            raise InvalidArgumentError(
                f"[logging] file must be a file's path, got {self.file!r}; leave it out to log "
                "to standard error"
            )
        if self.format not in FORMATS:
            raise InvalidArgumentError(
                f"[logging] format must be one of {', '.join(FORMATS)}, got {self.format!r}"
            )
        object.__setattr__(self, "level", self.level.lower())

    @staticmethod
    def from_toml(table: object, base: Path) -> LogSettings:
        if not isinstance(table, Mapping):
            raise InvalidArgumentError(f"[logging] must be a table, got {table!r}")
        known = {f.name for f in fields(LogSettings)}
        unknown = set(table) - known
        if unknown:
            raise InvalidArgumentError(
                f"[logging]: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
            )
        settings = LogSettings(**dict(table))
        if settings.file is not None:
            settings = replace(settings, file=str(base / Path(settings.file).expanduser()))
        return settings


@dataclass(frozen=True)
class ServiceConfig:
    """Where the ledger is, the request limits, and the file whose datasets are loaded."""

    ledger: str
    limits: ServiceLimits = ServiceLimits()
    path: Path | None = None
    logging: LogSettings = LogSettings()

    @staticmethod
    def load(path: str | os.PathLike[str]) -> ServiceConfig:
        file = Path(path)
        try:
            doc: dict[str, Any] = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read {str(file)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"{str(file)!r} is not a TOML configuration: it is not UTF-8 text (byte "
                f"{exc.start}); name the service's .toml file"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgumentError(f"{str(file)!r} is not valid TOML: {exc}") from None
        unknown = set(doc) - {"ledger", "service", "logging", "datasets"}
        if unknown:
            raise InvalidArgumentError(
                f"{str(file)!r}: unknown key(s) {sorted(unknown)}; known: ledger, [service], "
                "[logging], [[datasets]]"
            )
        try:
            url = config_ledger_url(doc, file.parent)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{str(file)!r}: {exc}") from None
        if url is None:
            raise InvalidArgumentError(
                f'{str(file)!r} must name the ledger: ledger = "sqlite:///veil-ledger.db" or '
                '"postgresql://user@host:5432/veil"'
            )
        return ServiceConfig(
            ledger=url,
            limits=ServiceLimits.from_toml(doc.get("service", {})),
            path=file,
            logging=LogSettings.from_toml(doc.get("logging", {}), file.parent.absolute()),
        )
