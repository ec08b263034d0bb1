"""The answer to one query: released values, error bars, cost and what the budget paid for."""

from __future__ import annotations

import html
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from veil.accounting.budget import Budget
from veil.errors import InvalidArgumentError, MissingDependencyError

if TYPE_CHECKING:
    import pyarrow as pa

    from veil.aggregates.base import ColumnModel, NoiseModel

__all__ = ["NOT_PRIVATE", "Columns", "Lazy", "ReleasedBars", "Result", "Usage"]

NOT_PRIVATE = (
    "NOT PRIVATE: the noise was drawn from a caller-supplied random source (for tests only); "
    "anyone with the source can remove it"
)


def _arrow_types() -> dict[str, pa.DataType]:
    """A released type → its Arrow type (pyarrow is imported when a table is made: a service's
    client reads answers without it)."""
    import pyarrow as pa

    return {
        "integer": pa.int64(),
        "real": pa.float64(),
        "string": pa.string(),
        "boolean": pa.bool_(),
    }


T = TypeVar("T")


class Lazy(Sequence[T], Generic[T]):
    """A tuple of ``size`` items built when an item is first read (:meth:`_build`); equal to
    the tuple of the same items (and printed as it)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: tuple[T, ...] | None = None

    def _build(self) -> tuple[T, ...]:
        raise NotImplementedError

    def _all(self) -> tuple[T, ...]:
        if self._items is None:
            self._items = self._build()
        return self._items

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lazy):
            return self._all() == other._all()
        if isinstance(other, tuple):
            return self._all() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


class Columns(Lazy[tuple[Any, ...]]):
    """Released rows held by column (``columns``, one sequence of values per output column):
    each row's tuple is built only when rows are read; Arrow, pandas and Polars are built
    from the columns."""

    def __init__(self, columns: Sequence[Sequence[Any]], size: int) -> None:
        if any(len(c) != size for c in columns):
            raise ValueError("every column of the released rows must hold one value per row")
        super().__init__(size)
        self.columns = tuple(columns)

    def _build(self) -> tuple[tuple[Any, ...], ...]:
        if not self.columns:
            return ((),) * self._size
        return tuple(zip(*self.columns, strict=True))


@dataclass(frozen=True)
class Usage:
    """One part of the budget: the measurement it paid for, its mechanism, loss, sensitivity
    and noise scale (both in value units), and the released columns that use it."""

    measurement: str
    mechanism: str
    loss: Budget
    sensitivity: str
    noise: str
    used_by: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "measurement": self.measurement,
            "mechanism": self.mechanism,
            "loss": self.loss.to_dict(),
            "sensitivity": self.sensitivity,
            "noise": self.noise,
            "used_by": list(self.used_by),
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Usage:
        return Usage(
            measurement=str(d["measurement"]),
            mechanism=str(d["mechanism"]),
            loss=Budget.from_dict(d["loss"]),
            sensitivity=str(d["sensitivity"]),
            noise=str(d["noise"]),
            used_by=tuple(d["used_by"]),
        )


@dataclass(frozen=True)
class ReleasedBars:
    """Error bars released with an answer at one confidence level, one row per released row
    (``None`` for group keys and quantiles). A veil service releases its answers' bars at 95 %
    without the noisy statistics that other levels are computed from."""

    level: float
    halfwidths: tuple[tuple[float | None, ...], ...]


@dataclass(frozen=True)
class Result:
    """Released rows with error bars and cost.

    ``columns`` and ``rows`` (list of lists, in column order) hold the released values;
    ``error_bars(level)`` the half-widths at ``level`` (same shape, ``None`` for group keys and
    quantiles); ``cost`` what the query was charged (zero for a cached answer); ``usage`` what
    each part of the budget paid for; ``cached`` whether the answer came from the ledger cache;
    ``charged`` the loss its measurement was charged when first released (for a cached answer,
    what that first query paid; None where unknown, as in an answer from a service);
    ``private`` is False when its noise was drawn from a caller-supplied random source (a
    seeded one, for tests): such an answer can be replayed and protects nothing, and its
    printout and JSON say so.

    An answer from a veil service (:class:`veil.client.Client`) carries its error bars as
    released (``released_bars``, at 95 %) instead of the noisy statistics, and ``remaining``,
    what was left of the grant right after it; in-process ``remaining`` is None (ask
    ``session.remaining()``).
    """

    columns: tuple[str, ...]
    types: tuple[str, ...]
    values: Sequence[tuple[Any, ...]]  # a tuple, or Columns (rows built when read)
    cost: Budget
    usage: Sequence[Usage] = ()  # a tuple, or the parts written when first read
    fingerprint: str = ""
    cached: bool = False
    notes: tuple[str, ...] = ()
    private: bool = True
    stats: Sequence[Mapping[str, int]] = field(default=(), repr=False)
    models: Mapping[str, ColumnModel] = field(default_factory=dict, repr=False)
    noise: Mapping[str, NoiseModel] = field(default_factory=dict, repr=False)
    released_bars: ReleasedBars | None = field(default=None, repr=False)
    remaining: Budget | None = None
    charged: Budget | None = field(default=None, repr=False, compare=False)
    # bounds="auto": the bounds chosen per column (veil.autobounds.ChosenBounds), in order
    auto_bounds: tuple[Any, ...] = field(default=(), repr=False, compare=False)
    # limits="auto": the limits chosen (veil.autolimits.ChosenLimits), or None
    auto_limits: Any = field(default=None, repr=False, compare=False)
    # target= with bounds="auto": what the targets decided (veil.autobounds_target.
    # TargetedBounds), or None
    targeted: Any = field(default=None, repr=False, compare=False)
    # error_bars(level) once computed, by level (post-processing of the fields above)
    _bars: dict[float, tuple[tuple[float | None, ...], ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def rows(self) -> list[list[Any]]:
        values = self.values
        if isinstance(values, Columns) and values.columns:
            return [list(r) for r in zip(*values.columns, strict=True)]
        return [list(r) for r in values]

    def error_bars(self, level: float = 0.95) -> list[list[float | None]]:
        """Half-widths at confidence ``level`` for every cell (noise only; see
        ``veil.release.estimators``). Post-processing of released values: costs nothing.
        Computed when first asked for, each column's groups at once, and kept per level (a
        second printout reads them)."""
        if not isinstance(level, int | float) or not 0 < level < 1 or math.isnan(level):
            raise InvalidArgumentError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
        if self.released_bars is not None:
            carried = self.released_bars.level
            if level != carried:
                raise InvalidArgumentError(
                    f"this answer carries its error bars at level {carried:g} only (a veil "
                    "service releases them at that level, without the noisy statistics other "
                    f"levels are computed from); call error_bars({carried:g})"
                )
            return [list(row) for row in self.released_bars.halfwidths]
        lv = float(level)
        if lv not in self._bars:
            self._bars[lv] = tuple(tuple(row) for row in self._compute_bars(lv))
        return [list(row) for row in self._bars[lv]]

    def _compute_bars(self, level: float) -> list[list[float | None]]:
        from veil.aggregates import kind  # an in-process answer: its kinds are loaded
        from veil.aggregates.base import Group

        out: list[list[float | None]] = [[None] * len(self.columns) for _ in self.values]
        for j, col in enumerate(self.columns):  # one column at a time: its kind vectorises
            model = self.models.get(col)
            if model is None:
                continue
            rows = [i for i, row in enumerate(self.values) if row[j] is not None]
            groups = [Group(model, self.stats[i], self.noise) for i in rows]
            # a MODE over labels releases a label: no number, and no bar
            values = [_number(self.values[i][j]) for i in rows]
            for i, bar in zip(
                rows, kind(model.function).halfwidths(groups, values, level), strict=True
            ):
                out[i][j] = bar
        return out

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        types = _arrow_types()
        arrays = []
        values = self.values
        by_column = values.columns if isinstance(values, Columns) else None
        for i, t in enumerate(self.types):
            column = by_column[i] if by_column is not None else [r[i] for r in values]
            arrays.append(pa.array(column, type=types.get(t)))
        return pa.table(arrays, names=list(self.columns))

    def to_pandas(self) -> Any:
        try:
            import pandas  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                "to_pandas() needs pandas: pip install 'veil[pandas]'"
            ) from exc
        return self.to_arrow().to_pandas()

    def to_polars(self) -> Any:
        try:
            import polars
        except ImportError as exc:
            raise MissingDependencyError("to_polars() needs polars: pip install polars") from exc
        return polars.from_arrow(self.to_arrow())

    def __len__(self) -> int:
        return len(self.values)

    def __str__(self) -> str:
        bars = self.error_bars()
        header = list(self.columns)
        body: list[list[str]] = []
        for row, bar in zip(self.values, bars, strict=True):
            cells = []
            for v, b in zip(row, bar, strict=True):
                text = f"{v:.6g}" if isinstance(v, float) else str(v)
                cells.append(text if b is None else f"{text} ± {b:.3g}")
            body.append(cells)
        widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
        lines.append(f"cost: {self.cost}" + (" (cached answer)" if self.cached else ""))
        lines += [f"note: {n}" for n in self.notes]
        if not self.private:
            lines.append(NOT_PRIVATE)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """An HTML table for notebooks: each value with its 95 % error bar, then the cost."""
        bars = self.error_bars()
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.columns)
        body = []
        for row, bar in zip(self.values, bars, strict=True):
            cells = []
            for v, b in zip(row, bar, strict=True):
                cell = html.escape(f"{v:.6g}" if isinstance(v, float) else str(v))
                if b is not None:
                    cell += f" <small>± {b:.3g}</small>"
                cells.append(f"<td>{cell}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        foot = f"cost {html.escape(str(self.cost))}"
        if self.cached:
            foot += " (cached answer: nothing spent)"
        foot += "; ± 95 % error bars (noise only)"
        if not self.private:
            foot += f"<br><b style='color:#b00'>{html.escape(NOT_PRIVATE)}</b>"
        return (
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"<p style='font-size:smaller'>{foot}</p>"
        )

    # -- the cached form (JSON) -------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "types": list(self.types),
            "rows": [list(r) for r in self.values],
            "cost": self.cost.to_dict(),
            "usage": [u.to_json() for u in self.usage],
            "fingerprint": self.fingerprint,
            "notes": list(self.notes),
            "private": self.private,
            "stats": [{k: str(v) for k, v in s.items()} for s in self.stats],
            "models": [m.to_json() for m in self.models.values()],
            "noise": [n.to_json() for n in self.noise.values()],
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], *, cached: bool = False) -> Result:
        from veil.aggregates.base import ColumnModel, NoiseModel

        models = [ColumnModel.from_json(m) for m in d["models"]]
        noise = [NoiseModel.from_json(n) for n in d["noise"]]
        cost = Budget(epsilon=0) if cached else Budget.from_dict(d["cost"])
        return Result(
            columns=tuple(d["columns"]),
            types=tuple(d["types"]),
            values=tuple(tuple(r) for r in d["rows"]),
            cost=cost,
            usage=tuple(Usage.from_json(u) for u in d["usage"]),
            fingerprint=str(d.get("fingerprint", "")),
            cached=cached,
            notes=tuple(d.get("notes", ())),
            private=bool(d.get("private", True)),
            stats=tuple({k: int(v) for k, v in s.items()} for s in d["stats"]),
            models={m.alias: m for m in models},
            noise={n.name: n for n in noise},
        )


def _number(v: Any) -> float:
    return float(v) if isinstance(v, int | float) else math.nan
