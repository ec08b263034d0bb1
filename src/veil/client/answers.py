"""The service's answers as Python values (``veil.client``): a query answer as the library's
:class:`veil.Result`, budgets as :class:`veil.Budget` (read from their exact fractions, never
the floats), and small frozen types for what has no library twin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from veil.accounting.budget import Budget
from veil.autobounds_choice import ChosenBounds, GroupBounds
from veil.errors import InvalidArgumentError, ServiceError
from veil.release.explained import budget_line, explanation_lines
from veil.release.result import ReleasedBars, Result, Usage

__all__ = [
    "BudgetLine",
    "Choice",
    "DatasetInfo",
    "Explanation",
    "Noisy",
    "budget_from_json",
    "chosen_from_json",
    "maybe_budget",
    "noisy_from_json",
    "result_from_payload",
]


def budget_from_json(d: object) -> Budget:
    """A budget from the service's JSON (its exact fractions, not the floats)."""
    if not isinstance(d, Mapping) or not isinstance(d.get("exact"), Mapping):
        raise ServiceError(f"the service sent a budget this client cannot read: {d!r}")
    return Budget.from_dict({"kind": d.get("kind"), **d["exact"]})


def maybe_budget(d: object) -> Budget | None:
    return None if d is None else budget_from_json(d)


def _usage(d: Mapping[str, Any]) -> Usage:
    return Usage(
        measurement=str(d["measurement"]),
        mechanism=str(d["mechanism"]),
        loss=budget_from_json(d["loss"]),
        sensitivity=str(d["sensitivity"]),
        noise=str(d["noise"]),
        used_by=tuple(str(c) for c in d["used_by"]),
    )


def _type_of(values: Sequence[object]) -> str:
    """A released column's type, from its JSON values (``Result.types``)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "boolean"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "integer"
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "real"
    if present and all(isinstance(v, str) for v in present):
        return "string"
    return "unknown"  # no value, or a mixture: Arrow infers it


def chosen_from_json(d: Mapping[str, Any]) -> ChosenBounds:
    """One column's auto bounds as the service sent them (``chosen_json``'s form)."""
    within = d.get("within")
    groups = tuple(
        GroupBounds(
            label=g["group"],
            lower=Fraction(float(g["lower"])),
            upper=Fraction(float(g["upper"])),
            clamped_below=float(g["clamped_below"]),
            clamped_above=float(g["clamped_above"]),
            clamped_bar=float(g["clamped_bar"]),
            rows=int(g["rows"]),
        )
        for g in d.get("groups") or ()
    )
    return ChosenBounds(
        column=str(d["column"]),
        lower=Fraction(float(d["lower"])),
        upper=Fraction(float(d["upper"])),
        loss=budget_from_json(d["loss"]),
        cost=budget_from_json(d["cost"]),
        cached=bool(d["cached"]),
        clamped_below=float(d["clamped_below"]),
        clamped_above=float(d["clamped_above"]),
        clamped_bar=float(d["clamped_bar"]),
        rows=int(d["rows"]),
        bins=int(d["bins"]),
        threshold=int(d["threshold"]),
        outer=None if within is None else (Fraction(float(within[0])), Fraction(float(within[1]))),
        key=None if d.get("key") is None else str(d["key"]),
        groups=groups,
    )


def _limits(obj: Mapping[str, Any] | None) -> Any:
    """The :class:`veil.autolimits.ChosenLimits` of an answer's ``auto_limits`` (or None)."""
    if obj is None:
        return None
    from veil.autolimits import ChosenLimits

    return ChosenLimits(
        max_rows=int(obj["max_rows"]),
        max_groups=int(obj["max_groups"]),
        max_rows_per_group=int(obj["max_rows_per_group"]),
        dropped=float(obj["dropped"]),
        dropped_bar=float(obj["dropped_bar"]),
        rows=float(obj["rows"]),
        loss=budget_from_json(obj["loss"]),
        cost=budget_from_json(obj["cost"]),
        cached=bool(obj["cached"]),
        cap=int(obj["cap"]),
        mode=str(obj.get("mode", "auto")),
    )


def _targeted_bounds(target: Mapping[str, Any] | None) -> Any:
    """The :class:`veil.autobounds_target.TargetedBounds` of an answer's ``target.bounds``
    (None without one); its ``choice`` stays None (the answer's ``target`` has the bars)."""
    if target is None or target.get("bounds") is None:
        return None
    from veil.autobounds_target import TargetedBounds

    d = target["bounds"]

    def ranges(obj: Mapping[str, Any] | None) -> Any:
        if obj is None:
            return None
        return tuple(
            (str(c), Fraction(float(r["lower"])), Fraction(float(r["upper"])))
            for c, r in obj.items()
        )

    return TargetedBounds(
        bounds_epsilon=Fraction(str(d["bounds_epsilon_exact"])),
        epsilon_min=Fraction(str(d["epsilon_min_exact"])),
        epsilon_max=Fraction(str(d["epsilon_max_exact"])),
        narrowest=ranges(d["narrowest"]),
        widest=ranges(d["widest"]),
        covers_cheapest=d.get("covers_cheapest"),
        covers_dearest=d.get("covers_dearest"),
        chosen=ranges(d.get("chosen")),
        epsilon=Fraction(str(target["epsilon_exact"])),
    )


def result_from_payload(payload: Mapping[str, Any]) -> Result:
    """The :class:`veil.Result` of a query answer (``POST /v1/query``'s body)."""
    try:
        columns = tuple(str(c) for c in payload["columns"])
        rows = tuple(tuple(r) for r in payload["rows"])
        bars = tuple(
            tuple(None if b is None else float(b) for b in r) for r in payload["error_bars"]
        )
        return Result(
            columns=columns,
            types=tuple(_type_of([r[j] for r in rows]) for j in range(len(columns))),
            values=rows,
            cost=budget_from_json(payload["cost"]),
            usage=tuple(_usage(u) for u in payload["usage"]),
            fingerprint=str(payload["fingerprint"]),
            cached=bool(payload["cached"]),
            notes=tuple(str(n) for n in payload["notes"]),
            private=bool(payload["private"]),
            released_bars=ReleasedBars(float(payload["error_bar_level"]), bars),
            remaining=maybe_budget(payload.get("remaining")),
            auto_bounds=tuple(chosen_from_json(c) for c in payload.get("auto_bounds") or ()),
            auto_limits=_limits(payload.get("auto_limits")),
            targeted=_targeted_bounds(payload.get("target")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ServiceError(
            f"the service sent a query answer this client cannot read: {exc!r}"
        ) from exc


@dataclass(frozen=True)
class DatasetInfo:
    """A granted dataset's public metadata, as its data owner set it, and its columns."""

    name: str
    privacy_unit: str | None
    max_groups: int
    max_rows_per_group: int
    bounds: Mapping[str, tuple[Fraction, Fraction]]
    domains: Mapping[str, tuple[Any, ...]]
    columns: Mapping[str, str]  # name → the engine's type
    max_epsilon: Fraction | None
    max_delta: Fraction | None
    total: Budget | None  # the cap across all analysts, if any
    min_response_ms: int
    max_rows: int | None = None  # total rows per unit (without a unit: rows per person)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> DatasetInfo:
        def frac(x: object) -> Fraction | None:
            return None if x is None else Fraction(str(x))

        return DatasetInfo(
            name=str(d["name"]),
            privacy_unit=d.get("privacy_unit"),
            max_groups=int(d["max_groups"]),
            max_rows_per_group=int(d["max_rows_per_group"]),
            bounds={c: (Fraction(lo), Fraction(hi)) for c, (lo, hi) in d["bounds"].items()},
            domains={c: tuple(v) for c, v in d["domains"].items()},
            columns={str(c["name"]): str(c["type"]) for c in d.get("columns", ())},
            max_epsilon=frac(d.get("max_epsilon")),
            max_delta=frac(d.get("max_delta")),
            total=None if d.get("total") is None else Budget.from_dict(d["total"]),
            min_response_ms=int(d.get("min_response_ms", 0)),
            max_rows=None if d.get("max_rows") is None else int(d["max_rows"]),
        )


@dataclass(frozen=True)
class BudgetLine:
    """The caller's grant on one dataset: granted, remaining, and the share spent (0…1)."""

    dataset: str
    granted: Budget
    remaining: Budget
    used: float


@dataclass(frozen=True)
class Explanation:
    """What a query would cost and its expected 95 % error bars; nothing was read or charged.

    The fields of :class:`veil.release.explain.Explanation`, with the plan as its canonical
    form (``canonical``) and the expected error bars as ``errors``."""

    dataset: str
    canonical: Mapping[str, Any]
    sql: str
    quantile_sql: tuple[str, ...]
    cost: Budget
    usage: tuple[Usage, ...]
    errors: Mapping[str, str]
    contribution: str
    notes: tuple[str, ...]
    remaining: Budget | None
    covered: bool | None

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Explanation:
        return Explanation(
            dataset=str(d["dataset"]),
            canonical=d["plan"],
            sql=str(d["sql"]),
            quantile_sql=tuple(d["quantile_sql"]),
            cost=budget_from_json(d["cost"]),
            usage=tuple(_usage(u) for u in d["usage"]),
            errors=dict(d["expected_error_bars"]),
            contribution=str(d["contribution"]),
            notes=tuple(d["notes"]),
            remaining=maybe_budget(d.get("remaining")),
            covered=d.get("covered"),
        )

    @property
    def budget_line(self) -> str:
        return budget_line(self.remaining, self.covered)

    def __str__(self) -> str:
        return "\n".join(explanation_lines(self))


@dataclass(frozen=True)
class Noisy:
    """Noisy values from a mechanism endpoint, in the shape they were sent (one number or a
    list), with what they cost. ``error_bar(0.95)`` is the service's; it releases no other
    level (randomized response has none)."""

    dataset: str
    mechanism: str
    values: Any
    loss: Budget
    remaining: Budget
    sensitivity: Fraction
    scale: float | None
    note: str
    bar: ReleasedBars | None = field(default=None, repr=False)

    def error_bar(self, level: float = 0.95) -> float:
        """Half-width ``t`` with ``P(|value − true value| ≤ t) ≥ level``, for each value."""
        if self.bar is None:
            raise InvalidArgumentError(
                f"a {self.mechanism} release has no additive noise, so no error bar"
            )
        (row,) = self.bar.halfwidths
        (half,) = row
        if level != self.bar.level or half is None:
            raise InvalidArgumentError(
                f"this release carries its error bar at level {self.bar.level:g} only; call "
                f"error_bar({self.bar.level:g})"
            )
        return half


@dataclass(frozen=True)
class Choice:
    """The exponential mechanism's choice: the candidate and its position."""

    dataset: str
    index: int
    choice: Any
    loss: Budget
    remaining: Budget
    note: str


def noisy_from_json(d: Mapping[str, Any]) -> Noisy:
    bar = d.get("error_bar")
    level = d.get("error_bar_level")
    return Noisy(
        dataset=str(d["dataset"]),
        mechanism=str(d["mechanism"]),
        values=d["values"],
        loss=budget_from_json(d["loss"]),
        remaining=budget_from_json(d["remaining"]),
        sensitivity=Fraction(str(d["sensitivity"])),
        scale=None if d.get("scale") is None else float(d["scale"]),
        note=str(d["note"]),
        bar=None if bar is None or level is None else ReleasedBars(float(level), ((bar,),)),
    )
