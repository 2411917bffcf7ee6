"""A memory row's one definition of "live", for every stage that reads rows (the engine's SQL says the same:
`hymem.store._schema.LIVE`). Kept light: the fault plan reads it, and the command line imports the plan early."""

from __future__ import annotations

from typing import Any


def is_live(row: dict[str, Any]) -> bool:
    """Neither superseded nor deleted."""
    return row.get("superseded_by") is None and row.get("deleted_at") is None
