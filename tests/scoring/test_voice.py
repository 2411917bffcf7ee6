"""One event told in the two voices, each person in the same role, is one fact; the same words with the roles
swapped are not (`evals.scoring.voice`, the subject check, the semantic matcher)."""

import pytest

from evals.scoring.matcher import texts_name_same_subject
from evals.scoring.voice import converse

# passive with an agent / active opening with that agent and acting on the passive's subject
CONVERSE = [
    ("The user was raised by their grandmother.", "User's grandmother raised them"),
    ("The user's uncle taught the user to swim.", "The user was taught to swim by their uncle."),
    ("The user is tutored in chemistry by Mateo.", "Mateo tutors the user in chemistry."),
    ("The user was hired by Siemens in 2019.", "Siemens hired the user in 2019."),
    ("The user's sister was driven to school by the user.", "The user drove their sister to school."),
    ("The user was coached by her father.", "The user's father coached her."),
    ("用户被奶奶带大", "用户的奶奶把用户带大了"),
    ("用户被李娜辅导数学。", "李娜给用户辅导数学。"),
]
# the same verb and the same two people, but the other one acts: a swap of roles
SWAPPED = [
    ("The user was raised by their grandmother.", "The user raised their grandmother."),
    ("The user taught their uncle to swim.", "The user was taught to swim by their uncle."),
    ("The user's uncle was taught to swim by the user.", "The user's uncle taught the user to swim."),
    ("The user is tutored in chemistry by Mateo.", "The user tutors Mateo in chemistry."),
    ("The user's father coached her.", "The user's father was coached by her."),
    ("用户被奶奶带大", "用户把奶奶带大了"),
    ("用户被李娜辅导数学。", "用户辅导李娜数学。"),
]


@pytest.mark.parametrize(("a", "b"), CONVERSE)
def test_an_event_in_the_other_voice_with_the_same_roles_is_converse(a, b):
    assert converse(a, b) and converse(b, a)
    assert texts_name_same_subject(a, b)  # the two subjects differ, but each person keeps their role


@pytest.mark.parametrize(("a", "b"), SWAPPED)
def test_the_other_person_acting_is_not_converse(a, b):
    assert not converse(a, b) and not converse(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("The user's mother is a nurse.", "The user is a nurse."),  # no voice at all
    ("The user's uncle taught the user to swim.", "The user taught their uncle to swim."),
    ("用户的奶奶很喜欢做饭。", "用户很喜欢做饭。"),
])
def test_different_people_without_a_voice_pair_still_name_different_subjects(a, b):
    assert not converse(a, b)
    assert not texts_name_same_subject(a, b)


def test_a_rule_set_without_the_voice_tables_reads_no_voice_pair():
    from evals.scoring.rulebook import frozen, frozen_names, use

    if "v1" not in frozen_names():
        pytest.skip("no frozen baseline v1")
    assert converse(*CONVERSE[0])
    with use(frozen("v1")):
        assert not converse(*CONVERSE[0])


@pytest.fixture(scope="module")
def semantic():
    from evals.scoring.choose_matcher import make_matcher

    return make_matcher("semantic")


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b"), CONVERSE[:3] + CONVERSE[6:7])
def test_the_matcher_takes_an_active_passive_paraphrase_for_the_same_fact(semantic, a, b):
    assert semantic.same_fact(a, "user", b, "user")
    assert semantic.same_fact(b, "user", a, "user")


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b"), SWAPPED + [
    ("The user lent a drill to Omar.", "The user borrowed a drill from Omar."),
    ("Mateo tutors the user in chemistry.", "The user tutors Mateo in chemistry."),
])
def test_the_matcher_rules_out_a_swap_of_roles(semantic, a, b):
    assert not semantic.same_fact(a, "user", b, "user")
    assert not semantic.same_fact(b, "user", a, "user")


@pytest.mark.parametrize(("predicate", "verbs"), [
    ("takes yoga classes", {"learn"}), ("is taking harp lessons", {"learn"}), ("attends pottery classes", {"learn"}),
    ("gives piano lessons", {"teach"}), ("runs a yoga class on Sundays", {"teach"}), ("teaches yoga", set()),
    ("takes the bus to class", set()),
])
def test_a_light_verb_and_its_noun_state_a_verb(predicate, verbs):
    from evals.scoring.lexicon import phrase_verbs

    assert phrase_verbs(predicate) == verbs


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b", "same"), [
    ("The user teaches yoga.", "Takes yoga classes", False),  # teacher / learner
    ("The user gives yoga classes.", "The user takes yoga classes.", False),
    ("The user teaches piano.", "The user gives piano lessons.", True),
    ("The user is learning piano.", "The user takes piano lessons.", True),
])
def test_teaching_and_taking_classes_are_other_roles(semantic, a, b, same):
    assert semantic.same_fact(a, "user", b, "user") is same


@pytest.mark.parametrize(("a", "b", "direction"), [
    ("rents a room to a student", "rents a room from a student", 1.0),  # a person noun, to / from
    ("把房子租给了一个大学生", "向一个大学生租了房子", 1.0),  # 给 / 向, past the numeral and classifier
    ("rents a room to a student", "lets a room to a student", 0.0),
    ("suffers from migraines", "is a migraine sufferer", 0.0),  # no person
])
def test_a_person_reached_from_one_side_and_to_the_other_is_a_direction_flip(a, b, direction):
    from evals.scoring.alignment import difference, words_of

    assert difference(words_of(a), words_of(b)).direction == direction


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b", "same"), [
    ("The user rents a room to a student.", "The user rents a room from a student.", False),
    ("用户把房子租给了一个大学生。", "用户向一个大学生租了房子", False),
    ("用户把房子租给了一个大学生。", "用户把房子租给了一名大学生", True),
])
def test_renting_to_and_renting_from_are_other_roles(semantic, a, b, same):
    assert semantic.same_fact(a, "user", b, "user") is same
