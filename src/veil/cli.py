"""The ``veil`` command line: thin over :class:`veil.Session` and :class:`veil.Ledger`.

No differential-privacy logic lives here: the commands parse options, call the session or the
ledger and print what comes back — rich tables with ± error bars for people, one JSON object
(or CSV) for programs. User errors print one line on stderr and exit with code 2; anything
else is reported as a bug (exit code 1), without a traceback.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from veil.cli_audit import audit_app
from veil.cli_errors import USER_ERROR_EXIT, _report
from veil.cli_errors import run as _run
from veil.cli_errors import stderr as _stderr
from veil.cli_ledger import ledger_app
from veil.cli_options import (
    OutputFormat,
    budget_json,
    merge_schemas,
    parse_bounds,
    parse_columns,
    parse_delta,
    parse_epsilon,
    parse_number,
    parse_schema_files,
    parse_tables,
)
from veil.cli_target import (
    CurveOpt,
    LevelOpt,
    MinGroupOpt,
    PlotOpt,
    ReferenceOpt,
    TargetOpt,
    parse_aim,
)
from veil.errors import (
    BudgetExhaustedError,
    InvalidArgumentError,
)
from veil.service.commands import admin_app, serve

if TYPE_CHECKING:  # the engines, the ledger and the release load only when a command runs
    from veil.accounting.budget import Budget
    from veil.accounting.ledger import Alert, Ledger
    from veil.accuracy import Choice, Curve
    from veil.cli_target import Aim
    from veil.engines.base import Progress
    from veil.release.explain import Explanation
    from veil.session import Session

__all__ = ["app", "main"]

T = TypeVar("T")


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
app.add_typer(admin_app, name="admin")
app.add_typer(audit_app, name="audit")
app.add_typer(ledger_app, name="ledger")
app.command("serve")(serve)


def _show_version(shown: bool) -> None:
    if shown:
        from veil import __version__

        sys.stdout.write(f"veil {__version__}\n")
        raise typer.Exit()


@app.callback()
def _setup(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print veil's version and exit.",
            callback=_show_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Differential-privacy analytics: noisy aggregates with error bars and a budget."""
    # Ledger alerts reach people through Ledger.on_alert (see _print_alert), not through
    # Python's last-resort logging handler.
    logger = logging.getLogger("veil")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _print_alert(alert: Alert) -> None:
    _stderr().print(f"warning: {alert}", markup=False, style="yellow")


# ----------------------------------------------------------------------------- errors


@contextmanager
def scanning(message: str) -> Iterator[Progress | None]:
    """A progress line on stderr while the engine scans, only when stderr is a terminal.

    Yields the callback to pass as ``progress=`` (None when nothing is shown: no watcher
    thread then). The line has a spinner, ``message`` and the elapsed time; the bar pulses
    while the fraction is unknown and shows the percentage once the engine reports one. It is
    erased when the block ends; stdout (JSON, CSV, tables) is never written to."""
    console = _stderr()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as RichProgress

    display = RichProgress(
        SpinnerColumn("dots"),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    task = display.add_task(message, total=None)

    def report(fraction: float | None) -> None:
        if fraction is not None:
            display.update(task, total=1.0, completed=fraction)

    with display:
        yield report


# ----------------------------------------------------------------------------- commands

TableOpt = Annotated[
    list[str],
    typer.Option(
        "--table",
        "-t",
        help="A private table as NAME=PATH (CSV or Parquet), or NAME=SCHEMA.TABLE with "
        "--engine postgres; repeatable.",
    ),
]
EpsilonOpt = Annotated[
    str, typer.Option("--epsilon", "-e", help="Privacy loss ε this query may spend.")
]
QueryEpsilonOpt = Annotated[
    str | None,
    typer.Option("--epsilon", "-e", help="Privacy loss ε this query may spend (or give --target)."),
]
DeltaOpt = Annotated[str | None, typer.Option("--delta", "-d", help="δ for (ε, δ)-DP (e.g. 1e-6).")]
UnitOpt = Annotated[
    str | None,
    typer.Option("--privacy-unit", "-u", help="The column naming the person; omit for rows."),
]
BoundsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--bounds",
        "-b",
        help="Clamping bounds COLUMN=LOWER:UPPER, or COLUMN=auto (found under DP, see veil "
        "bounds), or COLUMN=auto:KEY (per group of the public GROUP BY key KEY), or auto "
        "(every clamped column); repeatable.",
    ),
]
BoundsShareOpt = Annotated[
    str | None,
    typer.Option(
        "--bounds-share",
        help="With --bounds …auto: the share of --epsilon spent finding the bounds (0.1).",
    ),
]
LimitsOpt = Annotated[
    str | None,
    typer.Option(
        "--limits",
        help="auto: choose max_rows under DP from a noisy histogram of rows per unit, within "
        "any --max-rows / --max-groups × --max-rows-per-group given; auto_groups: choose "
        "max_groups, max_rows_per_group and max_rows from one noisy joint histogram of "
        "distinct groups × rows per unit (see veil.autolimits).",
    ),
]
LimitsShareOpt = Annotated[
    str | None,
    typer.Option(
        "--limits-share",
        help="With --limits auto (or auto_groups): the share of --epsilon spent choosing the "
        "limits (0.1).",
    ),
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


DatasetNameOpt = Annotated[
    str | None,
    typer.Option("--dataset", help="Ledger dataset name (default: the table names joined by +)."),
]
MaxGroupsOpt = Annotated[
    int | None, typer.Option("--max-groups", help="Groups one unit may contribute to (L0).")
]
MaxRowsOpt = Annotated[
    int | None,
    typer.Option("--max-rows-per-group", help="Rows one unit may contribute per group (L∞)."),
]
TotalRowsOpt = Annotated[
    int | None,
    typer.Option("--max-rows", help="Rows one unit may contribute in all groups (total)."),
]
ContributionsOpt = Annotated[
    int | None,
    typer.Option(
        "--contributions", help="Without --privacy-unit: rows one person has at most (declared)."
    ),
]
SchemaOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--schema",
        help="Declared column types [TABLE=]FILE.json, a JSON object column → type (e.g. "
        '{"income": "DOUBLE"}); repeatable. Undeclared CSV columns are text.',
    ),
]
ColumnOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--column",
        help="A declared column type [TABLE.]COLUMN:TYPE, e.g. income:DOUBLE; repeatable.",
    ),
]
QuantileBucketsOpt = Annotated[
    int,
    typer.Option(
        "--quantile-buckets",
        help="Grid cells of a continuous quantile (MEDIAN, QUANTILE, MIN, MAX), 1 to 2^40.",
    ),
]
WeightsOpt = Annotated[
    str | None,
    typer.Option(
        "--weights",
        help="A survey-weights column (with --bounds COL=0:W_MAX): COUNT(*), SUM and AVG "
        "are weighted by it.",
    ),
]
SqlArg = Annotated[
    str,
    typer.Argument(
        help="The SQL query (veil's DP subset, see the docs' SQL reference); - reads stdin."
    ),
]


def _sql_text(sql: str) -> str:
    """The query text: the argument, or standard input when it is ``-``."""
    return sys.stdin.read() if sql.strip() == "-" else sql


EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="duckdb (embedded), spark (the SparkSession spark-submit or SPARK_REMOTE sets up) "
        "or postgres (with --connection; tables as NAME=SCHEMA.TABLE).",
    ),
]
ConnectionOpt = Annotated[
    str | None,
    typer.Option(
        "--connection",
        help="The database URL of --engine postgres (postgresql://user@host:5432/db).",
    ),
]
_ENGINES = ("duckdb", "spark", "postgres")


@dataclass(frozen=True)
class _Ask:
    """The options every query-like command shares, parsed."""

    tables: dict[str, str]
    epsilon: Fraction
    delta: Fraction | None
    bounds: dict[str, tuple[Fraction, Fraction]]
    privacy_unit: str | None
    ledger: str | None
    analyst: str
    dataset: str | None
    max_groups: int | None
    max_rows_per_group: int | None
    engine: str = "duckdb"
    schema: dict[str, dict[str, str]] = field(default_factory=dict)
    connection: str | None = None
    quantile_buckets: int = 2**32
    max_rows: int | None = None
    contributions: int | None = None
    auto: list[str] | None = None  # --bounds COLUMN=auto ([]: a bare --bounds auto)
    bounds_share: Fraction | None = None
    weights: str | None = None
    auto_by: dict[str, str] = field(default_factory=dict)  # --bounds COLUMN=auto:KEY
    limits: str | None = None
    limits_share: Fraction | None = None

    def bounds_arg(self) -> Any:
        """What Session.sql / explain take as ``bounds``: pairs, "auto", or both by column
        (``{"auto": KEY}`` for a column found per group)."""
        if self.auto is None:
            return self.bounds
        if not self.auto:
            return "auto"
        auto = {c: {"auto": self.auto_by[c]} if c in self.auto_by else "auto" for c in self.auto}
        return {**self.bounds, **auto}

    def declared(self) -> dict[str, tuple[Fraction, Fraction]]:
        """The declared range of each auto column given a pair too (``--bounds income=0:1e6
        --bounds income=auto``): the session's bounds, the widest the bounds step may choose."""
        return {c: self.bounds[c] for c in self.auto or () if c in self.bounds}

    @staticmethod
    def parse(
        table: Sequence[str],
        epsilon: str,
        delta: str | None,
        bounds: Sequence[str] | None,
        privacy_unit: str | None,
        ledger: str | None,
        analyst: str,
        dataset: str | None,
        max_groups: int | None,
        max_rows_per_group: int | None,
        engine: str,
        schema: Sequence[str] | None = None,
        column: Sequence[str] | None = None,
        connection: str | None = None,
        quantile_buckets: int = 2**32,
        max_rows: int | None = None,
        contributions: int | None = None,
        bounds_share: str | None = None,
        weights: str | None = None,
        limits: str | None = None,
        limits_share: str | None = None,
    ) -> _Ask:
        from veil.cli_bounds import split_auto
        from veil.compile.constants import check_quantile_buckets

        if engine not in _ENGINES:
            raise InvalidArgumentError(
                f"--engine must be {', '.join(_ENGINES[:-1])} or {_ENGINES[-1]}, got {engine!r}"
            )
        if (engine == "postgres") != (connection is not None):
            raise InvalidArgumentError(
                "--engine postgres needs --connection postgresql://user@host:5432/db"
                if engine == "postgres"
                else f"--connection is for --engine postgres, not {engine}"
            )
        tables = parse_tables(table)
        if not tables:
            raise InvalidArgumentError("give at least one table: --table people=people.parquet")
        names = list(tables)
        declared = merge_schemas(
            parse_schema_files(schema or [], names), parse_columns(column or [], names)
        )
        pairs, auto, auto_by = split_auto(bounds or [])
        return _Ask(
            tables,
            parse_epsilon(epsilon),
            parse_delta(delta),
            parse_bounds(pairs),
            privacy_unit,
            ledger,
            analyst,
            dataset,
            max_groups,
            max_rows_per_group,
            engine,
            declared,
            connection,
            check_quantile_buckets(quantile_buckets),
            max_rows,
            contributions,
            auto,
            parse_number(bounds_share, "--bounds-share"),
            weights,
            auto_by,
            limits,
            parse_number(limits_share, "--limits-share"),
        )

    def session(self, *, grant: bool = True) -> Session:
        """A session on the chosen engine; without --ledger, a one-shot in-memory budget of
        this query (``grant=False``: none yet, the caller grants it).
        ``--ledger`` must name an existing ledger: a mistyped path is an error, not a new
        empty ledger."""
        from veil.accounting.budget import Budget
        from veil.accounting.scratch import ScratchLedger
        from veil.session import Session

        budget = (
            None if self.ledger or not grant else Budget(epsilon=self.epsilon, delta=self.delta)
        )
        build: Callable[..., Session]
        if self.engine == "postgres":
            if self.connection is None:
                raise InvalidArgumentError("--engine postgres needs --connection URL")
            build = functools.partial(Session.postgres, self.connection)
        elif self.engine == "spark":
            from veil.engines.spark import default_spark_session

            build = functools.partial(Session.spark, default_spark_session())
        else:
            build = Session.local
        session = build(
            self.tables,
            privacy_unit=self.privacy_unit,
            budget=budget,
            analyst=self.analyst,
            ledger=_open_ledger(self.ledger, create=False) if self.ledger else ScratchLedger(),
            dataset=self.dataset,
            max_groups=self.max_groups,
            max_rows_per_group=self.max_rows_per_group,
            max_rows=self.max_rows,
            contributions=self.contributions,
            schema=self.schema or None,
            quantile_buckets=self.quantile_buckets,
            weights=self.weights,
            bounds=self.declared() or None,
        )
        if self.ledger:
            session.ledger.on_alert(_print_alert)
        return session


@app.command()
def query(
    sql: SqlArg,
    table: TableOpt,
    epsilon: QueryEpsilonOpt = None,
    delta: DeltaOpt = None,
    privacy_unit: UnitOpt = None,
    bounds: BoundsOpt = None,
    ledger: LedgerOpt = None,
    analyst: AnalystOpt = "cli",
    dataset: DatasetNameOpt = None,
    max_groups: MaxGroupsOpt = None,
    max_rows_per_group: MaxRowsOpt = None,
    max_rows: TotalRowsOpt = None,
    contributions: ContributionsOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    engine: EngineOpt = "duckdb",
    schema: SchemaOpt = None,
    column: ColumnOpt = None,
    connection: ConnectionOpt = None,
    quantile_buckets: QuantileBucketsOpt = 2**32,
    target: TargetOpt = None,
    level: LevelOpt = None,
    min_group_size: MinGroupOpt = None,
    reference: ReferenceOpt = None,
    bounds_share: BoundsShareOpt = None,
    weights: WeightsOpt = None,
    limits: LimitsOpt = None,
    limits_share: LimitsShareOpt = None,
) -> None:
    """Answer a SQL query with noise, error bars and a charged budget (at --epsilon, or at
    the smallest ε meeting every --target)."""

    def go() -> None:
        aim = parse_aim(
            target, level, min_group_size, reference, False, None, epsilon=epsilon, command="query"
        )
        # with --target the search chooses ε (and grants it, no --ledger)
        ask = _Ask.parse(
            table,
            "1" if epsilon is None else epsilon,
            delta,
            bounds,
            privacy_unit,
            ledger,
            analyst,
            dataset,
            max_groups,
            max_rows_per_group,
            engine,
            schema,
            column,
            connection,
            quantile_buckets,
            max_rows,
            contributions,
            bounds_share,
            weights=weights,
            limits=limits,
            limits_share=limits_share,
        )
        _answer(ask, _sql_text(sql), fmt, explain_only=False, aim=aim)

    _run(go, fmt)


@app.command()
def explain(
    sql: SqlArg,
    table: TableOpt,
    epsilon: QueryEpsilonOpt = None,
    delta: DeltaOpt = None,
    privacy_unit: UnitOpt = None,
    bounds: BoundsOpt = None,
    ledger: LedgerOpt = None,
    analyst: AnalystOpt = "cli",
    dataset: DatasetNameOpt = None,
    max_groups: MaxGroupsOpt = None,
    max_rows_per_group: MaxRowsOpt = None,
    max_rows: TotalRowsOpt = None,
    contributions: ContributionsOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    engine: EngineOpt = "duckdb",
    schema: SchemaOpt = None,
    column: ColumnOpt = None,
    connection: ConnectionOpt = None,
    quantile_buckets: QuantileBucketsOpt = 2**32,
    target: TargetOpt = None,
    level: LevelOpt = None,
    min_group_size: MinGroupOpt = None,
    reference: ReferenceOpt = None,
    curve: CurveOpt = False,
    plot: PlotOpt = None,
    bounds_share: BoundsShareOpt = None,
    weights: WeightsOpt = None,
    limits: LimitsOpt = None,
    limits_share: LimitsShareOpt = None,
) -> None:
    """Show plan, SQL, noise, cost and expected error bars; reads no data, charges nothing.
    With --target: at the smallest ε meeting every target; --curve, --plot: bars versus ε."""

    def go() -> None:
        aim = parse_aim(target, level, min_group_size, reference, curve, plot, epsilon=epsilon)
        ask = _Ask.parse(
            table,
            "1" if epsilon is None else epsilon,  # with --target the search chooses ε
            delta,
            bounds,
            privacy_unit,
            ledger,
            analyst,
            dataset,
            max_groups,
            max_rows_per_group,
            engine,
            schema,
            column,
            connection,
            quantile_buckets,
            max_rows,
            contributions,
            bounds_share,
            weights=weights,
            limits=limits,
            limits_share=limits_share,
        )
        _answer(ask, _sql_text(sql), fmt, explain_only=True, aim=aim)

    _run(go, fmt)


def _answer(
    ask: _Ask, sql: str, fmt: OutputFormat, *, explain_only: bool, aim: Aim | None = None
) -> None:
    """Run (or only explain) ``sql`` on a session built from ``ask``, print what comes back;
    ``aim``: accuracy targets (ε is then the smallest meeting them) and curves."""
    from veil.cli_output import print_explanation, print_result

    targeted = aim is not None and bool(aim.targets)
    session = ask.session(grant=not targeted)
    try:
        epsilon = ask.epsilon
        choice = None
        if aim is not None and aim.targets and (ask.limits is not None or ask.auto is not None):
            _answer_targeted_auto(session, sql, ask, aim, fmt, explain_only=explain_only)
            return
        if aim is not None and aim.targets:
            from veil.cli_target import choose, grant_chosen

            choice = choose(session, sql, aim, ask.delta, ask.bounds)  # free: reads no data
            epsilon = choice.epsilon
            if not ask.ledger and not explain_only:
                grant_chosen(session, choice, ask.delta)
        if explain_only:
            explanation = session.explain(
                sql, epsilon=epsilon, delta=ask.delta, bounds=ask.bounds_arg(),
                bounds_share=ask.bounds_share, limits=ask.limits, limits_share=ask.limits_share,
            )  # fmt: skip
            if aim is not None and aim.active:
                _explain_aimed(session, sql, ask, aim, fmt, explanation, choice)
                return
            print_explanation(explanation, fmt)
            return
        with scanning("scanning the private table…") as progress:
            result = session.sql(
                sql, epsilon=epsilon, delta=ask.delta, bounds=ask.bounds_arg(),
                progress=progress, bounds_share=ask.bounds_share, limits=ask.limits,
                limits_share=ask.limits_share,
            )  # fmt: skip
        if not ask.ledger:
            _warn_untracked()
        remaining = session.remaining() if ask.ledger else None
        if choice is not None:
            from veil.cli_target import print_targeted_result

            print_targeted_result(result, choice, fmt, remaining)
            return
        print_result(result, fmt, remaining=remaining)
    finally:
        session.close()
        session.ledger.close()


def _warn_untracked() -> None:
    _stderr().print(
        "warning: no --ledger: this query's cost is not tracked across runs (each run "
        "gets a fresh in-memory budget, so repeating it leaks without limit); keep a "
        "budget with --ledger sqlite:///ledger.db and `veil budget grant`",
        markup=False,
        style="yellow",
    )


def _answer_targeted_auto(
    session: Session, sql: str, ask: _Ask, aim: Aim, fmt: OutputFormat, *, explain_only: bool
) -> None:
    """``--target`` with ``--limits auto`` or ``--bounds auto``: the limits (bounds) step, then
    the query at the smallest ε meeting the targets at the limits (bounds) chosen
    (:mod:`veil.autolimits_target`, :mod:`veil.autobounds_target`). Without ``--ledger`` the
    one-shot budget is the most the request can cost."""
    from veil.cli_target import (
        print_auto_targeted_explained,
        print_auto_targeted_result,
        refuse_bounds_curve,
        refuse_limits_curve,
    )

    limits = ask.limits is not None
    (refuse_limits_curve if limits else refuse_bounds_curve)(aim)
    options: dict[str, Any] = {
        "target": aim.targets, "delta": ask.delta, "bounds": ask.bounds_arg(),
        "bounds_share": ask.bounds_share, "limits_share": ask.limits_share,
    }  # fmt: skip
    if limits:
        options["limits"] = ask.limits
    if explain_only or not ask.ledger:
        explanation = session.explain(sql, **options)  # free: reads no data
        if explain_only:
            print_auto_targeted_explained(explanation, fmt)
            return
        session.ledger.grant(session.analyst, session.dataset, explanation.cost)
    with scanning("scanning the private table…") as progress:
        result = session.sql(sql, progress=progress, **options)
    if not ask.ledger:
        _warn_untracked()
    targeted = result.auto_limits.targeted if limits else result.targeted
    print_auto_targeted_result(result, targeted, fmt, session.remaining() if ask.ledger else None)


def _explain_aimed(
    session: Session,
    sql: str,
    ask: _Ask,
    aim: Aim,
    fmt: OutputFormat,
    explanation: Explanation,
    choice: Choice | None,
) -> None:
    """An explanation with the targets met, the curve around its ε and the picture."""
    from veil.cli_target import curve_for, plot_single, print_explained

    curve: Curve | None = None
    notes: list[str] = []
    picture = None
    centre = choice.epsilon if choice is not None else ask.epsilon
    if aim.curve or aim.plot is not None:
        curve, notes = curve_for(session, sql, aim, centre, ask.delta, ask.bounds)
        if aim.plot is not None:
            picture = plot_single(aim.plot, sql, curve, aim, centre)
    print_explained(explanation, fmt, choice, curve, notes, aim, picture, centre)


@app.command("plan")
def plan_command(
    workload: Annotated[
        str,
        typer.Argument(help="A workload .toml file: \\[tables] and \\[\\[queries]] with targets."),
    ],
    total: Annotated[
        str | None,
        typer.Option(
            "--total",
            help="Share this total ε, minimising the largest relative miss (over the file's "
            "total_epsilon); default: the least total meeting every target.",
        ),
    ] = None,
    ledger: LedgerOpt = None,
    analyst: Annotated[
        str | None, typer.Option("--analyst", "-a", help="Who is asking (over the file's).")
    ] = None,
    fmt: FormatOpt = OutputFormat.table,
    curve: CurveOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Split a budget over several queries to meet their accuracy targets; reads no data,
    charges nothing."""

    def go() -> None:
        from veil.cli_plan import load_workload, parse_total, run_plan
        from veil.plots import check_path

        picture = check_path(plot) if plot is not None else None
        spec = load_workload(workload)
        cap = parse_total(total, spec)
        o = spec.options
        try:
            ask = _Ask.parse(
                spec.tables,
                "1",  # the plan chooses each query's ε
                o.get("delta"),
                spec.bounds,
                o.get("privacy_unit"),
                ledger if ledger is not None else o.get("ledger"),
                analyst if analyst is not None else o.get("analyst", "cli"),
                o.get("dataset"),
                o.get("max_groups"),
                o.get("max_rows_per_group"),
                o.get("engine", "duckdb"),
                None,
                spec.columns,
                o.get("connection"),
                o.get("quantile_buckets", 2**32),
                o.get("max_rows"),
                o.get("contributions"),
            )
        except InvalidArgumentError as err:  # in the CLI's words: say which file it came from
            raise InvalidArgumentError(f"{spec.file}: {err.for_cli()}") from None
        run_plan(spec, ask, fmt, total=cap, curve=curve, picture=picture)

    _run(go, fmt)


@app.command("bounds")
def bounds_command(
    table_name: Annotated[str, typer.Argument(metavar="TABLE", help="The table to read.")],
    columns: Annotated[
        list[str], typer.Argument(metavar="COLUMN...", help="The numeric columns to bound.")
    ],
    table: TableOpt,
    epsilon: EpsilonOpt,
    where: Annotated[
        str | None,
        typer.Option("--where", help="Only the rows matching this SQL condition (HWUSUAL < 99)."),
    ] = None,
    privacy_unit: UnitOpt = None,
    bounds: Annotated[
        list[str] | None,
        typer.Option("--within", help="An outer range COLUMN=LOWER:UPPER the bounds must stay in."),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Find the bounds per group of a public key: a column whose groups --where "
            "lists (--where \"state IN ('CA', 'NY')\") or the catalog declares, or "
            "'BIN(age, 0, 30, 60, 120) AS band'.",
        ),
    ] = None,
    ledger: LedgerOpt = None,
    analyst: AnalystOpt = "cli",
    dataset: DatasetNameOpt = None,
    max_groups: MaxGroupsOpt = None,
    max_rows_per_group: MaxRowsOpt = None,
    max_rows: TotalRowsOpt = None,
    contributions: ContributionsOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    engine: EngineOpt = "duckdb",
    schema: SchemaOpt = None,
    column: ColumnOpt = None,
    connection: ConnectionOpt = None,
) -> None:
    """Find clamping bounds for columns under DP (a noisy log-scale histogram each, charged
    like a query) and show them with the share of rows each would clamp."""

    def go() -> None:
        from veil.autobounds import find_bounds
        from veil.cli_bounds import print_bounds

        ask = _Ask.parse(
            table, epsilon, None, bounds, privacy_unit, ledger, analyst, dataset, max_groups,
            max_rows_per_group, engine, schema, column, connection, 2**32, max_rows,
            contributions,
        )  # fmt: skip
        if ask.auto is not None:
            raise InvalidArgumentError("--within takes COLUMN=LOWER:UPPER ranges, not auto")
        session = ask.session()
        try:
            with scanning("scanning the private table…"):
                chosen = find_bounds(
                    session, table_name, columns, epsilon=ask.epsilon, where=where,
                    within=ask.bounds, max_groups=max_groups,
                    max_rows_per_group=max_rows_per_group, max_rows=max_rows, by=by,
                )  # fmt: skip
            print_bounds(chosen, fmt, remaining=session.remaining() if ask.ledger else None)
        finally:
            session.close()
            session.ledger.close()

    _run(go, fmt)


@app.command()
def demo(
    patients: Annotated[
        int, typer.Option("--patients", help="Size of the synthetic table (patients).")
    ] = 60_000,
    fmt: FormatOpt = OutputFormat.table,
    write: Annotated[
        str | None,
        typer.Option(
            "--write",
            help="Write the tutorials' synthetic people table to this .parquet or .csv "
            "file instead of running the demo.",
        ),
    ] = None,
    users: Annotated[
        int, typer.Option("--users", help="People in the table --write writes.")
    ] = 20_000,
) -> None:
    """Generate a synthetic hospital-visits table and run a few DP queries on it."""

    def go() -> None:
        from veil.accounting.budget import Budget
        from veil.cli_output import print_result
        from veil.demo import (
            DEMO_BUDGET_DELTA,
            DEMO_BUDGET_EPSILON,
            DEMO_QUERIES,
            generate_people,
            generate_visits,
            write_table,
        )
        from veil.session import Session

        if write is not None:
            table = generate_people(users)
            write_table(table, write)
            _stderr().print(
                f"wrote {table.num_rows:,} rows of {users:,} synthetic people "
                f"({', '.join(table.column_names)}) to {write}",
                markup=False,
            )
            return
        from rich.syntax import Syntax

        console = Console(highlight=False)
        people = fmt is OutputFormat.table
        with scanning("generating the synthetic table…"):
            visits = generate_visits(patients)
        budget = Budget(epsilon=DEMO_BUDGET_EPSILON, delta=DEMO_BUDGET_DELTA)
        session = Session.local(
            {"visits": visits}, privacy_unit="patient_id", budget=budget, analyst="demo"
        )
        session.ledger.on_alert(_print_alert)
        if people:
            console.rule("[bold]veil demo")
            console.print(
                f"A synthetic table [bold]visits[/bold]: {visits.num_rows:,} hospital visits of "
                f"{patients:,} made-up patients (privacy unit: [bold]patient_id[/bold]).\n"
                f"Budget granted to analyst 'demo': {budget}. Every number below is noisy; "
                "± is its 95 % error bar.\n"
            )
        for step in DEMO_QUERIES:
            with scanning(f"{step.title}…") as progress:
                result = session.sql(
                    step.sql, epsilon=step.epsilon, bounds=step.bounds_dict(), progress=progress
                )
            if not people:
                print_result(result, fmt, remaining=session.remaining())
                continue
            console.rule(f"[bold]{step.title}")
            console.print(step.note, style="italic")
            console.print(Syntax(step.sql, "sql", word_wrap=True))
            bounds = ", ".join(f"{c} ∈ [{lo:g}, {hi:g}]" for c, lo, hi in step.bounds)
            console.print(f"ε = {step.epsilon}" + (f", bounds {bounds}" if bounds else ""))
            print_result(result, fmt, remaining=session.remaining(), console=console)
        if people:
            console.rule("[bold]the budget")
            console.print(f"left for analyst 'demo': {session.remaining()}")
            try:
                session.sql("SELECT COUNT(*) FROM visits", epsilon=1.0)
            except BudgetExhaustedError as err:
                console.print(f"one more query at ε = 1 is refused:\n  {err}", markup=False)
        session.close()

    _run(go, fmt)


def main() -> None:
    """Console-script entry point. A usage error (a missing option, a bad choice) prints one
    ``error: …`` line — a JSON object with ``--format json`` — and exits with code 2, like
    every other user error."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        _stderr().print("interrupted")
        raise SystemExit(130) from None
    except typer.TyperException as err:  # click's usage errors, as typer ships them
        if _is_help(err):  # `veil`, `veil budget`: typer printed the help; nothing went wrong
            raise SystemExit(getattr(err, "exit_code", USER_ERROR_EXIT)) from None
        fmt = OutputFormat.json if _asks_json(sys.argv[1:]) else OutputFormat.table
        _report(InvalidArgumentError(_usage_message(err)), "error", fmt, user_error=True)
        raise SystemExit(USER_ERROR_EXIT) from None
    if isinstance(code, int) and code:
        raise SystemExit(code)


def _is_help(err: typer.TyperException) -> bool:
    """Whether ``err`` is the "no command given" of a group with ``no_args_is_help``: typer has
    printed the group's help already (and exits with 2, as click does), so there is no error
    to report."""
    import importlib

    # click as recent typers vendor it, else click itself
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            kind = importlib.import_module(module).NoArgsIsHelpError
        except (ImportError, AttributeError):
            continue
        return isinstance(err, kind)
    return False


def _asks_json(argv: Sequence[str]) -> bool:
    for i, arg in enumerate(argv):
        if arg in ("--format", "-f") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if arg in ("--format=json", "-fjson"):
            return True
    return False


def _usage_message(err: typer.TyperException) -> str:
    """Click's message in one line, with the command to ask for help."""
    formatter = getattr(err, "format_message", None)
    text = " ".join((formatter() if callable(formatter) else str(err)).split())
    context = getattr(err, "ctx", None)
    command = context.command_path if context is not None else "veil"
    return f"{text} (see `{command} --help`)"


# ----------------------------------------------------------------------------- budget


def _short(text: str | None, limit: int = 80) -> str:
    """A query's text on one line, cut to ``limit`` characters for a table."""
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


RequiredLedgerOpt = Annotated[
    str, typer.Option("--ledger", help="Ledger URL: sqlite:///ledger.db or postgresql://…")
]
DatasetOpt = Annotated[str, typer.Option("--dataset", help="The dataset the budget is for.")]
AnalystReqOpt = Annotated[str, typer.Option("--analyst", "-a", help="The analyst.")]


def _open_ledger(url: str, *, create: bool = False) -> Ledger:
    """The ledger at ``url``; one that does not exist is an error unless ``create`` (only
    ``veil budget grant`` creates a ledger: a mistyped path must not become an empty one)."""
    from veil.accounting.ledger import Ledger

    return Ledger(url, create=create)


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
                rows.append((a, d, led.granted(a, d), led.remaining(a, d), led.used_share(a, d)))
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
                {
                    "analyst": a,
                    "dataset": d,
                    "granted": budget_json(g),
                    "remaining": budget_json(r),
                    "used": float(u),
                }
                for a, d, g, r, u in rows
            ]
            sys.stdout.write(json.dumps({"budgets": payload}) + "\n")
            return
        if fmt is OutputFormat.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(["analyst", "dataset", "kind", "granted", "remaining", "used"])
            for a, d, g, r, u in rows:
                writer.writerow([a, d, g.kind, str(g), str(r), f"{float(u):.6g}"])
            sys.stdout.write(buf.getvalue())
            return
        table = Table(title=f"privacy budgets in {led.url}")
        for name in ("analyst", "dataset", "granted", "remaining", "used"):
            table.add_column(name, justify="left" if name in ("analyst", "dataset") else "right")
        for a, d, g, r, u in rows:
            table.add_row(a, d, str(g), str(r), f"{float(u):.0%}")
        Console(highlight=False).print(table)

    _run(go, fmt)


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
        from veil.accounting.budget import Budget

        r = parse_number(rho, "--rho")
        e = parse_number(epsilon, "--epsilon")
        d = parse_delta(delta)
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
        with _open_ledger(ledger, create=True) as led:
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

    _run(go, fmt)


@budget_app.command("export")
def budget_export(
    ledger: RequiredLedgerOpt,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="json (everything) or csv (events).")
    ] = OutputFormat.json,
) -> None:
    """Dump the ledger for an audit: budgets, every event, alerts and cached answers."""

    def go() -> None:
        if fmt is OutputFormat.table:
            raise InvalidArgumentError("export writes json or csv; pass --format json or csv")
        with _open_ledger(ledger) as led:
            text = led.export_csv() if fmt is OutputFormat.csv else led.export_json()
        sys.stdout.write(text if text.endswith("\n") else text + "\n")

    _run(go, fmt)


@budget_app.command("history")
def budget_history(
    ledger: RequiredLedgerOpt,
    analyst: AnalystReqOpt,
    dataset: DatasetOpt,
    fmt: FormatOpt = OutputFormat.table,
    limit: Annotated[int, typer.Option("--limit", help="Events to show (1 … 1000).")] = 100,
    before: Annotated[
        int | None,
        typer.Option("--before", help="Show events older than this one (the 'older:' cursor)."),
    ] = None,
) -> None:
    """The latest grants, charges, cache hits and alerts of an analyst on a dataset, newest
    first (--limit of them; --before ID for older ones)."""

    def go() -> None:
        with _open_ledger(ledger) as led:
            page = led.history_page(analyst, dataset, limit=limit, before=before)
            records = list(page)
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
                "query": r.query,
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
                        "next": page.next,
                        "remaining": budget_json(remaining),
                    }
                )
                + "\n"
            )
            return
        if fmt is OutputFormat.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(
                ["id", "at", "event", "status", "loss", "fingerprint", "detail", "query"]
            )
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
                        r.query or "",
                    ]
                )
            sys.stdout.write(buf.getvalue())
            return
        older = "" if page.next is None else f"; older: --before {page.next}"
        table = Table(
            title=f"budget history of {analyst!r} on {dataset!r}, newest first",
            caption=f"remaining {remaining}{older}",
            caption_justify="left",
        )
        for name in ("#", "when (UTC)", "event", "status", "loss", "fingerprint", "query"):
            table.add_column(name, overflow="fold" if name == "query" else "ellipsis")
        for r in records:
            table.add_row(
                str(r.id),
                r.at.strftime("%Y-%m-%d %H:%M:%S"),
                r.event,
                r.status or "",
                str(r.loss) if r.loss is not None else "",
                (r.fingerprint or "")[:12],
                _short(r.query),
            )
        Console(highlight=False).print(table)

    _run(go, fmt)


# -- the catalog ------------------------------------------------------------------------------

catalog_app = typer.Typer(
    help="Register datasets and what protects them (the data owner's decisions).",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


def _domains(specs: Sequence[str]) -> dict[str, list[str]]:
    """``["state=CA,NY"]`` → ``{"state": ["CA", "NY"]}``."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        column, sep, values = spec.partition("=")
        keys = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not column.strip() or not keys:
            raise InvalidArgumentError(
                f"--domain expects COLUMN=KEY,KEY,…, got {spec!r}; e.g. --domain state=CA,NY"
            )
        out[column.strip()] = keys
    return out


@catalog_app.command("add")
def catalog_add(
    name: Annotated[str, typer.Argument(help="The dataset's name (its unit of accounting).")],
    ledger: RequiredLedgerOpt,
    path: Annotated[
        str | None, typer.Option("--path", help="A CSV/Parquet file, or a DuckDB database.")
    ] = None,
    kind: Annotated[
        str, typer.Option("--source", help="file, duckdb, postgres or spark.")
    ] = "file",
    table: Annotated[
        str | None, typer.Option("--table", help="The table (duckdb, postgres, spark sources).")
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="A PostgreSQL connection URL (postgres sources).")
    ] = None,
    unit: UnitOpt = None,
    max_groups: Annotated[int, typer.Option("--max-groups", help="Groups per unit.")] = 1,
    max_rows: Annotated[
        int, typer.Option("--max-rows-per-group", help="Rows per unit and group.")
    ] = 1,
    total_rows: TotalRowsOpt = None,
    contributions: ContributionsOpt = None,
    bounds: BoundsOpt = None,
    domain: Annotated[
        list[str] | None,
        typer.Option("--domain", help="Public keys: COLUMN=KEY,KEY,… (repeatable)."),
    ] = None,
    column: ColumnOpt = None,
    max_epsilon: Annotated[
        str | None, typer.Option("--max-epsilon", help="The largest ε of one query.")
    ] = None,
    max_delta: Annotated[
        str | None, typer.Option("--max-delta", help="The largest δ of one query.")
    ] = None,
    total_epsilon: Annotated[
        str | None, typer.Option("--total-epsilon", help="A cap across all analysts (ε).")
    ] = None,
    total_delta: Annotated[str | None, typer.Option("--total-delta", help="The cap's δ.")] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Change a registered dataset's metadata.")
    ] = False,
    fmt: FormatOpt = OutputFormat.table,
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="The survey-weights column every query's COUNT(*), SUM and AVG are weighted "
            "by (its --bounds from 0 up).",
        ),
    ] = None,
) -> None:
    """Register a dataset: its source, privacy unit, limits, bounds, domains and caps."""

    def go() -> None:
        from veil.accounting.budget import Budget
        from veil.catalog import Catalog, Source

        declared = parse_columns(column or [], [name]).get(name, {})
        total_eps = parse_number(total_epsilon, "--total-epsilon")
        total_dlt = parse_number(total_delta, "--total-delta")
        if total_dlt is not None and total_eps is None:
            raise InvalidArgumentError("--total-delta needs --total-epsilon")
        total = None if total_eps is None else Budget(epsilon=total_eps, delta=total_dlt)
        with _open_ledger(ledger, create=True) as led:
            ds = Catalog(led).add_dataset(
                name,
                source=Source(kind, path=path, table=table, url=url),  # type: ignore[arg-type]
                privacy_unit=unit,
                max_groups=max_groups,
                max_rows_per_group=max_rows,
                max_rows=total_rows,
                contributions=contributions,
                bounds=parse_bounds(bounds or []),
                domains=_domains(domain or []),
                schema=declared,
                max_epsilon=parse_number(max_epsilon, "--max-epsilon"),
                max_delta=parse_number(max_delta, "--max-delta"),
                total=total,
                replace=replace,
                weights=weights,
            )
        if fmt is OutputFormat.json:
            sys.stdout.write(json.dumps({"dataset": ds.to_json()}) + "\n")
            return
        Console(highlight=False, soft_wrap=True).print(
            f"dataset {ds.name!r} registered in {ledger}", markup=False
        )

    _run(go, fmt)


@catalog_app.command("show")
def catalog_show(
    ledger: RequiredLedgerOpt,
    name: Annotated[str | None, typer.Argument(help="One dataset (default: all).")] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """The registered datasets and what protects them."""

    def go() -> None:
        from veil.catalog import Catalog

        with _open_ledger(ledger) as led:
            catalog = Catalog(led)
            found = [catalog.dataset(name)] if name is not None else catalog.datasets()
            caps = {d.name: led.dataset_cap(d.name) for d in found}
        if fmt is OutputFormat.json:
            payload = [d.to_json() for d in found]
            sys.stdout.write(json.dumps({"datasets": payload}) + "\n")
            return
        if fmt is OutputFormat.csv:
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            writer.writerow(["name", "source", "privacy_unit", "max_groups",
                             "max_rows_per_group", "bounds", "max_epsilon", "total"])  # fmt: skip
            for d in found:
                writer.writerow(
                    [
                        d.name,
                        json.dumps(d.source.to_json()),
                        d.privacy_unit or "",
                        d.max_groups,
                        d.max_rows_per_group,
                        json.dumps(d.public()["bounds"]),
                        d.max_epsilon or "",
                        d.total or "",
                    ]
                )
            sys.stdout.write(buf.getvalue())
            return
        table = Table(title=f"datasets in {led.url}")
        for col in ("dataset", "source", "privacy unit", "limits", "bounds", "per query", "cap"):
            table.add_column(col, overflow="fold")
        for d in found:
            cap = caps[d.name]
            bounds_text = ", ".join(
                f"{c} ∈ [{float(lo):g}, {float(hi):g}]" for c, (lo, hi) in sorted(d.bounds.items())
            )
            table.add_row(
                d.name,
                f"{d.source.kind}: {d.source.path or d.source.table or ''}",
                d.privacy_unit or "each row",
                f"{d.max_groups} group(s), {d.max_rows_per_group} row(s)"
                + ("" if d.max_rows is None else f", {d.max_rows} in all"),
                bounds_text,
                "" if d.max_epsilon is None else f"ε ≤ {float(d.max_epsilon):g}",
                "" if cap is None else f"{cap[0]} (left {cap[1]})",
            )
        Console(highlight=False).print(table)

    _run(go, fmt)


@catalog_app.command("remove")
def catalog_remove(
    name: Annotated[str, typer.Argument(help="The dataset to unregister.")],
    ledger: RequiredLedgerOpt,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Unregister a dataset (its grants, charges and cap stay in the ledger)."""

    def go() -> None:
        from veil.catalog import Catalog

        with _open_ledger(ledger) as led:
            Catalog(led).remove(name)
        if fmt is OutputFormat.json:
            sys.stdout.write(json.dumps({"removed": name}) + "\n")
            return
        Console(highlight=False).print(f"dataset {name!r} removed", markup=False)

    _run(go, fmt)


@catalog_app.command("load")
def catalog_load(
    config: Annotated[str, typer.Argument(help="A veil.toml file with [[datasets]] tables.")],
    ledger: Annotated[
        str | None,
        typer.Option("--ledger", help="Ledger URL (default: the file's [ledger] url)."),
    ] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Register every dataset a veil.toml declares (idempotent: run it at every start)."""

    def go() -> None:
        import tomllib
        from pathlib import Path

        from veil.catalog import Catalog, config_ledger_url

        file = Path(config)
        url = ledger
        if url is None:
            try:
                doc = tomllib.loads(file.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise InvalidArgumentError(f"cannot read {config!r}: {exc}") from None
            url = config_ledger_url(doc, file.parent)
            if url is None:
                raise InvalidArgumentError(
                    f'{config!r} names no ledger; add ledger = "sqlite:///veil-ledger.db" or '
                    "pass --ledger URL"
                )
        with _open_ledger(url, create=True) as led:
            loaded = Catalog(led).load_toml(file)
        if fmt is OutputFormat.json:
            sys.stdout.write(json.dumps({"loaded": [d.name for d in loaded]}) + "\n")
            return
        names = ", ".join(repr(d.name) for d in loaded) or "none"
        Console(highlight=False).print(f"datasets loaded: {names}", markup=False)

    _run(go, fmt)


if __name__ == "__main__":  # python -m veil.cli …
    main()
