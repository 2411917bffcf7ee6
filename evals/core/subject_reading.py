"""The scorer's own reading of who a memory sentence is about, kept apart from `hymem.subjects`.

Why a second reading: the engine files facts with `hymem.subjects`; a scorer that asked the same function
who a sentence names would agree with every mistake it makes, so a bug in the engine's rule could never show
as a wrong score. Scoring takes a subject from the gold labels where a case has them and otherwise from this
reading, which is deliberately simpler and written separately: a sentence names the assistant, the user, the
user's relative ("the user's mother", "用户的母亲"), a person (a run of capitalised words, a title included;
for Chinese, jieba's person-name tags), or nobody (mem0-style "Works at Stripe", "最近在瘦身").
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from typing import Literal

PersonClass = Literal["user", "assistant", "named"]

# Spellings of the user and the assistant as subject labels and sentence openers.
_USER_LABELS = frozenset({"user", "the user", "current user", "the current user", "用户", "当前用户", "该用户", "这位用户",
                          "此用户"})
_ASSISTANT_LABELS = frozenset({"assistant", "the assistant", "ai", "the ai", "ai assistant", "the ai assistant", "agent",
                               "助手", "ai助手", "智能助手"})
# Kin and social relations, each with the one spelling two sentences about the same person share.
_EN_KIN = {"mother": "mother", "mom": "mother", "mum": "mother", "father": "father", "dad": "father",
           "parents": "parent", "parent": "parent", "sister": "sister", "brother": "brother", "wife": "wife",
           "husband": "husband", "partner": "partner", "son": "son", "daughter": "daughter", "child": "child",
           "children": "child", "kids": "child", "kid": "child", "grandmother": "grandmother", "grandma": "grandmother",
           "grandfather": "grandfather", "grandpa": "grandfather", "aunt": "aunt", "uncle": "uncle", "cousin": "cousin",
           "niece": "niece", "nephew": "nephew", "friend": "friend", "girlfriend": "girlfriend",
           "boyfriend": "boyfriend", "colleague": "colleague", "coworker": "colleague", "co-worker": "colleague",
           "boss": "boss", "manager": "manager", "roommate": "roommate", "neighbour": "neighbor", "neighbor": "neighbor",
           "grandson": "grandson", "granddaughter": "granddaughter", "fiance": "fiancé", "fiancé": "fiancé",
           "fiancee": "fiancée", "fiancée": "fiancée", "stepmother": "stepmother", "stepfather": "stepfather",
           "stepdad": "stepfather", "stepmom": "stepmother", "mother-in-law": "mother-in-law",
           "father-in-law": "father-in-law", "sister-in-law": "sister-in-law", "brother-in-law": "brother-in-law",
           "stepbrother": "stepbrother", "stepsister": "stepsister", "ex-wife": "ex-wife", "ex-husband": "ex-husband",
           "classmate": "classmate", "teammate": "teammate", "twin": "twin", "sibling": "sibling", "spouse": "spouse",
           "siblings": "sibling", "half-brother": "half-brother", "half-sister": "half-sister", "flatmate": "flatmate",
           "grandparents": "grandparent", "grandparent": "grandparent", "grandchild": "grandchild",
           "grandchildren": "grandchild", "in-laws": "in-law", "godmother": "godmother", "godfather": "godfather",
           "stepson": "stepson", "stepdaughter": "stepdaughter", "son-in-law": "son-in-law",
           "daughter-in-law": "daughter-in-law", "best friend": "best friend", "baby": "baby",
           "great-grandmother": "great-grandmother", "great-grandfather": "great-grandfather", "goddaughter": "goddaughter",
           "godson": "godson"}
_ZH_KIN = {"妈妈": "母亲", "母亲": "母亲", "爸爸": "父亲", "父亲": "父亲", "父母": "父母", "姐姐": "姐姐", "妹妹": "妹妹",
           "哥哥": "哥哥", "弟弟": "弟弟", "妻子": "妻子", "老婆": "妻子", "太太": "妻子", "丈夫": "丈夫", "老公": "丈夫",
           "儿子": "儿子", "女儿": "女儿", "孩子": "孩子", "奶奶": "奶奶", "爷爷": "爷爷", "外婆": "外婆", "姥姥": "外婆",
           "外公": "外公", "姥爷": "外公", "阿姨": "阿姨", "叔叔": "叔叔", "舅舅": "舅舅", "姑姑": "姑姑", "朋友": "朋友",
           "好友": "朋友", "闺蜜": "闺蜜", "男朋友": "男朋友", "男友": "男朋友", "女朋友": "女朋友", "女友": "女朋友",
           "同事": "同事", "老板": "老板", "领导": "领导", "室友": "室友", "邻居": "邻居", "同学": "同学", "表哥": "表哥",
           "表姐": "表姐", "表妹": "表妹", "表弟": "表弟", "堂哥": "堂哥", "堂姐": "堂姐", "外甥": "外甥", "外甥女": "外甥女",
           "侄子": "侄子", "侄女": "侄女", "孙子": "孙子", "孙女": "孙女", "公公": "公公", "婆婆": "婆婆", "岳父": "岳父",
           "岳母": "岳母", "前妻": "前妻", "前夫": "前夫", "前男友": "前男朋友", "嫂子": "嫂子", "姐夫": "姐夫", "舅妈": "舅妈",
           "婶婶": "婶婶", "姨妈": "姨妈", "姑父": "姑父", "姨父": "姨父", "伯伯": "伯伯", "伯父": "伯父", "伯母": "伯母",
           "儿媳": "儿媳", "女婿": "女婿", "弟媳": "弟媳", "妹夫": "妹夫", "继父": "继父", "继母": "继母", "外孙": "外孙",
           "外孙女": "外孙女", "未婚夫": "未婚夫", "未婚妻": "未婚妻", "上司": "上司", "堂弟": "堂弟", "堂妹": "堂妹",
           "兄弟": "兄弟", "姐妹": "姐妹", "前女友": "前女朋友", "发小": "发小", "同桌": "同桌"}
_EN_KIN_WORDS = "|".join(sorted((re.escape(k) for k in _EN_KIN), key=len, reverse=True))
_ZH_KIN_WORDS = "|".join(sorted(_ZH_KIN, key=len, reverse=True))
_EN_QUALIFIERS = r"(?:(?:older|younger|elder|little|big|best|close|old|new|late|maternal|paternal)\s+)*"

_EN_ASSISTANT = re.compile(r"(?i)^(?:the\s+)?(?:ai\s+)?assistant\b|^the\s+ai\b|^(?:AI|Agent)\s+(?=\w+ed\b|will\b|"
                           r"suggests\b|recommends\b|advises\b|reminds\b)")
_ZH_ASSISTANT = re.compile(r"^(?:AI|ai|智能)?助手")
_EN_USER = re.compile(r"(?i)^(?:the\s+)?(?:current\s+)?user\b(?!-)")
_EN_USER_KIN = re.compile(rf"(?i)^(?:the\s+)?(?:current\s+)?user(?:'s|s')?\s+{_EN_QUALIFIERS}({_EN_KIN_WORDS})\b"
                          r"(?:,?\s+(?-i:([A-Z][\w'-]+))(?=[\s,]))?")
_ZH_USER = re.compile(r"^(?:当前|该|这位|此)?用户")
_ZH_USER_KIN = re.compile(rf"^(?:当前|该|这位|此)?用户(?:的[\u4e00-\u9fff]{{0,2}}?|的?(?:大|小|亲|好|老)?)({_ZH_KIN_WORDS})")
# A memory with no "the user's" that opens with a relative ("Mother is a nurse", "wife teaches Cornish", "母亲是护士").
_EN_BARE_KIN = re.compile(rf"(?i)^(?:my\s+)?{_EN_QUALIFIERS}({_EN_KIN_WORDS})(?:'s\b|\s+(?:is|are|was|were|has|had|will|"
                          r"can|does|did|[a-z]+s|[a-z]+ed)\b)")
_ZH_KIN_THEN_NAME = re.compile(rf"^(?:(?:我|他|她)们?的)?(?:大|小|亲|好|老)?(?:{_ZH_KIN_WORDS})(?=[\u4e00-\u9fff])")
_ZH_BARE_KIN = re.compile(rf"^(?:我的?)?({_ZH_KIN_WORDS})(?=是|在|住|喜欢|有|叫|今年|很|每|会)")
# The user reporting on a relative ("The user mentioned that their aunt …", "用户提到儿子…"), or having one who …
_EN_REPORTED_KIN = re.compile(rf"(?i)^(?:the\s+)?user\s+(?:has\s+)?(?:mentioned|said|says|noted|stated|explained|shared|"
                              rf"mentions|notes)\s+(?:that\s+)?(?:their|his|her)\s+{_EN_QUALIFIERS}({_EN_KIN_WORDS})\b"
                              rf"|^(?:the\s+)?user\s+has\s+(?:a|an|one)\s+{_EN_QUALIFIERS}({_EN_KIN_WORDS})\s+(?:who|that)\b")
_ZH_REPORTED_KIN = re.compile(rf"^用户(?:提到|表示|说|称|透露)[，,:：]?(?:自己的?|他的?|她的?)?({_ZH_KIN_WORDS})"
                              rf"|^用户有(?:一)?(?:个|位|名)({_ZH_KIN_WORDS})(?=是|在|住|会|叫)")
# An agent after "by" / 被 / 由 in a sentence about the user's thing or any thing ("… was drafted by the assistant",
# "The curtains were sewn by the user's mother", "用户的简历是由助手帮忙修改的").
_EN_AGENT = re.compile(rf"(?i)\bby\s+(?:(?P<assistant>the\s+(?:ai\s+)?assistant)\b|the\s+user's\s+{_EN_QUALIFIERS}"
                       rf"(?P<kin>{_EN_KIN_WORDS})\b|(?-i:(?P<name>[A-Z][a-z]+))\b)")
_ZH_AGENT = re.compile(rf"(?:被|由)(?:(?P<assistant>(?:AI|ai|智能)?助手)|用户的(?P<kin>{_ZH_KIN_WORDS}))|^[^，,。]{{1,30}}?是助手(?P<did>)")
# A leading adverbial clause before the subject ("On Sundays, the user plays tennis", "每天晚上，用户…").
_FRONTED = re.compile(r"^[^,，]{1,40}[,，]\s*(?=(?:the\s+)?user\b(?!'s)|用户(?!的)|(?:the\s+)?assistant\b(?!'s)|助手(?!的))",
                      re.IGNORECASE)
# A sentence that opens with a thing and names the user later as agent or owner.
_EN_LATER_USER = re.compile(rf"(?i)\bby\s+the\s+user\b(?!')|^[^,]{{1,60}}?\s(?:is|are|was|were|will\s+be)\s+(?:the\s+\w+\s+of\s+)?"
                            rf"the\s+user's\s+(?!{_EN_QUALIFIERS}(?:{_EN_KIN_WORDS})\b)")
_ZH_IS_KIN = re.compile(rf"^([\u4e00-\u9fff]{{2,4}}?|[A-Z][A-Za-z'-]+(?:\s[A-Z][A-Za-z'-]+)?)\s*是用户的[^，,。]{{0,3}}?"
                        rf"(?:{_ZH_KIN_WORDS})")
# "余华是用户最喜欢的作家": a thing or person said to be the user's something that is no relation is the user's fact.
_ZH_IS_USERS = re.compile(r"^[^，,。]{1,12}?是用户")
# A relative's relative ("the user's mother's mother", "用户妈妈的兄弟"): the reader names no kinship table, so it
# abstains (None) and leaves the decision to the labels and the matcher.
_EN_KIN_OF_KIN = re.compile(rf"(?i)^(?:the\s+)?user's\s+{_EN_QUALIFIERS}(?:{_EN_KIN_WORDS})'s\s+(?:{_EN_KIN_WORDS})\b")
_ZH_KIN_OF_KIN = re.compile(rf"^用户的?(?:{_ZH_KIN_WORDS})的(?:{_ZH_KIN_WORDS})")
_ZH_LATER_USER = re.compile(r"^[^，,。]{1,30}?(?:被|由|是)用户")

_TITLE = (r"(?:Dr|Doctor|Mr|Mrs|Ms|Mx|Miss|Prof|Professor|Sir|Dame|Lady|Lord|Rev|Fr|Capt|Captain|Col|Lt|Sgt|Judge|"
          r"Rabbi|Imam|Pastor|Coach|Officer|Herr|Frau|Madame|Monsieur)\.?")
_CAP_WORD = r"(?:[OD]')?[A-Z\u00c0-\u00de\u0100-\u017f][a-zA-Z\u00df-\u00ff\u0100-\u017f-]*"
_EN_PERSON = re.compile(rf"^((?:{_TITLE}\s+)?{_CAP_WORD}(?:\s+(?:(?:da|de|van|von|der|di|du|bin|al|le|la)\s+)?{_CAP_WORD})*)"
                        rf"(?:'s\s+({_EN_KIN_WORDS})\b)?")
# Words that open a subjectless memory and are nobody's name: verbs and adverbs mem0-style notes start with.
_OPENERS = frozenset("""someone somebody everyone nobody one two three four five six seven eight nine ten many most
some all both human never always often usually recently currently previously formerly originally also still just now
once rarely sometimes already really mostly only even finally daily weekly lately soon got went became began bought sold
took made gave knew left lost wrote grew came spent kept built paid met taught thought felt found held brought chose
fell flew forgot heard meant saw sent slept spoke told wore quit moved lives lived works worked is are was were has had
have does did can could will would should may might must favourite favorite birthday job name in on at after before
during every each today when while if since for from to with by this that these those it its they he she we you i my
there here the a an""".split())
# What a person's name is followed by: an auxiliary, an adverb, or a verb in -s / -ed.
_AUX = frozenset("""is are was were has had have can could will would shall should may might must does did do used never
always often also just still now recently currently usually really already sometimes once rarely who and""".split())


# Irregular past forms a name is followed by ("Anders ran", "Calvin bought").
_ZH_ADDRESS = frozenset("阿姨 叔叔 叔 大爷 大妈 姐 哥 师傅 老师 医生 奶奶 爷爷 伯伯 婶".split())
_IRREGULAR_PAST = frozenset("""ran bought gave quit went taught took wrote grew left made got became began sold knew lost
spent kept built paid met thought felt found held brought chose fell flew forgot heard saw sent slept spoke told wore
ate drove won read put cut set hit rode sang drank threw drew caught fought sat led fed hung shot broke hid""".split())


def _clean(text: str) -> str:
    cleaned = unicodedata.normalize("NFKC", str(text or "")).replace("’", "'").strip().lstrip("-*•·> ").strip()
    if len(cleaned) > 1 and cleaned[0] in "\"“「『'" and cleaned.rstrip("。.")[-1:] in "\"”」』'":
        cleaned = cleaned.rstrip("。.")[1:-1].strip()
    return cleaned


def _fold(text: str | None) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text or "").replace("’", "'").strip()).casefold()


@functools.lru_cache(maxsize=65536)
def read_subject(text: str) -> str | None:
    """Who the sentence names: "user", "assistant", "the user's <relation>" / "用户的<relation>", a person's
    name ("Dr. Smith", "赵敏", "Jack" in "The user's friend Jack …"), or None."""
    cleaned = _clean(text)
    if fronted := _FRONTED.match(cleaned):
        cleaned = cleaned[fronted.end():]
    if _EN_ASSISTANT.match(cleaned) or _ZH_ASSISTANT.match(cleaned):
        return "assistant"
    if _EN_KIN_OF_KIN.match(cleaned) or _ZH_KIN_OF_KIN.match(cleaned):
        return None
    if match := _EN_USER_KIN.match(cleaned):
        return match.group(2) or f"the user's {_EN_KIN[match.group(1).casefold()]}"
    if match := _ZH_USER_KIN.match(cleaned):  # "用户的同事小叶会说五种语言" is 小叶's
        return _zh_person(cleaned[match.end():]) or f"用户的{_ZH_KIN[match.group(1)]}"
    if match := _EN_REPORTED_KIN.match(cleaned):
        return f"the user's {_EN_KIN[(match.group(1) or match.group(2)).casefold()]}"
    if match := _ZH_REPORTED_KIN.match(cleaned):
        return f"用户的{_ZH_KIN[match.group(1) or match.group(2)]}"
    if re.match(r"(?i)^(?:the\s+)?(?:current\s+)?user's\s|^用户[^，,。被由]{0,6}?的", cleaned) and (agent := _agent(cleaned)) is not None:
        return agent  # "The user's bathroom was tiled by Dario."
    if _EN_USER.match(cleaned) or _ZH_USER.match(cleaned):
        return "user"
    if (match := _ZH_KIN_THEN_NAME.match(cleaned)) and (person := _zh_person(cleaned[match.end():])) is not None:
        return person  # mem0's "朋友戴美玲是一名老师", "他的妻子向美玲是一名医生"
    if match := _EN_BARE_KIN.match(cleaned):
        return f"the user's {_EN_KIN[match.group(1).casefold()]}"
    if match := _ZH_BARE_KIN.match(cleaned):
        return f"用户的{_ZH_KIN[match.group(1)]}"
    if match := _ZH_IS_KIN.match(cleaned):  # "大飞是用户的表哥": only a person is the user's relative
        return match.group(1)
    if _ZH_IS_USERS.match(cleaned):
        return "user"
    if _EN_LATER_USER.search(cleaned):  # "Ironing is the user's least favourite chore" (not "Jack is the user's friend")
        return "user"
    if _en_person(cleaned) is None and (agent := _agent(cleaned, names=False)) is not None:
        return agent  # "The fence was repaired by the user's neighbour.", "《原子习惯》这本书是助手推荐的。"
    if (person := _en_person(cleaned)) is not None or (person := _zh_person(cleaned)) is not None:
        return person
    if _ZH_LATER_USER.match(cleaned):
        return "user"
    return None


def _agent(text: str, names: bool = True) -> str | None:
    """The agent a passive names: the assistant, the user's relative, or (English, with `names`: after "the
    user's …", where a subjectless "employed by Aldi" cannot be meant) a capitalised name."""
    if match := _EN_AGENT.search(text):
        if match.group("assistant"):
            return "assistant"
        if match.group("kin"):
            return f"the user's {_EN_KIN[match.group('kin').casefold()]}"
        return match.group("name") if names and match.group("name").casefold() not in _OPENERS else None
    if match := _ZH_AGENT.search(text):
        return "assistant" if match.group("assistant") is not None or match.group("did") is not None \
            else f"用户的{_ZH_KIN[match.group('kin')]}"
    if names and (match := re.search(r"(?:被|由)", text)) and (person := _zh_person(text[match.end():])) is not None:
        return person  # "用户浴室的瓷砖是由马俊贴的。"
    if names and (match := _ZH_CLEFT.search(text)) and (person := _zh_person(match.group("done"))) is not None \
            and _zh_verb_opens(match.group("done")[len(person):]):
        return person  # "用户的电脑是郑浩修好的": the agent of a 是…的 cleft, as "… was repaired by Zheng Hao"
    return None


# A 是…的 cleft that ends the sentence and names who did it: "用户的电脑是郑浩修好的。" (what follows 是, 的 included).
_ZH_CLEFT = re.compile(r"是(?P<done>[^，,。；;是被由]+?的)\s*[。.!！]?\s*$")


def _zh_verb_opens(text: str) -> bool:
    """Whether a text opens with a verb (or an adverb or a preposition before one), as what a cleft's agent did does:
    "修好的", "亲手做的", "帮忙修改的"; not "的" alone ("用户的车是李明的" says whose the car is, not who did it)."""
    import jieba.posseg

    first = next(iter(jieba.posseg.cut(text)), None) if text else None
    return first is not None and first.flag.startswith(("v", "d", "p"))


def _en_person(text: str) -> str | None:
    """A run of capitalised words (a title, accents, O'/D' and hyphens included) followed by what follows a
    name: a possessive, a comma, an auxiliary, an adverb or a verb in -s/-ed; not a verb or label opening."""
    match = _EN_PERSON.match(text)
    if match is None or match.group(1).split()[0].casefold().rstrip(".") in _OPENERS:
        return None
    name, rest = match.group(1), text[match.end():]
    if match.group(2):
        return f"{name}'s {_EN_KIN[match.group(2).casefold()]}"
    if rest.startswith("'s"):
        return None  # "Tamsin's cat was rescued …": about Tamsin's cat; the reader abstains
    if re.match(r"\s*,|\s*\((?:the\s+)?user's|[\u4e00-\u9fff]", rest):
        return name
    after = re.match(r"\s+([a-z]+)\b", rest)
    if after is None:
        return None
    word = after.group(1)
    if not (word in _AUX or word in _IRREGULAR_PAST or word.endswith(("ed", "ly")) or (word.endswith("s") and not word.endswith("ss"))):
        return None  # "Works at Stripe", "Prefers dark mode": no verb after the opening word
    if " " not in name and re.search(r"(?:s|ed|ing)$", name) and word not in _AUX and not word.endswith("ed"):
        # an opener shaped like a verb, then a plural or an adverb ("Cultivates orchids", "Jogs daily") unless
        # more follows, as a name's verb has its object ("James cooks dinner", "Mohammed runs a shop")
        return name if re.match(r"\s+[a-z]+\s+\w", rest) else None
    return name


@functools.lru_cache(maxsize=4096)
def _zh_person(text: str) -> str | None:
    """The first word of a Chinese sentence when jieba tags it a person's name (nr), or a nickname of 小/老/阿
    with a one-character name after it."""
    if not text or not re.match(r"[\u4e00-\u9fff]", text):
        return None
    import logging

    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    words = list(jieba.posseg.cut(re.split(r"[，,。；;！!？?：:]", text, maxsplit=1)[0]))
    if not words:
        return None
    first, name = words[0], None
    if first.word in ("小", "老", "阿") and len(words) > 1 and len(words[1].word) == 1:
        name = first.word + words[1].word
    elif first.flag.startswith("nr") and len(first.word) == 1 and len(words) > 1 and words[1].word in _ZH_ADDRESS:
        name = first.word + words[1].word  # 王 + 阿姨
    elif len(first.word) == 2 and first.word[0] in "小老阿" and not first.flag.startswith(("n", "v", "a", "d", "m")):
        name = first.word  # 老周 (jieba: a time word), not 老师 or 小孩
    elif first.flag.startswith("nr") and 2 <= len(first.word) <= 4:
        name = first.word
        if len(name) == 3 and (name[0] in "小老阿" or jieba.posseg.dt.word_tag_tab.get(name[:2], "").startswith("nr")):
            name = name[:2]  # jieba's model runs a known name into its verb: 张伟爱, 老贺会
        elif len(name) == 2 and len(words) > 1 and len(words[1].word) == 1 and words[1].flag[:1] in ("n", "x") \
                and _name_like(name + words[1].word):
            name += words[1].word  # 花蕾|蕾, 麦冬|梅: a dictionary word and the character that ends the name
    if name is None:
        name = _unlisted_name(re.split(r"[，,。；;！!？?：:]", text, maxsplit=1)[0])
    if name is None:
        return None
    after = [w.flag for w in jieba.posseg.cut(text[len(name):])]
    if after and not any(f.startswith(("v", "a", "d", "p", "t", "m", "f", "r", "u", "l", "i")) for f in after):
        return None  # "爱喝酸梅汤": no predicate after the word, so it is no name
    if kin := re.match(rf"(?:的|(?:提到|说|表示)(?:自己的?)?)({_ZH_KIN_WORDS})", text[len(name):]):
        return f"{name}的{_ZH_KIN[kin.group(1)]}"  # "王芳的儿子…" is about 王芳's son, as "John's sister …"
    return name


# A character belongs in a name's position when jieba's character model gives that reading at least e^-4 (about
# 2%) of its weight against every other reading of the character in that position (begin, middle or end of a word
# of any part of speech): 温 to begin a name, 立 inside one, 新 to end one; not 不 inside a name (钱不够), 眼 (戴眼镜).
_NAME_POSITION_FLOOR = -4.0
# A span that opens with a word this common in jieba's counts (周末, 高中) is that word.
_COMMON_COUNT = 200


def _name_like(span: str) -> bool:
    """Whether each character of a span reads as its place in a person's name (first, inside, last) by jieba's
    character model, each character weighed on its own against the other readings of it in that place."""
    from jieba.posseg import emit_P, start_P

    places = ["B"] + ["M"] * (len(span) - 2) + ["E"]
    for char, place in zip(span, places, strict=True):
        weights = {state: emit_P[state][char] + (start_P.get(state, -1e9) if place == "B" else 0.0)
                   for state in emit_P if state[0] == place and char in emit_P[state]}
        if (place, "nr") not in weights:
            return False
        top = max(weights.values())
        total = top + math.log(sum(math.exp(w - top) for w in weights.values()))
        if weights[(place, "nr")] - total < _NAME_POSITION_FLOOR:
            return False
    return True


def _unlisted_name(clause: str) -> str | None:
    """A name of two to four characters that jieba's dictionary does not hold (温立新, 甘美玲, 焦阳): no dictionary
    word, made of whole dictionary-cut pieces (温|立新, not 高峰|期), not opening with a common word, not ending in a
    one-character verb, adverb or preposition (卜凡, not 卜凡会), with each character name-like (`_name_like`)."""
    import jieba
    import jieba.posseg

    pieces = [(w.word, w.flag) for w in jieba.posseg.cut(clause, HMM=False)]
    if not pieces or pieces[0][1][:1] in ("c", "u", "m", "q", "p") or \
            (len(pieces[0][0]) >= 2 and jieba.dt.FREQ.get(pieces[0][0], 0) >= _COMMON_COUNT):
        return None
    span, found = "", None
    for index, (word, flag) in enumerate(pieces[:3]):
        span += word
        verb_given_name = index == 1 and len(word) == 2 and flag[:1] == "v"  # 齐|远航, a given name that is a verb
        if len(span) > 4 or not re.fullmatch(r"[\u4e00-\u9fff]+", span) or (span != word and not verb_given_name and (
                flag[:1] in ("v", "p", "c", "u", "t", "m", "r", "f") or (len(word) == 1 and flag[:1] == "d"))):
            break  # a verb, a preposition or a time word ends the name (焦阳|喜欢, 卜凡|会)
        if len(span) >= 2 and len(span) < len(clause) and span not in jieba.posseg.dt.word_tag_tab and _name_like(span):
            found = span  # the longest such span
    return found


def canonical(subject: str | None) -> str:
    """A subject label folded for comparison: "user", "assistant", or the folded name or relation."""
    text = _fold(subject)
    if text in _USER_LABELS:
        return "user"
    if text in _ASSISTANT_LABELS:
        return "assistant"
    if match := re.fullmatch(rf"(?:the\s+)?(?:current\s+)?user's\s+({_EN_KIN_WORDS})", text):
        return f"the user's {_EN_KIN[match.group(1)]}"
    if match := re.fullmatch(rf"(?:当前|该)?用户的?({_ZH_KIN_WORDS})", text):
        return f"用户的{_ZH_KIN[match.group(1)]}"
    return text


def same_person(a: str | None, b: str | None) -> bool:
    return canonical(a) == canonical(b)


def person_class(subject: str | None) -> PersonClass:
    folded = canonical(subject)
    return "user" if folded == "user" else "assistant" if folded == "assistant" else "named"


def names_person(text: str, subject: str | None) -> bool:
    """Whether the sentence is about `subject`: its reading is that subject, or (for a named person, when the
    sentence names neither the user nor the assistant) the sentence mentions the name."""
    read = read_subject(text)
    if read is not None and same_person(read, subject):
        return True
    if person_class(subject) != "named" or person_class(read) != "named":
        return False
    return canonical(subject) in _fold(text)


def unlabelled_memory_subject(text: str, owner: str | None) -> str:
    """The subject a memory stored without one should have: the assistant's for an agent memory, else the
    person the sentence names, else the user's ("Works at Stripe")."""
    return "assistant" if owner == "agent" else (read_subject(text) or "user")


__all__ = ["canonical", "names_person", "person_class", "read_subject", "same_person", "unlabelled_memory_subject"]
