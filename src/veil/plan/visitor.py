"""A typed visitor over plan nodes: one ``visit_<node>`` per node class.

Subclass :class:`PlanVisitor` with a concrete result type; a node added to the plan adds an
abstract method here, so every visitor that forgot it fails to instantiate (and mypy says so).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from veil.plan.nodes import Aggregate, Filter, Having, Limit, Plan, Project, Scan, Sort

__all__ = ["PlanVisitor"]

T = TypeVar("T")


class PlanVisitor(ABC, Generic[T]):
    """Dispatches on the node class; call ``visitor.visit(plan)``."""

    def visit(self, plan: Plan) -> T:
        return plan.accept(self)

    @abstractmethod
    def visit_scan(self, node: Scan) -> T: ...

    @abstractmethod
    def visit_filter(self, node: Filter) -> T: ...

    @abstractmethod
    def visit_aggregate(self, node: Aggregate) -> T: ...

    @abstractmethod
    def visit_having(self, node: Having) -> T: ...

    @abstractmethod
    def visit_sort(self, node: Sort) -> T: ...

    @abstractmethod
    def visit_limit(self, node: Limit) -> T: ...

    @abstractmethod
    def visit_project(self, node: Project) -> T: ...
