"""Chinese names the conversation never gives and jieba's dictionary does not tag (issue 33, point 1's known limit).

`tests/data/subject_shapes_zh_unknown_names.jsonl` was written before the rule change (94 shapes: 54 names or names
as objects, 40 negatives whose opening characters are no name). First reading on the old rule: engine 51/94 (names
19/54, 8 false names), scorer 49/94 (16/54, 7 false names). Both readers now also use jieba's character model
(`hymem.zh_unknown_names` for the engine; the scorer's own per-character reading in `evals.core.subject_reading`).
The rows either reader still gets wrong are listed below as strict expected failures: each is a dictionary word
jieba tags as a person's name (石家庄, 马拉松), a compound surname the engine's closed list holds (上官网, 东方明珠),
or, for the scorer, a compound surname it has no list for. A fix turns its row into an unexpected pass.
Two held-out tables were written after the change and committed before they were run (first readings, engine /
scorer: `_heldout` 42/50 / 41/50, the same as the old rule, as its names turned out to be ones jieba's model already
tags; `_heldout3`, surnames that are everyday words, 31/38 / 30/38, also unchanged). Their misses then shaped a
second change (a surname the dictionary calls a numeral, 左; a given name that is a verb, 远航; a dictionary word and
the character that ends the name, 花蕾|蕾; a compound surname before a time word; 用户的大学同学), so both are
in-sample for it now: engine 43/50 and 36/38, scorer 41/50 and 32/38. The floors below hold those figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from evals.core.subject_reading import person_class, read_subject, same_person
from hymem.subjects import same_subject, subject_class, subject_of

DATA = Path(__file__).parents[1] / "data"
TABLE = "subject_shapes_zh_unknown_names.jsonl"

ENGINE_MISREADS = {"马拉松比赛在十月举行。", "东方明珠是上海的地标。", "上官网查询了航班信息。", "孔雀舞学了三年。",
                   "石家庄的房价不高。"}
SCORER_MISREADS = {"慕容立新喜欢下棋。", "司徒美玲是一名建筑师。", "诸葛文静养了一只猫。", "东方美玲住在广州。",
                   "他的妻子向美玲是一名医生。", "用户的舅舅于海峰在农村种果树。", "华为发布了新手机。", "马拉松比赛在十月举行。",
                   "东方明珠是上海的地标。", "阿里巴巴的面试通过了。", "戴眼镜已经十年了。", "孔雀舞学了三年。",
                   "石家庄的房价不高。"}


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _marked(rows: list[dict], misreads: set[str]) -> list:
    return [pytest.param(r, id=r["shape"], marks=pytest.mark.xfail(strict=True, reason="known misread")
                         if r["text"] in misreads else ()) for r in rows]


def _agrees(got: str | None, want: str | None, same: Callable[[str | None, str | None], bool]) -> bool:
    return got is None if want is None else got is not None and same(got, want)


@pytest.mark.parametrize("row", _marked(_rows(TABLE), ENGINE_MISREADS))
def test_the_engine_reads_a_name_jieba_does_not_know(row):
    got = subject_of(row["text"], row["participants"], row["user_name"])
    assert _agrees(got, row["subject"], same_subject), (row["text"], got)


@pytest.mark.parametrize("row", _marked(_rows(TABLE), SCORER_MISREADS))
def test_the_scorer_reads_a_name_jieba_does_not_know(row):
    """The scorer reads the text alone (no conversation names), with its own code."""
    got = read_subject(row["text"])
    assert _agrees(got, row["subject"], same_person), (row["text"], got)


def test_no_negative_reads_as_a_name_it_did_not_read_before():
    """The new reading adds no false name: every negative either reader reads as a person is a known misread of
    jieba's dictionary (listed above), none comes from the character model."""
    negatives = [r for r in _rows(TABLE) if r["shape"].startswith("neg")]
    assert len(negatives) >= 20
    engine = {r["text"] for r in negatives
              if (got := subject_of(r["text"])) is not None and subject_class(got) == "named" and "的" not in got}
    scorer = {r["text"] for r in negatives
              if (got := read_subject(r["text"])) is not None and person_class(got) == "named" and "的" not in got}
    assert engine <= ENGINE_MISREADS and scorer <= SCORER_MISREADS, (engine - ENGINE_MISREADS, scorer - SCORER_MISREADS)


@pytest.mark.parametrize(("text", "subject"), [
    ("用户的同事温立新的女儿在上海读书。", "温立新的女儿"),  # a relative's relative, after a name the model reads
    ("甘美玲在深圳工作。", "甘美玲"),  # jieba's dictionary cuts 甘美|玲; the model reads one name
    ("高峰期地铁很挤。", None),  # 高峰 is a name to jieba, but the dictionary's 高峰期 is not cut
    ("和老公下周去厦门看海", None),  # a conjunction begins no name
])
def test_the_engine_reads_a_name_where_one_is_and_not_where_none_is(text, subject):
    assert _agrees(subject_of(text), subject, same_subject), subject_of(text)


@pytest.mark.parametrize(("table", "engine_floor", "scorer_floor"), [
    ("subject_shapes_zh_unknown_names_heldout.jsonl", 43, 41), ("subject_shapes_zh_unknown_names_heldout3.jsonl", 36, 32)])
def test_the_held_out_tables_are_read_as_measured(table, engine_floor, scorer_floor):
    rows = _rows(table)
    engine = sum(_agrees(subject_of(r["text"], r["participants"], r["user_name"]), r["subject"], same_subject) for r in rows)
    scorer = sum(_agrees(read_subject(r["text"]), r["subject"], same_person) for r in rows)
    assert engine >= engine_floor and scorer >= scorer_floor, (engine, scorer)


BLIND = "subject_shapes_zh_blind.jsonl"


def _names_no_one(got: str | None, named: Callable[[str], str]) -> bool:
    """A user note (subjectless, 该用户…) or a fact about no one is read right when no named person is read."""
    return got is None or named(got) != "named"


def test_the_blind_table_is_read_as_first_measured():
    """`subject_shapes_zh_blind.jsonl` (90 rows: 55 named third parties, 35 user notes or facts about no one that open
    with a place, brand, dish, time word or wish) was written by a helper who read neither reader's code, after both
    changes, and measured once on the merge: engine 57/90 on main before → 72/90 (names 33 → 45 of 55, no-one rows
    24 → 27 of 35); scorer 42/90 → 61/90 (names 18 → 37, no-one rows 24 → 24). The floors hold that reading; a rule
    fitted to this table's misses makes it in-sample (say so where its figure is reported)."""
    rows = _rows(BLIND)
    named_rows = [r for r in rows if r["subject"] not in (None, "user")]
    engine = sum(_agrees(subject_of(r["text"], r["participants"], r["user_name"]), r["subject"], same_subject)
                 for r in named_rows)
    scorer = sum(_agrees(read_subject(r["text"]), r["subject"], same_person) for r in named_rows)
    no_one = [r for r in rows if r["subject"] in (None, "user")]
    engine_no_one = sum(_names_no_one(subject_of(r["text"]), subject_class) for r in no_one)
    scorer_no_one = sum(_names_no_one(read_subject(r["text"]), person_class) for r in no_one)
    assert (len(named_rows), len(no_one)) == (55, 35)
    assert engine >= 45 and engine_no_one >= 27, (engine, engine_no_one)
    assert scorer >= 37 and scorer_no_one >= 24, (scorer, scorer_no_one)
