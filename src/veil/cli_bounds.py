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
from veil.autobounds import AUTO, ChosenBounds, GroupBounds, percent
from veil.cli_options import OutputFormat, budget_json
from veil.errors import InvalidArgumentError

__all__ = ["bounds_payload", "chosen_json", "print_bounds", "split_auto"]


def split_auto(specs: Sequence[str]) -> tuple[list[str], list[str] | None, dict[str, str]]:
    """``--bounds`` values as (the LOWER:UPPER specs, the auto columns, the auto columns found
    per group → their GROUP BY key): ``COLUMN=auto`` names one, ``COLUMN=auto:KEY`` one per
    group of KEY, a bare ``auto`` every column the query clamps (``[]``); ``None``: no auto."""
    pairs: list[str] = []
    auto: list[str] | None = None
    by: dict[str, str] = {}
    for spec in specs:
        column, sep, value = spec.partition("=")
        if not sep and spec.strip() == AUTO:
            auto = auto or []
            continue
        head, colon, key = value.strip().partition(":")
        if sep and head.strip() == AUTO and (not colon or key.strip()):
            auto = [*(auto or []), column.strip()]
            if colon:
                by[column.strip()] = key.strip()
            continue
        if sep and head.strip() == AUTO:
            raise InvalidArgumentError(
                f"--bounds {spec} names no key: give --bounds {column.strip()}=auto:KEY with KEY "
                f"a GROUP BY key of the query, e.g. --bounds {column.strip()}=auto:region"
            )
        pairs.append(spec)
    if auto == [] and pairs:
        raise InvalidArgumentError(
            "--bounds auto finds the bounds of every column the query clamps, so it cannot be "
            "combined with --bounds COLUMN=LOWER:UPPER; name the auto ones: --bounds income=auto"
        )
    return pairs, auto, by


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
    grouped = any(c.key is not None for c in chosen)
    if fmt is OutputFormat.csv:
        head = "column,group," if grouped else "column,"
        sys.stdout.write(f"{head}lower,upper,clamped_below,clamped_above,clamped_bar,cached\n")
        for c, g in _lines(chosen):
            where = (
                f"{c.column},{'' if g is None else _csv_cell(g.label)},"
                if grouped
                else (f"{c.column},")
            )
            part = g if g is not None else c
            sys.stdout.write(
                f"{where}{float(part.lower)!r},{float(part.upper)!r},{part.clamped_below!r},"
                f"{part.clamped_above!r},{part.clamped_bar!r},{str(c.cached).lower()}\n"
            )
        return
    out = console or Console(highlight=False)
    table = Table(title="clamping bounds found under DP")
    for name, justify in (
        ("column", "left"),
        *((("group", "left"),) if grouped else ()),
        ("lower", "right"),
        ("upper", "right"),
        ("clamped below", "right"),
        ("clamped above", "right"),
        ("clamped in all", "right"),
        ("cost", "right"),
    ):
        table.add_column(name, justify=justify)
    for c, g in _lines(chosen):
        part = g if g is not None else c
        table.add_row(
            c.column,
            *((("" if g is None else str(g.label)),) if grouped else ()),
            _num(part.lower),
            _num(part.upper),
            _share(part.clamped_below),
            _share(part.clamped_above),
            _share(part.clamped, part.clamped_bar),
            ("cached, free" if c.cached else str(c.cost)) if g is None or g is c.groups[0] else "",
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
        use = (
            f"use them as --bounds {c.column}={_num(c.lower)}:{_num(c.upper)}"
            if c.key is None
            else f"one histogram for every group of {c.key!r} (parallel composition); "
            f"ask the query with --bounds {c.column}=auto:{c.key} and the same rows to reuse them"
        )
        out.print(
            f"{c.column}: {c.bins} public log-scale bins{within}; bins with a noisy count "
            f"≥ {c.threshold} set the bounds; {use}",
            style="dim",
            markup=False,
        )


def _lines(chosen: Sequence[ChosenBounds]) -> list[tuple[ChosenBounds, GroupBounds | None]]:
    """One line per column, or per group of a column found per group."""
    return [(c, g) for c in chosen for g in (c.groups or (None,))]


def _csv_cell(value: object) -> str:
    text = "" if value is None else str(value)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(ch in text for ch in ',"\n') else text
