"""The qualifier checks the semantic matcher relies on, read off one sentence at a time: frequencies
compared as rates, numbers in Chinese numerals, and negation, modality and time words that a
paraphrase keeps in other words. Each paraphrase is checked in both directions, and each near-miss
must stay different. The sentences are written for these tests (none is a labelled pair)."""

import pytest

from evals.scoring.checks import Qualifiers, mismatches, modality, polarity, time_words
from evals.scoring.quantities import frequencies, quantities, same_quantities


def _same_quantities(a: str, b: str) -> bool:
    return same_quantities(quantities(a), quantities(b)) and same_quantities(quantities(b), quantities(a))


@pytest.mark.parametrize(("a", "b"), [
    ("The user cycles twice a week.", "The user cycles 2x weekly."),
    ("The user cycles twice a week.", "The user cycles twice weekly."),
    ("The user cycles twice a week.", "The user cycles two times per week."),
    ("The user calls home every other day.", "The user calls home every two days."),
    ("The user sees an optician every six months.", "The user sees an optician twice a year."),
    ("The user gets a haircut once every two weeks.", "The user gets a haircut fortnightly."),
    ("The user works from home three days a week.", "The user works from home three times a week."),
    ("用户每周打两次羽毛球。", "用户一周打2次羽毛球。"),
    ("用户每周打两次羽毛球。", "用户一周打两回羽毛球。"),
    ("用户每周打两次羽毛球。", "The user plays badminton twice a week."),
    ("用户每两周理一次发。", "The user gets a haircut every two weeks."),
    ("用户隔天跑步。", "用户每隔一天跑一次步。"),
])
def test_the_same_frequency_in_other_words_is_the_same(a, b):
    assert frequencies(a) == frequencies(b) and frequencies(a), (frequencies(a), frequencies(b))
    assert _same_quantities(a, b), (quantities(a), quantities(b))
    assert time_words(a) == time_words(b), (time_words(a), time_words(b))


@pytest.mark.parametrize(("a", "b"), [
    ("The user cycles twice a week.", "The user cycles three times a week."),
    ("The user cycles twice a week.", "The user cycles twice a month."),
    ("The user waters the garden every day.", "The user waters the garden every other day."),
    ("The user feeds the dog twice a day.", "The user feeds the dog once a day."),
    ("用户每周去一次超市。", "用户每月去一次超市。"),
    ("用户每天喝两次咖啡。", "用户每天喝一次咖啡。"),
])
def test_a_different_frequency_is_different(a, b):
    assert not _same_quantities(a, b)
    assert time_words(a) != time_words(b)


def test_a_frequency_is_not_a_duration():
    assert quantities("The user swims twice a week.") == quantities("用户每周游两次泳。")
    assert not _same_quantities("The user swims twice a week.", "The user swam for two weeks.")
    assert not _same_quantities("用户一周游两次泳。", "用户游了两周。")
    # a period alone, or a duration inside a rate, stays what it was
    assert _same_quantities("The user sleeps 8 hours a day.", "The user sleeps eight hours every day.")
    assert quantities("The user stayed for a week.") == () and frequencies("The user is a night owl.") == ()
    assert frequencies("用户每周上四天班。") == frequencies("The user works four days a week.")
    assert frequencies("用户每周上四天班。") != frequencies("用户每周上五天班。")
    assert _same_quantities("The user's son is 18 months old.", "The user's son is a year and a half old.")
    assert time_words("The user's son is 18 months old.") == time_words("The user's son is a year and a half old.")


def test_a_weekday_and_a_part_of_day_survive_a_frequency():
    assert "monday" in time_words("用户每周一去游泳。") and "monday" not in time_words("用户每周一次去游泳。")
    assert time_words("用户每天早上跑步。") != time_words("用户每天晚上跑步。")
    assert time_words("用户每个周末都爬山。") == time_words("用户一到周末就爬山。")
    assert time_words("The user moved to Oslo last summer.") != time_words("The user will move to Oslo next summer.")
    assert time_words("用户每周六去钓鱼。") == time_words("用户每个星期六都去钓鱼。") == time_words("用户周六去钓鱼。")
    assert time_words("用户每晚散步。") == time_words("用户每天晚上散步。")
    assert time_words("用户月底交房租。") != time_words("用户月初交房租。")


@pytest.mark.parametrize(("a", "b"), [
    ("用户考过了英语四级。", "用户考过了CET-4。"),
    ("用户在一家世界五百强公司工作。", "用户在一家500强公司工作。"),
    ("用户的儿子身高一米六三。", "用户的儿子身高163厘米。"),
    ("用户的儿子身高一米九。", "用户的儿子身高190cm。"),
    ("用户一次飞机都没坐过。", "用户从来没坐过飞机。"),
    ("用户十分喜欢猫。", "用户非常喜欢猫。"),
])
def test_chinese_numerals_read_as_numbers(a, b):
    assert _same_quantities(a, b), (quantities(a), quantities(b))


@pytest.mark.parametrize(("a", "b"), [
    ("The API allows 100 requests per minute.", "The API allows a hundred requests a minute."),
    ("The user paid 120 dollars.", "The user paid a hundred and twenty dollars."),
    ("The user has 1,000 followers.", "The user has a thousand followers."),
])
def test_a_hundred_is_one_hundred(a, b):
    assert _same_quantities(a, b), (quantities(a), quantities(b))
    assert not _same_quantities(a, b.replace("a hundred", "two hundred").replace("a thousand", "two thousand"))


@pytest.mark.parametrize(("a", "b"), [
    ("用户考过了英语四级。", "用户考过了英语六级。"),
    ("用户的儿子身高一米六三。", "用户的儿子身高一米六。"),
    ("用户在二十一楼上班。", "用户在十二楼上班。"),
    ("用户坐过一次飞机。", "用户坐过两次飞机。"),
])
def test_a_different_chinese_number_is_different(a, b):
    assert not _same_quantities(a, b)


def _polarity_flag(a: str, b: str) -> float:
    return mismatches(Qualifiers.of(a), Qualifiers.of(b), a, b)["polarity"]


@pytest.mark.parametrize(("a", "b"), [
    ("用户在考虑要不要学日语。", "用户正在考虑学日语。"),
    ("用户不知道是不是该换工作。", "用户不知道该换工作吗。"),
    ("用户特别喜欢下雨天。", "用户很喜欢下雨天。"),
    ("The user has never eaten meat.", "The user is a lifelong non-meat-eater."),
    ("用户的申请被拒了。", "学校拒绝了用户的申请。"),
])
def test_a_paraphrase_keeps_its_polarity(a, b):
    assert _polarity_flag(a, b) == 0.0 and _polarity_flag(b, a) == 0.0, (polarity(a), polarity(b))


@pytest.mark.parametrize(("a", "b"), [
    ("The user can swim.", "The user cannot swim."),
    ("The user is a smoker.", "The user is a non-smoker."),
    ("用户喜欢香菜。", "用户不喜欢香菜。"),
    ("用户的申请通过了。", "用户的申请被拒了。"),
    ("助手建议用户熬夜复习。", "助手建议用户别熬夜复习。"),
    ("用户喜欢臭豆腐。", "用户受不了臭豆腐。"),
])
def test_a_negation_flips_polarity(a, b):
    assert _polarity_flag(a, b) == 1.0 and _polarity_flag(b, a) == 1.0


@pytest.mark.parametrize(("a", "b"), [
    ("The user is studying for the LSAT.", "The user is preparing for the LSAT."),
    ("用户在准备雅思考试。", "用户在备考雅思。"),
    ("The user goes to the gym twice a week.", "The user mentioned going to the gym twice a week."),
    ("用户已经不抽烟了。", "用户戒掉了抽烟的习惯。"),
    ("用户改掉了熬夜的习惯。", "用户已经不熬夜了。"),
    ("The user quit the job at the bakery.", "The user resigned from the bakery job."),
    ("用户在考虑养狗。", "用户在犹豫要不要养狗。"),
])
def test_a_paraphrase_keeps_its_modality(a, b):
    assert modality(a) == modality(b), (modality(a), modality(b))


@pytest.mark.parametrize(("a", "b"), [
    ("The user moved to Lisbon.", "The user is preparing to move to Lisbon."),
    ("The user moved to Lisbon.", "The user is going to move to Lisbon."),
    ("用户开了一家咖啡店。", "用户准备开一家咖啡店。"),
    ("用户抽烟。", "用户戒掉了抽烟。"),
    ("The user lives in Rome.", "The user wants to live in Rome."),
])
def test_a_change_of_modality_is_different(a, b):
    assert modality(a) != modality(b)


@pytest.mark.parametrize(("a", "b"), [
    ("Piet is six foot one.", "Piet is 185 cm tall."),
    ("The user is 5'7\".", "The user is 170 cm tall."),
    ("The user's brother is 6 feet 3 inches tall.", "The user's brother is 1.91 m tall."),
    ("The user's suitcase weighs 44 lb.", "The user's suitcase weighs 20 kg."),
    ("用户的外甥一岁零六个月。", "用户的外甥18个月大"),
    ("助手学到，请求超过三秒就要重试。", "助手经验：请求>3s即重试"),
    ("The user's father turned seventy-one in May.", "father turned 71 in May"),  # "in" after a number: a preposition
    ("用户每天跑步一小时二十分钟。", "用户每天跑步80分钟。"),
    ("The user's flight lasted 2 hours 10 minutes.", "The user's flight lasted 130 minutes."),
    ("The user's flight lasted an hour and ten minutes.", "The user's flight lasted 70 minutes."),
    ("助手学到，日志文件不能超过五十兆。", "助手备注：日志上限50MB"),
])
def test_a_measure_in_another_unit_or_form_is_the_same(a, b):
    assert _same_quantities(a, b), (quantities(a), quantities(b))


@pytest.mark.parametrize(("a", "b"), [
    ("Piet is six foot one.", "Piet is six foot three."),
    ("The user is 1.85 m tall.", "The user is 1.86 m tall."),
    ("The user's suitcase weighs 20 kg.", "The user's suitcase weighs 21 kg."),
    ("用户家是三室一厅。", "用户家是两室一厅。"),
    ("用户的外甥一岁零六个月。", "用户的外甥一岁零八个月。"),
    ("用户每天跑步一小时二十分钟。", "用户每天跑步70分钟。"),
    ("The upload cap is 25 MB.", "The upload cap is 25 GB."),
])
def test_a_different_measure_stays_different(a, b):
    assert not _same_quantities(a, b), (quantities(a), quantities(b))


@pytest.mark.parametrize(("a", "b", "substituted"), [
    ("The user studied at the University of Texas, Austin.", "The user studied at UTA.", False),
    ("Ines donates to the Royal Society for the Protection of Birds.", "Ines donates to the RSPB.", False),
    ("The user works at Google's Advanced Technology Lab.", "The user works at Google ATL.", False),
    ("The user studied at UCLA.", "The user studied at UCSD.", True),
    ("The user debugs in VS Code.", "The user debugs in Visual Studio.", True),
])
def test_a_short_form_covers_the_run_of_words_it_spells_across_commas_and_small_words(a, b, substituted):
    from evals.scoring.checks import name_substitution

    assert name_substitution(a, b) is substituted and name_substitution(b, a) is substituted
