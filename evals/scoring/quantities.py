"""Numbers with their units, in English and Chinese, brought to one scale so that "1.80 m" and
"180 cm", "三十分钟" and "半小时", "a decade" and "ten years", "6 am" and "06:00" compare equal.

A quantity is (dimension, value in the dimension's base unit): lengths in metres, masses in
kilograms, durations in seconds, volumes in litres, clock times in hours since midnight; a number
with no unit of this table (a count, an age, an amount of money, a version) keeps its dimension
"" and its value. The unit words are a closed class of measurement units, not content words.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from types import SimpleNamespace
from typing import Any

import cn2an

from evals.scoring.rulebook import RulesError, RuleSet, compiled

_YEAR = 365.25 * 86400
_DAYS = 86400.0
_EN_UNIT_AFTER = re.compile(r"\s*(?:-\s*)?(?:of\s+)?(?:an?\s+)?(?P<unit>[a-z]+)(?![a-z0-9_])", re.IGNORECASE)
_CLOCK = re.compile(r"(?<!\d)(\d{1,2})(?:[:：](\d{2}))?\s*(?:(a\.?m\.?|p\.?m\.?)(?![a-z])|o'clock)|(?<!\d)(\d{1,2})[:：](\d{2})(?!\d)",
                    re.IGNORECASE)
_ZH_NUMERAL = re.compile(r"[零〇一二两俩三四五六七八九十百千万亿]+|半")
# a numeral with a place value ("五百", "二十三") is a number whatever follows it ("世界五百强"); "十分"
# (very) and "千万" (by all means) are adverbs
_ZH_PLACE_VALUE = (r"(?:[零〇一二两三四五六七八九]+[十百千万亿]|[十百千万亿][零〇一二两三四五六七八九十百千万亿])"
                   r"[零〇一二两三四五六七八九十百千万亿]*")
# temperatures on a named scale, brought to Celsius ("20 °C" = "68°F" = 摄氏20度); a bare "26度" is left alone
_TEMPERATURE = re.compile(r"(?P<v>-?\d+(?:\.\d+)?)\s*(?:(?:°\s*|degrees?\s+)(?P<scale>celsius|centigrade|fahrenheit|[CF](?![A-Za-z]))|"
                          r"(?:degrees?\s+)?(?P<named>celsius|centigrade|fahrenheit))"
                          r"|(?P<zh>摄氏|华氏)\s*(?P<zv>-?\d+(?:\.\d+)?|[零一二两三四五六七八九十百]+)\s*度|"
                          r"(?P<zv2>-?\d+(?:\.\d+)?|[零一二两三四五六七八九十百]+)\s*(?P<zh2>摄氏|华氏)度", re.IGNORECASE)
# an age: "两岁半" is 2.5, "30个月大" 2.5 (as "18 months old" is 1.5 in English)
_ZH_AGE_HALF = re.compile(r"(\d+|[一二两三四五六七八九十]+)岁半")
_ZH_AGE_MONTHS = re.compile(r"(\d+|[一二两三四五六七八九十]+)个月大")
# "一岁零三个月" is 1.25 years, as "15个月大" is
_ZH_AGE_YEARS_MONTHS = re.compile(r"(\d+|[一二两三四五六七八九十]+)岁零?(\d+|[一二两三四五六七八九十]+)个月")
_ZH_AND_A_HALF = re.compile(r"(\d+|[一二两三四五六七八九十]+)个半(小时|钟头|月)")
# "一米八" is 1.8 m, "一米五二" 1.52 m, "一米零五" 1.05 m: the digits after 米 are its decimals
_ZH_METRES = re.compile(r"(\d|[一二两])米([零〇一二三四五六七八九]|\d)([零〇一二三四五六七八九]|\d)?(?![\d零一二三四五六七八九十百千万米])")



_EN_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_CN2AN_UNREAD = {"俩": 2.0, "百": 100.0, "千": 1000.0}  # numerals that cn2an does not read on their own

def _optional(read: Any, *args: str) -> Any:
    """A key added after a frozen baseline was taken: None where its files lack it, so the baseline reads as it did."""
    try:
        return read(*args)
    except RulesError:
        return None


def _build(r: RuleSet) -> SimpleNamespace:
    """This module's words, tables and the patterns made of them, from the rule files (`evals.scoring.rulebook`)."""
    en_units: dict[str, tuple[str, float]] = r.table("en", "quantities.units")
    zh_units: dict[str, tuple[str, float]] = r.table("zh", "quantities.units")
    number_words: dict[str, float] = r.table("en", "quantities.number_words")
    ordinals = {w: int(v) for w, v in r.table("en", "quantities.ordinals").items()}
    en_word = "|".join(sorted((w for w in number_words if w not in ("a", "an")), key=len, reverse=True))
    # a number word that may follow another in one number ("thirty-four", "two hundred", "three quarters"):
    # not a single "half" or "quarter", so "fifteen half-marathons" is fifteen
    en_next_word = "|".join(sorted((w for w in number_words if w not in ("a", "an", "half", "quarter")),
                                   key=len, reverse=True))
    en_unit_words = "|".join(sorted((u for u in en_units if len(u) > 2), key=len, reverse=True))
    en_small_number = "|".join(sorted((w for w, v in number_words.items() if 1 <= v < 20 and v == int(v) and w not in (
        "a", "an", "once", "twice", "thrice", "dozen")), key=len, reverse=True))
    en_periods: dict[str, float] = r.table("en", "quantities.periods")
    en_period_adverbs: dict[str, float] = r.table("en", "quantities.period_adverbs")
    en_period = "|".join(sorted(en_periods, key=len, reverse=True))
    en_adverb = "|".join(en_period_adverbs)
    en_count_number = rf"\d+(?:\.\d+)?|(?:{en_word})(?:[\s-]+(?:{en_next_word}))?"
    # "twice", "3 times", "2x", "three days" (a week)
    en_count = rf"(?:(?P<once>once|twice|thrice)|(?P<n>{en_count_number})(?:\s*(?:x|×)|\s+(?:times|days|nights)))"
    # "every other", "every six", "every second"
    en_every = rf"(?:every|each)\s+(?:(?P<k>other|second|third|{en_count_number})\s+)?"
    zh_count_number = r"\d+(?:\.\d+)?|[一二两三四五六七八九十百半]+"
    not_after = "".join(rf"(?<!\b{w}\s)" for w in r.words("en", "quantities.not_a_rate_before"))  # "for a day", "only a week"
    measure = "".join(r.words("zh", "quantities.measure_words"))
    clock_am, clock_pm = r.words("en", "quantities.clock_parts_am"), r.words("en", "quantities.clock_parts_pm")
    en_hours_minutes = _optional(r.alternatives, "en", "quantities.hours_minutes")
    zh_hours_minutes = _optional(r.alternatives, "zh", "quantities.hours_minutes")
    return SimpleNamespace(
        # "1 hour 15 minutes", 一小时十五分钟: one duration (groups h and m)
        EN_HOURS_MINUTES=re.compile(en_hours_minutes, re.IGNORECASE) if en_hours_minutes else None,
        ZH_HOURS_MINUTES=re.compile(zh_hours_minutes) if zh_hours_minutes else None,
        # units that are a preposition when a word follows ("turned 93 in March")
        PREPOSITION_UNITS=frozenset(_optional(r.words, "en", "quantities.preposition_units") or ()),
        # numerals that count without a measure word (俩: 俩娃)
        ZH_SELF_COUNTING=_optional(r.alternatives, "zh", "quantities.self_counting"),
        EN_UNITS=en_units, ZH_UNITS=zh_units, EN_NUMBER_WORDS=number_words, EN_ORDINALS=ordinals,
        EN_SCALE=r.table("en", "quantities.scale"), FRACTIONS=r.table("en", "quantities.fractions"),
        FREQUENCY=frozenset(r.words("en", "quantities.frequency_units")),
        EN_PERIODS=en_periods, EN_PERIOD_ADVERBS=en_period_adverbs,
        ZH_PERIODS=r.table("zh", "quantities.periods"),
        POUND=en_units["lb"][1],  # kilograms per pound
        ZH_UNIT_RE="|".join(sorted(map(re.escape, zh_units), key=len, reverse=True)),
        # "a year and a half", "two and a half hours", "half an hour": a half added to or taken of a unit
        EN_AND_A_HALF=re.compile(rf"\b(?P<n>an?|\d+(?:\.\d+)?|{en_word})\s+(?:(?P<u1>{en_unit_words})\s+and\s+a\s+half|"
                                 rf"and\s+a\s+half\s+(?P<u2>{en_unit_words}))\b", re.IGNORECASE),
        EN_HALF_A=re.compile(rf"\bhalf\s+an?\s+(?P<u>{en_unit_words})\b", re.IGNORECASE),
        # A number: digits (with thousands commas / a decimal point), or number words ("thirty-four", "ten
        # thousand", "a hundred and twenty"); "a"/"an" count as one only before a scale word or a unit of the table
        # ("a decade", "an hour").
        EN_NUMBER=re.compile(
            rf"(?<![A-Za-z0-9_.])(?:(?P<digits>\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<k>k\b)?|"
            rf"(?P<words>(?:(?:an?(?=[\s-]+(?:hundred|thousand|million|billion))|{en_word})(?:[\s-]+(?:{en_next_word}|hundred|thousand|million|and))*)(?:[\s-]+(?:hundred|thousand|million))?)\b"
            rf"|(?P<article>\ban?\b))", re.IGNORECASE),
        # Ordinal words from "fourth" on, and compounds after a tens word ("twenty-first"), read as "4th", "21st":
        # a bare "first", "second" or "third" is also "native", a unit of time or a fraction, so only digits count there
        EN_ORDINAL=re.compile(rf"(?i)\b(?:(?P<tens>{_EN_TENS})[\s-]+(?P<unit>first|second|third|{'|'.join(ordinals)})|"
                              rf"(?P<alone>{'|'.join(sorted(ordinals, key=len, reverse=True))}))\b"),
        # Clock times in words: "half past six in the morning", "a quarter to eight", "seven o'clock", "six
        # in the evening"; a bare "six" is a count, so a clock time needs past/to, o'clock or a part of day.
        WORD_CLOCK=re.compile(
            rf"\b(?:(?P<minutes>half|(?:a\s+)?quarter|five|ten|twenty|twenty[\s-]five|\d{{1,2}})(?:\s+minutes)?\s+(?P<rel>past|to)\s+)?"
            rf"(?P<hour>{r.alternatives('en', 'quantities.hours')}|\d{{1,2}})(?P<oclock>\s+o'clock)?"
            rf"(?:\s+(?P<part>{'|'.join(clock_am + clock_pm)}))?\b", re.IGNORECASE),
        CLOCK_PM=frozenset(clock_pm),
        AFTER_NOON=frozenset(r.words("en", "quantities.after_noon") + r.words("zh", "quantities.after_noon")),
        ZH_CLOCK=re.compile(rf"({r.alternatives('zh', 'quantities.clock_parts')})?(\d{{1,2}}|[一二两三四五六七八九十]{{1,3}})点(半|(\d{{1,2}})分)?"),
        # a height in feet and inches, one length: "six foot two", "5 ft 10 in", "5'10\"", "6 feet 2 inches"
        EN_FEET_INCHES=re.compile(rf"(?i)(?<![\w.])(?P<ft>\d+|{en_small_number})\s*(?:foot|feet|ft\.?|'|′)\s*(?:and\s+)?"
                                  rf"(?P<in>\d+(?:\.\d+)?|{en_small_number})\s*(?:inches\b|inch\b|in\b|\"|″)?(?![\w'])"),
        ZH_NOT_NUMBER=re.compile(r.alternatives("zh", "quantities.not_number")),
        # A Chinese numeral counts only before a measure word, a unit or a non-Chinese character: 四川 and 三亚
        # are names, and 一 before a measure word is an article ("一家银行", "一名护士"), not a count.
        ZH_COUNTED=rf"(?:[{measure}]|{r.alternatives('zh', 'quantities.counted')})",
        EN_FREQUENCY=re.compile(
            rf"(?<![\w.])(?:{en_count}(?:\s+(?:(?:a|an|per|a\s+single)\s+|{en_every})(?P<p1>{en_period})|[\s-]*(?P<a1>{en_adverb}))"
            rf"|(?:{en_every.replace('?P<k>', '?P<k2>')}|per\s+)(?P<p2>{en_period})"
            rf"|{not_after}\ban?\s+(?P<p3>day|night|week|month|year)"
            # "a day" ends its phrase ("two cups a day", "8 hours a day on weekdays"): not "a night owl", "a day trip"
            rf"(?!\s+(?:{r.alternatives('en', 'quantities.not_a_rate_after')})\b)"
            rf"(?=\s*(?:[.,;:!?)]|$|(?:{r.alternatives('en', 'quantities.phrase_end')})\b))"
            rf"|(?P<a2>{en_adverb}))\b", re.IGNORECASE),
        ZH_FREQUENCY=re.compile(
            # 每周两次, 每周去两次, 一周游两次泳, 每两周一次, 每隔一天一次, 两周一次, 三天一次
            rf"(?:(?P<every>每)(?P<skip>隔)?(?P<k>{zh_count_number})?|(?P<k2>{zh_count_number}))个?(?P<p>{r.alternatives('zh', 'quantities.period_order')})(?!末)"
            rf"(?:(?P<gap>[^，。,.;；、！!？?\d一二两三四五六七八九十]{{0,6}}?)(?P<n>{zh_count_number})(?P<times>{r.alternatives('zh', 'quantities.times')}))?"
            rf"|(?P<daily>天天|隔天|隔日)"),
    )


_k = compiled(_build)



def _ordinal(m: re.Match[str]) -> str:
    k = _k()
    if m.group("alone"):
        return f"{k.EN_ORDINALS[m.group('alone').casefold()]}th"
    unit = m.group("unit").casefold()
    return f"{int(k.EN_NUMBER_WORDS[m.group('tens').casefold()]) + {'first': 1, 'second': 2, 'third': 3}.get(unit, k.EN_ORDINALS.get(unit, 0))}th"



def _zh_value(chunk: str) -> float:
    """A Chinese numeral's value, read by cn2an ("两千五" 2500, "一百五" 150); 半 is a half."""
    if chunk == "半":
        return 0.5
    try:
        return float(cn2an.cn2an(chunk, "smart"))
    except ValueError:
        return _CN2AN_UNREAD.get(chunk, 0.0)


def _number(chunk: str) -> float:
    return float(chunk) if chunk[0].isdigit() else _zh_value(chunk)


def _en_words_value(words: str) -> float:
    total, current = 0.0, 0.0
    for w in re.split(r"[\s-]+", words.casefold()):
        if w == "and" or not w:
            continue
        if w in _k().EN_SCALE:
            current = (current or 1) * _k().EN_SCALE[w]
            if _k().EN_SCALE[w] >= 1000:
                total, current = total + current, 0.0
        elif w in _k().FRACTIONS and current:
            current *= _k().FRACTIONS[w]  # "three quarters"
        else:
            current += _k().EN_NUMBER_WORDS[w]
    return total + current


def _hour(h: float, minutes: float, meridiem: str) -> float:
    m = meridiem.casefold().replace(".", "")
    if m in _k().AFTER_NOON and h < 12:
        h += 12
    if m in ("am",) and h == 12:
        h = 0
    return round(h + minutes / 60, 4)


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("’", "'")


# ---------------------------------------------------------------- frequencies
# A frequency is a count per period ("twice a week", "2x weekly", "every other day", "every six
# months", 每周两次, 一周2次, 每两周一次, 隔天), compared as a rate (times per day): "every six months"
# and "twice a year" are one rate. A period without a count ("every week", 每周) is once per period.

def _en_count(words: str) -> float:
    w = words.casefold()
    return {"other": 2.0, "second": 2.0, "third": 3.0}.get(w) or (float(w) if w[0].isdigit() else _en_words_value(w))


def _strip_frequencies(text: str) -> tuple[str, list[float]]:
    """The text without its frequencies (a verb between 每周 and 两次 stays), and each frequency as
    times per day."""
    rates: list[float] = []

    def en(m: re.Match[str]) -> str:
        count = 1.0 if m.group("once") and m.group("once").casefold() == "once" else \
            {"twice": 2.0, "thrice": 3.0}.get((m.group("once") or "").casefold()) or \
            (_en_count(m.group("n")) if m.group("n") else 1.0)
        k = m.group("k") or m.group("k2")
        period = (_k().EN_PERIODS.get((m.group("p1") or m.group("p2") or m.group("p3") or "").casefold())
                  or _k().EN_PERIOD_ADVERBS[(m.group("a1") or m.group("a2")).casefold()])
        rates.append(round(count / (period * (_en_count(k) if k else 1.0)), 6))
        return " "

    def zh(m: re.Match[str]) -> str:
        if m.group("daily"):
            rates.append(1.0 if m.group("daily") == "天天" else 0.5)
            return " "
        after = m.string[m.end():m.end() + 2]
        if m.group("p") in ("周", "星期", "礼拜") and not m.group("n") and re.match(r"[一二三四五六日天](?![次回遍趟])", after):
            return m.group()  # 每周一, 每个星期六: a weekday ("on Mondays"), read by the time words
        if m.group("times") == "天" and _k().ZH_PERIODS[m.group("p")] <= 1:
            return m.group()  # "每天…三天" is no rate
        if m.group("k2") and not m.group("n"):
            return m.group()  # "三天" alone is a duration
        if m.group("k2") and m.group("gap") and m.group("k2") not in ("一", "1"):
            return m.group()  # "三年去过两次": a count within a duration; "一周去两次" is a rate
        k = _number(m.group("k") or m.group("k2") or "1")
        if m.group("skip") and k == 1:
            k = 2.0  # 每隔一天: every other day
        count = _number(m.group("n")) if m.group("n") else 1.0
        if m.group("p") == "日" and not m.group("every"):
            return m.group()
        rates.append(round(count / (_k().ZH_PERIODS[m.group("p")] * k), 6))
        return f" {m.group('gap') or ''} "

    t = _k().EN_FREQUENCY.sub(en, text)
    if re.search(r"[\u4e00-\u9fff]", t):
        t = _k().ZH_FREQUENCY.sub(zh, t)
    return t, rates


def frequencies(text: str) -> tuple[float, ...]:
    """Every frequency the sentence states, as times per day, sorted: "twice a week" and 每周两次 are
    2/7, "every other day" and 隔天 1/2, "every six months" and "twice a year" 2/365.25."""
    return tuple(sorted(_strip_frequencies(_norm(text))[1]))


def quantities(text: str) -> tuple[tuple[str, float], ...]:
    """Every (dimension, value) the sentence states, sorted; clock times as ("clock", hour)."""
    t = _norm(text)
    found: list[tuple[str, float]] = []

    def clock(m: re.Match[str]) -> str:
        if m.group(4) is not None:
            found.append(("clock", _hour(int(m.group(4)), int(m.group(5)), "")))
        else:
            found.append(("clock", _hour(int(m.group(1)), int(m.group(2) or 0), m.group(3) or "")))
        return " "

    t = _CLOCK.sub(clock, t)

    def word_clock(m: re.Match[str]) -> str:
        if not (m.group("rel") or m.group("oclock") or m.group("part")):
            return m.group()
        hour_word = m.group("hour").casefold()
        hour = {"noon": 12.0, "midnight": 0.0}.get(hour_word)
        if hour is None:
            hour = float(hour_word) if hour_word.isdigit() else _k().EN_NUMBER_WORDS[hour_word]
        minutes = 0.0
        if m.group("minutes"):
            word = m.group("minutes").casefold().replace("a ", "").strip()
            minutes = {"half": 30.0, "quarter": 15.0}.get(word) or _en_words_value(word) if not word.isdigit() \
                else float(word)
            if m.group("rel").casefold() == "to":
                hour, minutes = hour - 1, 60 - minutes
        part = (m.group("part") or "").casefold()
        meridiem = "pm" if part in _k().CLOCK_PM and hour != 12 else ""
        if part == "at night" and hour < 5:
            meridiem = ""
        found.append(("clock", _hour(hour % 24, minutes, meridiem)))
        return " "

    t = _k().WORD_CLOCK.sub(word_clock, t)

    def zh_clock(m: re.Match[str]) -> str:
        hour = float(m.group(2)) if m.group(2).isdigit() else _zh_value(m.group(2))
        minutes = 30.0 if m.group(3) == "半" else float(m.group(4) or 0)
        found.append(("clock", _hour(hour, minutes, m.group(1) or "")))
        return " "

    t = _k().ZH_CLOCK.sub(zh_clock, t)
    t, rates = _strip_frequencies(t)
    found += [("rate", r) for r in rates]
    # "一个半小时" (1.5 hours) and "一米八" (1.8 m), then Chinese numerals (with an optional 个 and a
    # unit) and digits with a Chinese unit
    def temperature(m: re.Match[str]) -> str:
        if m.group("v") is not None:
            value, fahrenheit = float(m.group("v")), (m.group("scale") or m.group("named")).casefold().startswith("f")
        else:
            raw = m.group("zv") or m.group("zv2")
            value = float(raw) if raw.lstrip("-")[0].isdigit() else _zh_value(raw)
            fahrenheit = (m.group("zh") or m.group("zh2")) == "华氏"
        found.append(("temperature", round((value - 32) * 5 / 9 if fahrenheit else value, 1)))
        return " "

    t = _TEMPERATURE.sub(temperature, t)
    t = _ZH_AGE_HALF.sub(lambda m: f"{_number(m.group(1)) + 0.5:g}岁", t)
    t = _ZH_AGE_YEARS_MONTHS.sub(lambda m: f"{_number(m.group(1)) + _number(m.group(2)) / 12:.4g}岁", t)
    t = _ZH_AGE_MONTHS.sub(lambda m: f"{_number(m.group(1)) / 12:.4g}岁", t)
    if _k().ZH_HOURS_MINUTES is not None:
        t = _k().ZH_HOURS_MINUTES.sub(lambda m: f"{_number(m.group('h')) * 60 + _number(m.group('m')):g}分钟", t)
    t = _ZH_AND_A_HALF.sub(lambda m: f"{_number(m.group(1)) + 0.5:g}{'个月' if m.group(2) == '月' else m.group(2)}", t)
    t = _ZH_METRES.sub(lambda m: f"{_number(m.group(1)) + _number(m.group(2)) / 10 + _number(m.group(3) or '0') / 100:g}米", t)
    t = _k().ZH_NOT_NUMBER.sub(" ", t)
    # digits with a Chinese multiplier: "1.2万" is 12000, "3亿" 300000000
    t = re.sub(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([万亿])", lambda m: f"{float(m.group(1)) * (1e4 if m.group(2) == '万' else 1e8):.6g}", t)

    def zh(m: re.Match[str]) -> str:
        value = float(m.group(1).replace(",", "")) if m.group(1)[0].isdigit() else _zh_value(m.group(1))
        unit = m.group(2)
        if value == 1 and unit in ("天", "周", "星期", "个月", "年"):
            return " "  # "一周游两次": a frequency's period, like "a week"
        if unit in _k().ZH_UNITS:
            dim, factor = _k().ZH_UNITS[unit]
            found.append((dim, round(value * factor, 6)))
        else:
            found.append(("", value))
        return " "

    t = re.sub(rf"(?<![\d.,])(\d+(?:[.,]\d+)*(?![\d.,a-zA-Z])|[零〇一二两俩三四五六七八九十百千万亿]+(?={_k().ZH_COUNTED})|{_ZH_PLACE_VALUE}|半"
               rf"{'|' + _k().ZH_SELF_COUNTING if _k().ZH_SELF_COUNTING else ''})"
               rf"\s*(?:个(?!月))?\s*({_k().ZH_UNIT_RE})?(?![a-zA-Z])"
               if re.search(r"[\u4e00-\u9fff]", t) else r"(?!x)x", zh, t)
    def and_a_half(m: re.Match[str]) -> str:
        n = m.group("n").casefold()
        value = 1.0 if n in ("a", "an") else float(n) if n[0].isdigit() else _k().EN_NUMBER_WORDS[n]
        return f"{value + 0.5:g} {m.group('u1') or m.group('u2')}"

    def feet_inches(m: re.Match[str]) -> str:
        ft, inches = ((float(x) if x[0].isdigit() else _k().EN_NUMBER_WORDS[x.casefold()]) for x in (m.group("ft"), m.group("in")))
        return f" {(ft * 12 + inches) * 0.0254:.6g} metres "

    t = _k().EN_FEET_INCHES.sub(feet_inches, t)

    def hours_minutes(m: re.Match[str]) -> str:
        h, mins = (1.0 if x.casefold() in ("a", "an") else float(x) if x[0].isdigit() else _en_words_value(x)
                   for x in (m.group("h"), m.group("m")))
        return f"{h * 60 + mins:g} minutes"

    if _k().EN_HOURS_MINUTES is not None:
        t = _k().EN_HOURS_MINUTES.sub(hours_minutes, t)
    t = _k().EN_ORDINAL.sub(_ordinal, t)
    t = _k().EN_AND_A_HALF.sub(and_a_half, t)
    t = _k().EN_HALF_A.sub(lambda m: f"0.5 {m.group('u')}", t)
    consumed = 0
    for m in _k().EN_NUMBER.finditer(t):
        if m.start() < consumed:
            continue
        if m.group("digits"):
            value = float(m.group("digits").replace(",", "")) * (1000 if m.group("k") else 1)
            if m.group("k"):  # "£18k" is 18,000; "a 10K race" is 10 km: `_readings` tries both
                found.append(("k", value))
                consumed = m.end()
                continue
        elif m.group("words"):
            value = _en_words_value(m.group("words"))
        else:
            value = 1.0
        after = _EN_UNIT_AFTER.match(t, m.end())
        unit = after.group("unit").casefold() if after else ""
        dim, factor = _k().EN_UNITS.get(unit, ("", 1.0))
        if unit in ("in", "s", "m", "g", "l", "h", "k") and not (after and after.group(0).strip().casefold() == unit
                                                                 and m.group("digits")):
            dim, factor = "", 1.0  # one-letter units only straight after digits ("2 L", "5k")
        if unit in _k().PREPOSITION_UNITS and after is not None and re.match(r"\s+[A-Za-z]", t[after.end():]):
            dim, factor = "", 1.0  # "turned 93 in March": a preposition, not inches
        if dim == "duration" and re.match(r"\s*old\b", t[after.end():] if after else ""):
            dim, factor = "", factor / _YEAR  # an age in years: "34 years old" is "thirty-four", "18 months old" 1.5
        if m.group("article") and after and t[after.end():after.end() + 1] == "-":
            continue  # "a second-hand car"
        if m.group("article") and (not dim or unit in _k().FREQUENCY):
            continue  # "a cat", and "a day" / "a week": a frequency, not an amount
        consumed = after.end() if after and dim else m.end()
        if m.group("words") and m.group("words").casefold() in ("half", "quarter") and not dim:
            continue
        found.append((dim, round(value * factor, 6)))
    return tuple(sorted(found))




# Measures stated in either unit system are compared to three significant figures: "six foot two" is 1.8796 m and
# "188 cm" 1.88 m, "150 lb" 68.04 kg and "68 kg"; 1.85 m and 1.86 m stay apart.
_CONVERTED = frozenset(("length", "mass", "volume", "temperature"))


def _readings(q: tuple[tuple[str, float], ...]) -> list[set[tuple[str, float]]]:
    """Each way to read the quantities (a repeated one counts once): "pounds" is an amount of money
    ("18,000 pounds" / "£18k") or a weight ("150 pounds" / "68 kg"), and "10K" ten thousand or 10 km; a
    measure to three significant figures (`_CONVERTED`)."""
    options = [[("", v), ("mass", v * _k().POUND)] if d == "pound" else [("", v), ("length", v)] if d == "k" else [(d, v)]
               for d, v in q]
    return [{(d, float(f"{v:.3g}" if d in _CONVERTED else f"{v:.6g}")) for d, v in choice}
            for choice in itertools.islice(itertools.product(*options), 16)]


def same_quantities(a: tuple[tuple[str, float], ...], b: tuple[tuple[str, float], ...]) -> bool:
    """The two sentences state the same set of quantities, under some reading of each (`_readings`)."""
    readings_b = _readings(b)
    return any(x in readings_b for x in _readings(a))


__all__ = ["frequencies", "quantities", "same_quantities"]
