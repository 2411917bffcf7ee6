"""The run record: typed, versioned records of a run, the Parquet tables, the run-directory I/O and
the metric catalogue.

It imports neither dspy nor the executor (`evals.replay`), so scorers, report, compare, gate and
plots can read a run without loading the engine. Implementation lives in the private modules.
"""

from evals.record._manifest import Manifest, epoch_seed
from evals.record._records import (
    CODE_KINDS,
    RETRY_KINDS,
    STATE_KINDS,
    Anomaly,
    AnomalyKind,
    Attempt,
    CaseMetricRow,
    CaseRun,
    Codes,
    FaultRecord,
    Finding,
    MetricRow,
    OpRecord,
    Outcome,
    Record,
    Status,
    Witnessed,
    WriteRecord,
)
from evals.record._rundir import (
    MANIFEST_FILE,
    UNITS_FILE,
    RunDirError,
    UnitsWriter,
    atomic_write,
    atomic_write_text,
    frame,
    parse_unit,
    read_manifest,
    read_table,
    read_units,
    write_manifest,
    write_table,
)
from evals.record._tables import TABLES, Column, arrow_schema, columns, pandas_dtypes
from evals.record._version import SCHEMA_VERSION, SchemaError, migrate

__all__ = [
    "CODE_KINDS",
    "MANIFEST_FILE",
    "RETRY_KINDS",
    "SCHEMA_VERSION",
    "STATE_KINDS",
    "TABLES",
    "UNITS_FILE",
    "Anomaly",
    "AnomalyKind",
    "Attempt",
    "CaseMetricRow",
    "CaseRun",
    "Codes",
    "Column",
    "FaultRecord",
    "Finding",
    "Manifest",
    "MetricRow",
    "Outcome",
    "OpRecord",
    "Record",
    "RunDirError",
    "SchemaError",
    "Status",
    "UnitsWriter",
    "Witnessed",
    "WriteRecord",
    "arrow_schema",
    "atomic_write",
    "atomic_write_text",
    "columns",
    "epoch_seed",
    "frame",
    "migrate",
    "pandas_dtypes",
    "parse_unit",
    "read_manifest",
    "read_table",
    "read_units",
    "write_manifest",
    "write_table",
]
