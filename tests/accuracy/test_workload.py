"""Workloads: the least total ε meeting every target, or the least largest miss in a total."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accuracy_support import BOUNDS, Q, session
from veil.accuracy import WorkItem, choose_epsilon, plan_workload
from veil.errors import InvalidArgumentError

COUNT = "SELECT COUNT(*) AS n, SUM(income) AS s FROM people"


def items() -> list[WorkItem]:
    return [WorkItem(COUNT, "n=±20"), WorkItem(Q, ["n=±50", "total=±20000"])]


def test_least_total_is_the_sum_of_each_querys_smallest_epsilon() -> None:
    s = session()
    before = s.remaining()
    p = plan_workload(s, items(), bounds=BOUNDS)
    alone = [choose_epsilon(s, w.sql, w.target, bounds=BOUNDS).epsilon for w in items()]
    assert [c.epsilon for c in p.choices] == alone
    assert p.total == sum(alone, Fraction(0))
    assert p.factor == 1.0
    assert s.remaining() == before
    assert p.table().splitlines()[-1].startswith("total epsilon")


def test_a_tight_total_minimises_the_largest_relative_miss() -> None:
    s = session()
    need = plan_workload(s, items(), bounds=BOUNDS).total
    cap = need / 3
    p = plan_workload(s, items(), total=cap, bounds=BOUNDS)
    assert p.total <= cap
    assert p.factor > 1
    # a factor 2 % smaller does not fit: the split is optimal to the tolerance
    smaller = [
        WorkItem(COUNT, f"n=±{20 * p.factor / 1.02}"),
        WorkItem(Q, [f"n=±{50 * p.factor / 1.02}", f"total=±{20000 * p.factor / 1.02}"]),
    ]
    assert plan_workload(s, smaller, bounds=BOUNDS).total > cap
    with pytest.raises(InvalidArgumentError, match="must be a positive"):
        plan_workload(s, items(), total=0, bounds=BOUNDS)
    with pytest.raises(InvalidArgumentError, match="empty workload"):
        plan_workload(s, [], bounds=BOUNDS)
