"""Accuracy targets: ``n=±50``, ``avg_income=±2%@90%``, with their public assumptions.

A target names an output column, a half-width (absolute, or relative to a *public* reference
value: a relative error of a private value would read data) and a level. Parsing reads no data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from veil.errors import InvalidArgumentError

__all__ = ["Target", "parse_target", "parse_targets"]

_FORM = "write it as 'column=±50', 'column=±2%' or 'column=±50@90%'"
_TEXT = re.compile(
    r"^\s*(?P<column>[^=\s]+)\s*=\s*(?:±|\+-|\+/-)\s*(?P<width>[^@%\s]+)\s*(?P<pct>%)?"
    r"\s*(?:@\s*(?P<level>[^%\s]+)\s*(?P<lpct>%)?)?\s*$"
)


@dataclass(frozen=True)
class Target:
    """Released bars of ``column`` at ``level`` must be ≤ ``halfwidth`` (absolute), or ≤
    ``relative`` × ``reference`` (a public value the analyst states). ``min_group_size``: the
    public smallest group size assumed where the bar depends on a group's size (AVG)."""

    column: str
    halfwidth: float | None = None
    relative: float | None = None
    level: float = 0.95
    reference: float | None = None
    min_group_size: int | None = None

    def __post_init__(self) -> None:
        if (self.halfwidth is None) == (self.relative is None):
            raise InvalidArgumentError(
                f"target for {self.column!r} needs exactly one of halfwidth= (±50) or "
                "relative= (±2%)"
            )
        for name, v in (("halfwidth", self.halfwidth), ("relative", self.relative)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise InvalidArgumentError(
                    f"target for {self.column!r}: {name}={v!r} must be a positive finite "
                    f"number; {_FORM}"
                )
        if not (isinstance(self.level, float | int) and 0 < self.level < 1):
            raise InvalidArgumentError(
                f"target for {self.column!r}: level {self.level!r} is out of range; pass a "
                "level strictly between 0 and 1 (e.g. @95%)"
            )
        if self.reference is not None and not (
            math.isfinite(self.reference) and self.reference != 0
        ):
            raise InvalidArgumentError(
                f"target for {self.column!r}: reference={self.reference!r} must be a non-zero "
                "finite public value"
            )
        if self.min_group_size is not None and (
            isinstance(self.min_group_size, bool)
            or not isinstance(self.min_group_size, int)
            or self.min_group_size < 1
        ):
            raise InvalidArgumentError(
                f"target for {self.column!r}: min_group_size={self.min_group_size!r} must be a "
                "positive integer (the public smallest group size you assume)"
            )

    @property
    def limit(self) -> float | None:
        """The absolute half-width the bars must not exceed (None: a relative target whose
        public reference value is still missing)."""
        if self.halfwidth is not None:
            return self.halfwidth
        if self.reference is None:
            return None
        assert self.relative is not None
        return self.relative * abs(self.reference)

    def __str__(self) -> str:
        width = f"±{self.halfwidth:g}" if self.halfwidth is not None else f"±{self.relative:.4g}"
        if self.relative is not None:
            width = f"±{100 * self.relative:g}% of {self.reference:g}"
        return f"{self.column} {width} at {100 * self.level:g}%"


def _number(text: str, what: str, raw: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"target {raw!r}: {what} {text!r} is not a number; {_FORM}"
        ) from None
    return v


def parse_target(
    text: str,
    *,
    reference: float | None = None,
    min_group_size: int | None = None,
    level: float = 0.95,
) -> Target:
    """``'n=±50'``, ``'avg_income=±2%'``, ``'n=±50@90%'`` (also ``+-`` for ``±``); ``level``:
    the level of a target that states none."""
    m = _TEXT.match(text)
    if m is None:
        raise InvalidArgumentError(f"malformed target {text!r}; {_FORM}")
    width = _number(m["width"], "the half-width", text)
    if m["level"] is not None:
        level = _number(m["level"], "the level", text)
        if m["lpct"] or level > 1:
            level /= 100
    if m["pct"]:
        return Target(
            m["column"],
            relative=width / 100,
            level=level,
            reference=reference,
            min_group_size=min_group_size,
        )
    return Target(m["column"], halfwidth=width, level=level, min_group_size=min_group_size)


def parse_targets(
    targets: str | Target | Iterable[str | Target] | Mapping[str, str],
    *,
    references: Mapping[str, float] | None = None,
    min_group_size: int | None = None,
    level: float = 0.95,
) -> tuple[Target, ...]:
    """Targets given as text, :class:`Target` objects, or ``{"n": "±50"}``; ``references``: the
    public reference value of each relatively targeted column; ``level``: that of a text
    target stating none."""
    refs = dict(references or {})
    if isinstance(targets, str | Target):
        items: list[str | Target] = [targets]
    elif isinstance(targets, Mapping):
        items = [f"{k}={v}" for k, v in targets.items()]
    else:
        items = list(targets)
    out: list[Target] = []
    for t in items:
        if isinstance(t, Target):
            out.append(t)
            continue
        column = t.split("=", 1)[0].strip()
        out.append(
            parse_target(t, reference=refs.get(column), min_group_size=min_group_size, level=level)
        )
    if not out:
        raise InvalidArgumentError("no target given; pass target='n=±50' (say)")
    seen = [t.column for t in out]
    dup = sorted({c for c in seen if seen.count(c) > 1})
    if dup:
        raise InvalidArgumentError(f"two targets for {dup[0]!r}; give one target per column")
    return tuple(out)
