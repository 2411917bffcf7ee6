"""Normalisation of OpenAI, Anthropic and object-style messages, and the validation errors."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel

from hymem.messages import MessageValidationError, normalize_messages
from hymem.models import ChatMessage


def one(message: dict) -> ChatMessage:
    [result] = normalize_messages([message])
    return result


# --- OpenAI style ---------------------------------------------------------------------------------


def test_openai_string_messages_keep_role_and_content():
    assert normalize_messages(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "I like coffee."},
            {"role": "assistant", "content": "Noted."},
        ]
    ) == [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="I like coffee."),
        ChatMessage(role="assistant", content="Noted."),
    ]


def test_speaker_names_are_kept_with_whitespace_stripped():
    assert one({"role": "user", "name": "  Tim ", "content": "hi"}).name == "Tim"
    assert one({"role": "assistant", "name": "John", "content": "hi"}).name == "John"
    assert one({"role": "system", "name": "ops", "content": "hi"}).name == "ops"


@pytest.mark.parametrize("name", ["", "   ", None])
def test_empty_or_blank_name_becomes_none(name):
    assert one({"role": "assistant", "name": name, "content": "hi"}).name is None


@pytest.mark.parametrize("role", ["user", "assistant", "system"])
def test_name_equal_to_its_own_role_is_no_name(role):
    assert one({"role": role, "name": role.capitalize(), "content": "hi"}).name is None


def test_message_content_is_kept_verbatim():
    assert one({"role": "user", "content": "  line one\n\n  line two\n"}).content == "  line one\n\n  line two\n"


def test_openai_text_parts_are_joined_with_newlines():
    message = one({"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]})
    assert message.content == "first\nsecond"


def test_image_audio_and_file_parts_become_short_placeholders():
    message = one(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                {"type": "file", "file": {"file_id": "f1"}},
            ],
        }
    )
    assert message.content == "What is this?\n[image]\n[audio]\n[file]"


def test_refusal_part_keeps_the_refusal_text():
    assert one({"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}).content == "I can't."


def test_assistant_tool_calls_with_null_content_render_as_called_text():
    message = one(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q":"x"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "clock", "arguments": ""}},
            ],
        }
    )
    assert message == ChatMessage(role="assistant", content='called search({"q": "x"})\ncalled clock()')


def test_assistant_text_comes_before_its_tool_calls():
    message = one(
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"q": "天气"}'}},
            ],
        }
    )
    assert message.content == 'Let me look.\ncalled search({"q": "天气"})'


def test_unparseable_tool_arguments_are_kept_verbatim():
    message = one(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{not json"}},
            ],
        }
    )
    assert message.content == "called search({not json)"


def test_custom_tool_call_keeps_its_free_text_input_verbatim():
    message = one(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "custom", "custom": {"name": "shell", "input": "ls -la"}},
            ],
        }
    )
    assert message.content == "called shell(ls -la)"


def test_legacy_function_call_renders_as_called_text():
    message = one({"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"id": 3}'}})
    assert message.content == 'called lookup({"id": 3})'


def test_openai_tool_message_name_is_the_tool_name():
    assert one({"role": "tool", "name": "search", "tool_call_id": "c", "content": "3 results"}) == ChatMessage(
        role="tool", name="search", content="3 results"
    )


def test_tool_message_without_name_takes_the_name_of_its_call():
    result = normalize_messages(
        [
            {"role": "assistant", "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "search"}}]},
            {"role": "tool", "tool_call_id": "c9", "content": "3 results"},
        ]
    )
    assert result[1] == ChatMessage(role="tool", name="search", content="3 results")


def test_tool_message_with_an_unknown_call_id_has_no_name():
    assert one({"role": "tool", "tool_call_id": "nowhere", "content": "ok"}).name is None


def test_tool_message_may_have_empty_content():
    assert one({"role": "tool", "tool_call_id": "c", "content": ""}).content == ""


def test_tool_message_text_parts_are_joined():
    message = one(
        {"role": "tool", "name": "search", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    )
    assert message.content == "a\nb"


def test_function_role_maps_to_tool_with_the_function_name():
    assert one({"role": "function", "name": "lookup", "content": "42"}) == ChatMessage(
        role="tool", name="lookup", content="42"
    )


def test_developer_role_maps_to_system():
    assert one({"role": "developer", "content": "Be brief."}) == ChatMessage(role="system", content="Be brief.")


# --- Anthropic style ------------------------------------------------------------------------------


def test_anthropic_text_blocks_keep_the_speaker_name():
    message = one({"role": "assistant", "name": "John", "content": [{"type": "text", "text": "I am a nurse."}]})
    assert message == ChatMessage(role="assistant", name="John", content="I am a nurse.")


def test_anthropic_tool_use_renders_as_called_text_after_the_text():
    message = one(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
            ],
        }
    )
    assert message.content == 'Searching.\ncalled search({"q": "x"})'


def test_user_message_of_only_tool_results_becomes_tool_messages_named_by_tool_use():
    result = normalize_messages(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "x"}},
                    {"type": "tool_use", "id": "t2", "name": "clock", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "3 results"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "12:00"},
                ],
            },
        ]
    )
    assert result[1:] == [
        ChatMessage(role="tool", name="search", content="3 results"),
        ChatMessage(role="tool", name="clock", content="12:00"),
    ]


def test_tool_result_with_an_unknown_tool_use_id_has_no_tool_name():
    message = one({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gone", "content": "ok"}]})
    assert message == ChatMessage(role="tool", name=None, content="ok")


def test_mixed_text_and_tool_results_are_split_in_order():
    result = normalize_messages(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {}}]},
            {
                "role": "user",
                "name": "Tim",
                "content": [
                    {"type": "text", "text": "before"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "found"},
                    {"type": "text", "text": "after"},
                ],
            },
        ]
    )
    assert result[1:] == [
        ChatMessage(role="user", name="Tim", content="before"),
        ChatMessage(role="tool", name="search", content="found"),
        ChatMessage(role="user", name="Tim", content="after"),
    ]


def test_tool_result_list_content_joins_text_blocks_and_marks_images():
    message = one(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [
                        {"type": "text", "text": "line 1"},
                        {"type": "image", "source": {}},
                        {"type": "text", "text": "line 2"},
                    ],
                }
            ],
        }
    )
    assert message.content == "line 1\n[image]\nline 2"


def test_tool_result_error_is_marked_as_an_error():
    message = one(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "timeout", "is_error": True},
            ],
        }
    )
    assert message.content == "error: timeout"


def test_tool_result_without_content_is_an_empty_tool_message():
    assert one({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}).content == ""


def test_thinking_blocks_are_skipped():
    message = one(
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Answer."},
            ],
        }
    )
    assert message.content == "Answer."


def test_unknown_block_types_become_a_placeholder_named_by_type():
    message = one({"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "search_result"}]})
    assert message.content == "see\n[search_result]"


# --- other input shapes ---------------------------------------------------------------------------


def test_chat_message_instances_are_accepted():
    message = ChatMessage(role="assistant", name="John", content="hi")
    assert normalize_messages([message]) == [message]


def test_pydantic_models_with_role_and_content_are_accepted():
    class SdkMessage(BaseModel):
        role: str
        content: str | list
        name: str | None = None

    result = normalize_messages([SdkMessage(role="user", name="Tim", content=[{"type": "text", "text": "hi"}])])
    assert result == [ChatMessage(role="user", name="Tim", content="hi")]


def test_objects_with_role_and_content_attributes_are_accepted():
    class Plain:
        def __init__(self) -> None:
            self.role = "assistant"
            self.content = "hello"
            self.name = "John"

    assert normalize_messages([Plain()]) == [ChatMessage(role="assistant", name="John", content="hello")]


def test_dataclass_messages_are_accepted():
    @dataclasses.dataclass
    class Message:
        role: str
        content: str

    assert normalize_messages([Message("user", "hi")]) == [ChatMessage(role="user", content="hi")]


# --- validation errors ----------------------------------------------------------------------------

BAD_INPUTS = [
    ("not a list", "hello", None, None, "expected a list"),
    ("empty list", [], None, None, "empty list"),
    ("element not a dict", [{"role": "user", "content": "a"}, 7], 1, None, "expected a message dict, got int"),
    ("missing role", [{"content": "a"}], 0, "role", "missing"),
    ("role not a string", [{"role": 1, "content": "a"}], 0, "role", "must be a string"),
    (
        "unknown role",
        [{"role": "user", "content": "a"}] * 2 + [{"role": "bot", "content": "a"}],
        2,
        "role",
        "unknown role 'bot'",
    ),
    ("missing content", [{"role": "user"}], 0, "content", "missing"),
    ("empty content", [{"role": "user", "content": ""}], 0, "content", "empty"),
    ("blank content", [{"role": "assistant", "content": " \n "}], 0, "content", "empty"),
    ("content wrong type", [{"role": "user", "content": 5}], 0, "content", "must be a string or a list"),
    (
        "only thinking blocks",
        [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}],
        0,
        "content",
        "empty",
    ),
    ("name wrong type", [{"role": "user", "name": 3, "content": "a"}], 0, "name", "must be a string"),
    ("name with a line break", [{"role": "user", "name": "Ti\nm", "content": "a"}], 0, "name", "line break"),
    ("name with a bracket", [{"role": "assistant", "name": "Jo]hn", "content": "a"}], 0, "name", "']'"),
    ("name too long", [{"role": "assistant", "name": "J" * 65, "content": "a"}], 0, "name", "longer than 64"),
    ("assistant named user", [{"role": "assistant", "name": "user", "content": "a"}], 0, "name", "reserved"),
    ("assistant named tool", [{"role": "assistant", "name": "Tool", "content": "a"}], 0, "name", "reserved"),
    (
        "part not a dict",
        [{"role": "user", "content": [{"type": "text", "text": "a"}, 3]}],
        0,
        "content[1]",
        "expected a dict",
    ),
    ("part without type", [{"role": "user", "content": [{"text": "a"}]}], 0, "content[0].type", "missing"),
    (
        "text part without text",
        [{"role": "user", "content": [{"type": "text", "text": None}]}],
        0,
        "content[0].text",
        "must be a string",
    ),
    ("tool_calls not a list", [{"role": "assistant", "tool_calls": {"id": "c"}}], 0, "tool_calls", "must be a list"),
    (
        "tool call without function",
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}],
        0,
        "tool_calls[0].function",
        "missing",
    ),
    (
        "tool call without name",
        [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": ""}}]}],
        0,
        "tool_calls[0].function.name",
        "missing tool name",
    ),
    (
        "tool_use without name",
        [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]}],
        0,
        "content[0].name",
        "missing tool name",
    ),
    ("tool name with parentheses", [{"role": "tool", "name": "f(x)", "content": "a"}], 0, "name", "parentheses"),
    ("tool message without content", [{"role": "tool", "name": "search"}], 0, "content", "missing"),
    (
        "tool_call_id wrong type",
        [{"role": "tool", "tool_call_id": 4, "content": "a"}],
        0,
        "tool_call_id",
        "must be a string",
    ),
    (
        "tool result nested content wrong type",
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 3}]}],
        0,
        "content[0].content",
        "must be a string",
    ),
]


@pytest.mark.parametrize(("case", "messages", "index", "field", "problem"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_an_error_naming_index_and_field(case, messages, index, field, problem):
    with pytest.raises(MessageValidationError) as caught:
        normalize_messages(messages)
    error = caught.value
    assert (error.index, error.field) == (index, field)
    assert problem in str(error)
    where = "messages" if index is None else f"messages[{index}]"
    assert str(error).startswith(where + (f".{field}" if field else "") + ": ")


def test_unknown_role_error_message_reads_exactly():
    with pytest.raises(MessageValidationError, match=r"^messages\[0\]\.role: unknown role 'bot'$"):
        normalize_messages([{"role": "bot", "content": "hi"}])


def test_validation_error_is_a_value_error():
    assert issubclass(MessageValidationError, ValueError)
