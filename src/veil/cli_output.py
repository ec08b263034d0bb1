"""How the ``veil`` command line prints results: rich tables with ± error bars for people,
one JSON object or CSV for programs. Pure formatting; no DP logic."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from veil.accounting.budget import Budget
from veil.cli_options import OutputFormat, budget_json
from veil.errors import InternalError
from veil.release.explain import Explanation
from veil.release.result import NOT_PRIVATE, Result, Usage

__all__ = [
    "OutputFormat",
    "budget_json",
    "format_cell",
    "print_explanation",
    "print_result",
    "render_table",
    "result_payload",
]


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


def format_cell(value: Any, bar: Any) -> str:
    """A released value and its error bar for people, both rounded at the error bar's second
    significant digit (``3,555 ± 189``, ``49.197 ± 0.041``)."""
    value, bar = _plain(value), _plain(bar)
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if bar is None or not math.isfinite(float(bar)) or float(bar) <= 0:
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:,.6g}" if abs(value) < 1e15 else f"{value:.6g}"
    b = float(bar)
    decimals = max(0, 1 - math.floor(math.log10(b)))
    if isinstance(value, int):
        return f"{value:,} ± {b:,.{decimals if b < 1 else 0}f}"
    return f"{value:,.{decimals}f} ± {b:,.{decimals}f}"


def render_table(
    console: Console,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    error_bars: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    keys: frozenset[str] = frozenset(),
) -> None:
    """Print released rows as a rich table, each noisy value with its 95 % ± half-width;
    group ``keys`` are printed as they are (a year is 2004, not 2,004)."""
    table = Table(title=title)
    for i, name in enumerate(columns):
        numeric = any(isinstance(_plain(row[i]), int | float) for row in rows)
        table.add_column(name, justify="right" if numeric else "left")
    for row, bars in zip(rows, error_bars, strict=True):
        table.add_row(
            *(
                _key_cell(v) if name in keys else format_cell(v, b)
                for name, v, b in zip(columns, row, bars, strict=True)
            )
        )
    console.print(table)


def _key_cell(value: Any) -> str:
    plain = _plain(value)
    return "—" if plain is None else str(plain)


def result_payload(result: Result, *, remaining: Budget | None = None) -> dict[str, Any]:
    """The JSON object of a result: ``columns``, ``rows`` (list of lists in column order),
    ``error_bars`` (same shape, 95 % half-widths, null where not applicable), ``cost`` and
    what each part of the budget paid for; with ``bounds="auto"``, ``auto_bounds``: the bounds
    chosen per column (per group where asked); with ``limits="auto"``, ``auto_limits``."""
    columns = [str(c) for c in result.columns]
    rows = [[_plain(v) for v in row] for row in result.rows]
    bars = [[_plain(b) for b in row] for row in result.error_bars(0.95)]
    for row in bars:
        if len(row) != len(columns):
            raise InternalError(f"error bars have {len(row)} columns, the result {len(columns)}")
    payload: dict[str, Any] = {
        "columns": columns,
        "rows": rows,
        "error_bars": bars,
        "error_bar_level": 0.95,
        "cost": budget_json(result.cost),
        "cached": result.cached,
        "usage": [_usage_json(u) for u in result.usage],
        "notes": list(result.notes),
        "fingerprint": result.fingerprint,
        "private": result.private,
    }
    if result.auto_bounds:
        from veil.cli_bounds import chosen_json

        payload["auto_bounds"] = [chosen_json(c) for c in result.auto_bounds]
    if result.auto_limits is not None:
        payload["auto_limits"] = limits_json(result.auto_limits)
    if remaining is not None:
        payload["remaining"] = budget_json(remaining)
    return payload


def limits_json(chosen: Any) -> dict[str, Any]:
    """The contribution limits ``limits="auto"`` chose (:class:`veil.autolimits.ChosenLimits`)
    as JSON."""
    return {
        "max_rows": chosen.max_rows,
        "max_groups": chosen.max_groups,
        "max_rows_per_group": chosen.max_rows_per_group,
        "dropped": chosen.dropped,
        "dropped_bar": chosen.dropped_bar,
        "rows": chosen.rows,
        "loss": budget_json(chosen.loss),
        "cost": budget_json(chosen.cost),
        "cached": chosen.cached,
        "cap": chosen.cap,
        "mode": chosen.mode,
    }


def _usage_json(u: Usage) -> dict[str, Any]:
    """One part of the budget as JSON (the loss in :func:`budget_json`'s form)."""
    return {
        "measurement": u.measurement,
        "mechanism": u.mechanism,
        "loss": budget_json(u.loss),
        "sensitivity": u.sensitivity,
        "noise": u.noise,
        "used_by": list(u.used_by),
    }


def print_result(
    result: Result,
    fmt: OutputFormat,
    *,
    remaining: Budget | None = None,
    title: str | None = None,
    console: Console | None = None,
) -> None:
    """Print a result: a rich table with ± error bars, or one JSON object, or CSV."""
    payload = result_payload(result, remaining=remaining)
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    if fmt is OutputFormat.csv:
        sys.stdout.write(_csv(payload))
        return
    out = console or Console(highlight=False)
    parts = [f"cost {result.cost}" + (" (cached answer: nothing spent)" if result.cached else "")]
    if remaining is not None:
        parts.append(f"remaining {remaining}")
    parts.append("± 95 % error bars")
    if any(t == "real" for t in result.types) and any(
        all(b[i] is None for b in payload["error_bars"]) and result.types[i] == "real"
        for i in range(len(result.columns))
    ):
        parts.append("quantiles: no value bar; their rank bar is in veil explain")
    keys = frozenset(c for c in result.columns if c not in result.models)
    render_table(
        out, payload["columns"], payload["rows"], payload["error_bars"], title=title, keys=keys
    )
    out.print("; ".join(parts), style="dim", markup=False)
    if not result.private:
        out.print(NOT_PRIVATE, style="bold red", markup=False)
    for note in result.notes:
        out.print(f"note: {note}", style="dim", markup=False)


def explanation_payload(explanation: Explanation) -> dict[str, Any]:
    """An explanation as one JSON object (the CLI's ``--format json`` and the service's)."""
    return {
        "plan": explanation.canonical,
        "sql": explanation.sql,
        "quantile_sql": list(explanation.quantile_sql),
        "cost": budget_json(explanation.cost),
        "contribution": explanation.contribution,
        "usage": [_usage_json(u) for u in explanation.usage],
        "expected_error_bars": dict(explanation.errors),
        "remaining": budget_json(explanation.remaining),
        "covered": explanation.covered,
        "notes": list(explanation.notes),
    }


def print_explanation(explanation: Explanation, fmt: OutputFormat) -> None:
    """Print what a query would do and cost (nothing read, nothing charged)."""
    if fmt is not OutputFormat.table:
        payload = explanation_payload(explanation)
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    console = Console(highlight=False)
    console.print(
        f"[bold]cost[/bold] {explanation.cost}  (a dry run: nothing read, nothing charged)"
    )
    style = "red" if explanation.covered is False else "default"
    console.print(f"[bold]budget[/bold] {explanation.budget_line}", style=style)
    console.print(f"[bold]contribution bounding[/bold] {explanation.contribution}", markup=True)
    usage = Table(title="budget use", title_justify="left")
    for name in ("measurement", "mechanism", "loss", "sensitivity", "noise", "used by"):
        usage.add_column(name)
    for u in explanation.usage:
        usage.add_row(
            u.measurement,
            u.mechanism,
            str(u.loss),
            u.sensitivity,
            u.noise,
            ", ".join(u.used_by) or "—",
        )
    console.print(usage)
    errors = Table(title="expected 95 % error bars", title_justify="left")
    errors.add_column("column")
    errors.add_column("error bar")
    for column, text in explanation.errors.items():
        errors.add_row(column, text)
    console.print(errors)
    console.print("[bold]SQL sent to the engine[/bold]")
    for text in (explanation.sql, *explanation.quantile_sql):
        console.print(Syntax(text, "sql", word_wrap=True))
    for note in explanation.notes:
        console.print(f"note: {note}", style="dim", markup=False)


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
