"""The run directory's schema version, and the named migrations that bring older records up to it.

Why: a run directory outlives the code that wrote it (the committed baseline, a colleague's run). Each
record and the manifest carry `schema_version`; a reader migrates an older one step by step, append-only
like llm's `migrations.py`, or refuses it with one line saying why (a newer writer, an unknown field).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 5  # 1: untyped units (anomalies as [kind, witness] pairs); 2: typed records with schema_version;
# 3: repeats — a unit is (provider, case, epoch), the manifest counts epochs, per-case tables carry `epoch`;
# 4: faults and anomalies carry `epoch` too (which repeat a faulted run or an anomaly belongs to);
# 5: a unit carries the gold it was scored against (`CaseRun.gold`), so scoring needs no dataset file


class SchemaError(ValueError):
    """A record this version of hymem-eval cannot read: written by a newer one, or not migratable."""


def _m002_unit(data: dict[str, Any]) -> dict[str, Any]:
    """v1 → v2: anomalies were `[kind, witness]` pairs; now `{kind, witness}` records."""
    for fault in data.get("faults") or []:
        fault["anomalies"] = [a if isinstance(a, dict) else {"kind": a[0], "witness": a[1]}
                              for a in fault.get("anomalies") or []]
    return data


def _m002_manifest(data: dict[str, Any]) -> dict[str, Any]:
    """v1 → v2: no field changed; the manifest's version follows the records'."""
    return data


def _m003_unit(data: dict[str, Any]) -> dict[str, Any]:
    """v2 → v3: a unit ran once: it is epoch 0."""
    data.setdefault("epoch", 0)
    return data


def _m003_manifest(data: dict[str, Any]) -> dict[str, Any]:
    """v2 → v3: a run ran every unit once (one epoch, no sampling temperature)."""
    data.setdefault("epochs", 1)
    return data


def _m004_same(data: dict[str, Any]) -> dict[str, Any]:
    """v3 → v4: no JSON field changed (units already carried their epoch); only two tables gained a column."""
    return data


def _m005_unit(data: dict[str, Any]) -> dict[str, Any]:
    """v4 → v5: units did not carry their gold. It cannot be made up here: `gold` stays None, and scoring such a
    unit reloads its case from the dataset files the manifest names, checked against its hash
    (`evals.report.rescore`)."""
    data.setdefault("gold", None)
    return data


def _m005_manifest(data: dict[str, Any]) -> dict[str, Any]:
    """v4 → v5: no field changed; the manifest's version follows the records'."""
    return data


# version N → N+1, per record type; append only, never edit a released step.
UNIT_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _m002_unit, 2: _m003_unit,
                                                                         3: _m004_same, 4: _m005_unit}
MANIFEST_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _m002_manifest, 2: _m003_manifest,
                                                                             3: _m004_same, 4: _m005_manifest}
# Parquet tables, by the version a file is migrated from: {version: {table: {column: value older files get}}}.
TABLE_MIGRATIONS: dict[int, dict[str, dict[str, Any]]] = {
    2: {"cases": {"epoch": 0}, "case_metrics": {"epoch": 0}, "facts": {"epoch": 0}},
    3: {"faults": {"epoch": 0}, "anomalies": {"epoch": 0}},  # a v3 run of K epochs cannot say which: 0
}


def migrate(data: dict[str, Any], steps: dict[int, Callable[[dict[str, Any]], dict[str, Any]]],
            what: str) -> dict[str, Any]:
    """Bring one JSON record to SCHEMA_VERSION (a record without the field is version 1), or raise SchemaError."""
    if not isinstance(data, dict):
        raise SchemaError(f"{what}: a JSON object is required, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise SchemaError(f"{what}: schema_version {version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{what}: schema_version {version} was written by a newer hymem-eval "
                          f"(this one reads up to {SCHEMA_VERSION}); upgrade to read it")
    while version < SCHEMA_VERSION:
        step = steps.get(version)
        if step is None:
            raise SchemaError(f"{what}: no migration from schema_version {version}")
        data = step(dict(data))
        version += 1
        data["schema_version"] = version
    return data
