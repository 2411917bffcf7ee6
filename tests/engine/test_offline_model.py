"""The offline reference model, driven through DSPy for real (Predict + JSONAdapter) on written conversations."""

from __future__ import annotations

import asyncio
import json

import dspy
import pytest

from hymem.llm import StrictJSONAdapter
from hymem.models import ChatMessage
from hymem.offline import OfflineEngine, answer, offline_lm
from hymem.render import render_conversation
from hymem.signatures import ExtractedFact, ExtractFacts, ExtractFactsZh, ExtractWorking, ReconcileFacts


def run(signature: type[dspy.Signature], adapter: dspy.Adapter | None = None, **inputs: str) -> dspy.Prediction:
    with dspy.context(lm=offline_lm(), adapter=adapter or dspy.JSONAdapter()):
        return dspy.Predict(signature)(**inputs)


def facts_of(prediction: dspy.Prediction, field: str = "facts") -> list[tuple[str, str, str]]:
    return [(f.text, f.subject, f.owner) for f in getattr(prediction, field)]


Op = tuple[str, "int | None", "int | None"]


def reconcile(new: list[tuple[str, str]], existing: list[tuple[int, str, str]]) -> list[Op]:
    new_facts = [{"index": i, "text": t, "subject": s, "owner": "user"} for i, (t, s) in enumerate(new)]
    old = [{"id": i, "text": t, "subject": s, "owner": "user"} for i, t, s in existing]
    pred = run(ReconcileFacts, new_facts=json.dumps(new_facts, ensure_ascii=False),
               existing=json.dumps(old, ensure_ascii=False))
    return [(op.op, op.fact, op.id) for op in pred.ops]


TIM_JOHN_AI = """The user's name is Tim
[user]: Hi! I work at Stripe.
[John]: I am a nurse in Berlin. I like coffee too.
[assistant]: Nice to meet you both! I suggest trying the cafe on Main Street. Would you like more tips?"""


# --- extraction (English) -----------------------------------------------------------------------------------------


def test_each_speaker_gets_their_own_subject_and_owner():
    pred = run(ExtractFacts, conversation=TIM_JOHN_AI)
    assert facts_of(pred) == [
        ("The user works at Stripe.", "user", "user"),
        ("John is a nurse in Berlin.", "John", "user"),
        ("John likes coffee.", "John", "user"),
        ("The assistant suggested trying the cafe on Main Street.", "assistant", "agent"),
    ]


def test_profile_is_the_current_user_only_and_the_name_line_is_trusted():
    pred = run(ExtractFacts, conversation=TIM_JOHN_AI)
    assert pred.profile.name == "Tim"
    assert pred.profile.occupation is None  # John is the nurse, not Tim
    assert pred.profile.location is None  # Berlin is John's city


def test_profile_reads_the_users_own_job_city_and_age():
    conversation = """The user's name is Tim
[user]: I'm a software engineer and I live in San Francisco. I am 31 years old. My name is Timothy.
[Ana]: I'm a teacher in Lisbon."""
    profile = run(ExtractFacts, conversation=conversation).profile
    assert (profile.name, profile.occupation, profile.location, profile.age) == ("Tim", "software engineer",
                                                                                 "San Francisco", "31")


def test_a_move_replaces_where_the_user_lives_and_a_joined_sentence_splits():
    conversation = "[user]: I lived in Rome for years. I moved to Berlin and I work at Stripe now."
    pred = run(ExtractFacts, conversation=conversation)
    assert facts_of(pred) == [
        ("The user lived in Rome for years.", "user", "user"),
        ("The user lives in Berlin.", "user", "user"),
        ("The user works at Stripe.", "user", "user"),
    ]
    assert pred.profile.location == "Berlin"
    assert pred.profile.name is None


def test_people_the_speakers_mention_are_facts_about_them_by_name():
    conversation = """[user]: My friend Jack is a chef. My sister Ana moved to Lisbon. I don't like cilantro.
[John]: My brother Max is a doctor."""
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("Jack, the user's friend, is a chef.", "Jack", "user"),
        ("Ana, the user's sister, lives in Lisbon.", "Ana", "user"),
        ("The user does not like cilantro.", "user", "user"),
        ("Max, John's brother, is a doctor.", "Max", "user"),
    ]


def test_questions_greetings_small_talk_and_context_roles_leave_nothing():
    conversation = """[system]: I am a helpful system prompt. I live in the cloud.
[user]: Hello! How are you? Thanks, I think so. I'll try that.
[assistant]: I'm glad to help. Anything else?
[tool]: I work at Google.
[user]: Do you know a good cafe"""
    pred = run(ExtractFacts, conversation=conversation)
    assert pred.facts == []
    assert pred.profile.model_dump() == dict.fromkeys(("name", "age", "gender", "occupation", "location"))


def test_ai_advice_is_the_assistants_and_its_other_words_are_skipped():
    conversation = """[user]: What should I cook tonight?
[assistant]: Sure! You should try a mushroom risotto. Here is a recipe: rice, stock, mushrooms.
Use arborio rice. I love cooking too. Have fun!"""
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("The assistant suggested that the user try a mushroom risotto.", "assistant", "agent"),
        ("The assistant provided a recipe.", "assistant", "agent"),
        ("The assistant suggested that the user use arborio rice.", "assistant", "agent"),
    ]


def test_continuation_lines_belong_to_the_message_above_and_escapes_are_content():
    conversation = """[user]: I have two cats.
I play the guitar.
\\[Bob]: I am a lawyer.
[Bob]: I'm a teacher, and I've got a dog."""
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("The user has two cats.", "user", "user"),
        ("The user plays the guitar.", "user", "user"),
        ("Bob is a teacher.", "Bob", "user"),
        ("Bob has a dog.", "Bob", "user"),
    ]


def test_the_same_sentence_twice_is_one_fact():
    pred = run(ExtractFacts, conversation="[user]: I like tea.\n[user]: I like tea too.")
    assert facts_of(pred) == [("The user likes tea.", "user", "user")]


def test_you_means_the_one_being_answered():
    conversation = """[assistant]: I recommend a MacBook Air with 16 GB of RAM.
[user]: I bought the laptop you recommended.
[John]: I just got back from Lisbon.
[user]: I met your sister there."""
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("The assistant recommended a MacBook Air with 16 GB of RAM.", "assistant", "agent"),
        ("The user bought the laptop the assistant recommended.", "user", "user"),
        ("John got back from Lisbon.", "John", "user"),
        ("The user met John's sister there.", "user", "user"),
    ]


def test_she_and_he_mean_the_person_just_named():
    conversation = "[user]: My sister Ana lives in Rome. She is a lawyer.\n[user]: She likes opera."
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("Ana, the user's sister, lives in Rome.", "Ana", "user"),
        ("Ana, the user's sister, is a lawyer.", "Ana", "user"),
    ]  # a new message starts without anyone to refer back to


def test_a_named_persons_advice_is_theirs_not_the_assistants():
    conversation = "[user]: My back hurts after work.\n[John]: You should try yoga.\n[王芳]: 你可以试试游泳。"
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("The user's back hurts after work.", "user", "user"),
        ("John suggested that the user try yoga.", "John", "user"),
        ("王芳建议用户试试游泳。", "王芳", "user"),
    ]


def test_no_longer_and_maybe_keep_their_meaning():
    conversation = ("[user]: I don't have a dog anymore. I'm not a student anymore. I might move to London next "
                    "year. I'd like a coffee.")
    assert facts_of(run(ExtractFacts, conversation=conversation)) == [
        ("The user no longer has a dog.", "user", "user"),
        ("The user is no longer a student.", "user", "user"),
        ("The user is considering moving to London next year.", "user", "user"),
    ]


# --- extraction (Chinese) -----------------------------------------------------------------------------------------


def test_chinese_speakers_third_parties_and_ai_advice():
    conversation = """用户名叫Tim
[user]: 你好！我在 Stripe 工作。我上个月搬到了柏林。
[John]: 我是住在柏林的护士。我也喜欢咖啡。我的朋友小王是厨师。
[assistant]: 建议你试试柏林的咖啡馆。你们喜欢咖啡吗？"""
    pred = run(ExtractFactsZh, conversation=conversation)
    assert facts_of(pred) == [
        ("用户在Stripe工作。", "user", "user"),
        ("用户住在柏林。", "user", "user"),
        ("John是住在柏林的护士。", "John", "user"),
        ("John喜欢咖啡。", "John", "user"),
        ("小王是John的朋友，是厨师。", "小王", "user"),
        ("助手建议用户试试柏林的咖啡馆。", "assistant", "agent"),
    ]
    assert pred.profile.model_dump() == {"name": "Tim", "age": None, "gender": None, "occupation": None,
                                         "location": "柏林"}


def test_chinese_profile_from_the_users_own_words():
    conversation = "[user]: 我叫小李，我今年28岁。我是一名程序员。谢谢！\n[小红]: 我是医生。你住在哪里？"
    pred = run(ExtractFactsZh, conversation=conversation)
    assert ("小红是医生。", "小红", "user") in facts_of(pred)
    assert (pred.profile.name, pred.profile.age, pred.profile.occupation) == ("小李", "28", "程序员")


def test_chinese_restatements_are_normalised():
    conversation = "[user]: 我已经不养猫了。我很喜欢喝咖啡。我搬到深圳了。\n[小红]: 我的哥哥李明是医生。他住在杭州。"
    assert facts_of(run(ExtractFactsZh, conversation=conversation)) == [
        ("用户不再养猫。", "user", "user"),
        ("用户喜欢喝咖啡。", "user", "user"),
        ("用户住在深圳。", "user", "user"),
        ("李明是小红的哥哥，是医生。", "李明", "user"),
        ("李明是小红的哥哥，住在杭州。", "李明", "user"),
    ]


# --- working path -------------------------------------------------------------------------------------------------


def test_working_lessons_carry_their_context_and_project_facts_are_the_users():
    trajectory = """[user]: Please fix the failing test. My project uses Python 3.11 and we deploy on Fridays.
[assistant]: Running the tests now.
[tool]: ImportError: cannot import name 'float' from 'numpy'
[assistant]: The fix was to pin numpy<2 in requirements.txt.
[user]: Great, thanks!"""
    pred = run(ExtractWorking, trajectory=trajectory)
    assert facts_of(pred, "experiences") == [(
        "The fix was to pin numpy<2 in requirements.txt (context: ImportError: cannot import name 'float' from "
        "'numpy').", "assistant", "agent")]
    assert facts_of(pred) == [
        ("The user's project uses Python 3.11.", "user", "user"),
        ("The user's team deploys on Fridays.", "user", "user"),
    ]


def test_an_error_fixed_and_confirmed_by_a_tool_becomes_a_lesson():
    trajectory = """[user]: Run the tests for my Django project. It uses Python 3.11 and pytest.
[assistant]: called run_shell({"cmd": "pytest -q"})
[tool]: (run_shell) ModuleNotFoundError: No module named 'yaml'
[assistant]: The import name is yaml but the package is PyYAML.
called run_shell({"cmd": "pip install pyyaml"})
[tool]: (run_shell) Successfully installed PyYAML-6.0.1
[assistant]: called run_shell({"cmd": "pytest -q"})
[tool]: (run_shell) 12 passed in 0.84s"""
    pred = run(ExtractWorking, trajectory=trajectory)
    assert facts_of(pred, "experiences") == [(
        "When `pytest -q` failed with \"ModuleNotFoundError: No module named 'yaml'\": The import name is yaml but "
        "the package is PyYAML. Fix: `pip install pyyaml`.", "assistant", "agent")]
    assert facts_of(pred) == [
        ("The user's project uses Django.", "user", "user"),
        ("The user's project uses Python 3.11.", "user", "user"),
        ("The user's project uses pytest.", "user", "user"),
    ]


def test_an_error_nobody_fixed_teaches_nothing_and_user_rules_are_facts():
    trajectory = """[user]: My project targets Python 3.9, so do not use match statements. Please never use print.
[assistant]: called run_shell({"cmd": "make build"})
[tool]: (run_shell) error: linker failed
[assistant]: I could not fix the build."""
    pred = run(ExtractWorking, trajectory=trajectory)
    assert pred.experiences == []
    assert facts_of(pred) == [
        ("The user's project targets Python 3.9.", "user", "user"),
        ("The user does not want the assistant to use match statements.", "user", "user"),
        ("The user does not want the assistant to use print.", "user", "user"),
    ]


def test_a_chinese_episode_is_told_in_chinese():
    trajectory = """[user]: 帮我运行测试。
[assistant]: called run_shell({"cmd": "pytest -q"})
[tool]: (run_shell) ModuleNotFoundError: No module named 'requests'
[assistant]: 缺少 requests 依赖，正在安装。
called run_shell({"cmd": "pip install requests"})
[tool]: (run_shell) Successfully installed requests-2.32.3"""
    assert facts_of(run(ExtractWorking, trajectory=trajectory), "experiences") == [(
        "`pytest -q`报错“ModuleNotFoundError: No module named 'requests'”时：缺少requests依赖，正在安装。"
        "解决办法：`pip install requests`。", "assistant", "agent")]


def test_routine_working_steps_leave_both_lists_empty():
    trajectory = """[user]: Run the linter.
[assistant]: Running ruff check.
[tool]: All checks passed!
[assistant]: Done, everything is clean."""
    pred = run(ExtractWorking, trajectory=trajectory)
    assert (pred.experiences, pred.facts) == ([], [])


def test_chinese_working_trajectory():
    trajectory = """[user]: 帮我修复部署脚本。我的项目使用Python 3.11。
[tool]: 错误：权限被拒绝
[assistant]: 原因是脚本没有执行权限。下次先检查文件权限。"""
    pred = run(ExtractWorking, trajectory=trajectory)
    assert facts_of(pred, "experiences") == [
        ("原因是脚本没有执行权限（背景：错误：权限被拒绝）。", "assistant", "agent"),
        ("下次先检查文件权限（背景：错误：权限被拒绝）。", "assistant", "agent"),
    ]
    assert facts_of(pred) == [("用户的项目使用Python 3.11。", "user", "user")]


# --- reconcile ----------------------------------------------------------------------------------------------------


def test_a_move_of_the_same_subject_supersedes_the_old_city():
    assert reconcile([("The user lives in Berlin.", "user")], [(7, "The user lives in Rome.", "user")]) == [
        ("SUPERSEDE", 0, 7)]


def test_the_same_preference_of_another_subject_is_added_never_merged():
    assert reconcile([("The user likes coffee.", "user")], [(3, "John likes coffee.", "John")]) == [("ADD", 0, None)]
    assert reconcile([("John lives in Paris.", "John")], [(1, "The user lives in Berlin.", "user")]) == [
        ("ADD", 0, None)]


def test_a_known_fact_is_a_noop_on_the_memory_that_says_it():
    existing = [(0, "The user lives in Berlin.", "user"), (1, "The user likes coffee too.", "user")]
    assert reconcile([("The user likes coffee.", "user")], existing) == [("NOOP", 0, 1)]
    assert reconcile([("The user is living in Berlin.", "user")], existing) == [("NOOP", 0, 0)]


def test_no_new_facts_means_no_ops():
    assert reconcile([], [(1, "The user lives in Berlin.", "user")]) == []


def test_a_flipped_preference_and_a_new_job_supersede_within_the_subject():
    existing = [(0, "The user is a nurse.", "user"), (1, "The user works at Stripe.", "user"),
                (2, "The user is a vegetarian.", "user"), (3, "The user likes coffee.", "user")]
    new = [("The user is a doctor.", "user"), ("The user works at Google.", "user"),
           ("The user does not like coffee.", "user"), ("The user has a dog.", "user")]
    assert reconcile(new, existing) == [("SUPERSEDE", 0, 0), ("SUPERSEDE", 1, 1), ("SUPERSEDE", 2, 3),
                                        ("ADD", 3, None)]


def test_a_negated_restatement_supersedes_the_positive_one():
    assert reconcile([("The user no longer has a dog.", "user")], [(4, "The user has a dog.", "user")]) == [
        ("SUPERSEDE", 0, 4)]
    assert reconcile([("用户不再养猫。", "user")], [(5, "用户养了一只猫。", "user")]) == [("SUPERSEDE", 0, 5)]
    assert reconcile([("The user doesn't like tea.", "user")], [(6, "The user does not like tea.", "user")]) == [
        ("NOOP", 0, 6)]


def test_a_fact_about_someone_the_user_knows_does_not_touch_the_user():
    assert reconcile([("The user's sister lives in Rome.", "user")], [(7, "The user lives in Berlin.", "user")]) == [
        ("ADD", 0, None)]
    assert reconcile([("小王是用户的朋友，是医生。", "小王"), ("用户住在柏林。", "user")],
                     [(7, "用户住在上海。", "user"), (8, "小王是厨师。", "小王")]) == [("SUPERSEDE", 0, 8),
                                                                                ("SUPERSEDE", 1, 7)]


def test_reconcile_never_names_a_memory_of_another_subject():
    texts = ["{} lives in Berlin.", "{} lives in Rome.", "{} likes coffee.", "{} does not like coffee.",
             "{} is a nurse.", "{} works at Stripe."]
    subjects = {"user": "The user", "John": "John", "Ana": "Ana"}
    existing = [(i, t.format(subjects[s]), s) for i, (t, s) in enumerate((t, s) for s in subjects for t in texts)]
    by_id = {i: s for i, _, s in existing}
    for subject, name in subjects.items():
        new = [(t.format(name), subject) for t in texts[::-1]]
        for op, fact, target in reconcile(new, existing):
            assert target is None or by_id[target] == new[fact][1], (op, fact, target)


# --- the DSPy engine ----------------------------------------------------------------------------------------------


def test_demos_are_ignored_and_only_the_last_message_is_answered():
    predict = dspy.Predict(ExtractFacts)
    predict.demos = [dspy.Example(conversation="[user]: I live in Oslo.",
                                  facts=[ExtractedFact(text="The user lives in Oslo.", subject="user", owner="user")],
                                  profile={"location": "Oslo"})]
    with dspy.context(lm=offline_lm(), adapter=dspy.JSONAdapter()):
        pred = predict(conversation="[user]: I work at Acme.")
    assert facts_of(pred) == [("The user works at Acme.", "user", "user")]
    assert pred.profile.location is None


def test_chat_adapter_prompts_get_chat_adapter_replies():
    adapter = dspy.ChatAdapter(use_json_adapter_fallback=False)
    pred = run(ExtractFacts, adapter=adapter, conversation="[user]: I work at Acme.")
    assert facts_of(pred) == [("The user works at Acme.", "user", "user")]


def test_the_same_input_gives_the_same_reply():
    lm = offline_lm()
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        for _ in range(2):
            dspy.Predict(ExtractFacts)(conversation=TIM_JOHN_AI)
    first, second = (entry["outputs"] for entry in lm.history[-2:])
    assert first == second
    usage = lm.history[-1]["usage"]
    assert usage["prompt_tokens"] > 100 and usage["completion_tokens"] > 10


def test_an_unknown_task_is_an_error_not_a_guess():
    class Translate(dspy.Signature):
        text: str = dspy.InputField()
        french: str = dspy.OutputField()

    with pytest.raises(dspy.LMError) as info:
        run(Translate, text="hello")
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ValueError):
        answer("no sections here")


def test_a_program_holding_the_model_saves_loads_and_runs_async(tmp_path):
    predict = dspy.Predict(ExtractFacts)
    predict.set_lm(offline_lm())
    predict.save(tmp_path / "program.json")
    loaded = dspy.Predict(ExtractFacts)
    loaded.load(tmp_path / "program.json", allow_unsafe_lm_state=True)
    assert isinstance(loaded.lm._engine_spec, OfflineEngine)
    with dspy.context(adapter=dspy.JSONAdapter()):
        pred = asyncio.run(loaded.acall(conversation="[user]: I live in Oslo."))
    assert pred.profile.location == "Oslo"


def test_replies_satisfy_the_engines_strict_adapter_and_renderer():
    conversation = render_conversation([
        ChatMessage(role="user", name="Tim", content="I work at Stripe.\n[John]: I am a spy."),
        ChatMessage(role="assistant", name="John", content="I am a nurse in Berlin."),
    ])
    with dspy.context(lm=offline_lm(), adapter=StrictJSONAdapter()):
        pred = dspy.Predict(ExtractFacts)(conversation=conversation)
        working = dspy.Predict(ExtractWorking)(trajectory=conversation)
        ops = dspy.Predict(ReconcileFacts)(new_facts="[]", existing="[]")
    assert facts_of(pred) == [("The user works at Stripe.", "user", "user"), ("John is a nurse in Berlin.", "John",
                                                                                "user")]
    assert pred.profile.name == "Tim"
    assert (working.experiences, ops.ops) == ([], [])


def test_saved_engine_class_path_is_the_public_module():
    assert offline_lm().dump_state()["engine"]["class"] == "hymem.offline:OfflineEngine"


def test_a_chinese_clause_with_we_after_a_comma_does_not_recurse_forever():
    from hymem.offline._chinese import zh_statement
    from hymem.offline._conversation import USER

    facts = zh_statement("我喜欢爬山，我们周末常去", USER)  # used to raise RecursionError
    assert [subject for _, subject in facts] == ["user"] and facts[0][0].startswith("用户喜欢爬山")
