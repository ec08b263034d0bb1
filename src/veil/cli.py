"""The ``veil`` command line: thin over :class:`veil.Session` and :class:`veil.Ledger`.

No differential-privacy logic lives here: the commands parse options, call the session or the
ledger and print what comes back — rich tables with ± error bars for people, one JSON object
(or CSV) for programs. User errors print one line on stderr and exit with code 2; anything
else is reported as a bug (exit code 1), without a traceback.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from veil.accounting.budget import Budget, exact
from veil.errors import InternalError, InvalidArgumentError, UserError, VeilError

__all__ = ["app", "main"]

T = TypeVar("T")

USER_ERROR_EXIT = 2
INTERNAL_ERROR_EXIT = 1

app = typer.Typer(
    name="veil",
    help="Differential-privacy analytics: noisy aggregates with error bars and a budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
budget_app = typer.Typer(
    help="Show, grant and audit privacy budgets in a ledger.", no_args_is_help=True
)
app.add_typer(budget_app, name="budget")


class OutputFormat(StrEnum):
    """How results are printed."""

    table = "table"
    json = "json"
    csv = "csv"


# ----------------------------------------------------------------------------- errors


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn veil errors into one clean line on stderr and an exit code; never a traceback."""
    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        _stderr().print("interrupted")
        raise typer.Exit(130) from None
    except UserError as err:
        _stderr().print(f"error: {err}", markup=False)
        raise typer.Exit(USER_ERROR_EXIT) from None
    except VeilError as err:  # InternalError, RandomnessError
        _stderr().print(f"error: {err}", markup=False)
        raise typer.Exit(INTERNAL_ERROR_EXIT) from None
    except Exception as err:
        bug = InternalError(f"unexpected {type(err).__name__}: {err}")
        _stderr().print(f"internal error: {bug}", markup=False)
        raise typer.Exit(INTERNAL_ERROR_EXIT) from None


# ----------------------------------------------------------------------------- option parsing


def parse_tables(specs: Sequence[str]) -> dict[str, str]:
    """``["people=people.parquet", …]`` → ``{"people": "people.parquet", …}``."""
    tables: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InvalidArgumentError(
                f"--table expects NAME=PATH, got {spec!r}; e.g. --table people=people.parquet"
            )
        if name.strip() in tables:
            raise InvalidArgumentError(f"--table {name.strip()!r} is given twice; name it once")
        tables[name.strip()] = path.strip()
    return tables


def parse_bounds(specs: Sequence[str]) -> dict[str, tuple[Fraction, Fraction]]:
    """``["income=0:1000000", …]`` → ``{"income": (0, 1000000), …}`` (exact numbers)."""
    bounds: dict[str, tuple[Fraction, Fraction]] = {}
    for spec in specs:
        column, sep, interval = spec.partition("=")
        lower, colon, upper = interval.partition(":")
        if not sep or not colon or not column.strip() or not lower.strip() or not upper.strip():
            raise InvalidArgumentError(
                f"--bounds expects COLUMN=LOWER:UPPER, got {spec!r}; e.g. --bounds income=0:1000000"
            )
        lo = exact(lower, f"the lower bound of {column.strip()!r}")
        hi = exact(upper, f"the upper bound of {column.strip()!r}")
        bounds[column.strip()] = (lo, hi)
    return bounds


def parse_number(value: str | None, name: str) -> Fraction | None:
    """An exact number from the command line (``0.5``, ``1e-6``, ``1/3``), or None."""
    if value is None:
        return None
    text = value.strip()
    try:
        number = exact(float(text), name) if _looks_float(text) else exact(text, name)
    except ValueError:
        raise InvalidArgumentError(
            f"{name} must be a number such as 0.5, 1e-6 or 1/3, got {value!r}"
        ) from None
    if number < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {value}")
    return number


def _looks_float(text: str) -> bool:
    return "/" not in text and any(c in text for c in "eE") and not text.lower().startswith("inf")


# ----------------------------------------------------------------------------- output


def _plain(value: Any) -> Any:
    """A JSON-friendly version of a released value (NaN → null, Fractions → float)."""
    if value is None:
        return None
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, Fraction):
        return float(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):  # numpy scalar
        return _plain(value.item())
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def budget_json(budget: Budget | None) -> dict[str, Any] | None:
    """A Budget as JSON: floats for reading, exact fractions as strings for auditing."""
    if budget is None:
        return None
    out: dict[str, Any] = {"kind": budget.kind}
    if budget.kind == "zcdp":
        out["rho"] = float(budget.rho or 0)
        out["exact"] = {"rho": str(budget.rho)}
    else:
        out["epsilon"] = float(budget.epsilon or 0)
        out["delta"] = float(budget.delta)
        out["exact"] = {"epsilon": str(budget.epsilon), "delta": str(budget.delta)}
    return out


def _format_value(value: Any) -> str:
    value = _plain(value)
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _format_error(bar: Any) -> str:
    bar = _plain(bar)
    if bar is None:
        return ""
    return f" ± {float(bar):,.3g}"


def render_table(
    console: Console,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    error_bars: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> None:
    """Print released rows as a rich table, each noisy value with its 95 % ± half-width."""
    table = Table(title=title, caption=caption, caption_justify="left")
    for i, name in enumerate(columns):
        numeric = any(isinstance(_plain(row[i]), int | float) for row in rows)
        table.add_column(name, justify="right" if numeric else "left")
    for row, bars in zip(rows, error_bars, strict=True):
        table.add_row(
            *(_format_value(v) + _format_error(b) for v, b in zip(row, bars, strict=True))
        )
    console.print(table)


def result_payload(result: Any) -> dict[str, Any]:
    """The JSON object of a result: columns, rows, error_bars (95 %), cost."""
    columns = [str(c) for c in result.columns]
    rows = [[_plain(v) for v in row] for row in result.rows]
    bars = [[_plain(b) for b in row] for row in _error_bar_rows(result, len(columns))]
    payload: dict[str, Any] = {
        "columns": columns,
        "rows": rows,
        "error_bars": bars,
        "error_bar_level": 0.95,
        "cost": budget_json(result.cost),
    }
    remaining = getattr(result, "remaining", None)
    if isinstance(remaining, Budget):
        payload["remaining"] = budget_json(remaining)
    cached = getattr(result, "cached", None)
    if isinstance(cached, bool):
        payload["cached"] = cached
    return payload


def _error_bar_rows(result: Any, width: int) -> list[list[Any]]:
    """Result.error_bars(0.95) as a list of rows (None where a column has no error bar)."""
    bars = result.error_bars(0.95)
    if hasattr(bars, "to_pylist"):  # an Arrow table
        bars = [list(d.values()) for d in bars.to_pylist()]
    out = [list(row) for row in bars]
    for row in out:
        if len(row) != width:
            raise InternalError(f"error bars have {len(row)} columns, the result {width}")
    return out


def print_result(result: Any, fmt: OutputFormat, *, title: str | None = None) -> None:
    """Print a result in the chosen format (table on stdout; json/csv machine-readable)."""
    payload = result_payload(result)
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    if fmt is OutputFormat.csv:
        sys.stdout.write(_csv(payload))
        return
    console = Console(highlight=False)
    cost = payload["cost"]
    caption = f"cost {result.cost}" if cost is not None else None
    remaining = getattr(result, "remaining", None)
    if isinstance(remaining, Budget):
        caption = f"{caption}; remaining {remaining}" if caption else f"remaining {remaining}"
    caption = (caption or "") + ("; " if caption else "") + "± = 95 % error bar"
    render_table(
        console,
        payload["columns"],
        payload["rows"],
        payload["error_bars"],
        title=title,
        caption=caption,
    )


def _csv(payload: Mapping[str, Any]) -> str:
    """Value columns, then one ``<column>_error95`` column for each column with error bars."""
    columns: list[str] = payload["columns"]
    rows: list[list[Any]] = payload["rows"]
    bars: list[list[Any]] = payload["error_bars"]
    with_bars = [i for i in range(len(columns)) if any(b[i] is not None for b in bars)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*columns, *(f"{columns[i]}_error95" for i in with_bars)])
    for row, bar in zip(rows, bars, strict=True):
        writer.writerow(["" if v is None else v for v in row] + [bar[i] for i in with_bars])
    return buf.getvalue()


@contextmanager
def scanning(message: str) -> Iterator[None]:
    """A spinner with elapsed time on stderr while the engine scans (only on a terminal)."""
    console = _stderr()
    if not console.is_terminal:
        yield
        return
    with console.status(message, spinner="dots"):
        yield


def _run(fn: Callable[[], T]) -> T:
    with _reported_errors():
        return fn()


# ----------------------------------------------------------------------------- commands

TableOpt = Annotated[
    list[str],
    typer.Option(
        "--table", "-t", help="A private table as NAME=PATH (CSV or Parquet); repeatable."
    ),
]
EpsilonOpt = Annotated[
    str, typer.Option("--epsilon", "-e", help="Privacy loss ε this query may spend.")
]
DeltaOpt = Annotated[str | None, typer.Option("--delta", "-d", help="δ for (ε, δ)-DP (e.g. 1e-6).")]
UnitOpt = Annotated[
    str | None,
    typer.Option("--privacy-unit", "-u", help="The column naming the person; omit for rows."),
]
BoundsOpt = Annotated[
    list[str] | None,
    typer.Option("--bounds", "-b", help="Clamping bounds COLUMN=LOWER:UPPER; repeatable."),
]
LedgerOpt = Annotated[
    str | None,
    typer.Option(
        "--ledger", help="Ledger URL (sqlite:///ledger.db, postgresql://…); default: in memory."
    ),
]
AnalystOpt = Annotated[str, typer.Option("--analyst", "-a", help="Who is asking.")]
FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table (people), json or csv (programs).")
]


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="The SQL query (veil's DP subset).")],
    table: TableOpt,
    epsilon: EpsilonOpt,
    delta: DeltaOpt = None,
    privacy_unit: UnitOpt = None,
    bounds: BoundsOpt = None,
    ledger: LedgerOpt = None,
    analyst: AnalystOpt = "cli",
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Answer a SQL query with noise, error bars and a charged budget."""

    def go() -> None:
        session, eps, dlt, bnds = _session(
            table, epsilon, delta, privacy_unit, bounds, ledger, analyst
        )
        with scanning("scanning the private table…"):
            result = session.sql(sql, epsilon=eps, delta=dlt, bounds=bnds or None)
        print_result(result, fmt)

    _run(go)


def _session(
    table: Sequence[str],
    epsilon: str,
    delta: str | None,
    privacy_unit: str | None,
    bounds: Sequence[str] | None,
    ledger: str | None,
    analyst: str,
) -> tuple[Any, Fraction, Fraction | None, dict[str, tuple[Fraction, Fraction]]]:
    import importlib

    Session = importlib.import_module("veil.session").Session  # lands with the query engine

    tables = parse_tables(table)
    if not tables:
        raise InvalidArgumentError("give at least one table: --table people=people.parquet")
    eps = parse_number(epsilon, "--epsilon")
    dlt = parse_number(delta, "--delta")
    if eps is None:
        raise InvalidArgumentError("--epsilon is required, e.g. --epsilon 0.5")
    bnds = parse_bounds(bounds or [])
    # Without a ledger the session is one-shot: its in-memory budget is this query's cost.
    budget = None if ledger else Budget(epsilon=eps, delta=dlt)
    session = Session.local(
        tables=tables,
        privacy_unit=privacy_unit,
        budget=budget,
        analyst=analyst,
        ledger=ledger or "sqlite://",
    )
    return session, eps, dlt, bnds


def main() -> None:
    """Console-script entry point."""
    app()


# ----------------------------------------------------------------------------- budget

RequiredLedgerOpt = Annotated[
    str, typer.Option("--ledger", help="Ledger URL: sqlite:///ledger.db or postgresql://…")
]
DatasetOpt = Annotated[str, typer.Option("--dataset", help="The dataset the budget is for.")]
AnalystReqOpt = Annotated[str, typer.Option("--analyst", "-a", help="The analyst.")]


def _open_ledger(url: str) -> Any:
    from veil.accounting.ledger import Ledger

    return Ledger(url)


def _budget_parts(budget: Budget) -> tuple[str, str, str]:
    """(ε, δ, ρ) as short strings for a table."""
    eps = "" if budget.epsilon is None else f"{float(budget.epsilon):.6g}"
    dlt = "" if budget.kind != "approx" else f"{float(budget.delta):.3g}"
    rho = "" if budget.rho is None else f"{float(budget.rho):.6g}"
    return eps, dlt, rho


@budget_app.command("show")
def budget_show(
    ledger: RequiredLedgerOpt,
    analyst: Annotated[
        str | None, typer.Option("--analyst", "-a", help="Only this analyst.")
    ] = None,
    dataset: Annotated[str | None, typer.Option("--dataset", help="Only this dataset.")] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Granted, spent and remaining budget per (analyst, dataset)."""

    def go() -> None:
        with _open_ledger(ledger) as led:
            rows = []
            for entry in json.loads(led.export_json())["budgets"]:
                a, d = str(entry["analyst"]), str(entry["dataset"])
                if (analyst is not None and a != analyst) or (dataset is not None and d != dataset):
                    continue
                rows.append((a, d, led.granted(a, d), led.remaining(a, d)))
        if not rows and (analyst or dataset):
            who = " and ".join(
                f"{k} {v!r}" for k, v in (("analyst", analyst), ("dataset", dataset)) if v
            )
            raise InvalidArgumentError(
                f"the ledger has no budget for {who}; grant one with "
                "`veil budget grant --ledger URL --analyst NAME --dataset NAME --epsilon E`"
            )
        if fmt is OutputFormat.json:
            payload = [
                {"analyst": a, "dataset": d, "granted": budget_json(g), "remaining": budget_json(r)}
                for a, d, g, r in rows
            ]
            sys.stdout.write(json.dumps({"budgets": payload}) + "\n")
            return
        if fmt is OutputFormat.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(["analyst", "dataset", "kind", "granted", "remaining"])
            for a, d, g, r in rows:
                writer.writerow([a, d, g.kind, str(g), str(r)])
            sys.stdout.write(buf.getvalue())
            return
        table = Table(title=f"privacy budgets in {led.url}")
        for name in ("analyst", "dataset", "granted", "remaining", "used"):
            table.add_column(name, justify="left" if name in ("analyst", "dataset") else "right")
        for a, d, g, r in rows:
            table.add_row(a, d, str(g), str(r), _used_share(g, r))
        Console(highlight=False).print(table)

    _run(go)


def _used_share(granted: Budget, remaining: Budget) -> str:
    if granted.kind == "zcdp":
        total, left = granted.rho or Fraction(0), remaining.rho or Fraction(0)
    else:
        total, left = granted.epsilon or Fraction(0), remaining.epsilon or Fraction(0)
    if total == 0:
        return "—"
    return f"{float((total - left) / total):.0%}"


@budget_app.command("grant")
def budget_grant(
    ledger: RequiredLedgerOpt,
    analyst: AnalystReqOpt,
    dataset: DatasetOpt,
    epsilon: Annotated[str | None, typer.Option("--epsilon", "-e", help="ε to grant.")] = None,
    delta: DeltaOpt = None,
    rho: Annotated[str | None, typer.Option("--rho", help="ρ to grant (zCDP).")] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Grant budget to an analyst on a dataset (added to an existing grant)."""

    def go() -> None:
        r = parse_number(rho, "--rho")
        e = parse_number(epsilon, "--epsilon")
        d = parse_number(delta, "--delta")
        if r is not None:
            if e is not None or d is not None:
                raise InvalidArgumentError("give either --rho or --epsilon [--delta], not both")
            budget = Budget(rho=r)
        elif e is not None:
            budget = Budget(epsilon=e, delta=d)
        else:
            raise InvalidArgumentError(
                "say how much to grant: --epsilon 1 [--delta 1e-6] or --rho 0.5"
            )
        with _open_ledger(ledger) as led:
            total = led.grant(analyst, dataset, budget)
            remaining = led.remaining(analyst, dataset)
        if fmt is OutputFormat.json:
            sys.stdout.write(
                json.dumps(
                    {
                        "analyst": analyst,
                        "dataset": dataset,
                        "granted": budget_json(budget),
                        "total": budget_json(total),
                        "remaining": budget_json(remaining),
                    }
                )
                + "\n"
            )
            return
        Console(highlight=False, soft_wrap=True).print(
            f"granted {budget} to {analyst!r} on {dataset!r}: total {total}, remaining {remaining}",
            markup=False,
        )

    _run(go)


@budget_app.command("history")
def budget_history(
    ledger: RequiredLedgerOpt,
    analyst: AnalystReqOpt,
    dataset: DatasetOpt,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Every grant, charge, cache hit and alert of an analyst on a dataset, oldest first."""

    def go() -> None:
        with _open_ledger(ledger) as led:
            records = led.history(analyst, dataset)
            remaining = led.remaining(analyst, dataset)
        rows = [
            {
                "id": r.id,
                "at": r.at.isoformat(),
                "event": r.event,
                "status": r.status,
                "loss": budget_json(r.loss),
                "fingerprint": r.fingerprint,
                "detail": r.detail,
            }
            for r in records
        ]
        if fmt is OutputFormat.json:
            sys.stdout.write(
                json.dumps(
                    {
                        "analyst": analyst,
                        "dataset": dataset,
                        "history": rows,
                        "remaining": budget_json(remaining),
                    }
                )
                + "\n"
            )
            return
        if fmt is OutputFormat.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(["id", "at", "event", "status", "loss", "fingerprint", "detail"])
            for r in records:
                writer.writerow(
                    [
                        r.id,
                        r.at.isoformat(),
                        r.event,
                        r.status or "",
                        str(r.loss or ""),
                        r.fingerprint or "",
                        r.detail or "",
                    ]
                )
            sys.stdout.write(buf.getvalue())
            return
        table = Table(
            title=f"budget history of {analyst!r} on {dataset!r}",
            caption=f"remaining {remaining}",
            caption_justify="left",
        )
        for name in ("#", "when (UTC)", "event", "status", "loss", "query"):
            table.add_column(name)
        for r in records:
            table.add_row(
                str(r.id),
                r.at.strftime("%Y-%m-%d %H:%M:%S"),
                r.event,
                r.status or "",
                str(r.loss) if r.loss is not None else "",
                (r.fingerprint or "")[:12],
            )
        Console(highlight=False).print(table)

    _run(go)
