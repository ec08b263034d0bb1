"""``veil admin …`` and ``veil serve``: the service's identities and its server, from the shell.

Thin, like the rest of the CLI: ``veil admin`` calls :class:`veil.service.principals.Principals`
(no FastAPI needed); ``veil serve`` starts uvicorn with the import-string factory
``veil.service.app:create_app_from_env``, so that each of ``--workers`` processes builds its
own app from the config file (named to it by ``$VEIL_SERVICE_CONFIG``).
"""

from __future__ import annotations

import importlib.util
import json
import logging.config
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from veil.cli_options import OutputFormat
from veil.errors import InvalidArgumentError, LedgerError, MissingDependencyError

if TYPE_CHECKING:
    from veil.service.principals import Principals

__all__ = ["admin_app", "serve"]

admin_app = typer.Typer(
    help="The service's analysts and administrators, and their API keys.", no_args_is_help=True
)
analyst_app = typer.Typer(help="Add analysts and administrators.", no_args_is_help=True)
key_app = typer.Typer(help="Rotate or revoke API keys.", no_args_is_help=True)
admin_app.add_typer(analyst_app, name="analyst")
admin_app.add_typer(key_app, name="key")

LedgerOpt = Annotated[
    str | None, typer.Option("--ledger", help="Ledger URL: sqlite:///ledger.db or postgresql://…")
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", help="The service's config file (veil.toml).")
]
FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table for people, json for programs.")
]


def _ledger_url(ledger: str | None, config: str | None) -> str:
    if (ledger is None) == (config is None):
        raise InvalidArgumentError("name the ledger: --ledger URL or --config veil.toml (one)")
    if ledger is not None:
        return ledger
    from veil.service.config import ServiceConfig

    return ServiceConfig.load(config or "").ledger


def _principals(ledger: str | None, config: str | None) -> Principals:
    from veil.accounting.store import require_existing
    from veil.service.principals import Principals

    url = _ledger_url(ledger, config)
    if config is None:  # a mistyped --ledger path must not become a new, empty ledger
        require_existing(url)
    return Principals(url)


def _ledger_exists(config: str, *, init: bool) -> None:
    """The service never starts on a ledger it would have to create: a mistyped path must not
    become a new, empty ledger (``--init-ledger`` makes one, explicitly, before the workers
    start: ``veil.Ledger.initialise``)."""
    from veil.accounting.ledger import Ledger
    from veil.accounting.store import require_existing, shown_url
    from veil.service.config import ServiceConfig

    url = ServiceConfig.load(config).ledger
    if init:
        Ledger.initialise(url).close()
        return
    try:
        require_existing(url)
    except LedgerError as exc:
        why = f"the config's ledger {shown_url(url)} does not exist yet"
        raise LedgerError(
            f"{why}; create it with veil ledger init --config {config} (or veil serve "
            "--init-ledger), or check the ledger URL in the config"
        ) from exc


def _run(fn: Callable[[], None], fmt: OutputFormat = OutputFormat.table) -> None:
    from veil.cli_errors import run  # the CLI's error reporting (one line, exit code 2)

    run(fn, fmt)


def _print_key(name: str, role: str, key: str, fmt: OutputFormat, verb: str) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps({"name": name, "role": role, "key": key}) + "\n")
        return
    Console(highlight=False, soft_wrap=True).print(
        f"{verb} {role} {name!r}; their API key (shown only this once, store it now):\n{key}",
        markup=False,
    )


@analyst_app.command("add")
def analyst_add(
    name: str,
    role: Annotated[str, typer.Option("--role", help="analyst or admin.")] = "analyst",
    ledger: LedgerOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Add an analyst (or, with --role admin, an administrator) and print their key once."""

    def go() -> None:
        if role not in ("analyst", "admin"):
            raise InvalidArgumentError(f"--role is analyst or admin, got {role!r}")
        with _principals(ledger, config) as p:
            key = p.add(name, "admin" if role == "admin" else "analyst")
        _print_key(name, role, key, fmt, "added")

    _run(go, fmt)


@key_app.command("rotate")
def key_rotate(
    name: str,
    ledger: LedgerOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Replace NAME's key with a new one (printed once); the old key stops working."""

    def go() -> None:
        with _principals(ledger, config) as p:
            key = p.rotate(name)
            who = p.get(name)
        _print_key(name, who.role if who else "analyst", key, fmt, "rotated the key of")

    _run(go, fmt)


@key_app.command("revoke")
def key_revoke(name: str, ledger: LedgerOpt = None, config: ConfigOpt = None) -> None:
    """Revoke NAME's key (rotate later to give them a new one)."""

    def go() -> None:
        with _principals(ledger, config) as p:
            p.revoke(name)
        Console(highlight=False).print(f"revoked the key of {name!r}", markup=False)

    _run(go)


@admin_app.command("list")
def admin_list(
    ledger: LedgerOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.table
) -> None:
    """Every analyst and administrator: role, when their key was made, whether it is live."""

    def go() -> None:
        with _principals(ledger, config) as p:
            rows = p.list()
        if fmt is OutputFormat.json:
            payload = [
                {
                    "name": r.name,
                    "role": r.role,
                    "created_at": r.created_at.isoformat(),
                    "revoked_at": None if r.revoked_at is None else r.revoked_at.isoformat(),
                    "active": r.active,
                }
                for r in rows
            ]
            sys.stdout.write(json.dumps({"principals": payload}) + "\n")
            return
        table = Table(title="principals")
        for col in ("name", "role", "key created (UTC)", "state"):
            table.add_column(col)
        for r in rows:
            table.add_row(
                r.name,
                r.role,
                r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                "live" if r.active else "revoked",
            )
        Console(highlight=False).print(table)

    _run(go, fmt)


def serve(
    config: Annotated[str, typer.Option("--config", help="The service's config file (veil.toml).")],
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes.", min=1)] = 1,
    init_ledger: Annotated[
        bool,
        typer.Option(
            "--init-ledger", help="Make a new, empty ledger first if the config's does not exist."
        ),
    ] = False,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help="debug, info, warning, error or critical (default: the config's [logging] "
            "level, else info).",
        ),
    ] = None,
    log_file: Annotated[
        str | None,
        typer.Option(
            "--log-file",
            help="Append the log to this file (default: the config's [logging] file, else "
            "standard error).",
        ),
    ] = None,
) -> None:
    """Run the HTTP service (pip install 'veil[service]'); behind a TLS proxy in production."""

    def go() -> None:
        try:
            import uvicorn
        except ImportError as exc:
            raise MissingDependencyError(
                "veil serve needs the service extra: pip install 'veil[service]'"
            ) from exc
        if importlib.util.find_spec("prometheus_client") is None:  # imported once named below
            raise MissingDependencyError(
                "veil serve needs the service extra: pip install 'veil[service]'"
            )
        from veil.service.config import CONFIG_ENV, LEVELS, ServiceConfig
        from veil.service.logs import log_config

        path = os.path.abspath(config)
        os.environ[CONFIG_ENV] = path
        settings = ServiceConfig.load(path).logging
        for flag, value in (("--log-level", log_level), ("--log-file", log_file)):
            if value is not None and not value.strip():
                raise InvalidArgumentError(f"{flag} needs a value; leave it out for the default")
        if log_level is not None and log_level.lower() not in LEVELS:
            raise InvalidArgumentError(
                f"--log-level must be one of {', '.join(LEVELS)}, got {log_level!r}"
            )
        settings = replace(
            settings,
            level=log_level or settings.level,
            file=os.path.abspath(log_file) if log_file else settings.file,
        )
        if settings.file is not None:
            try:  # the workers append to it: refused here, in one line, if they cannot
                with open(settings.file, "a", encoding="utf-8"):
                    pass
            except OSError as exc:
                raise InvalidArgumentError(
                    f"cannot open the log file {settings.file!r}: {exc.strerror}; create its "
                    "folder or choose another ([logging] file, or --log-file)"
                ) from None
        # the check below logs as the workers will (uvicorn configures it again in each)
        logging.config.dictConfig(log_config(settings.level, settings.file, settings.format))
        _ledger_exists(path, init=init_ledger)
        # the workers' metrics files (prometheus_client's multiprocess mode), summed by every
        # scrape: a new directory per server, named before prometheus_client is first imported
        metrics_dir = tempfile.mkdtemp(prefix="veil-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        previous = signal.signal(signal.SIGTERM, _remove_then_die(metrics_dir))
        try:
            from veil.service.app import create_app_from_env

            app = create_app_from_env()  # fail here, in one clean line, on a bad config or ledger
            app.state.veil.close()
            uvicorn.run(
                "veil.service.app:create_app_from_env",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_config=log_config(settings.level, settings.file, settings.format),
                log_level=settings.level,
                access_log=False,  # veil.access logs each request, with its analyst and outcome
            )
        finally:
            signal.signal(signal.SIGTERM, previous)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            shutil.rmtree(metrics_dir, ignore_errors=True)

    _run(go)


def _remove_then_die(directory: str) -> Callable[[int, object], None]:
    """A SIGTERM handler that removes ``directory``, then lets the signal kill the process.
    With one worker, uvicorn serves in this process and, once shut down, raises the SIGTERM it
    caught again under the handler it found, so no ``finally`` runs; the process still dies of
    the signal, as uvicorn meant. With several, uvicorn's supervisor handles SIGTERM itself."""

    def handler(signum: int, _frame: object) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    return handler
