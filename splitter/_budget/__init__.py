"""Rate-limit budgets: what the service will accept now, learned from its headers."""

from __future__ import annotations

from ._memory import MemoryBudget
from ._protocol import Budget, Kind, Reservation, WaitHook
from ._snapshot import BudgetSnapshot

__all__ = ["Budget", "BudgetSnapshot", "Kind", "MemoryBudget", "Reservation", "WaitHook"]
