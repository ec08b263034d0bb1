"""The words of an explanation (what a query would cost, its expected error and its SQL),
shared by the library's :class:`veil.release.explain.Explanation` and the service client's
(:class:`veil.client.answers.Explanation`); light, so that the client loads no compiler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from veil.accounting.budget import Budget
from veil.release.result import Usage

__all__ = ["Explained", "budget_line", "explanation_lines"]


class Explained(Protocol):
    """What an explanation's text is made of: :class:`Explanation`, and the service client's
    (``veil.client.answers.Explanation``), which has the plan only as its canonical form."""

    @property
    def notes(self) -> tuple[str, ...]: ...
    @property
    def contribution(self) -> str: ...
    @property
    def cost(self) -> Budget: ...
    @property
    def budget_line(self) -> str: ...
    @property
    def usage(self) -> tuple[Usage, ...]: ...
    @property
    def errors(self) -> Mapping[str, str]: ...
    @property
    def sql(self) -> str: ...
    @property
    def quantile_sql(self) -> tuple[str, ...]: ...


def budget_line(remaining: Budget | None, covered: bool | None) -> str:
    """Whether the caller's remaining budget covers a query, in words."""
    if remaining is None:
        return "no budget is granted to this analyst on this dataset"
    verdict = "covers it" if covered else "does NOT cover it"
    return f"remaining {remaining.precise()}: {verdict}"


def explanation_lines(e: Explained) -> list[str]:
    """An explanation's text after its plan: notes, cost, budget use, error bars, SQL."""
    lines = [f"note: {n}" for n in e.notes]
    lines.append(f"contribution bounding: {e.contribution}")
    lines.append(f"cost: {e.cost}; {e.budget_line}")
    lines.append("budget use:")
    for u in e.usage:
        lines.append(
            f"  {u.measurement}: {u.mechanism}, {u.loss}; {u.sensitivity}; {u.noise}; "
            f"used by {', '.join(u.used_by) or '-'}"
        )
    lines.append("expected 95% error bars:")
    lines += [f"  {k}: {v}" for k, v in e.errors.items()]
    lines.append("SQL sent to the engine:")
    lines.append(e.sql)
    lines += e.quantile_sql
    return lines
