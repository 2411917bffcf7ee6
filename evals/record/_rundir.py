"""Reading and writing a run directory: manifest.json, units.jsonl and the Parquet tables.

Every file is written whole-or-not (a temporary file, then a rename), except units.jsonl, which
is appended one finished unit per line and fsynced, so a crash loses at most the unit in flight.
Readers migrate an older schema_version or refuse it in one line naming the file.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import ValidationError
from pydantic_core import from_json, to_json

from evals.core.files import atomic_write
from evals.core.json_limits import MAX_DEPTH, TooDeep, deep_field, problem_line
from evals.core.redact import redact, redact_frame, redact_text
from evals.record._manifest import Manifest
from evals.record._records import CaseRun
from evals.record._tables import TABLES, arrow_schema, columns, pandas_dtypes
from evals.record._version import (
    MANIFEST_MIGRATIONS,
    SCHEMA_VERSION,
    TABLE_MIGRATIONS,
    UNIT_MIGRATIONS,
    SchemaError,
    migrate,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MANIFEST_FILE = "manifest.json"
UNITS_FILE = "units.jsonl"
_VERSION_KEY = b"hymem.schema_version"  # Parquet file metadata


class RunDirError(ValueError):
    """A run directory (or one of its files) that cannot be read: missing, torn, foreign or too new."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text`, redacted (no key ever reaches a file: `evals.core.redact`), whole-or-not."""
    text = redact_text(text)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# ---- manifest ---------------------------------------------------------------------------------------------


def read_manifest(run_dir: Path) -> Manifest:
    """The run's manifest, migrated to this schema_version; RunDirError when missing or unreadable."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {MANIFEST_FILE}, not a run directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Manifest.model_validate(migrate(data, MANIFEST_MIGRATIONS, str(path)))
    except SchemaError as exc:
        raise RunDirError(str(exc)) from exc
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError and ValidationError are ValueErrors
        count = exc.error_count() if isinstance(exc, ValidationError) else None
        raise RunDirError(f"{path}: not a run manifest ({f'{count} errors' if count else exc})") from exc


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    atomic_write_text(Path(run_dir) / MANIFEST_FILE, manifest.model_dump_json(indent=2))


# ---- units ------------------------------------------------------------------------------------------------


def parse_unit(line: str, where: str = UNITS_FILE) -> CaseRun:
    """One units.jsonl line as a CaseRun, migrated from its schema_version; SchemaError or ValueError else."""
    try:  # strict: JSON's own types only ("1" is not a number); nesting limited as every record read back
        run = CaseRun.model_validate_json(line, strict=True)  # the common case: a record of this version
        if run.schema_version == SCHEMA_VERSION:
            return run
    except ValidationError as exc:
        try:
            data = from_json(line)
        except ValueError:
            raise exc from None  # not JSON (e.g. torn): pydantic's message says where ("EOF while parsing")
        if not isinstance(data, dict) or data.get("schema_version", 1) == SCHEMA_VERSION:
            raise
    data = from_json(line)
    if (deep := deep_field(data)) is not None:
        raise TooDeep(deep, MAX_DEPTH)
    return CaseRun.model_validate(migrate(data, UNIT_MIGRATIONS, where))


def read_units(run_dir: Path, planned: Collection[tuple[str, str, int]] | None = None) -> list[CaseRun]:
    """The units of a run, last record per (provider, case_id, epoch).

    A record cut short by a crash (the last line, or a line a resumed run started after) is
    skipped: its unit never finished and is redone. Any other bad line raises RunDirError with
    its line number, and so does, given the run's `planned` units, a record of a unit not among them
    (a resumed run must not report a case it does not hold).
    """
    # errors="replace": a record torn inside a multi-byte character is still just a torn record
    # split("\n"), not splitlines(): a record's strings may hold U+2028, U+0085 or \x1c raw (JSON escapes the
    # characters below U+0020 only, \n among them), and splitlines() would cut the record there
    lines = (Path(run_dir) / UNITS_FILE).read_bytes().decode("utf-8", errors="replace").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    runs: dict[tuple[str, str, int], CaseRun] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{UNITS_FILE}:{lineno}"
        try:
            run = parse_unit(line, where)
        except SchemaError as exc:
            raise RunDirError(str(exc)) from exc
        except ValueError as exc:
            if (lineno == len(lines) or "EOF while parsing" in str(exc)) and _torn(line):
                continue  # a record whose JSON is whole but wrong is never torn: it is refused
            raise RunDirError(f"{where}: not a CaseRun record: {problem_line(exc)}") from exc
        unit = (run.provider, run.case_id, run.epoch)
        if planned is not None and unit not in planned:
            raise RunDirError(f"{where}: unit (provider {run.provider!r}, case {run.case_id!r}, epoch {run.epoch}) "
                              "is not one of this run's")
        runs[unit] = run
    return list(runs.values())


def in_report_order(runs: Collection[CaseRun], providers: list[str]) -> list[CaseRun]:
    """Units in the order a run scores and reports them: arm (as the manifest lists them), case id, epoch.

    Why one order: the bootstrap resamples cases by position, so a re-scored run must see its units in the order
    the run did, not the order they finished in (units.jsonl's), or its confidence intervals move."""
    rank = {label: i for i, label in enumerate(providers)}
    return sorted(runs, key=lambda r: (rank.get(r.provider, 99), r.case_id, r.epoch))


def _torn(line: str) -> bool:
    """Whether a line is not whole JSON (cut short by a crash), as opposed to whole JSON of a bad record."""
    try:
        from_json(line)
    except ValueError as exc:
        return "recursion limit" not in str(exc)
    return False


# The characters str.splitlines() breaks on that JSON leaves raw (it escapes those below U+0020): escaped, as JSON
# allows, so a record holding a message with them is still one line.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


class UnitsWriter:
    """Appends finished units to units.jsonl, one fsynced line each; safe across threads."""

    def __init__(self, run_dir: Path):
        path = Path(run_dir) / UNITS_FILE
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            with path.open("a", encoding="utf-8") as torn:  # a crash cut the last record: end its line
                torn.write("\n")
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def append(self, run: CaseRun) -> None:
        line = to_json(redact(run.model_dump(mode="json"))).decode("utf-8")  # every string redacted
        line = line.translate(_LINE_BREAKS) + "\n"  # one line for every reader, str.splitlines() too
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


# ---- tables -----------------------------------------------------------------------------------------------


def frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with the table's declared columns and types (an empty table keeps them)."""
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=arrow_schema(table)).to_pandas()


def write_table(run_dir: Path, table: str, data: pd.DataFrame) -> None:
    """Write `<table>.parquet` with its declared schema and this schema_version in the file metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(table).with_metadata({_VERSION_KEY: str(SCHEMA_VERSION).encode()})
    arrow = pa.Table.from_pandas(redact_frame(data[columns(table)]), schema=schema, preserve_index=False)
    atomic_write(Path(run_dir) / f"{table}.parquet", lambda tmp: pq.write_table(arrow, tmp))


def _holds(declared: str, stored: pa.DataType) -> bool:
    """Whether a stored Arrow type reads as the declared one: the same kind of value (any string encoding, an
    integer where a float is declared); an all-null column holds any."""
    import pyarrow.types as t

    if t.is_null(stored):
        return True
    if t.is_dictionary(stored):
        stored = stored.value_type
    if declared == "list<string>":
        return (t.is_list(stored) or t.is_large_list(stored)) and _holds("string", stored.value_type)
    kinds = {"string": (t.is_string, t.is_large_string), "int64": (t.is_integer,),
             "float64": (t.is_floating, t.is_integer), "bool": (t.is_boolean,)}
    return any(is_kind(stored) for is_kind in kinds[declared])


def read_table(run_dir: Path, table: str, required: bool = True, check_columns: bool = True) -> pd.DataFrame | None:
    """`<table>.parquet` of a run; RunDirError when torn, foreign, too new or (`check_columns`) missing declared
    columns or holding another type in one (strings for numbers: readers would fail deep inside, or compare
    strings). A missing optional table (`required=False`) is None."""
    import pandas as pd
    import pyarrow.parquet as pq

    path = Path(run_dir) / f"{table}.parquet"
    if not path.is_file():
        if required:
            raise RunDirError(f"{run_dir}: no {path.name}; the run has not finished (continue it with --resume)")
        return None
    try:
        arrow = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a torn or foreign file
        raise RunDirError(f"{path}: not a readable Parquet file ({exc})") from exc
    if check_columns and table in TABLES:
        stored = {field.name: field.type for field in arrow.schema}
        wrong = [f"{c.name} is {stored[c.name]}, declared {c.type}" for c in TABLES[table]
                 if c.name in stored and not _holds(c.type, stored[c.name])]
        if wrong:
            raise RunDirError(f"{path}: schema mismatch, {'; '.join(wrong)}")
    version = int((arrow.schema.metadata or {}).get(_VERSION_KEY, b"1"))
    if version > SCHEMA_VERSION:
        raise RunDirError(f"{path}: schema_version {version} was written by a newer hymem-eval "
                          f"(this one reads up to {SCHEMA_VERSION}); upgrade to read it")
    data: pd.DataFrame = arrow.to_pandas()
    for step in range(version, SCHEMA_VERSION):  # columns added since the file was written get their old value
        for column, value in TABLE_MIGRATIONS.get(step, {}).get(table, {}).items():
            if column not in data.columns:
                data[column] = pd.Series([value] * len(data), dtype=pandas_dtypes(table).get(column), index=data.index)
    if check_columns and table in TABLES and (missing := [c for c in columns(table) if c not in data.columns]):
        raise RunDirError(f"{path}: schema mismatch, missing columns {missing}")
    return data
