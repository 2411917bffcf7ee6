"""The oracle providers driven through the real engine: gold in, exactly the gold (or the planned errors) out."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from evals.arms.oracle import ERROR_KINDS, oracle_lm, oracle_plan, parse_oracle_spec
from evals.arms.providers import provider_factory
from evals.cases.dataset import Case, bundled_dataset_dir, load_cases
from evals.cli.main import main
from evals.core.errors import UsageError
from evals.faults.plan import FaultPlan
from evals.pipeline import run_eval
from evals.record import CaseRun
from evals.run.replay import CaseReplayer, UnitModels
from evals.run.runner import RunConfig
from hymem.client import HyMemoryClient
from hymem.embedder import HashEmbedder

BUNDLED = load_cases([bundled_dataset_dir()])
NOISY = "oracle:flip_owner=0.2,swap_subject=0.1,drop=0.1,seed=7"


def case(**fields) -> Case:
    return Case.model_validate({"lang": "en", "user_id": "u", **fields})


HAND_MADE = [
    case(id="seeded-update", tags=["update", "separate"],
         memories=[{"text": "The user lives in Paris."}, {"text": "John lives in Paris.", "subject": "John"},
                   {"text": "The user likes tea."}],
         turns=[[{"role": "user", "name": "Tim", "content": "I moved to Berlin."},
                 {"role": "assistant", "name": "John", "content": "I still live in Paris. I am a nurse."}]],
         expect={"facts": [{"text": "The user lives in Berlin."},
                           {"text": "John is a nurse.", "subject": "John"}],
                 "updates": [{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}],
                 "profile": {"location": "Berlin"}}),
    case(id="working", path="working", tags=["working"],
         turns=[[{"role": "user", "content": "Our project uses Python 3.11. The tests fail on import."},
                 {"role": "assistant", "content": "The fix was to install the package in editable mode."}]],
         expect={"facts": [{"text": "The user's project uses Python 3.11."},
                           {"text": "The assistant learned that installing the package in editable mode fixes "
                                    "import errors in the tests.", "kind": "experience"}]}),
    case(id="nothing", tags=["no-memory"], turns=[[{"role": "user", "content": "Hi!"}]],
         expect={"facts": [], "no_memory": True}),
    case(id="two-turns", tags=["multi-turn"],
         turns=[[{"role": "user", "content": "I live in Rome."}], [{"role": "user", "content": "I moved to Oslo."}]],
         expect={"facts": [{"text": "The user lives in Oslo."}], "absent": ["The user lives in Rome."]}),
]


def replay(c: Case, factory) -> CaseRun:
    run = CaseReplayer(c, "x", "oracle", UnitModels(lm_factory=factory, embedder=HashEmbedder()),
                       FaultPlan.parse("none"), 0).run()
    assert run.status == "ok", run.error
    return run


def new_memories(c: Case, run: CaseRun) -> list[tuple[str, str, str, str]]:
    seeds = {m.text for m in c.memories}
    return sorted((m["text"], m["subject"], m["owner"], m["kind"]) for m in run.memories if m["text"] not in seeds)


def live_seeds(c: Case, run: CaseRun) -> set[str]:
    seeds = {m.text for m in c.memories}
    return {m["text"] for m in run.memories if m["text"] in seeds}


def named_humans(c: Case) -> set[str]:
    return {m["name"] for turn in c.turns for m in turn if m.get("role") == "assistant" and m.get("name")}


def user_name(c: Case) -> str | None:
    return next((m["name"] for turn in c.turns for m in turn if m.get("role") == "user" and m.get("name")), None)


# ---------------------------------------------------------------------------------------------- the oracle

# Every bundled case in CI (the rest marked ci_heavy, run by `nox -s heavy`); the default run replays every sixth
# case of the bundled suites, in order, and the hand-made ones.
ORACLE_CASES = [c if i % 6 == 0 else pytest.param(c, marks=pytest.mark.ci_heavy) for i, c in enumerate(BUNDLED)]


@pytest.mark.parametrize("c", ORACLE_CASES + HAND_MADE, ids=lambda c: c.id)
def test_oracle_leaves_exactly_the_gold(c):
    run = replay(c, provider_factory("oracle", [c]))
    gold = sorted((f.text, f.subject, f.owner, f.kind) for f in c.expect.facts or [])
    assert new_memories(c, run) == gold
    assert live_seeds(c, run) == {m.text for m in c.memories} - {u.old for u in c.expect.updates}
    expected_profile = {k: v for k, v in c.expect.profile.items() if v is not None}  # null: must stay empty
    if user_name(c) and c.path == "chat":  # the working path keeps no L0 profile (a trajectory is about the work)
        expected_profile["name"] = user_name(c)  # the engine always trusts the role=user name
    assert run.profile == expected_profile


def test_updates_supersede_the_old_fact_and_never_cross_subjects():
    c = HAND_MADE[0]
    run = replay(c, provider_factory("oracle", [c]))
    seeds, last = run.writes[0], run.writes[-1]
    assert [op.op for op in seeds.ops] == ["ADD", "ADD", "ADD"]
    by_text = {op.text: op for op in last.ops}
    paris = next(op.memory_id for op in seeds.ops if op.text == "The user lives in Paris.")
    assert by_text["The user lives in Berlin."].op == "SUPERSEDE"
    assert by_text["The user lives in Berlin."].target_id == paris
    assert by_text["John is a nurse."].op == "ADD"
    assert not any(op.refused for w in run.writes for op in w.ops)


def test_facts_are_emitted_once_at_the_last_turn():
    c = HAND_MADE[3]
    run = replay(c, provider_factory("oracle", [c]))
    assert run.writes[0].proposed_facts == []
    assert [f["text"] for f in run.writes[1].proposed_facts] == ["The user lives in Oslo."]


def test_the_oracle_refuses_a_conversation_that_is_not_one_of_its_turns(tmp_path):
    with HyMemoryClient(path=tmp_path, lm=oracle_lm(HAND_MADE[3]), embedder="hash") as client:
        result = client.add([{"role": "user", "content": "I live in Lima."}], user_id="u")
    assert not result.success and result.error_code == "LLM_ERROR"
    assert "no turn that renders" in result.message


# ---------------------------------------------------------------------------------------------- the noisy plan

def test_parse_reads_rates_and_seed():
    spec = parse_oracle_spec(NOISY)
    assert (spec.flip_owner, spec.swap_subject, spec.drop, spec.seed) == (0.2, 0.1, 0.1, 7)
    assert not parse_oracle_spec("oracle").noisy and spec.noisy


@pytest.mark.parametrize(("spec", "message"), [
    ("oracle:flip=0.2", "unknown key 'flip'"),
    ("oracle:drop=1.5", "drop must be a rate in [0, 1]"),
    ("oracle:drop=-0.1", "drop must be a rate in [0, 1]"),
    ("oracle:drop=nan", "drop must be a rate in [0, 1]"),
    ("oracle:drop=lots", "drop must be a rate in [0, 1]"),
    ("oracle:seed=x", "seed must be an integer"),
    ("oracle:drop", "'drop' is not key=value"),
    ("oracle:", "'' is not key=value"),
    ("oracle:drop=0.1,drop=0.2", "drop is given twice"),
])
def test_parse_errors_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        provider_factory(spec, BUNDLED)


def test_a_bad_oracle_spec_is_a_usage_error_exit_2(tmp_path, capsys):
    with pytest.raises(UsageError, match="unknown key"):
        run_eval(RunConfig(datasets=[str(bundled_dataset_dir())], providers=["oracle:owner=0.1"], embedder="hash",
                           faults="none", out=tmp_path / "o", progress=False))
    assert main(["run", "--lm", "oracle:drop=2", "--embedder", "hash", "--faults", "none",
                 "--out", str(tmp_path / "p"), "--no-progress"]) == 2
    assert "drop must be a rate" in capsys.readouterr().err


def test_the_plan_perturbs_exactly_round_rate_times_n_per_kind():
    n = sum(len(c.expect.facts or []) for c in BUNDLED)
    plan = oracle_plan(NOISY, BUNDLED)
    assert set(plan) == {c.id for c in BUNDLED}
    spec = parse_oracle_spec(NOISY)
    for kind in ERROR_KINDS:
        chosen = [(cid, p.fact) for cid, ps in plan.items() for p in ps if p.kind == kind]
        assert len(chosen) == len(set(chosen)) == round(getattr(spec, kind) * n)


def test_the_plan_is_deterministic_in_the_seed_and_differs_across_seeds():
    assert oracle_plan(NOISY, BUNDLED) == oracle_plan(NOISY, BUNDLED)
    assert oracle_plan(NOISY, BUNDLED) != oracle_plan(NOISY.replace("seed=7", "seed=8"), BUNDLED)
    assert all(not ps for ps in oracle_plan("oracle", BUNDLED).values())
    everything = oracle_plan("oracle:drop=1", BUNDLED)
    assert all(len(everything[c.id]) == len(c.expect.facts or []) for c in BUNDLED)


def test_each_error_kind_changes_what_it_says_and_nothing_else():
    plan = oracle_plan("oracle:flip_owner=0.5,swap_subject=0.5,drop=0.5,seed=3", BUNDLED)
    for c in BUNDLED:
        people = {f.subject for f in [*(c.expect.facts or []), *c.memories]} | {
            m["name"] for turn in c.turns for m in turn if m.get("role") == "assistant" and m.get("name")}
        people -= {"user", "assistant"}
        for p in plan[c.id]:
            fact = (c.expect.facts or [])[p.fact]
            assert p.text == fact.text
            if p.kind == "flip_owner":
                assert (p.before, p.after) == (fact.owner, {"user": "agent", "agent": "user"}[fact.owner])
            elif p.kind == "swap_subject":
                assert p.before == fact.subject
                if fact.subject == "user":
                    assert p.after in people if people else p.after == "assistant"
                else:
                    assert p.after == "user"
            else:
                assert p.before is None and p.after is None


@pytest.mark.ci_heavy  # replays every bundled case (run by `nox -s heavy`)
def test_the_noisy_oracle_leaves_the_gold_with_exactly_the_planned_errors():
    factory = provider_factory(NOISY, BUNDLED)
    plan = oracle_plan(NOISY, BUNDLED)
    counts = dict.fromkeys(ERROR_KINDS, 0)
    for c in (c for c in BUNDLED if plan[c.id]):
        errors = {(p.fact, p.kind): p for p in plan[c.id]}
        expected, replaced = [], set()
        for i, f in enumerate(c.expect.facts or []):
            if (i, "drop") in errors:
                counts["drop"] += 1
                continue
            owner = errors[(i, "flip_owner")].after if (i, "flip_owner") in errors else f.owner
            subject = errors[(i, "swap_subject")].after if (i, "swap_subject") in errors else f.subject
            counts["flip_owner"] += owner != f.owner
            counts["swap_subject"] += subject != f.subject
            if subject in ("user", "用户") and f.subject in named_humans(c) and f.text.startswith(f.subject):
                subject = f.subject  # the engine's guard: a fact opening with a named human's name is theirs
            expected.append((f.text, subject, owner, f.kind))
            if subject == f.subject:  # a swapped subject cannot supersede: the engine refuses cross-subject ops
                replaced |= {u.old for u in c.expect.updates if u.new == f.text}
        run = replay(c, factory)
        assert new_memories(c, run) == sorted(expected), c.id
        assert live_seeds(c, run) == {m.text for m in c.memories} - replaced, c.id
    spec, n = parse_oracle_spec(NOISY), sum(len(c.expect.facts or []) for c in BUNDLED)
    assert counts["drop"] == round(spec.drop * n)
    dropped = {(cid, p.fact) for cid, ps in plan.items() for p in ps if p.kind == "drop"}
    for kind in ("flip_owner", "swap_subject"):
        assert counts[kind] == sum(p.kind == kind and (cid, p.fact) not in dropped for cid, ps in plan.items()
                                   for p in ps)


def test_a_noisy_factory_refuses_a_case_it_did_not_plan():
    with pytest.raises(ValueError, match="not among the cases"):
        provider_factory(NOISY, BUNDLED)(HAND_MADE[0])
    assert provider_factory("oracle", BUNDLED)(HAND_MADE[0]) is not None


# ---------------------------------------------------------------------------------------------- end to end

@pytest.mark.ci_heavy  # a run of every bundled case; the default run replays a sixth of them above (run by `nox -s heavy`)
def test_every_bundled_case_replays_ok_under_the_oracle(tmp_path):
    outcome = run_eval(RunConfig(datasets=[str(bundled_dataset_dir())], providers=["oracle"], embedder="hash",
                                 faults="none", out=tmp_path / "o", progress=False))
    assert outcome.units == len(BUNDLED)
    units = [json.loads(line) for line in (outcome.run_dir / "units.jsonl").read_text().splitlines()]
    failed = {u["case_id"]: u["error"] for u in units if u["status"] != "ok"}
    assert not failed


def test_the_oracle_survives_a_fault_sweep():
    c = HAND_MADE[0]
    with tempfile.TemporaryDirectory() as tmp:
        cases_file = Path(tmp) / "one.jsonl"
        cases_file.write_text(json.dumps(c.model_dump(mode="json", exclude={"source", "line"})) + "\n")
        outcome = run_eval(RunConfig(datasets=[str(cases_file)], providers=["oracle"], embedder="hash",
                                     out=Path(tmp) / "o", progress=False))
    assert outcome.verdict == "valid"
