"""``veil plan workload.toml``: several queries with accuracy targets under one budget.

The file (every key but ``tables`` and ``queries`` optional; top-level keys come before the
first ``[table]`` header, as TOML wants)::

    total_epsilon = 1.0          # share this total (minimise the largest relative miss);
                                 # without it: the least total meeting every target
    level = 0.95                 # of targets that state none (or "95%")
    min_group_size = 200         # public smallest group, for AVG targets
    privacy_unit = "person_id"   # the options of `veil query`, underscores for dashes:
    delta = "1e-6"               # engine, connection, ledger, analyst, dataset, max_groups,
    bounds = { income = [0, 200000] }   # max_rows_per_group, max_rows, contributions,
    columns = { income = "DOUBLE" }     # quantile_buckets

    [tables]                     # as --table NAME=PATH; a relative path is from this file
    pums = "pums_california_1000.csv"

    [[queries]]
    name = "people by sex"       # optional, shown in the table
    sql = "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex"
    targets = ["n=±20"]          # or { n = "±20" }; the syntax of --target

    [[queries]]
    sql = "SELECT AVG(income) AS mean_income FROM pums"
    targets = ["mean_income=±2%"]
    references = { mean_income = 40000 }   # public values relative targets are taken of
    bounds = { income = [0, 150000] }      # this query's bounds, over the file's

Everything is checked before the search starts, each refusal naming the file, the key, the
value and the fix. The search (:func:`veil.accuracy.plan_workload`) reads no data and charges
nothing; the plan says whether the remaining budget covers it.
"""

from __future__ import annotations

import json
import math
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.table import Table

from veil.accuracy.targets import Target
from veil.cli_options import OutputFormat, budget_json, parse_bounds, parse_number
from veil.cli_target import (
    CURVE_FACTORS,
    curve_json,
    curve_table,
    parse_level,
    parse_references,
    parse_targets_cli,
    target_json,
)
from veil.errors import InvalidArgumentError

if TYPE_CHECKING:
    from veil.accounting.budget import Budget
    from veil.accuracy import Curve, Planned
    from veil.session import Session

__all__ = ["QuerySpec", "WorkloadSpec", "load_workload", "run_plan"]

_OPTIONS = {  # key → (kind, what a good value looks like)
    "engine": (str, '"duckdb"'),
    "connection": (str, '"postgresql://user@host:5432/db"'),
    "privacy_unit": (str, '"person_id"'),
    "ledger": (str, '"sqlite:///ledger.db"'),
    "analyst": (str, '"alice"'),
    "dataset": (str, '"pums"'),
    "delta": (str, '"1e-6"'),
    "max_groups": (int, "1"),
    "max_rows_per_group": (int, "1"),
    "max_rows": (int, "10"),
    "contributions": (int, "1"),
    "quantile_buckets": (int, "4096"),
}
_TOP = {"tables", "queries", "total_epsilon", "level", "min_group_size", "bounds", "columns"}
_QUERY = {"name", "sql", "targets", "references", "min_group_size", "level", "bounds"}


class _Asked(Protocol):
    """What ``veil plan`` needs of the CLI's parsed options (``veil.cli._Ask``)."""

    @property
    def delta(self) -> Fraction | None: ...

    @property
    def bounds(self) -> dict[str, tuple[Fraction, Fraction]]: ...

    @property
    def ledger(self) -> str | None: ...

    def session(self, *, grant: bool = True) -> Session: ...


@dataclass(frozen=True)
class QuerySpec:
    """One query of the file: its name, SQL, targets (parsed) and own bounds."""

    name: str
    sql: str
    targets: tuple[Target, ...]
    bounds: dict[str, tuple[Fraction, Fraction]] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload file, checked: the CLI-style options of its session and its queries."""

    file: Path
    tables: tuple[str, ...]
    options: dict[str, Any]
    bounds: tuple[str, ...]
    columns: tuple[str, ...]
    total: Fraction | None
    queries: tuple[QuerySpec, ...]


class _Where:
    """Errors naming the file and the key: ``plan.toml: queries[2].targets: …; fix``."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def error(self, key: str, problem: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.file}: {key}: {problem}")

    def kind(self, key: str, value: Any, kind: type, example: str) -> Any:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)  # delta = 1e-6 reads as a number: the CLI takes its text
        if not ok:
            raise self.error(
                key,
                f"{value!r} is not a {kind.__name__}; write it as {key.split('.')[-1]} = {example}",
            )
        return value

    def unknown(self, key: str, table: Mapping[str, Any], known: set[str]) -> None:
        extra = sorted(set(table) - known)
        if extra:
            raise self.error(
                f"{key}{extra[0]}" if key else extra[0],
                f"unknown key; the keys here are {', '.join(sorted(known))}",
            )


def load_workload(path: str | Path) -> WorkloadSpec:
    """Read and check a workload file (see the module docstring), before any work."""
    file = Path(path)
    w = _Where(file)
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot read the workload {str(file)!r}: {exc.strerror or exc}; give the path of "
            "a .toml file (see `veil plan --help`)"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgumentError(f"{file}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{file}: not a UTF-8 text file; save it as UTF-8") from None
    w.unknown("", doc, _TOP | set(_OPTIONS))
    options = {k: w.kind(k, doc[k], kind, ex) for k, (kind, ex) in _OPTIONS.items() if k in doc}
    engine = str(options.get("engine", "duckdb"))
    if engine not in ("duckdb", "spark", "postgres"):
        raise w.error(
            "engine", f'{engine!r} is not an engine; write engine = "duckdb", "spark" or "postgres"'
        )
    tables = _tables(w, doc.get("tables"), engine)
    level = _level(w, "level", doc.get("level"))
    group = _group(w, "min_group_size", doc.get("min_group_size"))
    total = None
    if "total_epsilon" in doc:
        raw = doc["total_epsilon"]
        total = _number(w, "total_epsilon", raw)
        if total is None or total <= 0:
            raise w.error("total_epsilon", f"{raw!r} must be a positive ε; e.g. total_epsilon = 1")
    bounds = _bounds_specs(w, "bounds", doc.get("bounds"))
    columns = _column_specs(w, doc.get("columns"))
    queries = doc.get("queries")
    if not isinstance(queries, list) or not queries:
        raise w.error(
            "queries",
            'no query; add one or more [[queries]] tables with sql = "SELECT …" and '
            'targets = ["n=±50"]',
        )
    specs = tuple(_query(w, i, q, level, group) for i, q in enumerate(queries, 1))
    names = [q.name for q in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise w.error("queries", f"two queries are named {dup[0]!r}; give each its own name")
    return WorkloadSpec(
        file,
        tables,
        options,
        bounds,
        columns,
        total,
        specs,
    )


def _number(w: _Where, key: str, raw: Any) -> Fraction | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise w.error(key, f"{raw!r} is not a number; e.g. {key} = 1")
    if isinstance(raw, float) and not math.isfinite(raw):
        raise w.error(key, f"{raw!r} is not a finite number; e.g. {key} = 1")
    try:
        return parse_number(str(raw), key)
    except InvalidArgumentError as err:
        raise w.error(key, str(err)) from None


def _level(w: _Where, key: str, raw: Any, default: float = 0.95) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise w.error(key, f'{raw!r} is not a level; write {key} = 0.95 or {key} = "95%"')
    try:
        return parse_level(str(raw), key)
    except InvalidArgumentError as err:
        raise w.error(key, str(err)) from None


def _group(w: _Where, key: str, raw: Any, default: int | None = None) -> int | None:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise w.error(
            key,
            f"{raw!r} must be a positive integer (the public smallest group size you "
            f"assume); e.g. {key.split('.')[-1]} = 100",
        )
    return raw


def _tables(w: _Where, raw: Any, engine: str) -> tuple[str, ...]:
    if not isinstance(raw, dict) or not raw:
        raise w.error("tables", 'no table; add [tables] with NAME = "PATH", e.g. pums = "pums.csv"')
    out: list[str] = []
    for name, path in raw.items():
        if not isinstance(path, str) or not path.strip():
            raise w.error(
                f"tables.{name}", f'{path!r} is not a path; write {name} = "{name}.parquet"'
            )
        p = Path(path)
        if engine != "postgres" and "://" not in path and not p.is_absolute():
            p = w.file.parent / p  # relative to the workload file, not the shell
        out.append(f"{name}={p if engine != 'postgres' else path}")
    return tuple(out)


def _bounds_specs(w: _Where, key: str, raw: Any) -> tuple[str, ...]:
    """``{income = [0, 1e5]}`` or ``["income=0:100000"]`` → ``("income=0:100000",)``."""
    if raw is None:
        return ()
    out: list[str] = []
    if isinstance(raw, dict):
        for column, pair in raw.items():
            ok = isinstance(pair, list) and len(pair) == 2
            if not ok or any(isinstance(v, bool) or not isinstance(v, int | float) for v in pair):
                raise w.error(
                    f"{key}.{column}",
                    f"{pair!r} is not a pair of numbers; write {column} = [0, 100000]",
                )
            out.append(f"{column}={pair[0]!r}:{pair[1]!r}")
    elif isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        out = list(raw)
    else:
        raise w.error(key, f"{raw!r}: write {key} = {{ income = [0, 100000] }}")
    try:
        parse_bounds(out)
    except InvalidArgumentError as err:
        raise w.error(key, str(err).replace("--bounds", "bounds")) from None
    return tuple(out)


def _column_specs(w: _Where, raw: Any) -> tuple[str, ...]:
    """``{income = "DOUBLE"}`` or ``["income:DOUBLE"]`` → ``("income:DOUBLE",)``."""
    if raw is None:
        return ()
    if isinstance(raw, dict) and all(isinstance(v, str) for v in raw.values()):
        return tuple(f"{c}:{t}" for c, t in raw.items())
    if isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        return tuple(raw)
    raise w.error("columns", f'{raw!r}: write columns = {{ income = "DOUBLE" }}')


def _query(w: _Where, i: int, raw: Any, level: float, group: int | None) -> QuerySpec:
    key = f"queries[{i}]"
    if not isinstance(raw, dict):
        raise w.error(key, "not a table; write each query as a [[queries]] table")
    w.unknown(f"{key}.", raw, _QUERY)
    sql = raw.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise w.error(f"{key}.sql", 'missing; write sql = "SELECT COUNT(*) AS n FROM t"')
    name = raw.get("name", f"query {i}")
    if not isinstance(name, str) or not name.strip():
        raise w.error(f"{key}.name", f'{name!r} is not a name; write name = "people by sex"')
    texts = raw.get("targets")
    if isinstance(texts, dict) and all(isinstance(v, str) for v in texts.values()):
        texts = [f"{c}={v}" for c, v in texts.items()]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise w.error(
            f"{key}.targets",
            f'{texts!r}: give the targets as targets = ["n=±50"] (the syntax of --target)',
        )
    refs_raw = raw.get("references", {})
    if not isinstance(refs_raw, dict):
        raise w.error(f"{key}.references", f"{refs_raw!r}: write references = {{ m = 40000 }}")
    try:
        refs = parse_references([f"{c}={v}" for c, v in refs_raw.items()], flag=f"{key}.references")
        targets = parse_targets_cli(
            texts,
            level=_level(w, f"{key}.level", raw.get("level"), level),
            min_group_size=_group(w, f"{key}.min_group_size", raw.get("min_group_size"), group),
            references=refs,
            flag="target",
        )
    except InvalidArgumentError as err:
        text = str(err).replace("--reference", "references").replace("--target", "targets")
        raise w.error(f"{key}.targets", text) from None
    specs = _bounds_specs(w, f"{key}.bounds", raw.get("bounds"))
    return QuerySpec(name.strip(), sql, targets, parse_bounds(specs))


# ---------------------------------------------------------------------------------- running


def run_plan(
    spec: WorkloadSpec,
    ask: _Asked,
    fmt: OutputFormat,
    *,
    total: Fraction | None,
    curve: bool,
    picture: Path | None,
) -> None:
    """Plan ``spec`` on ``ask``'s session and print the split (and curves, a picture)."""
    import warnings

    from veil.accuracy import WorkItem, plan_workload
    from veil.accuracy.search import check_targets
    from veil.errors import VeilWarning

    session = ask.session(grant=False)
    try:
        items = [
            WorkItem(q.sql, q.targets, options={"bounds": {**ask.bounds, **q.bounds}})
            for q in spec.queries
        ]
        with warnings.catch_warnings():  # the search's probes above ε = 10 warn nothing
            warnings.simplefilter("ignore", VeilWarning)
            planned = plan_workload(  # the largest miss to 0.2 % of the best split's
                session, items, total=total, tolerance=0.002, delta=ask.delta, bounds=ask.bounds
            )
        cost = _total_cost(planned)
        remaining, covered = None, None
        if session.ledger.has_grant(session.analyst, session.dataset):
            remaining = session.remaining()
            covered = session.ledger.covers(session.analyst, session.dataset, cost)
        curves: list[Curve] = []
        if curve or picture is not None:
            curves = _curves(session, spec, ask, planned)
        if picture is not None:
            from veil.accuracy.plot import Panel, plot_curves

            plot_curves(
                [
                    Panel(q.name, c, {t.column: t.limit or 0.0 for t in q.targets}, ch.epsilon)
                    for q, c, ch in zip(spec.queries, curves, planned.choices, strict=True)
                ],
                picture,
            )
        # the public assumptions of the targets as stated (the choices' are of scaled ones)
        said = [
            check_targets(session.plan(q.sql, bounds={**ask.bounds, **q.bounds}), q.targets)
            for q in spec.queries
        ]
        _print(
            spec,
            planned,
            cost,
            total,
            remaining,
            covered,
            fmt,
            curves if curve else [],
            picture,
            said,
        )
    finally:
        session.close()
        session.ledger.close()


def _total_cost(planned: Planned) -> Budget:
    from veil.accounting.budget import Budget

    cost = Budget(epsilon=0)
    for c in planned.choices:
        cost = cost + c.explanation.cost
    return cost


def _curves(session: Session, spec: WorkloadSpec, ask: _Asked, planned: Planned) -> list[Curve]:
    import warnings

    from veil.accounting.limits import MAX_EPSILON, MIN_EPSILON
    from veil.accuracy import accuracy_curve
    from veil.errors import VeilWarning

    out = []
    for q, c in zip(spec.queries, planned.choices, strict=True):
        grid = sorted({min(MAX_EPSILON, max(MIN_EPSILON, c.epsilon * f)) for f in CURVE_FACTORS})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", VeilWarning)
            out.append(
                accuracy_curve(
                    session,
                    q.sql,
                    q.targets,
                    grid,
                    delta=ask.delta,
                    bounds={**ask.bounds, **q.bounds},
                )
            )
    return out


def _rows(
    spec: WorkloadSpec, planned: Planned, assumptions: Sequence[Sequence[str]]
) -> list[dict[str, Any]]:
    out = []
    for q, c, asked, said in zip(
        spec.queries, planned.choices, planned.asked, assumptions, strict=True
    ):
        share = c.epsilon / planned.total if planned.total > 0 else Fraction(0)
        out.append(
            {
                "name": q.name,
                "sql": q.sql,
                "epsilon": float(c.epsilon),
                "epsilon_exact": str(c.epsilon),
                "cost": budget_json(c.explanation.cost),
                "share": float(share),
                "targets": [
                    target_json(t, c.bars[t.column], a)
                    for t, a in zip(c.targets, asked, strict=True)
                ],
                "assumptions": list(said),
                "notes": list(c.explanation.notes),
            }
        )
    return out


def _print(
    spec: WorkloadSpec,
    planned: Planned,
    cost: Budget,
    total: Fraction | None,
    remaining: Budget | None,
    covered: bool | None,
    fmt: OutputFormat,
    curves: Sequence[Curve],
    picture: Path | None,
    assumptions: Sequence[Sequence[str]],
) -> None:
    rows = _rows(spec, planned, assumptions)
    if fmt is not OutputFormat.table:
        payload: dict[str, Any] = {
            "workload": str(spec.file),
            "mode": "least_total" if total is None else "fixed_total",
            "total_epsilon": float(planned.total),
            "total_epsilon_exact": str(planned.total),
            "given_total_epsilon": None if total is None else float(total),
            "cost": budget_json(cost),
            "factor": planned.factor,
            "queries": rows,
            "remaining": budget_json(remaining),
            "covered": covered,
        }
        if curves:
            payload["curves"] = [
                curve_json(c, q.targets) for c, q in zip(curves, spec.queries, strict=True)
            ]
        if picture is not None:
            payload["plot"] = str(picture)
        sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
        return
    console = Console(highlight=False)
    mode = (
        "the least total ε meeting every target"
        if total is None
        else f"a total of ε = {float(total):g}, minimising the largest relative miss"
    )
    table = Table(title=f"plan of {spec.file.name}: {mode}", title_justify="left")
    for name in ("query", "ε", "share", "target", "level", "expected bar", "bar / target"):
        table.add_column(name, justify="left" if name == "query" else "right")
    for row in rows:
        for j, t in enumerate(row["targets"]):
            bar = t["expected_bar"]
            limit = t["limit"]
            table.add_row(
                row["name"] if j == 0 else "",
                f"{row['epsilon']:.4g}" if j == 0 else "",
                f"{row['share']:.1%}" if j == 0 else "",
                f"{t['column']} ± {limit:.4g}",
                f"{100 * t['level']:g} %",
                "± ∞" if bar is None else f"± {bar:.4g}",
                "∞" if bar is None else f"{bar / limit:.3f}",
            )
        table.add_section()
    console.print(table)
    console.print(f"total {cost} (nothing read, nothing charged)", markup=False)
    if planned.factor > 1:
        console.print(
            f"the total cannot meet every target: each is missed by at most × "
            f"{planned.factor:.3f} (the largest relative miss); raise total_epsilon or "
            "loosen the targets",
            style="yellow",
            markup=False,
        )
    if remaining is not None:
        style = "red" if covered is False else "default"
        says = "covers it" if covered else "does not cover it"
        console.print(f"budget remaining {remaining}: {says}", style=style, markup=False)
    for row in rows:
        for a in row["assumptions"]:
            console.print(f"assumption ({row['name']}): {a}", style="dim", markup=False)
    for note in dict.fromkeys(n for c in planned.choices for n in c.explanation.notes):
        console.print(f"note: {note}", style="dim", markup=False)
    for c, q, ch in zip(curves, spec.queries, planned.choices, strict=bool(curves)):
        console.print(
            curve_table(c, q.targets, ch.epsilon, f"{q.name}: expected error bars versus ε")
        )
    if picture is not None:
        console.print(f"plot: {picture}", markup=False)


def parse_total(text: str | None, spec: WorkloadSpec) -> Fraction | None:
    """``--total E`` over the file's ``total_epsilon``."""
    if text is None:
        return spec.total
    value = parse_number(text, "--total")
    if value is None or value <= 0:
        raise InvalidArgumentError(f"--total must be a positive ε, e.g. --total 1; got {text}")
    return value


AskFactory = Callable[..., _Asked]
