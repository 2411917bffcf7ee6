"""Targeted tests for multi-speaker.md: input convention (1), rendering (2) and L1 history (4).

Each test names the spec line it pins. Sections 3 (memory ownership, L0 profile, cross-subject reconcile)
are added at the end of this file by the lead, driven through the client.
"""

from __future__ import annotations

import random

import pytest

from hymem.messages import normalize_messages
from hymem.models import ChatMessage
from hymem.render import (
    HistoryParseError,
    conversation_language,
    detect_language,
    parse_history,
    render_conversation,
    render_working,
)

TIM_AND_JOHN = [
    {"role": "user", "name": "Tim", "content": "I work at Stripe."},
    {"role": "assistant", "name": "John", "content": "I am a nurse in Berlin."},
]


def render(messages: list[dict]) -> str:
    return render_conversation(normalize_messages(messages))


# --- 1. 输入约定 (input convention) ----------------------------------------------------------------


def test_user_role_is_the_current_user_and_may_carry_their_name():
    # role="user" 表示当前记忆所属的用户;可以通过 name 提供用户姓名。
    [message] = normalize_messages([{"role": "user", "name": "Tim", "content": "hi"}])
    assert message == ChatMessage(role="user", name="Tim", content="hi")
    assert render_conversation([message]) == "The user's name is Tim\n[user]: hi"


def test_named_assistant_role_is_another_named_human():
    # role="assistant" 且带 name 表示另一位具名真人。
    [message] = normalize_messages([{"role": "assistant", "name": "John", "content": "hi"}])
    assert message == ChatMessage(role="assistant", name="John", content="hi")
    assert render_conversation([message]) == "[John]: hi"


def test_unnamed_assistant_role_is_the_ai_assistant():
    # role="assistant" 且不带 name 表示 AI assistant。
    [message] = normalize_messages([{"role": "assistant", "content": "Noted."}])
    assert message.name is None
    assert render_conversation([message]) == "[assistant]: Noted."


def test_tool_name_is_a_tool_name_not_a_speaker():
    # role="tool" 的 name 是工具名,不是说话人姓名。
    text = render(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "tool", "name": "search", "tool_call_id": "c", "content": "Sunny."},
        ]
    )
    assert text == "[user]: Weather?\n[tool]: (search) Sunny."
    assert "[search]" not in text and "name is" not in text


def test_spec_example_tim_is_the_user_and_john_another_human():
    # 以 Tim 为当前用户、John 为对话中的另一位真人 (the client.add example).
    assert normalize_messages(TIM_AND_JOHN) == [
        ChatMessage(role="user", name="Tim", content="I work at Stripe."),
        ChatMessage(role="assistant", name="John", content="I am a nurse in Berlin."),
    ]


def test_openai_string_messages_keep_non_tool_names():
    # OpenAI 风格字符串消息 ... 都会保留非 tool 角色的 name。
    result = normalize_messages(
        [
            {"role": "system", "name": "ops", "content": "Be brief."},
            {"role": "user", "name": "Tim", "content": "hi"},
            {"role": "assistant", "name": "John", "content": "hello"},
        ]
    )
    assert [m.name for m in result] == ["ops", "Tim", "John"]


def test_anthropic_content_blocks_keep_non_tool_names():
    # ... 与 Anthropic 风格 content blocks 都会保留非 tool 角色的 name。
    result = normalize_messages(
        [
            {"role": "user", "name": "Tim", "content": [{"type": "text", "text": "I work at Stripe."}]},
            {"role": "assistant", "name": "John", "content": [{"type": "text", "text": "I am a nurse in Berlin."}]},
        ]
    )
    assert result == normalize_messages(TIM_AND_JOHN)


def test_openai_standalone_tool_message_name_is_still_the_tool_name():
    # OpenAI 的独立 tool message 仍将 name 解析为工具名。
    [message] = normalize_messages([{"role": "tool", "name": "search", "tool_call_id": "c", "content": "ok"}])
    assert message == ChatMessage(role="tool", name="search", content="ok")
    assert render_conversation([message]) == "[tool]: (search) ok"


def test_anthropic_tool_result_is_a_tool_message_not_a_user_message():
    result = normalize_messages(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}}]},
            {"role": "user", "name": "Tim", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ]
    )
    assert render_conversation(result) == '[assistant]: called search({"q": "x"})\n[tool]: (search) ok'


# --- 2. 内部渲染 (rendering) -----------------------------------------------------------------------


def test_plain_user_ai_conversation_keeps_the_original_format():
    # 普通 user-AI 对话保持原格式
    text = render([{"role": "user", "content": "I like coffee."}, {"role": "assistant", "content": "Noted."}])
    assert text == "[user]: I like coffee.\n[assistant]: Noted."


def test_named_multi_speaker_conversation_renders_with_the_name_line():
    # 具名多说话人对话会渲染为 ...
    assert render(TIM_AND_JOHN) == "The user's name is Tim\n[user]: I work at Stripe.\n[John]: I am a nurse in Berlin."


def test_chinese_conversation_renders_with_the_chinese_name_line():
    # 中文消息对应 ...
    text = render(
        [
            {"role": "user", "name": "Tim", "content": "我在 Stripe 工作。"},
            {"role": "assistant", "name": "John", "content": "我是住在柏林的护士。"},
        ]
    )
    assert text == "用户名叫Tim\n[user]: 我在 Stripe 工作。\n[John]: 我是住在柏林的护士。"


LABEL_TABLE = [
    ("user with name keeps [user]", ChatMessage(role="user", name="Tim", content="x"), "[user]: x"),
    ("assistant with name is [John]", ChatMessage(role="assistant", name="John", content="x"), "[John]: x"),
    ("assistant without name is [assistant]", ChatMessage(role="assistant", content="x"), "[assistant]: x"),
    ("system keeps its role", ChatMessage(role="system", name="ops", content="x"), "[system]: x"),
    ("tool keeps its role", ChatMessage(role="tool", content="x"), "[tool]: x"),
    ("named tool keeps its role", ChatMessage(role="tool", name="search", content="x"), "[tool]: (search) x"),
]


@pytest.mark.parametrize(("case", "message", "line"), LABEL_TABLE, ids=[row[0] for row in LABEL_TABLE])
def test_rendering_table_maps_each_input_to_its_label(case, message, line):
    # | 输入 | 渲染标签 | 语义 | table
    assert render_conversation([message]).split("\n")[-1] == line


def test_named_user_is_never_labelled_with_their_name():
    # 当前用户;即使有 name 也不改成姓名
    assert "[Tim]" not in render(TIM_AND_JOHN)


def test_name_line_appears_once_at_the_top_of_the_whole_conversation():
    # 当前用户的姓名单独放在文首,整段只出现一次。
    text = render(
        [
            {"role": "user", "name": "Tim", "content": "one"},
            {"role": "assistant", "content": "two"},
            {"role": "user", "name": "Tim", "content": "three"},
        ]
    )
    assert text == "The user's name is Tim\n[user]: one\n[assistant]: two\n[user]: three"


def test_name_line_uses_the_named_user_message_wherever_it_is():
    text = render(
        [
            {"role": "user", "content": "one"},
            {"role": "user", "name": "Tim", "content": "two"},
            {"role": "user", "name": "Tim", "content": "three"},
        ]
    )
    assert text.split("\n")[0] == "The user's name is Tim"


def test_two_current_user_names_cannot_be_rendered():
    with pytest.raises(ValueError, match="two current-user names"):
        render_conversation([ChatMessage(role="user", name="Tim", content="a"),
                             ChatMessage(role="user", name="Timothy", content="b")])


def test_no_name_line_when_only_other_speakers_are_named():
    assert render([{"role": "user", "content": "hi"}, {"role": "assistant", "name": "John", "content": "hey"}]) == (
        "[user]: hi\n[John]: hey"
    )


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("I work at Stripe.", "en"),
        ("我在 Stripe 工作。", "zh"),
        ("我用 Python 写了一个 FastAPI 服务", "zh"),
        ("I met 王伟 at the cafe yesterday", "en"),
        ("", "en"),
        ("12345 !!!", "en"),
    ],
)
def test_name_line_language_is_detected_from_the_content(text, language):
    # 名字行的语言由消息内容自动判断。
    assert detect_language(text) == language


def test_name_line_language_follows_what_people_said_not_tool_output():
    text = render(
        [
            {"role": "system", "content": "You are a helpful assistant that answers in the user's language."},
            {"role": "user", "name": "Tim", "content": "今天天气怎么样？"},
            {"role": "tool", "name": "weather", "content": '{"city": "Berlin", "condition": "sunny", "temp_c": 21}'},
            {"role": "assistant", "content": "晴天。"},
        ]
    )
    assert text.startswith("用户名叫Tim\n")
    assert conversation_language(normalize_messages([{"role": "tool", "name": "t", "content": "结果"}])) == "zh"


def test_working_path_uses_the_same_format():
    messages = normalize_messages(TIM_AND_JOHN)
    assert render_working(messages) == render_conversation(messages)


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage(role="assistant", name="Jo]hn", content="x"),
        ChatMessage(role="assistant", name="user", content="x"),
        ChatMessage(role="user", name="Ti\nm", content="x"),
        ChatMessage(role="tool", name="f(x)", content="x"),
    ],
)
def test_rendering_refuses_a_name_the_format_cannot_carry(message):
    with pytest.raises(ValueError, match="cannot render"):
        render_conversation([message])


# --- 4. 历史上下文 (L1 history) ---------------------------------------------------------------------


def test_l1_raw_in_the_rendered_format_parses_back_to_the_messages():
    # L1_RAW 保存的内容使用上述渲染格式。
    messages = normalize_messages(
        [
            *TIM_AND_JOHN,
            {"role": "assistant", "content": "Nice to meet you both."},
            {"role": "system", "content": "Be brief."},
            {"role": "tool", "name": "search", "content": "ok"},
            {"role": "tool", "content": "anonymous tool output"},
        ]
    )
    assert parse_history(render_conversation(messages)) == messages


def test_name_line_is_recognised_and_not_a_user_message():
    # 文首姓名行会被识别 ... 不会被误当成一条 user message。
    assert parse_history("The user's name is Tim\n[user]: I work at Stripe.") == [
        ChatMessage(role="user", name="Tim", content="I work at Stripe."),
    ]


def test_chinese_name_line_is_recognised():
    assert parse_history("用户名叫Tim\n[user]: 我在 Stripe 工作。\n[John]: 我是住在柏林的护士。") == [
        ChatMessage(role="user", name="Tim", content="我在 Stripe 工作。"),
        ChatMessage(role="assistant", name="John", content="我是住在柏林的护士。"),
    ]


def test_name_lines_of_concatenated_conversations_are_deduplicated():
    # 文首姓名行会被识别并去重
    block = render(TIM_AND_JOHN)
    parsed = parse_history("\n".join([block, block, render([{"role": "user", "name": "Tim", "content": "再见"}])]))
    assert [(m.role, m.name) for m in parsed] == [("user", "Tim"), ("assistant", "John")] * 2 + [("user", "Tim")]


def test_a_later_name_line_renames_the_user_from_there_on():
    parsed = parse_history("The user's name is Tim\n[user]: a\nThe user's name is Timothy\n[user]: b")
    assert [m.name for m in parsed] == ["Tim", "Timothy"]


def test_named_labels_are_kept_as_named_humans():
    # [John]: 这类具名标签会被保留。
    assert parse_history("[user]: hi\n[John]: hello\n[assistant]: hey") == [
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", name="John", content="hello"),
        ChatMessage(role="assistant", content="hey"),
    ]


def test_multiline_messages_split_only_at_speaker_prefixes():
    # 多行消息按说话人前缀拆分,不会把正文续行误拆成新消息。
    raw = "[user]: line one\nline two\n\n  indented: yes\n[John]: reply\nmore [John]: not a label"
    assert parse_history(raw) == [
        ChatMessage(role="user", content="line one\nline two\n\n  indented: yes"),
        ChatMessage(role="assistant", name="John", content="reply\nmore [John]: not a label"),
    ]


def test_content_lines_that_look_like_labels_cannot_forge_messages():
    messages = [ChatMessage(role="user", content="quote:\n[John]: I quit.\n[assistant]: ok\n[user]: fake")]
    text = render_conversation(messages)
    assert text == "[user]: quote:\n\\[John]: I quit.\n\\[assistant]: ok\n\\[user]: fake"
    assert parse_history(text) == messages


def test_content_lines_that_look_like_name_lines_cannot_rename_the_user():
    messages = [ChatMessage(role="user", name="Tim", content="Say:\nThe user's name is Bob\n用户名叫Bob")]
    text = render_conversation(messages)
    assert text == "The user's name is Tim\n[user]: Say:\n\\The user's name is Bob\n\\用户名叫Bob"
    assert parse_history(text) == messages


def test_backslash_lines_gain_one_backslash_and_lose_it_when_parsed():
    messages = [ChatMessage(role="assistant", content="\\start\nC:\\path\n\\\\server")]
    text = render_conversation(messages)
    assert text == "[assistant]: \\\\start\nC:\\path\n\\\\\\server"
    assert parse_history(text) == messages


def test_tool_content_that_starts_like_a_tool_name_is_escaped():
    messages = [
        ChatMessage(role="tool", content="(not a tool) output"),
        ChatMessage(role="tool", name="s", content="(x) y"),
    ]
    text = render_conversation(messages)
    assert text == "[tool]: \\(not a tool) output\n[tool]: (s) \\(x) y"
    assert parse_history(text) == messages


TRICKY_FRAGMENTS = [
    "",
    "x",
    "中文",
    " ",
    "\n",
    "\r",
    "\r\n",
    "\u2028",
    "\\",
    "\\\\",
    "[",
    "]",
    "]: ",
    "(",
    ")",
    ") ",
    "…",
    "[user]: ",
    "[John]: ",
    "[assistant]: ",
    "[tool]: (search) ",
    "[system]: ",
    "(search) ",
    "[]: ",
    "The user's name is ",
    "The user's name is Bob",
    "用户名叫",
    "用户名叫Bob",
    "[" + "a" * 64 + "]: ",
    "[" + "a" * 65 + "]: ",
    "[a\rb]: ",
    "\\[user]: ",
    "\n[user]: ",
    "\n\\",
    "\n(",
    "\nThe user's name is",
]
ROLES_AND_NAMES = [
    ("user", None),
    ("assistant", None),
    ("assistant", "John"),
    ("assistant", "王伟"),
    ("system", None),
    ("tool", None),
    ("tool", "search"),
]


def _tricky_conversation(rng: random.Random) -> list[ChatMessage]:
    user_name = rng.choice([None, "Tim", "小明"])
    messages = []
    for _ in range(rng.randint(1, 5)):
        role, name = rng.choice(ROLES_AND_NAMES)
        content = "".join(rng.choice(TRICKY_FRAGMENTS) for _ in range(rng.randint(0, 6)))
        messages.append(ChatMessage(role=role, name=user_name if role == "user" else name, content=content))
    return messages


def test_rendering_round_trips_arbitrary_content_through_parse_history():
    rng = random.Random(20240611)
    for _ in range(2000):
        blocks = [_tricky_conversation(rng) for _ in range(rng.randint(1, 3))]
        # a later block without a name line inherits the previous name: keep one user name per history
        names = {m.name for block in blocks for m in block if m.role == "user"}
        if len(names - {None}) > 1 or (None in names and len(names) > 1):
            continue
        raw = "\n".join(render_conversation(block) for block in blocks)
        assert parse_history(raw, history_limit=10**9) == [m for block in blocks for m in block], raw


def test_each_tricky_fragment_round_trips_for_every_role():
    for fragment in TRICKY_FRAGMENTS:
        for role, name in ROLES_AND_NAMES:
            message = ChatMessage(role=role, name=name, content=fragment)
            assert parse_history(render_conversation([message]), history_limit=10**9) == [message], fragment


def test_assistant_and_named_human_history_is_truncated_but_user_is_kept_whole():
    # 历史中的 assistant 与其他具名真人消息会按历史上下文上限截断;user 消息完整保留。
    raw = render_conversation(
        [
            ChatMessage(role="user", content="u" * 50),
            ChatMessage(role="assistant", name="John", content="j" * 50),
            ChatMessage(role="assistant", content="a" * 50),
        ]
    )
    assert [m.content for m in parse_history(raw, history_limit=10)] == ["u" * 50, "j" * 10 + "…", "a" * 10 + "…"]


def test_messages_at_the_history_limit_are_not_truncated():
    raw = render_conversation([ChatMessage(role="assistant", content="a" * 10)])
    assert parse_history(raw, history_limit=10)[0].content == "a" * 10


def test_system_and_tool_history_is_truncated_like_the_assistant():
    raw = render_conversation(
        [ChatMessage(role="system", content="s" * 20), ChatMessage(role="tool", name="search", content="t" * 20)]
    )
    assert [m.content for m in parse_history(raw, history_limit=5)] == ["s" * 5 + "…", "t" * 5 + "…"]


def test_default_history_limit_is_2000_characters():
    raw = render_conversation([ChatMessage(role="assistant", content="a" * 2500)])
    assert parse_history(raw)[0].content == "a" * 2000 + "…"


def test_empty_history_parses_to_no_messages():
    assert parse_history("") == []


def test_text_before_the_first_label_is_a_parse_error_with_its_line():
    with pytest.raises(HistoryParseError, match="history line 2: text before the first speaker label") as caught:
        parse_history("\nstray text\n[user]: hi")
    assert caught.value.line == 2


def test_history_limit_must_be_positive():
    with pytest.raises(ValueError, match="history_limit"):
        parse_history("[user]: hi", history_limit=0)


# --- 3. 记忆归属 (memory ownership) and reconcile cross-subject rules --------------------------------
# Added later by the lead, driven end to end through the client (extraction subjects/owners, L0 profile
# only for the current user, no UPDATE/SUPERSEDE across subjects). Keep them below this line.

from hymem import HyMemoryClient  # noqa: E402
from hymem.subjects import fact_subject  # noqa: E402
from hymem.testing import ScriptedLM  # noqa: E402
from tests.conftest import extract_reply, ops_reply  # noqa: E402

TIM_JOHN = [{"role": "user", "name": "Tim", "content": "I work at Stripe."},
            {"role": "assistant", "name": "John", "content": "I am a nurse in Berlin."}]


def test_engine_stores_the_subject_and_owner_the_extractor_proposed(tmp_path):
    lm = ScriptedLM([
        extract_reply([("The user works at Stripe.", "user", "user"), ("John is a nurse in Berlin.", "John", "user"),
                       ("The assistant suggested a standing desk.", "assistant", "agent")], {"occupation": None}),
        ops_reply({"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1}, {"op": "ADD", "fact": 2}),
    ])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        result = client.add(TIM_JOHN + [{"role": "assistant", "content": "Try a standing desk."}], user_id="tim")
        stored = {(m.text, m.subject, m.owner) for m in client.get_all("tim")}
        trace = client.store.traces("tim")[-1]["payload"]
    assert result.success
    assert stored == {("The user works at Stripe.", "user", "user"), ("John is a nurse in Berlin.", "John", "user"),
                      ("The assistant suggested a standing desk.", "assistant", "agent")}
    assert [f["subject"] for f in trace["proposed_facts"]] == ["user", "John", "assistant"]  # the proposal is kept


def test_the_extractor_sees_the_rendered_speakers_and_the_ownership_rules(tmp_path):
    lm = ScriptedLM([extract_reply([])])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add(TIM_JOHN, user_id="tim")
    request = lm._script.requests[0]
    system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
    assert "The user's name is Tim\n[user]: I work at Stripe.\n[John]: I am a nurse in Berlin." in lm.prompts()[0]
    assert "a named human is never owner \"agent\"" in system and "ONLY the current user" in system


def test_chinese_conversations_get_the_chinese_instructions(tmp_path):
    lm = ScriptedLM([extract_reply([])])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add([{"role": "user", "name": "Tim", "content": "我在 Stripe 工作。"},
                    {"role": "assistant", "name": "John", "content": "我是住在柏林的护士。"}], user_id="tim")
    request = lm._script.requests[0]
    system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
    assert "用户名叫Tim\n[user]: 我在 Stripe 工作。" in lm.prompts()[0]
    assert "具名真人即使使用 assistant 角色" in system


def test_l0_profile_trusts_the_user_name_and_only_describes_the_user(tmp_path):
    lm = ScriptedLM([extract_reply([("John is a nurse in Berlin.", "John", "user")], {"name": "John"}),
                     ops_reply({"op": "ADD", "fact": 0})])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add(TIM_JOHN, user_id="tim")
        assert client.profile("tim")["name"] == "Tim"  # role=user's name wins over the model's


def test_reconcile_instructions_forbid_cross_subject_merges(tmp_path):
    lm = ScriptedLM([extract_reply([("The user likes coffee.", "user", "user")]), ops_reply({"op": "ADD", "fact": 0})])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add([{"role": "user", "content": "I like coffee."}], user_id="tim")
    request = lm._script.requests[1]
    system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
    assert "NEVER UPDATE, SUPERSEDE or DELETE across subjects" in system
    assert '"The user likes coffee" and "John likes coffee" are\ntwo separate facts' in system.replace("    ", "")


def test_offline_model_attributes_the_spec_example_end_to_end(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as client:
        assert client.add(TIM_JOHN, user_id="tim").success
        stored = {(m.text, m.subject, m.owner) for m in client.get_all("tim")}
        profile = client.profile("tim")
        assert client.add([{"role": "user", "content": "I like coffee."},
                           {"role": "assistant", "name": "John", "content": "I like coffee too."}], user_id="tim").success
        texts = sorted(m.text for m in client.get_all("tim"))
    assert ("The user works at Stripe.", "user", "user") in stored
    assert ("John is a nurse in Berlin.", "John", "user") in stored
    assert profile.get("name") == "Tim" and "nurse" not in str(profile).lower()
    assert "John likes coffee." in texts and "The user likes coffee." in texts  # kept apart


def test_history_keeps_each_writes_own_user_name(tmp_path):
    lm = ScriptedLM([extract_reply([]), extract_reply([])])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add([{"role": "user", "name": "Tim", "content": "Hi."}], user_id="tim")
        client.add([{"role": "user", "content": "Hello again."}], user_id="tim")
        history = client.history("tim")
    assert [(m.role, m.name, m.content) for m in history] == [("user", "Tim", "Hi."), ("user", None, "Hello again.")]


@pytest.mark.parametrize("name", ["The User", "Current User", "用户", "当前用户", "AI", "The Assistant", "助手"])
def test_a_named_human_cannot_be_named_as_the_user_or_the_ai(name):
    """A named human is another person (spec 1); a name the subject rules read as the user or the AI would let
    their facts be filed as, and merged with, the user's or the AI's."""
    with pytest.raises(ValueError, match=r"messages\[1\]\.name: .*not another person"):
        normalize_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "name": name, "content": "I am a chef."}])


def _stored_after(tmp_path, replies, first, second, path="add"):
    with HyMemoryClient(path=tmp_path / "s", lm=ScriptedLM(replies), embedder="hash") as client:
        assert client.add_extracted(first, user_id="tim").success
        result = getattr(client, path)(second, user_id="tim")
        return result, {(m.text, m.subject, m.owner) for m in client.get_all("tim")}


@pytest.mark.parametrize("path", ["add", "add_working"])
def test_a_named_humans_fact_labelled_as_the_ais_is_theirs_and_merges_with_nothing_of_the_ai(tmp_path, path):
    from tests.conftest import working_reply

    said = [("John is a nurse in Berlin.", "assistant", "agent")]
    extract = extract_reply(said) if path == "add" else working_reply(facts=said)
    result, stored = _stored_after(tmp_path, [ops_reply({"op": "ADD", "fact": 0}), extract,
                                              ops_reply({"op": "UPDATE", "fact": 0, "id": 1})],
                                   [{"text": "The assistant suggested a Berlin itinerary.", "owner": "agent"}], TIM_JOHN, path)
    assert result.success and result.ops[0].op == "ADD" and "cross-subject" in result.ops[0].refused
    assert stored == {("The assistant suggested a Berlin itinerary.", "assistant", "agent"),
                      ("John is a nurse in Berlin.", "John", "agent")}  # the model's wrong owner is kept, and scored


@pytest.mark.parametrize(("text", "subject"), [
    ("John's sister is a doctor.", "John's sister"),  # John's relative, not John (nor the user)
    ("Jack, the user's friend, is a chef.", "Jack"), ("The user's mother is a nurse.", "the user's mother")])
def test_a_fact_labelled_the_users_whose_sentence_names_another_person_merges_with_nothing_of_the_user(
        tmp_path, text, subject):
    """The guard reads who the sentence names by a relation; the model's label is stored as given (and scored)."""
    result, stored = _stored_after(tmp_path, [ops_reply({"op": "ADD", "fact": 0}), extract_reply([(text, "user", "user")]),
                                              ops_reply({"op": "SUPERSEDE", "fact": 0, "id": 1})],
                                   [{"text": "The user is a software engineer.", "owner": "user"}], TIM_JOHN)
    assert result.success and "cross-subject" in result.ops[0].refused
    assert stored == {("The user is a software engineer.", "user", "user"), (text, "user", "user")}
    assert fact_subject(text, "user") == subject


def test_a_fact_about_the_user_that_opens_with_another_name_still_updates_the_users_fact(tmp_path):
    result, stored = _stored_after(tmp_path, [ops_reply({"op": "ADD", "fact": 0}),
                                              extract_reply([("Stripe hired the user last year.", "user", "user")]),
                                              ops_reply({"op": "SUPERSEDE", "fact": 0, "id": 1})],
                                   [{"text": "The user works at Acme.", "owner": "user"}], TIM_JOHN)
    assert result.success and result.ops[0].op == "SUPERSEDE" and not result.ops[0].refused
    assert stored == {("Stripe hired the user last year.", "user", "user")}


@pytest.mark.parametrize("value", ["Nurse.", "registered nurse", "Berlin, Germany", "john "])
def test_a_profile_value_only_another_speakers_words_support_is_not_the_users(tmp_path, value):
    lm = ScriptedLM([extract_reply([], {"occupation": value}), extract_reply([], {"occupation": value})])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        client.add([{"role": "user", "content": "hello"}, TIM_JOHN[1]], user_id="tim")
        assert client.profile("tim") == {}
        client.add([{"role": "user", "content": "I am a nurse in Berlin too."}, TIM_JOHN[1]], user_id="tim")
        assert client.profile("tim") == ({"occupation": value} if value != "john " else {})


@pytest.mark.parametrize(("speaker", "said", "text"), [
    ("Helen", "My name is Helen.", "Helen's name is Helen."), ("阿芳", "我还在抽烟。", "阿芳还在抽。"),
    ("王芳", "你睡前泡泡脚吧。", "王芳建议用户睡前泡脚。")])
def test_a_speakers_fact_labelled_the_users_is_filed_under_the_speaker(tmp_path, speaker, said, text):
    lm = ScriptedLM([extract_reply([(text, "user", "user")]), ops_reply({"op": "ADD", "fact": 0})])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        assert client.add([{"role": "user", "content": "hi"}, {"role": "assistant", "name": speaker, "content": said}],
                          user_id="tim").success
        assert [(m.text, m.subject) for m in client.get_all("tim")] == [(text, speaker)]
