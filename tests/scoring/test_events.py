"""Which life event a fact is about (`evals.scoring.events`, the `[events]` tables of the rule files): two facts that
share a date, place or organisation but state different events are not the same fact, and two words for one event
are one."""

from __future__ import annotations

import pytest

from evals.scoring.events import events, events_differ, told_as_one_event
from evals.scoring.rulebook import frozen, use


@pytest.mark.parametrize(("a", "b"), [
    ("was born in 1979.", "got married in 1979."),
    ("started working at KPMG in 2012.", "left KPMG in 2012."),
    ("lives in Cardiff.", "works in Cardiff."),
    ("moved to Lisbon in May.", "visited Lisbon in May."),
    ("interviewed at Spotify.", "works at Spotify."),
    ("coaches a rugby team.", "plays rugby."),
    ("graduated from Durham in 2010.", "studied at Durham in 2010."),
    ("1985年出生。", "1985年结婚。"),
    ("住在绍兴。", "在绍兴上班。"),
    ("搬到了成都。", "去成都旅游了。"),
    ("在网易工作。", "去网易面试过。"),
    ("是篮球教练。", "打篮球。"),
])
def test_facts_about_two_different_events_differ(a, b):
    assert events_differ(a, b) and events_differ(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("lives in Leeds.", "is based in Leeds."),
    ("works at Siemens.", "is employed by Siemens."),
    ("left Unilever.", "no longer works at Unilever."),  # one side says more: no other event
    ("studies law at Leiden.", "is a law student at Leiden."),
    ("is preparing for the Graduate Record Examinations.", "is studying for the GRE."),  # a name states no event
    ("在华为工作。", "是华为的员工。"),
    ("住在温州。", "定居温州。"),
    ("已经不在银行工作了。", "已从银行离职。"),
    ("喜欢读书。", "喜欢看书。"),
])
def test_one_event_in_other_words_does_not_differ(a, b):
    assert not events_differ(a, b)


@pytest.mark.parametrize(("a", "b", "x", "y"), [
    ("lives in Leeds.", "is based in Leeds.", ("lives",), ("based",)),
    ("上个月换了工作。", "上个月跳槽了。", ("换了工作", "工作"), ("跳槽",)),
    ("住在丽江。", "定居丽江。", ("住在", "住"), ("定居",)),
])
def test_two_words_for_one_event_are_paired(a, b, x, y):
    assert told_as_one_event(x, [y], a, b) and told_as_one_event(y, [x], b, a)


def test_a_word_outside_the_event_is_not_paired_by_it():
    assert not told_as_one_event(("Leeds",), [("Bradford",)], "lives in Leeds.", "is based in Bradford.")


def test_the_frozen_baseline_reads_no_event():
    assert events("was born in 1979.") == {"born"}
    with use(frozen("v1")):
        assert events("was born in 1979.") == frozenset()
        assert not events_differ("was born in 1979.", "got married in 1979.")


def test_a_passive_turns_a_direction_round():
    """租出去 (let out) against 租了 (rented) is another event; told in the passive (被…租下) it is the same one."""
    assert events_differ("把城西的一间铺面租出去了。", "在城西租了一间铺面。")
    assert not events_differ("把铺面租给了一家面馆。", "的铺面被一家面馆租下了。")
