"""The record carries the gold each unit was scored against: a run is re-scored from its own directory after its
dataset files are gone, with the numbers the files gave; a record from before the gold (schema v4) still reads, and
is re-scored from the dataset files, checked against the run's hash, or refused in one line saying why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from evals.cases.dataset import Case, Expect, load_cases
from evals.cases.gold import MISATTRIBUTED, case_gold
from evals.pipeline import run_eval
from evals.record import SCHEMA_VERSION, CaseGold, FlaggedLabels, read_units
from evals.report.rescore import RescoreError, rescore
from evals.run.runner import RunConfig

ROOT = Path(__file__).resolve().parents[2]
CASES = 30  # the first cases of chat_en: seeds, profiles, updates, separate pairs, absent statements, no_memory
TABLES = ("metrics", "case_metrics", "facts", "ops")


def _suite(directory: Path) -> Path:
    directory.mkdir(parents=True)
    lines = (ROOT / "datasets" / "chat_en.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    path = directory / "suite.jsonl"
    path.write_text("".join(lines[:CASES]), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished run of a dataset file of its own (scored by `text`), its manifest then saying another matcher
    scored it: `rescore(..., "text")` must score it again rather than hand back the run."""
    base = tmp_path_factory.mktemp("gold")
    out = base / "run"
    run_eval(RunConfig(datasets=[str(_suite(base / "data"))], embedder="hash", faults="none", out=out,
                       progress=False, matcher="text"))
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "matcher_spec": "llm:other"}))
    return out


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("rescored"))
    return to


def _as_schema_4(run_dir: Path) -> None:
    """units.jsonl as hymem-eval wrote it before units carried their gold."""
    lines = [json.loads(line) for line in (run_dir / "units.jsonl").read_text(encoding="utf-8").splitlines()]
    for line in lines:
        del line["gold"]
        line["schema_version"] = 4
    (run_dir / "units.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _assert_same_tables(a: Path, b: Path, timed_again: bool = False) -> None:
    """The scored tables of two report directories hold the same rows; `timed_again`: but for the wall-clock
    latencies (a unit was replayed again)."""
    for table in TABLES:
        frames = [pd.read_parquet(d / f"{table}.parquet") for d in (a, b)]
        if timed_again and table == "metrics":
            frames = [f[~f.metric.str.startswith("latency_")].reset_index(drop=True) for f in frames]
        assert_frame_equal(*frames, obj=table)


@pytest.mark.ci_heavy  # the run_dir fixture: a run of 30 cases (run by `nox -s heavy`)
def test_every_unit_records_its_cases_gold_once(run_dir: Path):
    cases = {c.id: c for c in load_cases([run_dir.parent / "data" / "suite.jsonl"])}
    runs = read_units(run_dir)
    assert len(runs) == CASES and {r.dataset for r in runs} == {"suite"}
    assert all(r.gold == case_gold(cases[r.case_id]) for r in runs)
    golds = [r.gold for r in runs if r.gold is not None]
    assert any(g.seeds for g in golds) and any(g.updates for g in golds) and any(g.separate for g in golds)
    assert any(g.profile for g in golds) and any(g.absent for g in golds) and any(g.no_memory for g in golds)
    line = json.loads((run_dir / "units.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert line["schema_version"] == SCHEMA_VERSION and "gold" in line
    assert all("gold" not in fault for fault in line["faults"])  # per unit, never per faulted run


@pytest.mark.ci_heavy  # the run_dir fixture: a run of 30 cases (run by `nox -s heavy`)
def test_a_run_is_rescored_from_its_record_after_its_dataset_file_is_moved_away(run_dir: Path, tmp_path: Path):
    # reference: the same units re-scored the old way, from the dataset file (present), checked by its hash
    old = _copy(run_dir, tmp_path / "old")
    _as_schema_4(old)
    reference = rescore(old, "text")
    # the run as recorded, its dataset file moved away: nothing but units.jsonl and the manifest is read
    data = run_dir.parent / "data"
    moved = tmp_path / "moved-data"
    shutil.move(str(data), str(moved))
    try:
        rescored = rescore(_copy(run_dir, tmp_path / "new"), "text")
    finally:
        shutil.move(str(moved), str(data))
    assert rescored == tmp_path / "new" / "rescored" / "text"
    _assert_same_tables(reference, rescored)
    _assert_same_tables(run_dir, rescored)  # and what the run itself reported, scored with the file present
    assert json.loads((rescored / "manifest.json").read_text())["matcher_spec"] == "text"


@pytest.mark.ci_heavy  # the run_dir fixture: a run of 30 cases (run by `nox -s heavy`)
def test_a_schema_4_unit_reads_without_gold_and_rescores_from_the_dataset_files(run_dir: Path, tmp_path: Path,
                                                                                 capsys):
    old = _copy(run_dir, tmp_path / "old")
    _as_schema_4(old)
    runs = read_units(old)
    assert runs and all(r.gold is None and r.schema_version == SCHEMA_VERSION for r in runs)
    rescore(old, "text")
    err = capsys.readouterr().err
    assert f"{CASES} case(s) were recorded without their gold" in err and "dataset hash" in err
    data = run_dir.parent / "data"
    moved = tmp_path / "moved-data"
    shutil.move(str(data), str(moved))
    try:
        with pytest.raises(RescoreError, match="predates schema v5 and carries no gold, so re-scoring it needs its "
                                               "dataset files: cannot reload"):
            rescore(_copy(old, tmp_path / "old2"), "text")
    finally:
        shutil.move(str(moved), str(data))


@pytest.mark.ci_heavy  # the run_dir fixture: a run of 30 cases (run by `nox -s heavy`)
def test_a_resumed_schema_4_run_scores_its_old_units_from_the_dataset(run_dir: Path, tmp_path: Path):
    resumed = _copy(run_dir, tmp_path / "resumed")
    manifest = json.loads((resumed / "manifest.json").read_text())
    (resumed / "manifest.json").write_text(json.dumps({**manifest, "matcher_spec": "text"}))
    _as_schema_4(resumed)
    lines = (resumed / "units.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (resumed / "units.jsonl").write_text("".join(lines[:-1]), encoding="utf-8")  # the last unit never finished
    run_eval(RunConfig(datasets=[str(run_dir.parent / "data" / "suite.jsonl")], embedder="hash", faults="none",
                       out=resumed, progress=False, matcher="text", resume=True))
    runs = read_units(resumed)
    assert sum(r.gold is None for r in runs) == CASES - 1  # the record is kept as it was written
    _assert_same_tables(run_dir, resumed, timed_again=True)


def test_the_gold_carries_every_key_of_a_cases_expect_and_its_flagged_labels():
    case = Case.model_validate({
        "id": "c", "lang": "en", "user_id": "u", "path": "chat",
        "memories": [{"text": "The user lives in Paris."}, {"text": "Tom is a chef.", "subject": "Tom"}],
        "turns": [[{"role": "user", "content": "I moved to Berlin."}], [{"role": "user", "content": "Hi."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}], "profile": {"location": "Berlin", "name": None},
                   "profile_excludes": ["Tom"], "separate": [["The user lives in Berlin.", "Tom is a chef."]],
                   "updates": [{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}],
                   "absent": ["The user lives in Paris."], "no_memory": False},
        "meta": {"gold": "clean", "flagged": [{"reasons": [MISATTRIBUTED], "clean_drop": True},
                                              {"reasons": ["other"], "clean_drop": False}]}})
    gold = case_gold(case)
    assert set(Expect.model_fields) <= set(CaseGold.model_fields)  # a new gold key must reach the record too
    for key in Expect.model_fields:
        assert gold.model_dump()[key] == case.expect.model_dump()[key], key
    assert [(m.text, m.subject, m.owner) for m in gold.seeds] == [("The user lives in Paris.", "user", "user"),
                                                                 ("Tom is a chef.", "Tom", "user")]
    assert gold.turns == 2
    assert gold.flagged_labels == FlaggedLabels(flagged=2, misattributed=1, left_out=1)
    assert case_gold(case.model_copy(update={"expect": Expect()})).facts is None  # None: facts not scored
