"""JSON read back from disk, with a nesting limit: every JSONL record the harness reads (datasets, train and dev
files, pairs, units.jsonl) goes through here before it is validated.

Why: Python's JSON parser, pydantic's serializer and every recursive walk of a record fail with RecursionError
(or "maximum serialization depth") on deeply nested input; a dataset line 900 levels deep in `meta` loaded, then
crashed `dataset_hash`. No record the harness writes or reads nests beyond a few levels, so a limit far above
that turns the crash into a `file:line: field: problem` error.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # containers inside containers; the harness's own records nest fewer than 10 deep


class TooDeep(ValueError):
    """A JSON value nested deeper than the limit; `field` is where the limit was crossed."""

    def __init__(self, field: str, limit: int) -> None:
        self.field, self.limit = field, limit
        super().__init__(f"{field}: nested deeper than {limit} levels")


def deep_field(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The path (`meta.x[0][0]...`, cut short) of the first container deeper than `limit`, None when within it.
    Iterative, so it never recurses however deep the value is."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict):
            children = [(v, f"{where}.{k}" if where else str(k)) for k, v in item.items()]
        elif isinstance(item, list | tuple):
            children = [(v, f"{where}[{i}]") for i, v in enumerate(item)]
        else:
            continue
        if depth + 1 > limit:
            return (where[:60] + "...") if len(where) > 60 else (where or "record")
        stack.extend((child, depth + 1, path) for child, path in children if isinstance(child, dict | list))
    return None


def loads(text: str, limit: int = MAX_DEPTH) -> Any:
    """`json.loads`, refusing a value nested deeper than `limit` (TooDeep, a ValueError) instead of recursing
    into a RecursionError; invalid JSON is json.JSONDecodeError as usual."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep("record", limit) from None
    if (field := deep_field(value, limit)) is not None:
        raise TooDeep(field, limit)
    return value


def problem_line(exc: Exception) -> str:
    """A record's validation error as one `field: problem` line (the first of several, with their count), not
    pydantic's multi-line block."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            first = found[0]
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            return f"{where or 'record'}: {str(first['msg']).removeprefix('Value error, ')}{more}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]


__all__ = ["MAX_DEPTH", "TooDeep", "deep_field", "loads", "problem_line"]
