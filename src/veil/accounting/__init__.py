"""Privacy losses, their composition and conversions, and the persistent ledger."""

from __future__ import annotations

from veil.accounting.budget import Budget, exact

__all__ = ["Budget", "exact"]
