"""The Parquet tables of a run directory, each column declared once (name, Arrow type, meaning).

Writers build their frames against these declarations and readers check them, so an empty table
keeps its types and a foreign file is refused by name. pyarrow is imported only when a schema is
built, so `import evals.record` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string | int64 | float64 | bool | list<string>
    doc: str = ""


def _cols(*specs: tuple[str, str] | tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)


_CODES = ("success", "error_code", "agent_error_code", "reconcile_error_code")

TABLES: dict[str, tuple[Column, ...]] = {
    "cases": _cols(
        ("provider", "string", "the arm: the provider name, prefixed SYSTEM/ for an engine other than hymem"),
        ("system", "string", "the engine under test: hymem | mem0"),
        ("dataset", "string"), ("case_id", "string"), ("lang", "string"), ("tags", "list<string>"),
        ("status", "string", "ok | infra_error"),
        ("error", "string", "the infra error with its traceback, else null"),
        ("n_writes", "int64"), ("n_memories", "int64"), ("n_faults", "int64"), ("n_anomalies", "int64"),
        ("seconds", "float64"),
        ("epoch", "int64", "the repeat of the case (run --epochs K: 0..K-1)"),
    ),
    "faults": _cols(
        ("provider", "string"), ("system", "string"), ("dataset", "string"), ("case_id", "string"),
        ("write", "int64"), ("path", "string"), ("site", "string"), ("kind", "string"),
        ("occurrence", "int64"), ("fired", "bool"), ("seed", "int64"),
        *((f"expected_{c}", "bool" if c == "success" else "string") for c in _CODES),
        *((f"actual_{c}", "bool" if c == "success" else "string") for c in _CODES),
        ("retry_success", "bool"),
        ("outcome", "string", "ok | wrong | indeterminate | infra_error"),
        ("code_ok", "bool", "null unless the unit was checked (ok | wrong)"), ("rollback_ok", "bool"),
        ("retry_ok", "bool"),
        ("n_anomalies", "int64"),
        ("error", "string", "the harness exception of an infra_error unit"),
        ("wire_log", "string", "JSON: the fault proxy's log lines for this unit (HTTP providers), else null"),
        ("seconds", "float64"),
        ("epoch", "int64", "the repeat of the case (run --epochs K: 0..K-1)"),
    ),
    "write_failures": _cols(
        ("provider", "string"), ("system", "string"), ("dataset", "string"), ("case_id", "string"),
        ("epoch", "int64", "the repeat of the case (run --epochs K: 0..K-1)"),
        ("write", "int64"), ("path", "string"),
        ("injected", "bool", "always false: no fault was injected; the model's reply or its provider broke the write"),
        ("cause", "string", "parse | empty | schema | refused | unavailable (the model's) | engine (every reply valid)"),
        ("site", "string", "the call site whose reply or provider error broke the write"),
        ("detail", "string", "what the harness's own reading of the reply found"),
        ("reply", "string", "a redacted excerpt of the broken reply"),
        *((f"expected_{c}", "bool" if c == "success" else "string") for c in _CODES),
        *((f"actual_{c}", "bool" if c == "success" else "string") for c in _CODES),
        ("checked", "bool", "the store was read before and after and the write contract checked"),
        ("retry_success", "bool", "the retry under a new request_id, on a copy of the store, succeeded"),
        ("n_anomalies", "int64", "write-contract anomalies on this write (the unit's findings)"),
        ("anomalies", "list<string>", "their kinds"),
    ),
    "anomalies": _cols(
        ("kind", "string", "an AnomalyKind"), ("provider", "string"), ("system", "string"), ("dataset", "string"),
        ("case_id", "string"), ("write", "int64"), ("path", "string"), ("site", "string"), ("fault", "string"),
        ("seed", "int64"), ("expected", "string", "expected codes, JSON"), ("actual", "string", "actual codes, JSON"),
        ("witness", "string"),
        ("outcome", "string", "the unit's outcome: wrong (counted) | indeterminate (fault did not fire; not counted)"),
        ("epoch", "int64", "the repeat of the case (run --epochs K: 0..K-1)"),
    ),
    "coverage": _cols(
        ("provider", "string"), ("system", "string"), ("site", "string"), ("kind", "string"),
        ("faulted_units", "int64", "the fault fired and the unit was checked"),
        ("ok_units", "int64"), ("wrong_units", "int64"), ("indeterminate_units", "int64"),
        ("infra_error_units", "int64"), ("reached", "bool"),
    ),
    "metrics": _cols(
        ("provider", "string"), ("dataset", "string", "a dataset name, or all"),
        ("metric", "string", "a name from evals.record.catalogue"), ("value", "float64"), ("ci_low", "float64"),
        ("ci_high", "float64"), ("n", "int64", "what n counts is the catalogue's"), ("note", "string"),
    ),
    "case_metrics": _cols(
        ("provider", "string"), ("dataset", "string"), ("case_id", "string"), ("metric", "string"),
        ("num", "float64"), ("den", "float64"), ("epoch", "int64", "the repeat of the case"),
    ),
    "stability": _cols(
        ("provider", "string"), ("dataset", "string"), ("case_id", "string"), ("metric", "string"),
        ("epochs", "int64", "epochs that scored the case on this metric"),
        ("mean", "float64", "mean over those epochs of the case's value (num/den)"),
        ("min", "float64"), ("max", "float64"),
        ("passes", "int64", "epochs whose value was the metric's right value (1, or 0 for a share of mistakes)"),
        ("stability", "string", "stable-pass | stable-fail | flaky (some epochs right, some not)"),
    ),
    "attempts": _cols(
        ("dataset", "string"), ("provider", "string"), ("model", "string"),
        ("case_id", "string"), ("write", "int64"), ("unit", "string", "control | fault | retry | repeat | replay | concurrency | stranger | subjectless | natural (the retry of a naturally failed write)"),
        ("site", "string"), ("attempt", "int64"), ("status", "string"), ("error", "string"),
        ("latency_s", "float64"), ("prompt_tokens", "int64"), ("completion_tokens", "int64"),
        ("cost_usd", "float64"), ("cache_hit", "bool"), ("injected", "string"),
    ),
    "facts": _cols(
        ("provider", "string"), ("dataset", "string"), ("case_id", "string"),
        ("stage", "string", "proposed | stored"),
        ("gold_text", "string", "null for an unmatched prediction"), ("gold_subject", "string"),
        ("gold_owner", "string"),
        ("pred_text", "string", "null for a missed gold fact"), ("pred_subject", "string"), ("pred_owner", "string"),
        ("match_score", "float64", "the matcher's score of a matched pair (>= its threshold)"), ("matched", "bool"),
        ("subject_ok", "bool", "null unless matched"), ("owner_ok", "bool"),
        ("gold_class", "string", "user | named | assistant"), ("pred_class", "string"),
        ("note", "string", "why a prediction is left out of precision, infra_error, or judge_error (a failed judge call left the fact undecided)"),
        ("matcher", "string", "the --matcher spec that decided the match (semantic, text, llm:MODEL)"),
        ("epoch", "int64", "the repeat of the case"),
    ),
    "ops": _cols(
        ("provider", "string"), ("dataset", "string"), ("case_id", "string"),
        ("write", "int64", "write index, 0 = seeds"),
        ("source", "string", "proposed | applied"), ("op", "string"),
        ("fact_text", "string", "the new fact the op carries, if any"), ("fact_subject", "string"),
        ("target_id", "int64", "the existing memory it names"), ("target_text", "string"),
        ("target_subject", "string"),
        ("cross_subject", "bool", "null when no merge or the target is unknown"),
        ("refused", "string", "the engine's reason, for an op it refused and rewrote"),
    ),
}

_PANDAS = {"string": "string", "int64": "Int64", "float64": "float64", "bool": "boolean"}


def columns(table: str) -> list[str]:
    """The column names of a table, in order."""
    return [c.name for c in TABLES[table]]


def pandas_dtypes(table: str) -> dict[str, str]:
    """Nullable pandas dtypes of a table's scalar columns, for frames built row by row."""
    return {c.name: _PANDAS[c.type] for c in TABLES[table] if c.type in _PANDAS}


def arrow_schema(table: str) -> pa.Schema:
    """The table's pyarrow schema (built on call: pyarrow is imported lazily)."""
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
             "list<string>": pa.list_(pa.string())}
    return pa.schema([(c.name, types[c.type]) for c in TABLES[table]])
