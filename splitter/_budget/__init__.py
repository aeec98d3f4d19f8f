"""Rate-limit budgets: what the service will accept now, learned from its headers."""

from __future__ import annotations

from ._snapshot import BudgetSnapshot
from ._tracker import HeaderTracker

__all__ = ["BudgetSnapshot", "HeaderTracker"]
