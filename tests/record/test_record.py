"""The run record: versioned records, migrations of older run directories, and imports that stay light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evals.record import (
    SCHEMA_VERSION,
    Anomaly,
    AnomalyKind,
    FaultRecord,
    Manifest,
    RunDirError,
    UnitsWriter,
    parse_unit,
    read_manifest,
    read_table,
    read_units,
    write_manifest,
    write_table,
)
from evals.report.compare import load_run

ROOT = Path(__file__).resolve().parents[2]

V1_UNIT = {  # a units.jsonl line as hymem-eval wrote it before records were versioned
    "case_id": "c1", "dataset": "d", "provider": "offline", "system": "hymem", "lang": "en", "tags": [],
    "status": "ok", "writes": [{"index": 0, "path": "chat", "request_id": "c1/w0", "success": True,
                                "codes": {"success": True, "error_code": None}, "reached": {"lm.extract": 1}}],
    "faults": [{"write": 0, "path": "chat", "site": "embed", "kind": "embed_error", "fired": True,
                "expected": {"success": False, "error_code": "EMBEDDING_FAILED"},
                "actual": {"success": True, "error_code": None}, "outcome": "wrong",
                "anomalies": [["DEGRADED_SUCCESS", "success=true under a fault that must fail; ops=1"]]}],
    "attempts": [{"provider": "offline", "model": "offline", "case_id": "c1", "site": "lm.extract"}],
}


def manifest(**fields) -> Manifest:
    base = dict(run_id="r", datasets=["d"], dataset_hash="h", n_cases=1, providers=["offline"], embedder="hash",
                faults="none", seed=0, concurrency=1, engine_version="0", prompt_hash="p")
    return Manifest(**{**base, **fields})


def test_importing_the_record_and_the_scorers_loads_no_dspy():
    code = ("import sys, evals.record, evals.record.catalogue, evals.scoring; "
            "print(sorted(m for m in ('dspy', 'evals.run.replay', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"


def test_every_record_carries_the_schema_version_through_units_jsonl(tmp_path: Path):
    run = parse_unit(json.dumps(V1_UNIT))
    writer = UnitsWriter(tmp_path)
    writer.append(run)
    writer.close()
    line = json.loads((tmp_path / "units.jsonl").read_text())
    assert line["schema_version"] == SCHEMA_VERSION
    assert line["writes"][0]["schema_version"] == line["faults"][0]["schema_version"] == SCHEMA_VERSION
    assert line["attempts"][0]["schema_version"] == SCHEMA_VERSION
    assert line["faults"][0]["expected"] == {"success": False, "error_code": "EMBEDDING_FAILED"}  # keys as set


def test_a_version_1_unit_is_migrated_with_its_anomalies_as_typed_records(tmp_path: Path):
    (tmp_path / "units.jsonl").write_text(json.dumps(V1_UNIT) + "\n")
    [run] = read_units(tmp_path)
    assert run.schema_version == SCHEMA_VERSION
    assert run.faults[0].anomalies == [Anomaly(kind=AnomalyKind.DEGRADED_SUCCESS,
                                               witness="success=true under a fault that must fail; ops=1")]
    assert run.faults[0].kinds == {AnomalyKind.DEGRADED_SUCCESS}


def test_a_unit_from_a_newer_writer_is_refused_in_one_line_naming_its_line(tmp_path: Path):
    newer = {**V1_UNIT, "schema_version": SCHEMA_VERSION + 1, "anomalies_v9": []}
    (tmp_path / "units.jsonl").write_text(json.dumps(V1_UNIT) + "\n" + json.dumps(newer) + "\n")
    with pytest.raises(RunDirError, match=r"units.jsonl:2: schema_version \d+ was written by a newer hymem-eval"):
        read_units(tmp_path)


def test_an_unknown_anomaly_kind_in_an_old_unit_says_which_line(tmp_path: Path):
    bad = json.loads(json.dumps(V1_UNIT))
    bad["faults"][0]["anomalies"] = [["NOT_A_KIND", "x"]]
    (tmp_path / "units.jsonl").write_text(json.dumps(bad) + "\n" + json.dumps(V1_UNIT) + "\n")
    with pytest.raises(RunDirError, match="units.jsonl:1: not a CaseRun record"):
        read_units(tmp_path)


def test_a_version_1_manifest_is_read_and_a_newer_one_refused(tmp_path: Path):
    data = manifest().model_dump()
    data.pop("schema_version")  # v1 manifests carried 1; either way it is migrated
    (tmp_path / "manifest.json").write_text(json.dumps({**data, "schema_version": 1}))
    assert read_manifest(tmp_path).schema_version == SCHEMA_VERSION
    (tmp_path / "manifest.json").write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(RunDirError, match="schema_version 99 was written by a newer hymem-eval"):
        read_manifest(tmp_path)


def test_the_committed_baseline_of_schema_version_1_still_loads():
    run = load_run(ROOT / "reports" / "baseline")
    assert run.manifest is not None and run.manifest.schema_version == SCHEMA_VERSION
    assert "rollback_correct_rate" in set(run.metrics["metric"])


def test_a_table_keeps_its_declared_types_when_empty_and_its_version_in_the_file(tmp_path: Path):
    import pyarrow.parquet as pq

    from evals.report.run_report import faults_frame

    write_table(tmp_path, "faults", faults_frame([], seed=0))
    meta = pq.read_schema(tmp_path / "faults.parquet").metadata
    assert meta[b"hymem.schema_version"] == str(SCHEMA_VERSION).encode()
    assert str(pq.read_schema(tmp_path / "faults.parquet").field("fired").type) == "bool"
    assert read_table(tmp_path, "faults").empty


def test_a_table_missing_a_declared_column_is_refused_by_name(tmp_path: Path):
    pd.DataFrame({"provider": ["p"], "metric": ["m"]}).to_parquet(tmp_path / "metrics.parquet")
    with pytest.raises(RunDirError, match=r"metrics.parquet: schema mismatch, missing columns \['dataset'"):
        read_table(tmp_path, "metrics")


def test_fault_record_properties_follow_the_outcome():
    record = FaultRecord.model_validate(V1_UNIT["faults"][0] | {"anomalies": []})
    assert record.checked and record.kinds == set()
    assert not FaultRecord.model_validate(V1_UNIT["faults"][0] | {"anomalies": [], "outcome": "indeterminate"}).checked


def test_write_manifest_round_trips(tmp_path: Path):
    write_manifest(tmp_path, manifest(verdict="valid"))
    assert read_manifest(tmp_path).verdict == "valid"


def test_the_fact_and_op_row_types_are_the_declared_table_columns():
    from evals.record import FactRow, OpRow, columns

    assert set(FactRow.__required_keys__) | {"matcher"} == set(columns("facts"))  # the matcher spec: added on write
    assert set(OpRow.__required_keys__) == set(columns("ops"))


def test_a_writes_ops_keep_their_keys_and_ids_through_units_jsonl(tmp_path: Path):
    applied = {"op": "UPDATE", "memory_id": 3, "target_id": 3, "text": "Tim lives in Oslo.", "subject": "user",
               "owner": "user", "kind": "fact", "refused": None}
    mem0 = {**applied, "op": "ADD", "memory_id": "9f1c-uuid", "target_id": None}  # mem0's ids are strings
    unit = {**V1_UNIT, "writes": [{**V1_UNIT["writes"][0], "ops": [applied, mem0]}]}
    writer = UnitsWriter(tmp_path)
    writer.append(parse_unit(json.dumps(unit)))
    writer.close()
    (run,) = read_units(tmp_path)
    assert [op.model_dump() for op in run.writes[0].ops] == [applied, mem0]
    assert json.loads((tmp_path / "units.jsonl").read_text())["writes"][0]["ops"] == [applied, mem0]


def test_a_message_holding_a_unicode_line_separator_stays_one_record(tmp_path: Path):
    # JSON leaves U+2028, U+0085 and \x1c raw; a reader splitting units.jsonl with str.splitlines() cut the record
    content = "line one\u2028[Bob]: forged\x85more\x1cend"
    payload = [{"role": "user", "content": content}]
    calls = [{"site": "lm.extract", "text": content, "reply": "{}"}]
    unit = {**V1_UNIT, "writes": [{**V1_UNIT["writes"][0], "payload": payload, "calls": calls}]}
    writer = UnitsWriter(tmp_path)
    writer.append(parse_unit(json.dumps(unit)))
    writer.append(parse_unit(json.dumps({**unit, "case_id": "c2"})))
    writer.close()
    text = (tmp_path / "units.jsonl").read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2  # escaped as JSON allows: one line for any reader
    runs = read_units(tmp_path)
    assert [r.case_id for r in runs] == ["c1", "c2"]
    assert runs[0].writes[0].payload == payload and runs[0].writes[0].calls == calls
    raw = text.replace("\\u2028", "\u2028").replace("\\u0085", "\x85")  # as a writer that left them raw
    (tmp_path / "units.jsonl").write_text(raw, encoding="utf-8")
    assert [r.case_id for r in read_units(tmp_path)] == ["c1", "c2"]  # the reader keeps such a record whole too
