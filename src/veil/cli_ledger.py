"""``veil ledger …``: the ledger itself, from the shell (issue 34).

- ``veil ledger init`` makes a new, empty ledger — the explicit path: where there is none, or
  only an empty file or database (a failed copy or restore leaves one). Nothing else makes
  one behind an operator's back except a grant (``veil budget grant``) on a path that does not
  exist yet.
- ``veil ledger check`` recomputes every grant's and cap's running sums from its charges and
  lists the reservations still open (exit code 1 on a mismatch), as the service does when it
  opens the ledger and every ``ledger_check_s``.
- ``veil ledger abandon --older-than S`` resolves reservations whose worker is gone (still
  charged, nothing released), as the service does after ``reservation_ttl_s``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from veil.cli_options import OutputFormat
from veil.errors import InvalidArgumentError, LedgerError

__all__ = ["ledger_app"]

ledger_app = typer.Typer(
    help="Make, check and settle a ledger (init, check, abandon).", no_args_is_help=True
)

LedgerOpt = Annotated[
    str | None, typer.Option("--ledger", help="Ledger URL: sqlite:///ledger.db or postgresql://…")
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", help="The service's config file (veil.toml).")
]
FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table for people, json for programs.")
]


def _url(ledger: str | None, config: str | None) -> str:
    if (ledger is None) == (config is None):
        raise InvalidArgumentError("name the ledger: --ledger URL or --config veil.toml (one)")
    if ledger is not None:
        return ledger
    from veil.service.config import ServiceConfig

    return ServiceConfig.load(config or "").ledger


def _say(fmt: OutputFormat, payload: dict[str, object], text: str) -> None:
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        Console(highlight=False, soft_wrap=True).print(text, markup=False)


@ledger_app.command("init")
def init(
    ledger: LedgerOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.table
) -> None:
    """Make a new, empty ledger where there is none (or only an empty file or database)."""
    from veil.accounting.ledger import Ledger
    from veil.cli_errors import run

    def go() -> None:
        url = _url(ledger, config)
        try:
            with Ledger(url, create=False) as found:
                shown = found.url
            made = False
        except LedgerError:  # none yet, or an empty file: made now (or refused, saying why)
            with Ledger.initialise(url) as new:
                shown = new.url
            made = True
        said = "made a new, empty ledger at" if made else "a veil ledger already; unchanged:"
        _say(fmt, {"ledger": shown, "created": made}, f"{said} {shown}")

    run(go, fmt)


@ledger_app.command("check")
def check(
    ledger: LedgerOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.table
) -> None:
    """Recompute every grant's and cap's running sums from its charges (exit 1 on a mismatch)
    and list the reservations still open."""
    from veil.accounting.ledger import Ledger
    from veil.accounting.pages import open_charges
    from veil.cli_errors import INTERNAL_ERROR_EXIT, run

    def go() -> bool:
        with Ledger(_url(ledger, config), create=False) as led:
            found = led.verify(halt=False)
            grants = len(led.grants())
            open_ = [(r.id, r.analyst, r.dataset, r.at.isoformat()) for r in led.read(open_charges)]
            shown = led.url
        payload = {
            "ledger": shown,
            "grants": grants,
            "mismatches": [str(m) for m in found],
            "reserved": [{"id": i, "analyst": a, "dataset": d, "at": at} for i, a, d, at in open_],
        }
        lines = [f"ledger {shown}: {grants} grant(s) checked"]
        lines += [f"MISMATCH: {m}" for m in found] or [
            "the running sums of every grant and cap match their charges"
        ]
        lines.append(f"{len(open_)} reservation(s) still open" + ("" if not open_ else ":"))
        lines += [f"  #{i} {a} on {d}, reserved at {at}" for i, a, d, at in open_]
        _say(fmt, payload, "\n".join(lines))
        return not found

    if not run(go, fmt):
        raise typer.Exit(INTERNAL_ERROR_EXIT)


@ledger_app.command("abandon")
def abandon(
    older_than: Annotated[
        float,
        typer.Option(
            "--older-than", help="Seconds a reservation must have stayed open (its worker gone)."
        ),
    ],
    ledger: LedgerOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Resolve reservations still open after --older-than seconds as abandoned: their worker is
    gone; they stay charged and nothing of them is released."""
    from veil.accounting.ledger import Ledger
    from veil.cli_errors import run

    def go() -> None:
        with Ledger(_url(ledger, config), create=False) as led:
            ids = led.abandon_stale(older_than)
        _say(
            fmt,
            {"abandoned": ids},
            f"{len(ids)} reservation(s) resolved as abandoned"
            + (f": {', '.join(f'#{i}' for i in ids)}" if ids else ""),
        )

    run(go, fmt)
