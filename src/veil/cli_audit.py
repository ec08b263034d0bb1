"""The ``veil audit`` command group: sampling-based checks of privacy claims (see
:mod:`veil.audit`). Thin: options are parsed here, the audits live in ``veil.audit`` (loaded
only when a command runs, so ``veil --help`` stays fast).

``veil audit mechanism NAME``: :func:`veil.audit.mechanisms.builtin` (veil's own mechanisms);
``veil audit command -- CMD ARG… {input}``: :func:`veil.audit.mechanisms.command` (a program);
``veil audit query``: :func:`veil.audit.query.query` on the command line — run the audit with a
progress bar on stderr, print the report, exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from veil.cli_errors import run as _run
from veil.cli_errors import stderr as _stderr
from veil.cli_options import (
    OutputFormat,
    merge_schemas,
    parse_bounds,
    parse_columns,
    parse_delta,
    parse_epsilon,
    parse_schema_files,
    parse_tables,
)
from veil.errors import InvalidArgumentError

__all__ = ["audit_app", "audit_command", "audit_mechanism", "audit_query", "audit_selftest"]

audit_app = typer.Typer(
    help="Test a query against its claimed privacy by sampling (NOT private: for data owners).",
    no_args_is_help=True,
)

_Tables = Annotated[
    list[str],
    typer.Option("--table", "-t", help="A table as NAME=PATH (CSV or Parquet); repeatable."),
]
_Epsilon = Annotated[str, typer.Option("--epsilon", "-e", help="The claimed ε of the query.")]
_Delta = Annotated[str | None, typer.Option("--delta", "-d", help="The claimed δ (e.g. 1e-6).")]
_Unit = Annotated[
    str | None,
    typer.Option("--privacy-unit", "-u", help="The column naming the person; omit for rows."),
]
_Bounds = Annotated[
    list[str] | None,
    typer.Option("--bounds", "-b", help="Clamping bounds COLUMN=LOWER:UPPER; repeatable."),
]
_MaxGroups = Annotated[
    int | None, typer.Option("--max-groups", help="Groups one unit may contribute to (L0).")
]
_MaxRows = Annotated[
    int | None,
    typer.Option("--max-rows-per-group", help="Rows one unit may contribute per group (L∞)."),
]
_Schema = Annotated[
    list[str] | None,
    typer.Option("--schema", help="Declared column types [TABLE=]FILE.json; repeatable."),
]
_Column = Annotated[
    list[str] | None,
    typer.Option("--column", help="A declared column type [TABLE.]COLUMN:TYPE; repeatable."),
]
_Buckets = Annotated[
    int, typer.Option("--quantile-buckets", help="Candidates of a continuous quantile.")
]
_Releases = Annotated[
    int, typer.Option("--releases", "-n", help="Releases drawn on D and on each neighbour.")
]
_Neighbours = Annotated[
    str, typer.Option("--neighbours", help="How neighbouring datasets are built: auto.")
]
_Confidence = Annotated[
    float,
    typer.Option("--confidence", help="The audit's confidence (false-alarm rate: 1 − it)."),
]
_Plot = Annotated[
    str | None,
    typer.Option("--plot", help="Also draw both output distributions to FILE.png (veil[plot])."),
]
_Format = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table (people) or json (programs).")
]


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar of the releases on stderr, only when stderr is a terminal."""
    console = _stderr()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    display = Progress(
        "auditing: releases", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    )  # fmt: skip
    task = display.add_task("releases", total=None)

    def report(done: int, total: int) -> None:
        display.update(task, total=total, completed=done)

    with display:
        yield report


@audit_app.command(
    "query",
    help="Audit a query on your own data against its claimed ε (and δ), by sampling releases "
    "on neighbouring datasets. NOT differentially private: it reads every row and its report "
    "reveals the true values; for the data owner only. Exit code 0 PASS, 1 FAIL, "
    "2 INCONCLUSIVE.",
)
def audit_query(
    sql: Annotated[str, typer.Argument(help="The SQL query to audit; - reads stdin.")],
    table: _Tables,
    epsilon: _Epsilon,
    delta: _Delta = None,
    privacy_unit: _Unit = None,
    bounds: _Bounds = None,
    max_groups: _MaxGroups = None,
    max_rows_per_group: _MaxRows = None,
    schema: _Schema = None,
    column: _Column = None,
    quantile_buckets: _Buckets = 1024,
    releases: _Releases = 2000,
    neighbours: _Neighbours = "auto",
    confidence: _Confidence = 0.95,
    fmt: _Format = OutputFormat.table,
    plot: _Plot = None,
) -> None:
    """Audit a query on your own data against its claimed ε (and δ), by sampling releases on
    neighbouring datasets. NOT differentially private: it reads every row and its report
    reveals the true values — for the data owner only. Exit code 0 PASS, 1 FAIL, 2
    INCONCLUSIVE."""
    from veil.audit.query import query

    def go() -> int:
        if fmt is OutputFormat.csv:
            raise InvalidArgumentError("--format must be table or json for an audit, not csv")
        if neighbours != "auto":
            raise InvalidArgumentError(f"--neighbours must be auto, got {neighbours!r}")
        picture = _plot_path(plot)
        tables = parse_tables(table)
        if not tables:
            raise InvalidArgumentError("give at least one table: --table people=people.csv")
        names = list(tables)
        declared = merge_schemas(
            parse_schema_files(schema or [], names), parse_columns(column or [], names)
        )
        text = sys.stdin.read() if sql.strip() == "-" else sql
        with _progress() as progress:
            audit = query(
                text,
                tables,
                epsilon=parse_epsilon(epsilon),
                delta=parse_delta(delta),
                privacy_unit=privacy_unit,
                bounds=parse_bounds(bounds or []),
                max_groups=max_groups,
                max_rows_per_group=max_rows_per_group,
                schema=declared or None,
                quantile_buckets=quantile_buckets,
                releases_per_side=releases,
                confidence=confidence,
                progress=progress,
            )
        return _report(audit, fmt, picture)

    code = _run(go, fmt)
    raise typer.Exit(code)


_Samples = Annotated[int, typer.Option("--samples", "-n", help="Outputs drawn per input.")]
_Sensitivity = Annotated[float, typer.Option("--sensitivity", help="The claimed sensitivity Δ.")]


def _plot_path(plot: str | None) -> Path | None:
    """The --plot file, checked (a .png in an existing folder, matplotlib installed) before
    the audit runs."""
    if plot is None:
        return None
    from veil.plots import check_path

    return check_path(plot)


def _report(audit: Any, fmt: OutputFormat, picture: Path | None = None) -> int:
    if picture is not None:
        from veil.audit.plot import plot_audit

        plot_audit(audit, picture)
    if fmt is OutputFormat.json:
        out = audit.to_json()
        if picture is not None:
            out["plot"] = str(picture)
        sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
    else:
        lines = audit.lines()
        if picture is not None:
            lines.append(f"plot: {picture}")
        sys.stdout.write("\n".join(lines) + "\n")
    return int(audit.exit_code)


def _format(fmt: OutputFormat) -> None:
    if fmt is OutputFormat.csv:
        raise InvalidArgumentError("--format must be table or json for an audit, not csv")


@audit_app.command(
    "mechanism",
    help="Audit one of veil's mechanisms (laplace, discrete_laplace, gaussian, "
    "discrete_gaussian, exponential, randomized_response) at its claimed ε (and δ) by sampling "
    "its outputs on neighbouring inputs. Exit code 0 PASS, 1 FAIL, 2 INCONCLUSIVE.",
)
def audit_mechanism(
    name: Annotated[str, typer.Argument(help="The mechanism, e.g. laplace.")],
    epsilon: _Epsilon,
    delta: _Delta = None,
    sensitivity: _Sensitivity = 1.0,
    samples: _Samples = 1_000_000,
    confidence: _Confidence = 0.95,
    fmt: _Format = OutputFormat.table,
    plot: _Plot = None,
) -> None:
    """Audit one of veil's mechanisms at its claimed parameters."""
    from veil.audit.mechanisms import builtin

    def go() -> int:
        _format(fmt)
        picture = _plot_path(plot)
        dlt = parse_delta(delta)
        with _progress() as progress:
            audit = builtin(
                name, epsilon=float(parse_epsilon(epsilon)),
                delta=float(dlt) if dlt is not None else 0.0, sensitivity=sensitivity,
                samples=samples, confidence=confidence, progress=progress,
            )  # fmt: skip
        return _report(audit, fmt, picture)

    raise typer.Exit(_run(go, fmt))


@audit_app.command(
    "command",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Audit a program against its claimed ε (and δ): veil audit command --epsilon 1 -- "
    "php noise.php {input} {count}. {input} is replaced by each neighbouring input (--inputs, "
    "default 0,1); with {count} the program prints that many numbers, one per line, in one "
    "run, else it is run once per output. --claim-scores 85,72,67 tests an exponential "
    "mechanism's outputs (0-based indexes) against its pmf too. Exit code 0 PASS, 1 FAIL, "
    "2 INCONCLUSIVE.",
)
def audit_command(
    ctx: typer.Context,
    epsilon: _Epsilon,
    delta: _Delta = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option("--inputs", help="A neighbouring pair A,B; repeatable (default 0,1)."),
    ] = None,
    claim_scores: Annotated[
        str | None,
        typer.Option("--claim-scores", help="Claim the exponential mechanism over these scores."),
    ] = None,
    sensitivity: _Sensitivity = 1.0,
    samples: _Samples = 10_000,
    confidence: _Confidence = 0.95,
    fmt: _Format = OutputFormat.table,
    plot: _Plot = None,
) -> None:
    """Audit a program (black box) against its claimed privacy."""
    from veil.audit.mechanisms import command

    def go() -> int:
        _format(fmt)
        picture = _plot_path(plot)
        argv = list(ctx.args)
        if not argv:
            raise InvalidArgumentError(
                "give the program after --: veil audit command --epsilon 1 -- "
                "php noise.php {input} {count}"
            )
        pairs = []
        for text in inputs or ["0,1"]:
            parts = text.split(",")
            if len(parts) != 2:
                raise InvalidArgumentError(f"--inputs takes A,B (two inputs), got {text!r}")
            pairs.append((parts[0], parts[1]))
        scores = None
        if claim_scores is not None:
            try:
                scores = [float(v) for v in claim_scores.split(",")]
            except ValueError:
                raise InvalidArgumentError(
                    f"--claim-scores takes numbers separated by commas, got {claim_scores!r}"
                ) from None
        dlt = parse_delta(delta)
        with _progress() as progress:
            audit = command(
                argv, neighbours=pairs, epsilon=float(parse_epsilon(epsilon)),
                delta=float(dlt) if dlt is not None else 0.0, samples=samples,
                confidence=confidence, claim_scores=scores, sensitivity=sensitivity,
                progress=progress,
            )  # fmt: skip
        return _report(audit, fmt, picture)

    raise typer.Exit(_run(go, fmt))


@audit_app.command(
    "selftest",
    help="Check this installation: veil's mechanisms must PASS their audits and known-broken "
    "controls (numpy's float Laplace, a Laplace at 70 % scale, a Gaussian with 10×δ, an int64 "
    "sum that wraps on overflow, the PHP seed's code when php is installed) must FAIL. Exit "
    "code 0 when every verdict is as expected, 1 otherwise.",
)
def audit_selftest(samples: _Samples = 200_000) -> None:
    """Run the selftest and print its table."""
    from veil.audit.selftest import lines, run

    def go() -> int:
        if samples < 1000:
            raise InvalidArgumentError(f"--samples must be at least 1000, got {samples}")
        with _progress() as progress:
            checks = run(samples, progress=progress)
        sys.stdout.write("\n".join(lines(checks)) + "\n")
        return 0 if all(c.ok for c in checks) else 1

    raise typer.Exit(_run(go, OutputFormat.table))
