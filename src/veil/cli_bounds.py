"""How ``veil bounds`` prints the clamping bounds it found (``veil.autobounds``), and how
``--bounds COLUMN=auto`` is read. Pure formatting and parsing; no DP logic."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from rich.console import Console
from rich.table import Table

from veil.accounting.budget import Budget
from veil.autobounds import AUTO, ChosenBounds, percent
from veil.cli_options import OutputFormat, budget_json
from veil.errors import InvalidArgumentError

__all__ = ["bounds_payload", "chosen_json", "print_bounds", "split_auto"]


def split_auto(specs: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """``--bounds`` values as (the LOWER:UPPER specs, the auto columns): ``COLUMN=auto`` names
    one, a bare ``auto`` every column the query clamps (``[]``); ``None``: no auto at all."""
    pairs: list[str] = []
    auto: list[str] | None = None
    for spec in specs:
        column, sep, value = spec.partition("=")
        if not sep and spec.strip() == AUTO:
            auto = auto or []
            continue
        if sep and value.strip() == AUTO:
            auto = [*(auto or []), column.strip()]
            continue
        pairs.append(spec)
    if auto == [] and pairs:
        raise InvalidArgumentError(
            "--bounds auto finds the bounds of every column the query clamps, so it cannot be "
            "combined with --bounds COLUMN=LOWER:UPPER; name the auto ones: --bounds income=auto"
        )
    return pairs, auto


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def _share(value: float, bar: float | None = None) -> str:
    text = percent(value)
    return text if bar is None else f"{text} ± {percent(bar)}"


def chosen_json(c: ChosenBounds) -> dict[str, Any]:
    """One column's chosen bounds as JSON (``veil bounds``, a result's ``auto_bounds``, the
    service): per group, ``key`` and ``groups`` (each group's label, bounds and shares)."""
    entry: dict[str, Any] = {
        "column": c.column,
        "lower": float(c.lower),
        "upper": float(c.upper),
        "clamped_share": c.clamped,
        "clamped_below": c.clamped_below,
        "clamped_above": c.clamped_above,
        "clamped_bar": c.clamped_bar,
        "within": None if c.outer is None else [float(c.outer[0]), float(c.outer[1])],
        "bins": c.bins,
        "threshold": c.threshold,
        "loss": budget_json(c.loss),
        "cost": budget_json(c.cost),
        "cached": c.cached,
        "rows": c.rows,
        "key": c.key,
    }
    if c.key is not None:
        entry["groups"] = [
            {
                "group": g.label,
                "lower": float(g.lower),
                "upper": float(g.upper),
                "clamped_below": g.clamped_below,
                "clamped_above": g.clamped_above,
                "clamped_bar": g.clamped_bar,
                "rows": g.rows,
            }
            for g in c.groups
        ]
    return entry


def bounds_payload(chosen: Sequence[ChosenBounds], remaining: Budget | None) -> dict[str, Any]:
    """The JSON object of ``veil bounds``: one entry per column, the total cost."""
    cost = Budget(epsilon=0)
    for c in chosen:
        cost = cost + c.cost
    payload: dict[str, Any] = {
        "bounds": [chosen_json(c) for c in chosen],
        "cost": budget_json(cost),
    }
    if remaining is not None:
        payload["remaining"] = budget_json(remaining)
    return payload


def print_bounds(
    chosen: Sequence[ChosenBounds],
    fmt: OutputFormat,
    *,
    remaining: Budget | None = None,
    console: Console | None = None,
) -> None:
    """A table of the chosen bounds per column and the clamped share each expects (people),
    or one JSON object (programs; CSV prints the table's rows)."""
    payload = bounds_payload(chosen, remaining)
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    if fmt is OutputFormat.csv:
        sys.stdout.write("column,lower,upper,clamped_below,clamped_above,clamped_bar,cached\n")
        for c in chosen:
            sys.stdout.write(
                f"{c.column},{float(c.lower)!r},{float(c.upper)!r},{c.clamped_below!r},"
                f"{c.clamped_above!r},{c.clamped_bar!r},{str(c.cached).lower()}\n"
            )
        return
    out = console or Console(highlight=False)
    table = Table(title="clamping bounds found under DP")
    for name, justify in (
        ("column", "left"),
        ("lower", "right"),
        ("upper", "right"),
        ("clamped below", "right"),
        ("clamped above", "right"),
        ("clamped in all", "right"),
        ("cost", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in chosen:
        table.add_row(
            c.column,
            _num(c.lower),
            _num(c.upper),
            _share(c.clamped_below),
            _share(c.clamped_above),
            _share(c.clamped, c.clamped_bar),
            "cached, free" if c.cached else str(c.cost),
        )
    out.print(table)
    total = Budget(epsilon=0)
    for c in chosen:
        total = total + c.cost
    parts = [f"cost {total}"]
    if remaining is not None:
        parts.append(f"remaining {remaining}")
    parts.append("clamped shares are noisy estimates with ≈95 % bars")
    out.print("; ".join(parts), style="dim", markup=False)
    for c in chosen:
        within = f" within [{_num(c.outer[0])}, {_num(c.outer[1])}]" if c.outer is not None else ""
        out.print(
            f"{c.column}: {c.bins} public log-scale bins{within}; bins with a noisy count "
            f"≥ {c.threshold} set the bounds; use them as --bounds "
            f"{c.column}={_num(c.lower)}:{_num(c.upper)}",
            style="dim",
            markup=False,
        )
