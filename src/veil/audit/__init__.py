"""Sampling-based checks of veil's privacy claims (``veil audit``).

:func:`query` audits one SQL query on the data owner's own table (:mod:`veil.audit.query`).
An audit is NOT differentially private: it reads the raw data and its report reveals it.
Passing an audit does not prove privacy.
"""

from __future__ import annotations

from veil.audit.query import NOT_DP, QueryAudit, query

__all__ = ["NOT_DP", "QueryAudit", "query"]
