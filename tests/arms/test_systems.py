"""The system-under-test seam: hymem behind the protocol, arm labels, fault plans, checker witnesses, the system column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evals.arms.base import MemorySystem, arm_label
from evals.arms.hymem_system import HymemSystem
from evals.arms.registry import site_kinds
from evals.cases.dataset import Case
from evals.check.checker import check_faulted_write
from evals.check.context import FaultedWrite
from evals.cli.main import main
from evals.core.errors import UsageError
from evals.faults.plan import Expected, FaultPlan, expected_outcome
from evals.pipeline import load_tuned_program, run_eval
from evals.record import CaseRun, FaultRecord, WriteRecord
from evals.report.run_report import write_report
from evals.run.provenance import Manifest
from evals.run.runner import RunConfig, prepare
from hymem.embedder import HashEmbedder
from hymem.offline import offline_lm
from tests.conftest import store_state, write_outcome

CASE = {"id": "ana-tea", "lang": "en", "user_id": "ana", "turns": [[{"role": "user", "content": "I like green tea."}]],
        "expect": {"facts": [{"text": "The user likes green tea.", "subject": "user", "owner": "user"}]}}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(CASE) + "\n", encoding="utf-8")
    return path


def test_hymem_is_a_memory_system_and_writes_through_the_protocol(tmp_path):
    case = Case.model_validate(CASE)
    system = HymemSystem(case, lambda c: offline_lm(), HashEmbedder(), FaultPlan.parse("sweep"))
    assert isinstance(system, MemorySystem)
    system.open(tmp_path / "store")
    outcome = system.write("chat", CASE["turns"][0], "ana", "w0", control=True)
    facts = outcome.proposed_facts  # what the engine said it proposed, not read from its trace table
    memories = system.memories("ana")
    system.close()
    assert outcome.success and outcome.codes["success"] is True and not outcome.fired
    assert outcome.reached == {"lm.extract": 1, "embed": 1, "lm.reconcile": 1, "store.commit": 1, "store.faiss": 1}
    assert [f["text"] for f in facts] == [m["text"] for m in memories] == ["The user likes green tea."]
    assert system.dim == 256 and system.snapshot(tmp_path / "store").tables["memories"][0]["request_id"] == "w0"


def test_a_hymem_run_keeps_its_labels_and_manifest_hash_and_gains_a_system_column(dataset, tmp_path):
    plain = RunConfig(datasets=[str(dataset)], embedder="hash", faults="none", out=tmp_path / "a", progress=False)
    explicit = plain.model_copy(update={"systems": ["hymem"], "out": tmp_path / "b"})

    def prepared(config):
        return prepare(config, matcher_spec="text", load_program=load_tuned_program).manifest

    assert prepared(plain).manifest_hash == prepared(explicit).manifest_hash
    outcome = run_eval(explicit)
    assert outcome.manifest.providers == ["offline"]
    for name in ("cases", "faults", "anomalies", "coverage"):
        assert "system" in pq.read_schema(outcome.run_dir / f"{name}.parquet").names, name
    cases = pq.read_table(outcome.run_dir / "cases.parquet").to_pylist()
    assert [(c["provider"], c["system"]) for c in cases] == [("offline", "hymem")]


def test_arm_labels_put_two_engines_on_one_provider_side_by_side():
    assert arm_label("hymem", "offline") == "offline"
    assert arm_label("mem0", "offline") == "mem0/offline"
    assert arm_label("mem0", "openai/gpt-4o-mini") == "mem0/openai/gpt-4o-mini"


def test_a_plan_over_another_engines_sites_sweeps_every_reached_site_and_kind_and_draws_the_same_faults_for_a_seed():
    kinds = {"a": ("x", "y"), "b": ("z",), "never": ("x",)}.__getitem__
    reached = {"a": 2, "b": 1}

    def plan_faults(spec: str, sites: tuple[str, ...], seed: int, key: str):
        return FaultPlan.parse(spec).faults_for_write(reached, seed, key, sites=sites, kinds=kinds)

    sweep = plan_faults("sweep", ("a", "b", "never"), 0, "u|c|0")
    assert [(f.site, f.kind, f.occurrence) for f in sweep] == [("a", "x", 0), ("a", "y", 0), ("a", "x", 1),
                                                                ("a", "y", 1), ("b", "z", 0)]
    assert plan_faults("none", ("a",), 0, "k") == []
    draw = [plan_faults("random:0.5", ("a", "b"), seed, "u|c|0") for seed in (1, 1, 2)]
    assert draw[0] == draw[1] and set(draw[0]) <= set(sweep)


def test_degraded_success_carries_the_leftover_state_as_its_witness():
    before = store_state(messages=[])
    after = store_state(messages=[{"id": "m1", "role": "user", "content": "I like tea."}])
    found = check_faulted_write(FaultedWrite(expected=Expected(success=False), result=write_outcome(True), before=before,
                                             after=after, control_after=before, retry_result=write_outcome(True),
                                             retry_after=before, repeat_after=before, dim=4))
    witness = {a.kind: a.witness for a in found}
    assert witness["DEGRADED_SUCCESS"] == ('success=true under a fault that must fail; ops=0; state diff: messages: '
                                          '+1 -0 e.g. {"content": "I like tea.", "id": "m1", "role": "user"}')
    assert witness["L1_NOT_ROLLED_BACK"] == 'messages: +1 -0 e.g. {"content": "I like tea.", "id": "m1", "role": "user"}'


def test_a_failure_is_judged_on_the_expected_fields_only_so_a_system_may_say_what_it_raised():
    state = store_state(memories=[])
    failed = write_outcome(False, raised="LLMError")
    def faulted(expected: Expected) -> FaultedWrite:
        return FaultedWrite(expected=expected, result=failed, before=state, after=state, control_after=state,
                            retry_result=write_outcome(True), retry_after=state, repeat_after=state, dim=4)

    assert check_faulted_write(faulted(Expected(success=False))) == []
    wrong = check_faulted_write(faulted(expected_outcome("lm.extract", "garbage")))
    assert [a.kind for a in wrong] == ["WRONG_ERROR_CODE"]


def _unit(provider: str, system: str, site: str, kind: str) -> CaseRun:
    record = FaultRecord(write=0, path="chat", site=site, kind=kind, fired=True, expected={"success": False},
                         actual={"success": False}, outcome="ok")
    return CaseRun(case_id="c1", dataset="d", provider=provider, system=system, lang="en", tags=[], status="ok",
                   writes=[WriteRecord(index=0, path="chat", request_id="c1/w0", success=True, codes={})],
                   faults=[record])


def test_the_report_names_each_units_system_and_lists_coverage_over_that_systems_sites(tmp_path):
    manifest = Manifest(run_id="r", datasets=["d"], dataset_hash="h", n_cases=1, providers=["p", "mem0/p"],
                        embedder="hash", faults="sweep", seed=0, concurrency=1, engine_version="0", prompt_hash="x")
    runs = [_unit("p", "hymem", "lm.reconcile", "garbage"), _unit("mem0/p", "mem0", "lm.extract", "empty_content")]
    write_report(tmp_path, manifest, runs)
    cases = pq.read_table(tmp_path / "cases.parquet").to_pylist()
    assert [(c["provider"], c["system"]) for c in cases] == [("p", "hymem"), ("mem0/p", "mem0")]
    coverage = pq.read_table(tmp_path / "coverage.parquet").to_pylist()
    mem0_pairs = {(r["site"], r["kind"]) for r in coverage if r["provider"] == "mem0/p"}
    assert mem0_pairs == set(site_kinds("mem0", {"chat"})) and ("lm.reconcile", "garbage") not in mem0_pairs
    assert {r["system"] for r in coverage if r["provider"] == "p"} == {"hymem"}
    reached = [(r["site"], r["kind"]) for r in coverage if r["reached"]]
    assert reached == [("lm.reconcile", "garbage"), ("lm.extract", "empty_content")]
    assert "## mem0/p" in (tmp_path / "summary.md").read_text()


def test_mem0_coverage_counts_only_the_sites_its_writes_could_reach():
    from importlib.util import find_spec

    from evals.report.run_report import coverage_frame, unreached_pairs

    links_entities = find_spec("spacy") is not None and find_spec("en_core_web_sm") is not None
    chat_only = _unit("mem0/p", "mem0", "lm.extract", "empty_content")  # no seeds: no infer=False write
    pairs = {(r.site, r.kind) for r in coverage_frame([chat_only], ["mem0/p"]).itertuples()}
    sites = {site for site, _ in pairs}
    assert {"embed.query", "lm.extract", "embed.facts"} <= sites and "embed.memory" not in sites
    assert ("embed.entities" in sites) == links_entities  # mem0 links entities only with spaCy and its model
    unreached = unreached_pairs(coverage_frame([chat_only], ["mem0/p"]))["mem0/p"]
    assert not [p for p in unreached if p.startswith("embed.memory")]  # no gap the writes could not have reached
    seeded = chat_only.model_copy(update={"writes": [WriteRecord(index=0, path="extracted", request_id="c1/w0",
                                                                  success=True, codes={}), *chat_only.writes]})
    assert "embed.memory" in {r.site for r in coverage_frame([seeded], ["mem0/p"]).itertuples()}


def test_an_unknown_system_is_refused_before_any_work(dataset, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--system", "nope", "--dataset", str(dataset), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    with pytest.raises(UsageError, match="--system 'nope'"):
        prepare(RunConfig(datasets=[str(dataset)], systems=["nope"], embedder="hash", out=tmp_path / "o"),
                matcher_spec="text", load_program=load_tuned_program)
    assert not (tmp_path / "o").exists()


def test_a_sweep_leaves_dspys_process_wide_trace_as_it_found_it(tmp_path):
    """A long run's memory does not grow by every write: the harness's writes are not appended to DSPy's trace
    (which an optimiser reads and the checks do not), so later units cost what earlier ones did."""
    import dspy

    from evals.run.replay import CaseReplayer, UnitModels

    trace = dspy.settings.trace
    before = len(trace) if trace is not None else 0
    run = CaseReplayer(Case.model_validate(CASE), "one", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("sweep"),
                       0).run()
    assert run.status == "ok" and run.faults and all(f.outcome == "ok" for f in run.faults)
    assert (len(dspy.settings.trace) if dspy.settings.trace is not None else 0) == before
