"""Who a fact is about, on tables of sentence shapes in both languages (tests/data/subject_shapes*.jsonl).

`subject_shapes.jsonl` was written before the rule was changed (today's rule scored 47/80 on it);
`subject_shapes_heldout.jsonl` was written after it, as the held-out figure. `subject_shapes_relations.jsonl`
(a name after a relation, a passive's agent) was written before the relation and agent rules stopped using a
surname list (that rule scored 31/62 on it); `subject_shapes_relations_heldout.jsonl` was written after that rule
(27/28 on first reading; the miss, "run by", added the irregular participles; the surname-list rule read 11/28). Each row: a sentence, the
conversation's named people (`participants`), the user's own name, and the subject a reader expects.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hymem.client import extracted_facts
from hymem.models import ChatMessage
from hymem.subjects import same_subject, split_subject, subject_of

DATA = Path(__file__).parents[1] / "data"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _agrees(got: str | None, want: str | None) -> bool:
    return got is None if want is None else got is not None and same_subject(got, want)


@pytest.mark.parametrize("row", _rows("subject_shapes.jsonl"), ids=lambda r: r["shape"])
def test_the_engine_names_the_subject_of_each_shape(row):
    got = subject_of(row["text"], row["participants"], row["user_name"])
    assert _agrees(got, row["subject"]), (row["text"], got)


@pytest.mark.parametrize("row", _rows("subject_shapes_relations.jsonl") + _rows("subject_shapes_relations_heldout.jsonl"),
                         ids=lambda r: r["shape"])
def test_the_engine_names_a_relatives_name_and_a_passives_agent(row):
    got = subject_of(row["text"], row["participants"], row["user_name"])
    assert _agrees(got, row["subject"]), (row["text"], got)


def test_held_out_shapes_are_read_at_least_as_the_issue_requires():
    """Written after the rule: a figure, not a fit (the issue asks ≥ 0.98 for a named speaker's fact)."""
    rows = _rows("subject_shapes_heldout.jsonl")
    assert len(rows) >= 20
    named = [r for r in rows if r["participants"]]
    hits = sum(_agrees(subject_of(r["text"], r["participants"], r["user_name"]), r["subject"]) for r in named)
    assert hits / len(named) >= 0.98, [r["text"] for r in named
                                       if not _agrees(subject_of(r["text"], r["participants"], r["user_name"]), r["subject"])]


@pytest.mark.parametrize(("speaker", "text"), [("赵敏", "赵敏很喜欢喝咖啡。"), ("Dr. Smith", "Dr. Smith is a dentist."),
                                               ("Siobhán O'Brien", "Siobhán O'Brien plays the fiddle."),
                                               ("欧阳娜娜", "欧阳娜娜喜欢画画。")])
def test_a_fact_the_model_filed_under_the_user_is_the_named_speakers(speaker, text):
    """The write path: a named speaker's fact the model labelled the user's (or the AI's) is re-filed under them,
    while the user's own facts stay the user's, even when they open with the user's name."""
    msgs = [ChatMessage(role="user", name="Tim", content="..."), ChatMessage(role="assistant", name=speaker, content="...")]
    outputs = {"facts": [SimpleNamespace(text=text, subject="user", owner="user"),
                         SimpleNamespace(text="Tim moved to Berlin.", subject="user", owner="user"),
                         SimpleNamespace(text=text, subject="assistant", owner="user")]}
    facts = extracted_facts(outputs, msgs, ("facts", "fact"))
    assert [f.subject for f in facts] == [speaker, "user", speaker]
    assert [f.owner for f in facts] == ["user", "user", "user"]


def test_a_named_human_who_shares_the_users_name_owns_a_sentence_that_opens_with_it():
    # The user's own facts read "The user ..." (spec 3), so "Tim likes jazz." with a second Tim speaking is theirs:
    # the sweep's third_party_as_user / _as_assistant replies on en-044 and zh-027 were kept misfiled without this.
    from hymem.subjects import subject_of

    assert subject_of("Tim likes jazz.", ["Tim"], "Tim") == "Tim"
    assert subject_of("小明喜欢钓鱼。", ["小明"], "小明") == "小明"
    assert subject_of("Tim likes jazz.", ["John"], "Tim") == "user"


@pytest.mark.parametrize(("text", "subject", "rest"), [
    ("用户的朋友Jack是厨师。", "Jack", "是厨师。"),  # the bundled case zh-010-friend-jack-chef's gold
    ("用户的同事José在北京工作。", "José", "在北京工作。"),
    ("用户的朋友O'Neil喜欢跑步。", "O'Neil", "喜欢跑步。"),
    ("用户的室友Jack Smith养了一只猫。", "Jack Smith", "养了一只猫。"),
])
def test_a_latin_name_after_a_chinese_relation_ends_where_the_chinese_begins(text, subject, rest):
    """The matcher compares what is left after the subject: a name that ran on into the Chinese after it
    ("Jack是厨") was nobody's, and the gold fact no longer paired with the model's "Jack是用户的朋友，是厨师。"."""
    assert split_subject(text) == (subject, rest)


@pytest.mark.parametrize(("text", "participants", "subject", "rest"), [
    ("用户的同事祁海峰会弹吉他。", ["祁海峰"], "祁海峰", "会弹吉他。"),  # jieba reads 祁 as a place, 海峰 as a noun
    ("用户的表哥温立新在银行工作。", ["温立新"], "温立新", "在银行工作。"),
    ("The user's colleague Ottilie Brandt fixes clocks.", ["Ottilie Brandt"], "Ottilie Brandt", " fixes clocks."),
])
def test_a_relatives_name_that_is_a_participants_is_read_even_when_the_tokenizer_misses_it(text, participants,
                                                                                            subject, rest):
    """The conversation's names come first: after a relation, a speaker's name is theirs whatever jieba tags it."""
    assert split_subject(text, participants) == (subject, rest)


def test_a_participants_relative_after_a_relation_is_still_the_relative():
    assert split_subject("用户的同事温立新的女儿在上海读书。", ["温立新"])[0] != "温立新"
