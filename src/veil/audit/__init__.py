"""Sampling-based checks of veil's privacy claims (``veil audit``).

:func:`mechanism` audits a mechanism (a Python function, or through
:func:`veil.audit.mechanisms.command` any program) against its claimed (ε, δ) on neighbouring
inputs; :func:`veil.audit.mechanisms.builtin` audits veil's own mechanisms
(:mod:`veil.audit.mechanisms`). :func:`query` audits one SQL query on the data owner's own table
(:mod:`veil.audit.query`); that audit is NOT differentially private: it reads the raw data and
its report reveals it. Passing an audit does not prove privacy.
"""

from __future__ import annotations

from veil.audit.mechanisms import MechanismAudit, mechanism
from veil.audit.query import NOT_DP, QueryAudit, query

__all__ = ["NOT_DP", "MechanismAudit", "QueryAudit", "mechanism", "query"]
