"""Prompt tuning: split, metric, optimisers (offline and scripted), saving, and `run --program`."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from evals.cases.dataset import bundled_dataset_dir, canonical_json, load_cases
from evals.cli.main import main
from evals.tuning import (
    CaseMetric,
    ErrorLog,
    apply_to_program,
    load_manifest,
    load_program,
    make_examples,
    make_student,
    reconcile_inputs,
    split_cases,
)
from evals.tuning.tune import TuneConfig, TuneError, summary_text, tune
from hymem.client import HyMemoryClient
from hymem.program import MemoryProgram
from hymem.testing import ScriptedLM
from tests.conftest import extract_reply

ALL = {c.id: c for c in load_cases([bundled_dataset_dir()])}
TRAIN = ["en-001-tim-john", "en-002-unnamed-teacher", "en-003-named-maria", "en-005-sara-ibm"]
DEV = ["en-004-john-pilot-trap"]
MISSED_BY_OFFLINE = ["en-015-openai-image-part", "en-050-long-printer-log", "en-061-sarcastic-monday"]


def write_cases(path: Path, ids: list[str]) -> str:
    path.write_text("".join(canonical_json(ALL[i]) + "\n" for i in ids), encoding="utf-8")
    return str(path)


@pytest.fixture
def data(tmp_path: Path) -> dict[str, str]:
    return {"train": write_cases(tmp_path / "train.jsonl", TRAIN), "dev": write_cases(tmp_path / "dev.jsonl", DEV),
            "missed": write_cases(tmp_path / "missed.jsonl", MISSED_BY_OFFLINE)}


def fact(text: str, subject: str, owner: str = "user") -> dict:
    return {"text": text, "subject": subject, "owner": owner, "kind": "fact"}


# ---------------------------------------------------------------------------------------------- split


def test_seeded_split_puts_no_case_in_both_sets_and_repeats_with_its_seed():
    cases = [c for c in ALL.values() if c.lang == "en"][:20]
    a = split_cases(cases, None, seed=3, dev_fraction=0.25)
    b = split_cases(cases, None, seed=3, dev_fraction=0.25)
    other = split_cases(cases, None, seed=4, dev_fraction=0.25)
    train, dev = {c.id for c in a.train}, {c.id for c in a.dev}
    assert not train & dev and train | dev == {c.id for c in cases} and len(dev) == 5 and a.seeded
    assert [c.id for c in b.dev] == [c.id for c in a.dev]
    assert {c.id for c in other.dev} != dev


def test_a_case_given_in_both_sets_stays_in_dev_only():
    train = [ALL[i] for i in TRAIN + DEV]
    split = split_cases(train, [ALL[i] for i in DEV], seed=0)
    assert [c.id for c in split.dev] == DEV and DEV[0] not in {c.id for c in split.train}
    assert split.overlap_removed == DEV and not split.seeded


def test_one_conversation_under_two_ids_never_lands_on_both_sides():
    base = [c for c in ALL.values() if c.lang == "en"][:10]
    twins = [c.model_copy(update={"id": c.id + "-twin", "memories": []}) for c in base]  # same turns, new id
    for seed in range(4):
        split = split_cases(base + twins, None, seed=seed)
        train, dev = ({c.id.removesuffix("-twin") for c in s} for s in (split.train, split.dev))
        assert not train & dev and len(split.dev) == 6
    split = split_cases(twins, [base[0]], seed=0)
    assert split.overlap_removed == [base[0].id + "-twin"] and len(split.train) == 9


# ---------------------------------------------------------------------------------------------- metric


def test_metric_scores_the_gold_one_and_a_misattributed_extraction_lower_with_feedback():
    case = ALL["en-001-tim-john"]
    (example,), _ = make_examples("extractor", [case])
    metric = CaseMetric("extractor", ALL, ErrorLog(), feedback=True)
    gold = [fact(f.text, f.subject, f.owner) for f in case.expect.facts]
    good = metric(example, dspy.Prediction(turn_facts=[gold], profile={"name": "Tim"}, error=None))
    assert good.score == 1.0
    bad_facts = [fact("The user lives in Berlin.", "user"), fact("The user works at Stripe.", "user"),
                 fact("The user is a nurse in Berlin.", "user"), fact("John likes coffee.", "John", "agent")]
    bad = metric(example, dspy.Prediction(turn_facts=[bad_facts], profile={"occupation": "nurse"}, error=None))
    assert bad.score == pytest.approx((1.0 + 0.75 + 0.75) / 3)  # F1 1, subject 3/4, owner 3/4
    assert 'expected "John is a nurse in Berlin." (subject John), got "The user is a nurse in Berlin." ' \
           "with subject user" in bad.feedback
    assert 'expected "John likes coffee." with owner user, got owner agent' in bad.feedback
    assert 'the profile holds "nurse"' in bad.feedback


def test_reconcile_metric_penalises_a_cross_subject_merge():
    case = ALL["en-001-tim-john"]
    (example,), _ = make_examples("reconciler", [case])
    metric = CaseMetric("reconciler", ALL, ErrorLog(), feedback=True)
    assert metric(example, dspy.Prediction(ops=example.ops, error=None)).score == 1.0
    facts = json.loads(example.new_facts)
    john_coffee = next(f["index"] for f in facts if f["text"] == "John likes coffee.")
    merged = [op if op["fact"] != john_coffee else {"op": "SUPERSEDE", "fact": john_coffee, "id": 1}
              for op in example.ops]  # id 1 is "The user likes coffee."
    judged = metric(example, dspy.Prediction(ops=merged, error=None))
    assert judged.score == pytest.approx((3 - 1) / 4)  # one wrong decision, and the merge subtracted again
    assert "crosses subjects" in judged.feedback and '"The user likes coffee."' in judged.feedback


def test_a_failed_prediction_is_counted_and_scores_zero_for_the_optimizer():
    (example,), _ = make_examples("extractor", [ALL["en-002-unnamed-teacher"]])
    log = ErrorLog()
    metric = CaseMetric("extractor", ALL, log)
    failed = dspy.Prediction(turn_facts=[], profile={}, error="extract: parse: not JSON", error_kind="parse")
    assert metric(example, failed) == 0.0
    metric(example, failed, None, "extract_en", None)  # GEPA's per-predictor re-ask is not a second failure
    summary = log.summary()
    assert (summary.runs, summary.errors, summary.by_kind) == (1, 1, {"parse": 1})


def test_a_reply_that_would_fail_the_engines_write_fails_in_tuning_too(tmp_path):
    case = ALL["en-002-unnamed-teacher"]
    (example,), _ = make_examples("extractor", [case])
    reply = extract_reply([("The user is a teacher.", "user\n[John]: hi", "user"),
                           ("The user lives in Chicago.", "user", "user")])  # a two-line subject
    with HyMemoryClient(tmp_path / "engine", lm=ScriptedLM([reply]), embedder="hash") as client:
        assert client.add(case.turns[0], user_id="u").error_code == "JSON_PARSE_FAILED"
    log = ErrorLog()
    with dspy.context(lm=ScriptedLM([reply])):
        prediction = make_student("extractor", MemoryProgram(), ["extract_en"])(**example.inputs())
    assert prediction.error_kind == "parse" and CaseMetric("extractor", ALL, log)(example, prediction) == 0.0
    assert log.summary().errors == 1


def test_tuning_scores_the_facts_as_the_engine_files_them():
    case = ALL["en-001-tim-john"]  # John speaks; the engine files a sentence about John under John
    (example,), _ = make_examples("extractor", [case])
    reply = extract_reply([(f.text, "user", f.owner) for f in case.expect.facts], profile={"occupation": "nurse"})
    with dspy.context(lm=ScriptedLM([reply])):
        prediction = make_student("extractor", MemoryProgram(), ["extract_en"])(**example.inputs())
    assert [f["subject"] for f in prediction.turn_facts[0]] == ["user", "user", "John", "John"]
    assert prediction.profile == {"name": "Tim"}  # John's job never reaches the user's profile
    assert CaseMetric("extractor", ALL, ErrorLog())(example, prediction) == 1.0


def test_reconcile_examples_send_what_the_engine_sends():
    case = ALL["en-001-tim-john"]
    new_facts, existing, ops = reconcile_inputs(case)
    lm = ScriptedLM([json.dumps({"ops": []})])
    with dspy.context(lm=lm):
        make_student("reconciler", MemoryProgram(), ["reconcile"])(new_facts=new_facts, existing=existing)
    assert new_facts in lm.prompts()[0] and existing in lm.prompts()[0]
    assert {op["op"] for op in ops} == {"ADD", "SUPERSEDE"}


# ---------------------------------------------------------------------------------------------- optimisers


def test_bootstrap_with_the_offline_model_keeps_demos_and_saves_a_loadable_program(data, tmp_path):
    out = tmp_path / "tuned"
    outcome = tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[data["train"]], dev=[data["dev"]],
                              out=out))
    m = outcome.manifest
    assert m.demos["extract_en"] >= 1 and m.predictors == ["extract_en"]
    assert m.prompt_fingerprint_after != m.prompt_fingerprint_before
    assert set(m.train_ids) == set(TRAIN) and m.dev_ids == DEV
    assert m.dev_before.score == m.dev_after.score  # the offline model ignores demos: no change is the honest result
    assert m.budget["compile"].calls >= len(TRAIN) and m.train_errors.errors == 0
    assert load_manifest(out) == m
    assert load_program(out).prompt_fingerprint() == m.prompt_fingerprint_after
    assert [c.id for c in load_cases([out / "dev.jsonl"])] == DEV
    text = summary_text(outcome)
    assert "dev score before" in text and "dev score after" in text and str(out / "program.json") in text
    assert m.matcher is not None and f"facts matched by: {m.matcher['spec']}" in text  # which matcher scored dev


def test_the_saved_program_changes_the_prompts_the_engine_sends(data, tmp_path):
    tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[data["train"]], dev=[data["dev"]],
                    out=tmp_path / "tuned"))
    sent = {}
    for label, program in (("baseline", None), ("tuned", load_program(tmp_path / "tuned"))):
        lm = ScriptedLM([extract_reply([("The user likes tea.", "user", "user")]), json.dumps({"ops": []})])
        with HyMemoryClient(tmp_path / label, lm=lm, embedder="hash", program=program) as client:
            assert client.add([{"role": "user", "content": "I like tea."}], user_id="u").success
        sent[label] = lm.history[0]["messages"]
    assert len(sent["baseline"]) == 2  # system + the conversation
    assert len(sent["tuned"]) > 2  # demos go before the conversation as user/assistant pairs
    demo_text = "\n".join(m["content"] for m in sent["tuned"][1:-1])
    assert any(turn["content"] in demo_text for i in TRAIN for turn in ALL[i].turns[0])


def test_errors_while_tuning_are_counted_and_the_budget_reported(data, tmp_path):
    teacher_ok = extract_reply([("The user is a teacher.", "user", "user"), ("The user lives in Chicago.", "user", "user")])
    lm = ScriptedLM([
        extract_reply([("John is a pilot.", "John", "user")]),  # dev, before
        ScriptedLM.server_error(),  # first train case: the provider fails
        teacher_ok,  # second train case: right, becomes a demo
        "not json at all",  # dev, after: unparseable
    ])
    twin = ALL["en-002-unnamed-teacher"].model_copy(update={"id": "en-002-twin"})  # same gold: order-proof script
    train = tmp_path / "two.jsonl"
    train.write_text(canonical_json(ALL["en-002-unnamed-teacher"]) + "\n" + canonical_json(twin) + "\n")
    outcome = tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[str(train)], dev=[data["dev"]], lm=lm,
                              out=tmp_path / "tuned"))
    m = outcome.manifest
    assert (m.train_errors.runs, m.train_errors.errors, m.train_errors.by_kind) == (2, 1, {"unavailable": 1})
    assert m.budget["compile"].calls == 2 and m.budget["compile"].failed_calls == 1
    assert m.demos == {"extract_en": 1}
    assert m.dev_after.errors.errors == 1 and m.dev_after.score is None and m.dev_after.score_with_errors == 0.0
    text = summary_text(outcome)
    assert "errors while tuning: 1 of 2 predictions" in text
    assert "dev score after:  n/a (0/1 scored, 1 error(s); 0.000 with each error as 0)" in text


def test_the_budget_counts_tokens_spent_in_an_optimisers_threads():
    from evals.arms.serve import start_server
    from evals.tuning.budget import BudgetMeter
    from evals.tuning.models import TuneModels

    (example,), _ = make_examples("extractor", [ALL["en-002-unnamed-teacher"]])
    student = make_student("extractor", MemoryProgram(), ["extract_en"])
    one, threaded = BudgetMeter(), BudgetMeter()
    with start_server() as server:
        lm = TuneModels().lm(f"openai/offline@{server.url}", "--lm")
        with dspy.context(lm=lm):
            with one.measure():
                student(**example.inputs())
            with threaded.measure():  # GEPA and MIPROv2 evaluate candidates on a dspy.Parallel like this
                dspy.Parallel(num_threads=2, disable_progress_bar=True)([(student, example.inputs())] * 4)
    assert one.budget().total_tokens > 0
    assert threaded.budget().calls == 4 and threaded.budget().total_tokens == 4 * one.budget().total_tokens


def test_mipro_runs_with_a_scripted_proposing_model(data, tmp_path):
    pytest.importorskip("optuna", reason="MIPROv2 needs optuna")
    proposal = "[[ ## proposed_instruction ## ]]\nName each fact's subject.\n\n[[ ## completed ## ]]"
    proposer = ScriptedLM([proposal, proposal])
    outcome = tune(TuneConfig(program="extractor", optimizer="mipro", train=[data["train"]], dev=[data["dev"]],
                              prompt_lm=proposer, out=tmp_path / "tuned",
                              settings={"num_candidates": 2, "num_trials": 1, "max_bootstrapped_demos": 1,
                                        "program_aware_proposer": False, "data_aware_proposer": False}))
    m = outcome.manifest
    assert proposer.calls == 2  # num_candidates instructions for the one predictor the train set uses
    assert "Extract durable memories" in proposer.prompts()[0]  # the current instruction is what gets improved
    assert m.settings["auto"] is None and m.settings["num_trials"] == 1 and m.prompt_lm == "ScriptedLM:scripted/test"
    assert m.budget["compile"].by_model["scripted/test"].calls == 2


def test_gepa_reflects_on_the_scorers_feedback_with_a_scripted_model(data, tmp_path):
    reflector = ScriptedLM([json.dumps({"new_instruction": "Name each fact's subject."})] * 3)
    outcome = tune(TuneConfig(program="extractor", optimizer="gepa", train=[data["missed"]], dev=[data["dev"]],
                              prompt_lm=reflector, out=tmp_path / "tuned",
                              settings={"max_metric_calls": 7, "reflection_minibatch_size": 2, "use_merge": False,
                                        "skip_perfect_score": False, "num_threads": 1}))
    assert reflector.calls >= 1
    prompt = reflector.prompts()[0]
    assert "Extract durable memories" in prompt and "missed \\\"" in prompt  # feedback names the missed facts
    assert outcome.manifest.train_errors.runs >= len(MISSED_BY_OFFLINE)


@pytest.mark.parametrize("optimizer", ["mipro", "gepa"])
def test_mipro_and_gepa_refuse_the_offline_model_as_their_proposer(data, tmp_path, optimizer):
    with pytest.raises(TuneError, match="propose instructions"):
        tune(TuneConfig(program="extractor", optimizer=optimizer, train=[data["train"]], out=tmp_path / "t"))


def test_unknown_settings_and_unusable_sets_are_refused(data, tmp_path):
    with pytest.raises(TuneError, match="unknown setting"):
        tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[data["train"]], out=tmp_path / "t",
                        settings={"max_demos": 3}))
    with pytest.raises(TuneError, match="no case a reconciler can learn from"):  # no seeded memories in dev
        tune(TuneConfig(program="reconciler", optimizer="bootstrap", train=[data["train"]], dev=[data["dev"]],
                        out=tmp_path / "t"))


def test_tuned_predictors_map_back_onto_the_program_by_name():
    student = make_student("extractor", MemoryProgram(), ["extract_en"])
    student.extract_en.signature = student.extract_en.signature.with_instructions("Only facts about people.")
    student.extract_en.demos = [dspy.Example(conversation="[user]: hi", facts=[], profile={}),
                                dspy.Example(case_id="x", turns=[])]  # the second reaches no prompt
    program = MemoryProgram()
    assert apply_to_program(student, program) == 1
    assert program.extract_en.signature.instructions == "Only facts about people."
    assert len(program.extract_en.demos) == 1
    assert program.extract_zh.signature.instructions == MemoryProgram().extract_zh.signature.instructions


# ---------------------------------------------------------------------------------------------- CLI


@pytest.mark.ci_heavy  # a tune and two runs (run by `nox -s heavy`)
def test_cli_tune_then_run_with_the_program_changes_the_prompt_hash_and_compares(data, tmp_path, capsys):
    tuned = tmp_path / "tuned"
    assert main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", data["train"],
                 "--setting", "max_bootstrapped_demos=2", "--seed", "1", "--out", str(tuned)]) == 0
    printed = capsys.readouterr().out
    assert "dev score before" in printed and "budget compile" in printed and "saved:" in printed
    manifest = load_manifest(tuned)
    assert manifest.dev is None and manifest.dev_fraction == 0.3 and manifest.settings["max_bootstrapped_demos"] == 2
    common = ["--dataset", str(tuned / "dev.jsonl"), "--faults", "none", "--embedder", "hash", "--no-progress"]
    assert main(["run", *common, "--out", str(tmp_path / "base")]) == 0
    assert main(["run", *common, "--program", str(tuned), "--out", str(tmp_path / "after")]) == 0
    base = json.loads((tmp_path / "base" / "manifest.json").read_text())
    after = json.loads((tmp_path / "after" / "manifest.json").read_text())
    assert base["prompt_hash"] == manifest.prompt_fingerprint_before
    assert after["prompt_hash"] == manifest.prompt_fingerprint_after != base["prompt_hash"]
    assert after["program"] == str(tuned) and after["manifest_hash"] != base["manifest_hash"]
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "after")]) == 0
    assert "Flipped cases" in capsys.readouterr().out


def test_run_refuses_to_score_a_tuned_program_on_cases_it_was_tuned_on(data, tmp_path, capsys):
    tuned = tmp_path / "tuned"
    tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[data["train"]], dev=[data["dev"]], out=tuned,
                    matcher="text"))
    renamed = ALL[TRAIN[0]].model_copy(update={"id": "renamed"})  # the same conversation under another id
    both = tmp_path / "both.jsonl"
    both.write_text(canonical_json(ALL[DEV[0]]) + "\n" + canonical_json(renamed) + "\n", encoding="utf-8")
    common = ["--faults", "none", "--embedder", "hash", "--no-progress", "--matcher", "text", "--program", str(tuned)]
    capsys.readouterr()
    assert main(["run", "--dataset", str(both), *common, "--out", str(tmp_path / "fitted")]) == 2
    err = capsys.readouterr().err
    assert "1 case(s) of the dataset were in its train set (renamed)" in err and len(err.strip().splitlines()) == 1
    assert main(["run", "--dataset", data["dev"], *common, "--out", str(tmp_path / "held_out")]) == 0


def test_cli_tune_with_an_http_provider_on_loopback_records_every_attempt(data, tmp_path, capsys):
    import pandas as pd

    from evals.arms.serve import start_server

    with start_server() as server:
        code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", data["train"],
                     "--dev", data["dev"], "--lm", f"openai/offline@{server.url}", "--out", str(tmp_path / "t")])
    printed = capsys.readouterr().out
    assert code == 0 and "0 error(s)" in printed and "errors while tuning: 0 of" in printed
    manifest = load_manifest(tmp_path / "t")
    assert manifest.demos["extract_en"] >= 1 and manifest.dev_before.scored == len(DEV)
    attempts = pd.read_parquet(tmp_path / "t" / "attempts.parquet")
    assert len(attempts) == manifest.budget["compile"].calls + manifest.budget["dev_eval"].calls
    assert set(attempts["site"]) == {"lm.extract"} and set(attempts["status"]) == {"ok"}
    assert attempts["prompt_tokens"].gt(0).all() and not attempts["cache_hit"].any()


def test_a_failing_llm_judge_in_the_metric_is_reported_not_silently_scored(data, tmp_path, capsys):
    import pandas as pd

    from evals.arms.serve import start_server

    with start_server() as server:  # the offline server cannot answer the judge's prompt: every judge call fails
        code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", data["train"],
                     "--dev", data["dev"], "--matcher", f"llm:openai/offline@{server.url}",
                     "--out", str(tmp_path / "t")])
    printed = capsys.readouterr().out
    manifest = load_manifest(tmp_path / "t")
    card = manifest.matcher
    assert code == 0 and card is not None and card["spec"] == f"llm:openai/offline@{server.url}"
    assert card["judge_calls"] > 0 and card["judge_errors"] == card["judge_calls"]
    assert f"The judge failed on {card['judge_errors']} of {card['judge_calls']} calls" in printed
    attempts = pd.read_parquet(tmp_path / "t" / "attempts.parquet")
    assert (attempts["site"] == "judge").sum() >= card["judge_calls"] and "ok" not in set(attempts["status"])


def test_a_proposing_model_that_fails_is_a_one_line_error_with_its_attempts_kept(data, tmp_path, capsys):
    pytest.importorskip("optuna", reason="MIPROv2 needs optuna")
    import pandas as pd

    from evals.arms.serve import start_server

    with start_server() as server:  # the offline server answers the engine's signatures, not MIPROv2's proposer
        code = main(["tune", "--program", "extractor", "--optimizer", "mipro", "--train", data["train"],
                     "--dev", data["dev"], "--prompt-lm", f"openai/offline@{server.url}", "--matcher", "text",
                     "--setting", "num_candidates=2", "--setting", "num_trials=1",
                     "--setting", "max_bootstrapped_demos=1", "--setting", "program_aware_proposer=false",
                     "--setting", "data_aware_proposer=false", "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1].startswith("hymem-eval tune: mipro: a model call of the optimiser failed")
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "t" / "program.json").exists()
    attempts = pd.read_parquet(tmp_path / "t" / "attempts.parquet")
    assert set(attempts["site"]) == {"tune.optimizer"} and "LMInvalidRequestError" in set(attempts["status"])


def test_proposing_calls_to_an_http_model_are_recorded_at_their_own_site():
    from dspy.utils.exceptions import LMError

    from evals.arms.serve import start_server
    from evals.tuning.models import OPTIMIZER_SITE, TuneModels

    models = TuneModels()
    with start_server() as server:
        lm = models.lm(f"openai/offline@{server.url}", "--prompt-lm").copy(temperature=1.0)  # as MIPROv2 copies it
        with pytest.raises(LMError):  # the offline server answers only the engine's signatures
            lm(messages=[{"role": "user", "content": "Propose a better instruction."}])
    rows = models.attempts_frame()
    assert rows["site"].tolist() == [OPTIMIZER_SITE] and rows["status"].tolist() == ["LMInvalidRequestError"]


@pytest.mark.parametrize(("flag", "spec", "says"), [
    ("--lm", "nonsense", "--lm 'nonsense': use offline"),
    ("--prompt-lm", "oracle", "--prompt-lm oracle: the oracle answers from the case"),
    ("--lm", "openai/gpt-4o-mini", "--lm openai/gpt-4o-mini: set OPENAI_API_KEY"),
])
def test_cli_tune_refuses_a_model_it_cannot_use_in_one_line(data, tmp_path, capsys, monkeypatch, flag, spec, says):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", data["train"],
                 flag, spec, "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "t").exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--setting", "max_bootstrapped_demos=abc"], "setting max_bootstrapped_demos='abc': Input should be a valid integer"),
    (["--setting", "max_bootstrapped_demos=-1"], "setting max_bootstrapped_demos=-1: Input should be greater than"),
    (["--setting", "max_rounds=0"], "setting max_rounds=0: Input should be greater than or equal to 1"),
    (["--out", "FILE"], "cannot create the directory"),
])
def test_cli_tune_refuses_bad_settings_and_outputs_before_any_model_call(data, tmp_path, capsys, args, says):
    (tmp_path / "FILE").write_text("not a directory")
    out = ["--out", str(tmp_path / "FILE")] if args == ["--out", "FILE"] else ["--out", str(tmp_path / "t"), *args]
    code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", data["train"], *out])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert "Bootstrapped" not in err  # refused before the optimiser ran


@pytest.mark.parametrize(("edit", "says"), [
    (lambda state: state["extract_en"].update(demos="x"), "extract_en.demos: Input should be a valid list"),
    (lambda state: state["extract_en"].update(demos=[{"foo": 1}]), "extract_en.demos[0]: fields ['foo']"),
    (lambda state: state["reconcile"]["signature"].update(instructions=5), "reconcile.signature.instructions"),
])
def test_run_refuses_a_saved_program_of_the_wrong_shape_in_one_line(data, tmp_path, capsys, edit, says):
    MemoryProgram().save(str(tmp_path / "program.json"))
    state = json.loads((tmp_path / "program.json").read_text())
    edit(state)
    (tmp_path / "program.json").write_text(json.dumps(state))
    code = main(["run", "--dataset", data["dev"], "--faults", "none", "--embedder", "hash", "--no-progress",
                 "--matcher", "text", "--program", str(tmp_path), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_run_refuses_a_program_directory_without_a_saved_program(data, tmp_path, capsys):
    code = main(["run", "--dataset", data["dev"], "--faults", "none", "--embedder", "hash", "--no-progress",
                 "--program", str(tmp_path), "--out", str(tmp_path / "r")])
    assert code == 2 and "--program" in capsys.readouterr().err
