"""Accuracy first from the shell: ``--target``, ``--curve`` and ``--plot`` on ``veil explain``
and ``veil query``.

Thin, like the rest of the CLI: the search is :func:`veil.accuracy.choose_epsilon` and the
curves :func:`veil.accuracy.accuracy_curve`, both of which read no data and charge nothing.
Everything here is decided from the command line and public parameters; every refusal happens
before a query reserves budget.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from veil.cli_options import OutputFormat, budget_json
from veil.errors import InvalidArgumentError, VeilWarning

if TYPE_CHECKING:  # veil.accuracy loads numpy: only when a command runs (veil --help is fast)
    from veil.accounting.budget import Budget
    from veil.accuracy import Choice, Curve, Target
    from veil.autobounds_target import TargetedBounds
    from veil.autolimits_target import TargetedLimits
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = [
    "Aim",
    "bounds_target_json",
    "choice_json",
    "curve_json",
    "curve_table",
    "limits_target_json",
    "parse_aim",
    "parse_level",
    "parse_references",
]

TargetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--target",
        help="An accuracy target COLUMN=±HALFWIDTH, COLUMN=±PCT% or …@LEVEL% (e.g. n=±50, "
        "avg_income=±2%); repeatable. veil spends the smallest ε meeting every target "
        "(instead of --epsilon).",
    ),
]
LevelOpt = Annotated[
    str | None,
    typer.Option("--level", help="The level of targets that state none (0.95 or 95%)."),
]
MinGroupOpt = Annotated[
    int | None,
    typer.Option(
        "--min-group-size",
        help="The smallest group size you assume (public) for the bar of an AVG column.",
    ),
]
ReferenceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--reference",
        help="The public value COLUMN=V a relative target (±2%) is taken of; repeatable.",
    ),
]
CurveOpt = Annotated[
    bool,
    typer.Option("--curve", help="Also show the expected error bars at ε/8 … 8ε (a table)."),
]
PlotOpt = Annotated[
    str | None,
    typer.Option("--plot", help="Also draw the error bars versus ε to FILE.png (veil\\[plot])."),
]

CURVE_FACTORS = tuple(Fraction(2) ** k for k in range(-3, 4))
"""The ε of a curve, as multiples of the chosen (or given) ε: ε/8 … 8ε."""


@dataclass(frozen=True)
class Aim:
    """The accuracy options of one command, parsed: the targets (empty: ε is given), the
    level and AVG assumption of bars without a target, and what to draw."""

    targets: tuple[Target, ...] = ()
    level: float = 0.95
    min_group_size: int | None = None
    curve: bool = False
    plot: Path | None = None

    @property
    def active(self) -> bool:
        return bool(self.targets) or self.curve or self.plot is not None


def parse_level(text: str | None, flag: str = "--level") -> float:
    """``0.95``, ``95%`` or ``95`` → 0.95 (default 0.95), strictly between 0 and 1."""
    if text is None:
        return 0.95
    raw = text.strip()
    try:
        value = float(raw.removesuffix("%").strip())
    except ValueError:
        value = math.nan
    if raw.endswith("%") or value > 1:
        value /= 100
    if not (0 < value < 1):
        raise InvalidArgumentError(
            f"{flag} {text!r} is not a level; give one strictly between 0 and 1 or a "
            f"percentage, e.g. {flag} 0.95 or {flag} 95%"
        )
    return value


def parse_references(specs: Sequence[str], flag: str = "--reference") -> dict[str, float]:
    """``["avg_income=35000"]`` → ``{"avg_income": 35000.0}``: public values, finite, non-zero."""
    out: dict[str, float] = {}
    for spec in specs:
        column, sep, value = spec.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not column.strip() or not (math.isfinite(number) and number != 0):
            raise InvalidArgumentError(
                f"{flag} expects COLUMN=VALUE, a public non-zero number the relative target "
                f"is taken of, got {spec!r}; e.g. {flag} avg_income=35000"
            )
        if column.strip() in out:
            raise InvalidArgumentError(f"{flag} {column.strip()!r} is given twice; give it once")
        out[column.strip()] = number
    return out


def parse_targets_cli(
    texts: Sequence[str],
    *,
    level: float,
    min_group_size: int | None,
    references: dict[str, float],
    flag: str = "--target",
) -> tuple[Target, ...]:
    """The targets of the command line, each refused in the CLI's syntax with its value."""
    from veil.accuracy.targets import parse_target

    if min_group_size is not None and min_group_size < 1:
        raise InvalidArgumentError(
            f"--min-group-size {min_group_size} must be a positive integer (the public "
            "smallest group size you assume), e.g. --min-group-size 100"
        )
    out: list[Target] = []
    for text in texts:
        column = text.split("=", 1)[0].strip()
        try:
            t = parse_target(
                text,
                reference=references.get(column),
                min_group_size=min_group_size,
                level=level,
            )
        except InvalidArgumentError as err:
            raise InvalidArgumentError(f"{flag} {text!r}: {err}") from None
        if any(o.column == t.column for o in out):
            raise InvalidArgumentError(
                f"{flag} gives two targets for {t.column!r}; give one target per column"
            )
        out.append(t)
    relative = {t.column for t in out if t.relative is not None}
    for column in references:
        if column not in relative:
            raise InvalidArgumentError(
                f"--reference {column}=… names no relative target; a reference is the public "
                f"value a target like --target '{column}=±2%' is taken of"
            )
    return tuple(out)


def parse_aim(
    target: Sequence[str] | None,
    level: str | None,
    min_group_size: int | None,
    reference: Sequence[str] | None,
    curve: bool,
    plot: str | None,
    *,
    epsilon: str | None,
    command: str = "explain",
) -> Aim:
    """The accuracy options, checked before anything else (a bad ``--plot`` path included):
    ``--target`` and ``--epsilon`` exclude each other, and one of them is needed."""
    if target and epsilon is not None:
        raise InvalidArgumentError(
            f"give --target or --epsilon {epsilon}, not both: the targets choose ε"
        )
    if not target and epsilon is None:  # worded like click's usage errors
        raise InvalidArgumentError(
            f"Missing option '--epsilon' (or accuracy targets: --target 'n=±50' spends the "
            f"smallest ε meeting them); e.g. --epsilon 0.5 (see `veil {command} --help`)"
        )
    if not target and reference:
        raise InvalidArgumentError(
            "--reference qualifies a relative target; add one, e.g. --target 'avg_income=±2%'"
        )
    drawn = curve or plot is not None
    if not target and not drawn and (level is not None or min_group_size is not None):
        flag = "--level" if level is not None else "--min-group-size"
        raise InvalidArgumentError(
            f"{flag} qualifies accuracy targets or curves; add --target 'n=±50' or --curve"
        )
    path = None
    if plot is not None:
        from veil.plots import check_path

        path = check_path(plot)
    lvl = parse_level(level)
    targets = parse_targets_cli(
        target or (),
        level=lvl,
        min_group_size=min_group_size,
        references=parse_references(reference or ()),
    )
    return Aim(targets, lvl, min_group_size, curve, path)


# ------------------------------------------------------------------------------- the search


def choose(session: Session, sql: str, aim: Aim, delta: Fraction | None, bounds: Any) -> Choice:
    """The smallest ε meeting ``aim``'s targets (free; refused free when the grant cannot pay
    it, naming the ε needed). The search's probes above ε = 10 warn nothing: only the
    explanation or the query at the chosen ε does."""
    from veil.accuracy import choose_epsilon

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VeilWarning)
        return choose_epsilon(session, sql, aim.targets, delta=delta, bounds=bounds)


def curve_for(
    session: Session, sql: str, aim: Aim, centre: Fraction, delta: Fraction | None, bounds: Any
) -> tuple[Curve, list[str]]:
    """The bars at ``centre``·(1/8 … 8) of the targeted columns, or (no target) of every column
    whose bar is public (AVG with ``--min-group-size``); the notes say what was left out."""
    from veil.accounting.limits import MAX_EPSILON, MIN_EPSILON
    from veil.accuracy import Target, accuracy_curve
    from veil.plan.tree import aggregate_of

    notes: list[str] = []
    columns: list[Target] = list(aim.targets)
    if not columns:
        for a in aggregate_of(session.plan(sql, bounds=bounds)).aggregates:
            if a.function in ("count", "count_distinct", "sum", "wcount", "wsum"):
                columns.append(Target(a.alias, halfwidth=1.0, level=aim.level))
            elif a.function in ("avg", "wavg") and aim.min_group_size is not None:
                columns.append(
                    Target(
                        a.alias, halfwidth=1.0, level=aim.level, min_group_size=aim.min_group_size
                    )
                )
            elif a.function in ("avg", "wavg"):
                size = "size" if a.function == "avg" else "total weight"
                notes.append(
                    f"AVG column {a.alias!r} is not in the curve: its bar depends on the "
                    f"group's {size}; add --min-group-size 100 (say)"
                )
            else:
                notes.append(
                    f"{a.function.upper()} column {a.alias!r} is not in the curve: its bar is "
                    "a rank statement (see the explanation)"
                )
    if not columns:
        raise InvalidArgumentError(
            "no column of this query has a public error bar to draw (COUNT, SUM, or AVG with "
            "--min-group-size); drop --curve and --plot"
        )
    grid = sorted({min(MAX_EPSILON, max(MIN_EPSILON, centre * f)) for f in CURVE_FACTORS})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VeilWarning)
        curve = accuracy_curve(session, sql, columns, grid, delta=delta, bounds=bounds)
    return curve, notes


def grant_chosen(session: Session, choice: Choice, delta: Fraction | None) -> None:
    """Without ``--ledger``: the one-shot budget of this run is the chosen cost."""
    from veil.accounting.budget import Budget

    session.ledger.grant(
        session.analyst, session.dataset, Budget(epsilon=choice.epsilon, delta=delta)
    )


# ------------------------------------------------------------------------------- output


def _bar(value: float) -> str:
    return "± ∞" if not math.isfinite(value) else f"± {value:.4g}"


def _target_text(t: Target) -> str:
    if t.relative is not None:
        return f"± {100 * t.relative:g}% of {t.reference:g} (± {t.limit or 0:.4g})"
    return f"± {t.halfwidth:g}"


def choice_json(choice: Choice) -> dict[str, Any]:
    """The chosen ε and each target against its bar there, as JSON."""
    return {
        "epsilon": float(choice.epsilon),
        "epsilon_exact": str(choice.epsilon),
        "cost": budget_json(choice.explanation.cost),
        "targets": [target_json(t, choice.bars[t.column]) for t in choice.targets],
        "assumptions": list(choice.assumptions),
    }


def target_json(t: Target, bar: float, asked: Target | None = None) -> dict[str, Any]:
    """One target (as ``asked``, when the search met a scaled one) and its expected bar."""
    a = asked or t
    limit = a.limit or 0.0
    return {
        "column": a.column,
        "halfwidth": a.halfwidth,
        "relative": a.relative,
        "reference": a.reference,
        "limit": limit,
        "level": a.level,
        "min_group_size": a.min_group_size,
        "expected_bar": bar if math.isfinite(bar) else None,
        "met": bar <= limit,
    }


def curve_json(curve: Curve, targets: Sequence[Target] = ()) -> dict[str, Any]:
    """A curve as JSON: ``epsilons`` and, per column, its level and bars (null: unbounded)."""
    levels = {t.column: t.level for t in targets}
    return {
        "epsilons": [float(e) for e in curve.epsilons],
        "columns": {
            c: {
                "level": levels.get(c, 0.95),
                "bars": [b[c] if math.isfinite(b[c]) else None for b in curve.bars],
            }
            for c in curve.columns
        },
    }


def curve_table(
    curve: Curve, targets: Sequence[Target], chosen: Fraction | None, title: str
) -> Table:
    """The curve as a rich table: one row per ε, a bar per column (its limit in the header)."""
    table = Table(title=title, title_justify="left")
    table.add_column("ε", justify="right")
    limits = {t.column: t for t in targets}
    for c in curve.columns:
        t = limits.get(c)
        head = c if t is None else f"{c} (target ± {t.limit or 0:.4g} at {100 * t.level:g} %)"
        table.add_column(head, justify="right")
    for e, bars in zip(curve.epsilons, curve.bars, strict=True):
        mark = "  ◀" if chosen is not None and e == chosen else ""
        table.add_row(f"{float(e):.4g}{mark}", *(_bar(bars[c]) for c in curve.columns))
    return table


def chosen_line(choice: Choice) -> str:
    return (
        f"smallest ε meeting every target: {float(choice.epsilon):.6g} (found from public "
        "parameters: nothing read, nothing spent to find it)"
    )


def choice_table(choice: Choice) -> Table:
    """Each target against its expected bar at the chosen ε."""
    table = Table(title="accuracy targets", title_justify="left")
    for name in ("column", "target", "level", "expected bar", "met"):
        table.add_column(name, justify="left" if name == "column" else "right")
    for t in choice.targets:
        bar = choice.bars[t.column]
        table.add_row(
            t.column,
            _target_text(t),
            f"{100 * t.level:g} %",
            _bar(bar),
            "yes" if bar <= (t.limit or 0) else "no",
        )
    return table


def plot_single(path: Path, sql: str, curve: Curve, aim: Aim, chosen: Fraction | None) -> Path:
    from veil.accuracy.plot import Panel, plot_curves

    limits = {t.column: t.limit or 0.0 for t in aim.targets}
    return plot_curves([Panel(_short(sql), curve, limits, chosen)], path)


def _short(text: str, width: int = 70) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def print_explained(
    explanation: Explanation,
    fmt: OutputFormat,
    choice: Choice | None,
    curve: Curve | None,
    curve_notes: Sequence[str],
    aim: Aim,
    picture: Path | None,
    centre: Fraction | None = None,
) -> None:
    """An explanation with its accuracy parts: the targets' table, the curve (its row at
    ``centre`` marked), the picture."""
    from veil.cli_output import explanation_payload, print_explanation

    if fmt is not OutputFormat.table:
        payload = explanation_payload(explanation)
        if choice is not None:
            payload["target"] = choice_json(choice)
        if curve is not None:
            payload["curve"] = curve_json(curve, aim.targets or curve_targets(curve, aim))
            payload["curve_notes"] = list(curve_notes)
        if picture is not None:
            payload["plot"] = str(picture)
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    console = Console(highlight=False)
    if choice is not None:
        console.print(chosen_line(choice), markup=False)
        console.print(choice_table(choice))
        for a in choice.assumptions:
            console.print(f"assumption: {a}", style="dim", markup=False)
    print_explanation(explanation, fmt)
    if curve is not None and aim.curve:
        level = f"{100 * aim.level:g} %" if not aim.targets else "each target's level"
        console.print(
            curve_table(
                curve,
                aim.targets,
                centre,
                f"expected error bars versus ε (at {level}; nothing read, nothing charged)",
            )
        )
    for note in curve_notes:
        console.print(f"note: {note}", style="dim", markup=False)
    if picture is not None:
        console.print(f"plot: {picture}", markup=False)


def curve_targets(curve: Curve, aim: Aim) -> tuple[Target, ...]:
    from veil.accuracy import Target

    return tuple(Target(c, halfwidth=1.0, level=aim.level) for c in curve.columns)


def print_targeted_result(
    result: Result, choice: Choice, fmt: OutputFormat, remaining: Budget | None
) -> None:
    """A result run at the chosen ε, with the targets it was chosen for."""
    from veil.cli_errors import stderr
    from veil.cli_output import print_result, result_payload

    if fmt is OutputFormat.json:
        payload = result_payload(result, remaining=remaining)
        payload["target"] = choice_json(choice)
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    if fmt is OutputFormat.csv:  # the data alone on stdout, the choice on stderr
        stderr().print(chosen_line(choice), markup=False)
        print_result(result, fmt, remaining=remaining)
        return
    console = Console(highlight=False)
    console.print(chosen_line(choice), markup=False)
    console.print(choice_table(choice))
    print_result(result, fmt, remaining=remaining)


# ------------------------------------------------------------------------ with --limits auto


def refuse_limits_curve(aim: Aim) -> None:
    """``--curve`` / ``--plot`` with ``--target`` and ``--limits auto``: refused, free (the
    bars versus ε depend on the limits the data will choose)."""
    if aim.curve or aim.plot is not None:
        flag = "--curve" if aim.curve else "--plot"
        raise InvalidArgumentError(
            f"{flag} with --target and --limits auto is not drawn: the bars versus ε depend on "
            "the limits the data will choose; drop it, or give --max-rows (say) instead of "
            "--limits auto"
        )


def targeted_json(t: TargetedLimits) -> dict[str, Any]:
    """What accuracy targets with auto limits decided (:class:`TargetedLimits`), as JSON:
    the limits step's ε, the range of the query's ε over the candidates, the grant's cover."""

    def at(limits: tuple[int, int, int]) -> dict[str, int]:
        return {"max_rows": limits[0], "max_groups": limits[1], "max_rows_per_group": limits[2]}

    top = t.epsilon_max
    return {
        "mode": t.mode,
        "limits_epsilon": float(t.limits_epsilon),
        "limits_epsilon_exact": str(t.limits_epsilon),
        "epsilon_min": float(t.epsilon_min),
        "epsilon_min_exact": str(t.epsilon_min),
        "epsilon_max": None if top is None else float(top),
        "epsilon_max_exact": None if top is None else str(top),
        "cheapest": at(t.cheapest),
        "dearest": at(t.dearest),
        "covers_cheapest": t.covers_cheapest,
        "covers_dearest": t.covers_dearest,
    }


def limits_target_json(t: TargetedLimits) -> dict[str, Any]:
    """The ``target`` object of an answer or explanation with auto limits: the choice's
    (:func:`choice_json`: at the limits chosen, or in an explanation at the dearest
    candidate) and ``limits``, :func:`targeted_json`."""
    if t.choice is None:
        raise InvalidArgumentError("accuracy targets with auto limits carry no choice: a bug")
    return choice_json(t.choice) | {"limits": targeted_json(t)}


# ------------------------------------------------------------------------ with --bounds auto


def refuse_bounds_curve(aim: Aim) -> None:
    """``--curve`` / ``--plot`` with ``--target`` and ``--bounds auto``: refused, free (the
    bars versus ε depend on the bounds the data will choose)."""
    if aim.curve or aim.plot is not None:
        flag = "--curve" if aim.curve else "--plot"
        raise InvalidArgumentError(
            f"{flag} with --target and --bounds auto is not drawn: the bars versus ε depend on "
            "the bounds the data will choose; drop it, or give --bounds COLUMN=LOWER:UPPER "
            "instead of auto"
        )


def bounds_targeted_json(t: TargetedBounds) -> dict[str, Any]:
    """What accuracy targets with auto bounds decided (:class:`TargetedBounds`), as JSON: the
    bounds step's ε, the range of the query's ε from one bin to the declared range, the
    grant's cover and (in an answer) the bounds chosen."""

    def ranges(rs: Sequence[tuple[str, Fraction, Fraction]] | None) -> Any:
        if rs is None:
            return None
        return {c: {"lower": float(lo), "upper": float(hi)} for c, lo, hi in rs}

    return {
        "bounds_epsilon": float(t.bounds_epsilon),
        "bounds_epsilon_exact": str(t.bounds_epsilon),
        "epsilon_min": float(t.epsilon_min),
        "epsilon_min_exact": str(t.epsilon_min),
        "epsilon_max": float(t.epsilon_max),
        "epsilon_max_exact": str(t.epsilon_max),
        "narrowest": ranges(t.narrowest),
        "widest": ranges(t.widest),
        "chosen": ranges(t.chosen),
        "covers_cheapest": t.covers_cheapest,
        "covers_dearest": t.covers_dearest,
    }


def bounds_target_json(t: TargetedBounds) -> dict[str, Any]:
    """The ``target`` object of an answer or explanation with auto bounds: the choice's
    (:func:`choice_json`: at the bounds chosen, or in an explanation at the declared range)
    and ``bounds``, :func:`bounds_targeted_json`."""
    if t.choice is None:
        raise InvalidArgumentError("accuracy targets with auto bounds carry no choice: a bug")
    return choice_json(t.choice) | {"bounds": bounds_targeted_json(t)}


def _target_json(t: TargetedLimits | TargetedBounds) -> dict[str, Any]:
    from veil.autolimits_target import TargetedLimits

    return limits_target_json(t) if isinstance(t, TargetedLimits) else bounds_target_json(t)


def print_auto_targeted_explained(explanation: Explanation, fmt: OutputFormat) -> None:
    """An explanation of ``--target`` with ``--limits auto`` or ``--bounds auto``: the range
    first, then the targets at the dearest case (the largest candidate limits, the declared
    range) and the usual explanation (its notes say the rest)."""
    from veil.cli_output import explanation_payload, print_explanation

    t: TargetedLimits | TargetedBounds = explanation.targeted
    if fmt is not OutputFormat.table:
        payload = explanation_payload(explanation) | {"target": _target_json(t)}
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    console = Console(highlight=False)
    console.print(t.range_line(), markup=False)
    if t.choice is not None:
        console.print(choice_table(t.choice))
    print_explanation(explanation, fmt)


def print_auto_targeted_result(
    result: Result,
    t: TargetedLimits | TargetedBounds,
    fmt: OutputFormat,
    remaining: Budget | None,
) -> None:
    """A result of ``--target`` with ``--limits auto`` or ``--bounds auto`` (``t``, what the
    targets decided): ε at the limits or bounds chosen, each target against its bar there,
    then the answer."""
    from veil.cli_errors import stderr
    from veil.cli_output import print_result, result_payload

    if fmt is OutputFormat.json:
        payload = result_payload(result, remaining=remaining) | {"target": _target_json(t)}
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    first = t.lines()[0]
    if fmt is OutputFormat.csv:  # the data alone on stdout, the choice on stderr
        stderr().print(first, markup=False)
        print_result(result, fmt, remaining=remaining)
        return
    console = Console(highlight=False)
    console.print(first, markup=False)
    if t.choice is not None:
        console.print(choice_table(t.choice))
    print_result(result, fmt, remaining=remaining)
