"""The scorer reads subjects on its own (`evals.core.subject_reading`), apart from the engine's `hymem.subjects`, so a
bug in the engine's rule shows as a wrong score instead of being agreed with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hymem.subjects
from evals.arms.mem0_system import subject_of as mem0_subject
from evals.core.subject_reading import names_person, read_subject, same_person
from evals.scoring.matcher import DEFAULT_MATCHER, subject_text_mismatch


@pytest.mark.parametrize(("text", "subject"), [
    ("The user lives in Berlin.", "user"), ("The assistant suggested chamomile tea.", "assistant"),
    ("The user's mum is a nurse.", "the user's mother"), ("用户的妈妈是护士。", "用户的母亲"),
    ("The user's friend Jack is a chef.", "Jack"), ("Jack, the user's friend, is a chef.", "Jack"),
    ("Dr. Smith is a dentist.", "Dr. Smith"), ("Siobhán O'Brien plays the fiddle.", "Siobhán O'Brien"),
    ("John's sister is a doctor.", "John's sister"), ("赵敏很喜欢喝咖啡。", "赵敏"), ("李娜非常喜欢跑步。", "李娜"),
    ("王阿姨每天早上在公园抖空竹。", "王阿姨"), ("大飞是用户的表哥。", "大飞"), ("张伟的妹妹在读高中。", "张伟的妹妹"),
    ("The fence was painted by the user.", "user"), ("The user's speech was drafted by the assistant.", "assistant"),
    ("The user mentioned that their aunt works as a taxidermist.", "the user's aunt"),
    ("Works at Stripe", None), ("Loves sushi", None), ("最近在瘦身", None), ("爱喝酸梅汤", None),
    ("James cooks dinner", "James"), ("Cultivates orchids", None), ("Mother is a nurse", "the user's mother"),
    # the agent of a 是…的 cleft about the user's thing, as "The user's bathroom was tiled by Dario."; not an owner
    ("用户的电脑是郑浩修好的。", "郑浩"), ("用户的车是李明的。", "user")])
def test_the_scorer_reads_who_a_sentence_is_about(text, subject):
    got = read_subject(text)
    assert (got is None) if subject is None else same_person(got, subject), got


def test_the_scorer_reads_the_shape_table_without_the_engines_rule():
    """The shapes with no conversation names (the scorer reads text only): most, not all (its reading is simpler)."""
    rows = [json.loads(line) for line in (Path(__file__).parents[1] / "data" / "subject_shapes.jsonl").read_text("utf-8").splitlines()]
    rows = [r for r in rows if not r["participants"] and not r["user_name"]]
    hits = sum((read_subject(r["text"]) is None) if r["subject"] is None
               else same_person(read_subject(r["text"]) or "", r["subject"]) for r in rows)
    assert hits / len(rows) >= 0.9


def test_a_broken_engine_rule_does_not_change_the_scorers_judgement(monkeypatch):
    """Breaking `hymem.subjects` leaves every scoring judgement about subjects as it was: the mismatch check, the
    matcher's subject check, and the subject mem0's plain memories are filed under."""
    facts = [("Dr. Smith is a dentist.", "Dr. Smith"), ("赵敏很喜欢喝咖啡。", "赵敏"), ("The user lives in Berlin.", "user")]
    before = ([subject_text_mismatch(t, s) for t, s in facts], [mem0_subject(t) for t, _ in facts],
              [DEFAULT_MATCHER.same_fact(t, None, t, s) for t, s in facts])
    monkeypatch.setattr(hymem.subjects, "split_subject", lambda text, *a, **k: ("user", text))
    monkeypatch.setattr(hymem.subjects, "subject_of", lambda text, *a, **k: "user")
    after = ([subject_text_mismatch(t, s) for t, s in facts], [mem0_subject(t) for t, _ in facts],
             [DEFAULT_MATCHER.same_fact(t, None, t, s) for t, s in facts])
    assert before == after
    assert before[0] == [False, False, False] and before[1] == ["Dr. Smith", "赵敏", "user"]


def test_a_fact_filed_under_a_wrong_name_is_a_mismatch():
    """What the issue's engine did (an adverb joined to the name, a title read as the name) is caught."""
    assert subject_text_mismatch("赵敏很喜欢喝咖啡。", "user")
    assert subject_text_mismatch("Dr. Smith is a dentist.", "user")
    assert not names_person("Dr. Smith is a dentist.", "assistant")
    assert names_person("Dr. Smith is a dentist.", "Dr. Smith")
