"""Subjects: the one definition of "which subject a sentence names" and "same subject".

The engine's cross-subject guard, the harness's matchers, the dataset checks and the mem0 adapter
(whose memories are plain text) all ask these two questions; answering them in one place keeps a
fact from being "the user's" in one component and John's in another.

A subject is `user`, `assistant` or a person's name. A sentence names the assistant when it opens
with "The (AI) assistant" / "助手", the user when it opens with "The user" / "用户" — unless it goes
on with a relation ("The user's mother …", "用户的妈妈…"), which is another person: their name when
the sentence gives one ("The user's friend Jack …"), else the relation phrase itself. A sentence that
opens with a thing names the subject it gives later as a passive's agent or a copula's owner ("The fence
was painted by the user", "Marrakech is the user's favourite city"). Memories written the way mem0-style
extractors write them name no subject ("Works at Stripe", "最近在瘦身": None, which the engine files under
the user) or a relative with no "the user's" ("Mother is a nurse", "母亲是护士").
Kept apart from the reconciler (which imports dspy) so the harness's scorers load no model stack.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hymem.names import EN_PERSON, opening_participant, participant_named, zh_leading_name, zh_name_after_relation

_USER = {"user", "the user", "current user", "the current user", "用户", "当前用户", "该用户", "这位用户", "此用户"}
_ASSISTANT = {"assistant", "the assistant", "ai", "the ai", "agent", "ai assistant", "the ai assistant",
              "助手", "ai助手", "智能助手"}

# Closed class: kin and social relations that turn "the user's X" into another person. Longest first, so
# that "mother-in-law" is not read as "mother" and 外甥女 not as 外甥.
_EN_RELATION_WORDS = """mother father mom mum dad parent parents sister brother sibling siblings wife husband spouse
partner son daughter child children kid kids baby grandmother grandfather grandma grandpa grandparent grandparents
grandson granddaughter grandchild grandchildren great-grandmother great-grandfather aunt uncle cousin niece nephew
friend best\\s+friend girlfriend boyfriend fiance fiancee fiancé fiancée colleague coworker co-worker boss manager
roommate flatmate neighbour neighbor classmate teammate in-law in-laws mother-in-law father-in-law sister-in-law
brother-in-law son-in-law daughter-in-law stepmother stepfather stepmom stepmum stepdad stepson stepdaughter
stepbrother stepsister half-brother half-sister godmother godfather godson goddaughter twin""".split()
_EN_RELATIONS = "|".join(sorted(_EN_RELATION_WORDS, key=len, reverse=True))
_ZH_RELATION_WORDS = """妈妈 母亲 爸爸 父亲 父母 姐姐 妹妹 哥哥 弟弟 兄弟 姐妹 妻子 老婆 太太 丈夫 老公 先生 儿子 女儿 孩子
奶奶 爷爷 外婆 外公 姥姥 姥爷 阿姨 叔叔 舅舅 姑姑 表哥 表姐 表妹 表弟 堂哥 堂姐 堂弟 堂妹 朋友 好友 闺蜜 男朋友 女朋友
男友 女友 同事 老板 领导 上司 室友 邻居 同学 未婚夫 未婚妻 婆婆 岳母 岳父 公公 外甥 外甥女 侄子 侄女 孙子 孙女 外孙
外孙女 儿媳 女婿 嫂子 弟媳 姐夫 妹夫 继父 继母 伯伯 伯父 伯母 婶婶 舅妈 姨妈 姑父 姨父 前妻 前夫""".split()
_ZH_RELATIONS = "|".join(sorted(_ZH_RELATION_WORDS, key=len, reverse=True))
# Spellings of one relation, folded so "the user's mum" and "the user's mother" are one person.
RELATION_FOLD = {"fiance": "fiancé", "fiancee": "fiancée", "in-laws": "in-law", "mom": "mother", "mum": "mother", "dad": "father", "stepmom": "stepmother", "stepmum": "stepmother",
                 "stepdad": "stepfather", "grandma": "grandmother", "grandpa": "grandfather",
                 "kids": "child", "kid": "child", "children": "child", "parents": "parent", "siblings": "sibling", "co-worker": "colleague",
                 "coworker": "colleague", "neighbour": "neighbor", "妈妈": "母亲", "爸爸": "父亲", "老婆": "妻子",
                 "太太": "妻子", "老公": "丈夫", "男友": "男朋友", "女友": "女朋友", "好友": "朋友", "姥姥": "外婆",
                 "姥爷": "外公"}
_EN_USER = re.compile(r"^(?:the\s+)?(?:current\s+)?user\b(?!-)", re.IGNORECASE)
_EN_ASSISTANT = re.compile(r"^(?:the\s+)?(?:ai\s+)?assistant\b|^the\s+ai\b", re.IGNORECASE)
# "AI" or "Agent" with no article, as ChatGPT-style notes open ("AI suggested …"): the assistant when a verb follows.
_EN_BARE_ASSISTANT = re.compile(r"^(AI|(?i:ai|agent))\s+([a-z]+)\b")
_ZH_USER_WORD = r"(?:当前|该|这位|此)?用户"  # the spellings of _USER in Chinese, as a pattern
_ZH_ASSISTANT_WORD = r"(?:ai|AI|智能)?助手"
_ZH_USER = re.compile(rf"^{_ZH_USER_WORD}")
_ZH_ASSISTANT = re.compile(rf"^{_ZH_ASSISTANT_WORD}")
# A relative's relative, by the one kinship term for it ("the user's mother's brother" is their uncle).
_KIN = {("mother", "mother"): "grandmother", ("father", "mother"): "grandmother", ("mother", "father"): "grandfather",
        ("father", "father"): "grandfather", ("mother", "brother"): "uncle", ("father", "brother"): "uncle",
        ("mother", "sister"): "aunt", ("father", "sister"): "aunt", ("husband", "father"): "father-in-law",
        ("wife", "father"): "father-in-law", ("husband", "mother"): "mother-in-law", ("wife", "mother"): "mother-in-law",
        ("brother", "son"): "nephew", ("sister", "son"): "nephew", ("brother", "daughter"): "niece",
        ("sister", "daughter"): "niece", ("母亲", "母亲"): "外婆", ("母亲", "父亲"): "外公", ("父亲", "母亲"): "奶奶",
        ("父亲", "父亲"): "爷爷", ("母亲", "兄弟"): "舅舅", ("母亲", "哥哥"): "舅舅", ("母亲", "弟弟"): "舅舅",
        ("父亲", "弟弟"): "叔叔", ("父亲", "姐姐"): "姑姑", ("父亲", "妹妹"): "姑姑", ("丈夫", "父亲"): "公公",
        ("丈夫", "母亲"): "婆婆", ("妻子", "父亲"): "岳父", ("妻子", "母亲"): "岳母"}
_EN_RELATION = re.compile(rf"^(?:(?:the\s+)?(?:current\s+)?user(?:'s|s'|(?=\s+(?:{_EN_RELATIONS})\b))|his|her|their)\s+(?:(?:older|younger|elder|little|big|maternal|paternal|"
                          rf"best|close|old|new|late|former|ex-)\s*)*({_EN_RELATIONS})\b(?:[\s,]+(?-i:({EN_PERSON}|"
                          r"[^\W\d_A-Za-z][^\s,.]*)))?", re.IGNORECASE)
# "用户的姐姐" / "他的同事": a relation; the relative's name after it is read by `zh_name_after_relation`.
_ZH_RELATION = re.compile(rf"^(?:{_ZH_USER_WORD}|(?:他|她)们?)的?(?:(?:大学|高中|初中|小学|大|小|亲|好|前|老))?({_ZH_RELATIONS})")
# A relative's name in Latin letters ("用户的朋友Anna是…", "用户的同事Dr. Smith…"), as the English name reader reads
# one: its letters exclude the Chinese that runs on after it ("用户的朋友Jack是厨师" is Jack's, not "Jack是厨"'s).
_ZH_LATIN_NAME = re.compile(rf"^[,，]?\s*({EN_PERSON}|[a-z][a-z'-]*)(?=[,，\s\u4e00-\u9fff])")
_APPOSITION = re.compile(r"^([^\s,，\u4e00-\u9fff]{1,24}|[\u4e00-\u9fff]{2,4}|[^\s,，]{1,24}\s[^\s,，]{1,24})[,，]\s*"
                         r"(?:the|a|an|用户的|当前用户的)")  # "Jack, the user's friend, ..." / "김민수, ..."
# A person named first is followed by a verb; a memory with no subject opens with its verb or label, which
# a preposition, an article or a colon follows ("Works at Stripe", "Allergic to peanuts", "Job: nurse").
_NOT_AFTER_A_NAME = re.compile(r"\s*(?:(?:[a-z]+\s*)?:|(?:at|in|on|to|for|with|from|of|about|as|into|onto|by|a|an|the|my|his|her|"
                               r"their|its|our|your|up|out|off|down|over|back|away|around)\b)", re.IGNORECASE)
# A verb opening a subjectless memory: the third person of a verb ending in a sound no given name ends in
# ("Cultivates orchids", "Enjoys hiking", "Loves sushi", "Teaches piano", "Studies law", "Likes dogs").
_VERB_ENDING = re.compile(r"(?:ates|izes|ises|ies|[aeou]ys|ches|shes|sses|xes|ves|kes|ks|ts|ds|ps)$")
# What follows a person's name: a finite verb (which these words or an -s/-ed ending mark) or an adverb.
_AFTER_A_NAME = frozenset("""is are was were has had have can could will would shall should may might must does did do
used never always often also just still now recently currently usually really already sometimes once and or not
rarely first then mostly only even finally""".split())
# Mem0-style memories name the user's relatives with no "the user's": "Mother is a nurse", "母亲是护士".
_EN_BARE_RELATION = re.compile(rf"^(?:my\s+)?({_EN_RELATIONS})\b(?:\s+(?-i:([A-Z][\w'-]*)))?(?=\s|'s\s)", re.IGNORECASE)
_ZH_BARE_RELATION = re.compile(rf"^(?:我的?)?(?:(?:大|小|亲|好|老))?({_ZH_RELATIONS})")
_ZH_BARE_NEXT = re.compile(r"是|在|住|喜欢|有|叫|做|今年|已|每|会|正|要|想|不|没|刚|很|最|一直|经常|的|，|,")
_EN_NAME = re.compile(rf"^({EN_PERSON})(?:'s\s+(?i:({_EN_RELATIONS}))\b|'s)?(?=[\s,.;:!?\u4e00-\u9fff]|$)")
_OTHER_NAME = re.compile(r"^([^\W\d_\u3040-\u30ff\u3400-\u9fff][^\s,，.。:：\u3400-\u9fff]{0,23})(?=\s|[是在住喜有的])")  # 김민수 / Олег / Lucas是
_RELATION_APPOSITION = re.compile(r"^[,，]\s*(?:the\s+)?(?:user's|用户的|当前用户的)\s*[^,，]{1,30}[,，]\s*",
                                  re.IGNORECASE)
_FRONTED = re.compile(r"^([^,，]{1,40}[,，]\s*)((?:the\s+)?user|用户|the\s+(?:ai\s+)?assistant|(?:ai|AI)?助手)(?!'s|的|[A-Za-z])",
                      re.IGNORECASE)
# Sentences that open with a thing but are about a subject named later: a passive with its agent ("The
# kitchen was painted by the user", "旧车被用户卖掉了", "分公司由用户管理"), a copula whose complement is the
# subject's own thing ("Marrakech is the user's favourite city", "麦香坊是用户面包店的名字"), and "has a
# <relation> who …", which is about that relation ("The user has a brother who is a plumber").
_EN_SUBJECT_PHRASE = (rf"(?:the\s+)?(?:current\s+)?user(?:'s|s')\s+(?:\w+\s+)?(?:{_EN_RELATIONS})\b(?:\s+[A-Z][\w'-]*)?|"
                      r"(?:the\s+)?(?:current\s+)?user\b(?!'|-)|(?:the\s+)?(?:ai\s+)?assistant\b(?!')|the\s+ai\b(?!')")
# Past participles no ending above catches ("The shop is run by Mrs. Nguyen", "The meeting was led by Ana").
_EN_IRREGULAR_PARTICIPLES = r"(?:run|held|led|sold|told|fed|read|found|bound|hit|cut|put|set|shut|won|spun|hung|shot|bred|dug|struck|stuck|hid)"
_EN_AGENT = re.compile(r"^(?P<head>(?P<thing>.{1,80}?)\s(?:is|are|was|were|be|been|being|will be|got|gets)\s+(?:\w+ly\s+)?"
                       r"(?P<verb>[a-z]+(?:ed|en|wn|ght|ung|id|t|de|ne)|" + _EN_IRREGULAR_PARTICIPLES + r")\b(?P<between>.*?))\s+by\s+(?P<agent>"
                       + _EN_SUBJECT_PHRASE + r")(?P<tail>.*)$", re.IGNORECASE)
_EN_INVERTED = re.compile(r"^(?P<head>.{1,60}?\s+(?:is|are|was|were|will be)\s+(?:(?:the|a|an)\s+\w+\s+of\s+)?)"
                          r"(?P<owner>(?:the\s+)?(?:current\s+)?user|(?:the\s+)?(?:ai\s+)?assistant)'s\s+"
                          rf"(?!(?:\w+\s+)?(?:{_EN_RELATIONS})\b)(?P<tail>.*)$", re.IGNORECASE)
_EN_HAS_RELATION = re.compile(rf"^(?:the\s+)?(?:current\s+)?user\s+(?:has|had)\s+(?:a|an|one)\s+(?:\w+\s+)?"
                              rf"(?P<relation>{_EN_RELATIONS})\b(?:\s+(?:named|called)\s+(?-i:(?P<name>[A-Z][\w'-]*)))?"
                              r",?\s+(?:who|that)\s+(?P<tail>.*)$", re.IGNORECASE)
# After "the user's …" / "用户的…", a named agent is the subject too ("The user's bathroom was tiled by Dario.").
_EN_NAMED_AGENT = re.compile(r"^(?P<head>(?P<thing>.{1,80}?)\s(?:is|are|was|were|be|been|being|will be|got|gets)\s+(?:\w+ly\s+)?"
                             r"(?P<verb>[a-z]+(?:ed|en|wn|ght|ung|id|t|de|ne)|" + _EN_IRREGULAR_PARTICIPLES + r")\b(?P<between>.*?))\s+by\s+"
                             rf"(?P<agent>(?-i:{EN_PERSON}))(?P<tail>(?:\s*[,.;!?]|\s*$|\s+(?:at|in|on|for|"
                             r"last|every|this|next|yesterday|after|before)\b).*)$", re.IGNORECASE)
# "这本书由马俊翻译", "用户浴室的瓷砖是由马俊贴的": the agent's name is read by jieba (not 小偷, 老师).
_ZH_NAMED_AGENT = re.compile(r"^(?P<head>[^，,。被由]{1,30}?)(?:是)?(?:被|由)(?P<after>.+)$")
# A sentence that opens with a thing, whose passive agent a name may be: a determiner or no capital in English.
_EN_THING_OPENER = re.compile(r"^(?i:the|a|an|this|that|these|those|its|his|her|their|our|my|your)\b")
_ZH_AGENT = re.compile(rf"^(?P<head>[^，,。]{{1,30}}?)(?:被|由|让)(?P<agent>{_ZH_USER_WORD}(?:的?(?:{_ZH_RELATIONS}))?|{_ZH_ASSISTANT_WORD})(?P<tail>.*)$")
_ZH_INVERTED = re.compile(rf"^(?P<head>[^，,。]{{1,30}}?)是(?P<owner>{_ZH_USER_WORD}|{_ZH_ASSISTANT_WORD})"
                          rf"(?!的?(?:大学|高中|初中|小学|大|小|亲|好|前|老)?(?:{_ZH_RELATIONS}))(?P<tail>.*)$")
_ZH_HAS_RELATION = re.compile(rf"^{_ZH_USER_WORD}有(?:一)?(?:个|位|名)?(?P<relation>{_ZH_RELATIONS})"
                              r"(?:叫(?P<name>[\u4e00-\u9fff]{2,3}))?[，,]?(?P<tail>[是在住喜做会每].*)$")
# Capitalised words that open a sentence without naming anyone.
# Irregular past forms and common verbs that open subjectless memories ("Got promoted to head chef", "Went to
# Peru in May") and are nobody's given name (Drew, Rose, Won and Ran are, and are left out).
_VERB_OPENERS = """got gets get went goes became becomes began begins bought sold took takes made gave gives knew left
lost wrote grew came comes spent kept built paid met taught thought said felt found held brought chose fell flew
forgot heard meant saw sent slept spoke stood swam told understood wore quit moved lives lived works worked""".split()
# Adverbs that open a subjectless memory ("Never drinks coffee", "Previously worked as cabin crew", "Usually
# runs at night"): nobody's name.
_ADVERB_OPENERS = """never always often also just still now recently currently usually really already sometimes
rarely mostly only even finally previously formerly originally initially eventually lately newly frequently
occasionally regularly typically generally normally mainly primarily seldom hardly nearly almost soon later daily
weekly monthly annually yearly nightly probably likely definitely apparently reportedly especially particularly
increasingly constantly strictly exclusively actively""".split()
# Past forms a person's name is followed by ("Anna ate", "Tom drove"), besides those that also open memories.
_IRREGULAR_PAST = frozenset(_VERB_OPENERS) | frozenset("""ate ran drove did won read put cut let set hit rode sang drank
threw drew caught fought sought sat lay led fed hung shot stuck struck wept woke broke hid bit dug lit shook shut spun
split spread stole swore tore wound bet bent bled blew bound bred burst cast clung crept dealt dove fled flung forgave
froze knelt leapt lent rang rose sank shone shrank slid sped sprang stung swept swung trod withdrew""".split())
# Lower-case words a name is followed by besides a verb: a surname's particle ("Maria da Silva", "Vincent van
# Gogh"), a relative pronoun, a reflexive.
_AFTER_A_NAME_TOO = frozenset("""da de del della di do dos das du van von der den ter la le bin ibn al el who whose
too herself himself themselves""".split())
# The first word of a mem0-style label ("Favourite movies are …", "Birthday is March 3"): nobody's name.
_LABEL_OPENERS = """favourite favorite birthday hometown hobby hobbies job occupation profession career goal goals
diet budget schedule preference preferences interest interests email phone address nickname pronouns religion
nationality height weight allergy allergies""".split()
_NOT_NAMES = frozenset(_VERB_OPENERS) | frozenset(_ADVERB_OPENERS) | frozenset(_LABEL_OPENERS) | frozenset("""the a an this that these those it its they their he his she her we our you your i my me
there here in on at after before during every each today tonight yesterday tomorrow last next when while if
since because although as for from to with by both all some many most no not one two three user users
assistant ai memory note fact name is are am was were be been being has have had does do did can could
would shall should might must""".split())


def _fold(text: str | None) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text or "").strip()).casefold()


def canonical_subject(subject: str | None) -> str:
    """`user`, `assistant`, or the person's name folded for comparison; a relative of the user's by their folded
    relation, as `subject_of` names them ("The user's mom" and "the user's mother" are one, 用户的妈妈 用户的母亲)."""
    text = _fold(subject)
    if text in _USER:
        return "user"
    if text in _ASSISTANT:
        return "assistant"
    if match := _EN_RELATIVE_LABEL.match(text):
        return _fold(_relative(match.group(1), None, zh=False))
    if match := _ZH_RELATIVE_LABEL.match(text):
        return _fold(_relative(match.group(1), None, zh=True))
    return text


# A subject label that is a relative of the user's and nothing more: "the user's mom", "用户的妈妈", "用户妈妈".
_EN_RELATIVE_LABEL = re.compile(rf"^(?:the\s+)?(?:current\s+)?user's\s+({_EN_RELATIONS})$")
_ZH_RELATIVE_LABEL = re.compile(rf"^{_ZH_USER_WORD}的?({_ZH_RELATIONS})$")


def same_subject(a: str | None, b: str | None) -> bool:
    """Whether two subject labels are the same person ("User" / "用户" / "the user" are one)."""
    return canonical_subject(a) == canonical_subject(b)


def subject_class(subject: str | None) -> str:
    """user / assistant / named."""
    canonical = canonical_subject(subject)
    return canonical if canonical in ("user", "assistant") else "named"


_QUOTED = re.compile(r'^(["“「『\'])(.*)(["”」』\'])[.。]?$', re.DOTALL)


def _clean(text: str) -> str:
    """NFKC, one apostrophe, no list bullet, and no quotes around the whole memory ("「用户…」")."""
    cleaned = unicodedata.normalize("NFKC", str(text or "")).replace("’", "'").strip().lstrip("-*•·> ").strip()
    if (match := _QUOTED.match(cleaned)) and match.group(2).strip():
        cleaned = match.group(2).strip()
    return cleaned


_EN_SECOND = re.compile(rf"'s\s+({_EN_RELATIONS})\b", re.IGNORECASE)
_ZH_SECOND = re.compile(rf"的({_ZH_RELATIONS})")


def _fold_relation(relation: str, zh: bool) -> str:
    return RELATION_FOLD.get(relation if zh else relation.casefold(), relation if zh else relation.casefold())


_FORMER = re.compile(r"(?i)\bex-\s*$|\bformer\s+$|前$")


def _relative(relation: str, name: str | None, zh: bool) -> str:
    """The subject a relative of the user's names: their name when the sentence gives one, else the folded
    relation ("the user's mother", "用户的母亲")."""
    folded = _fold_relation(relation, zh)
    return name or (f"用户的{folded}" if zh else f"the user's {folded}")


# How extractors report what the user said, which is not part of the fact ("The user mentioned that …",
# "用户表示…"); the semantic matcher drops it from the predicate, and a relative named right after it is the
# subject ("The user mentioned that their aunt works as a taxidermist", "用户提到儿子性格腼腆"), but not the one
# reported on ("The user reported their neighbour to the council").
EN_REPORTING = (r"(?:has\s+)?(?:mentioned|mentions|said|says|stated|states|noted|notes|reported|reports|shared|shares|"
                r"explained|explains|indicated|indicates|told the assistant|revealed|reveals)")
ZH_REPORTING = r"(?:表示|提到|提及|说|称|透露|告诉助手)"
_REPORTED_RELATIVE = re.compile(rf"^\s*(?:(?:{EN_REPORTING}\s+that|(?:has\s+)?(?:said|says|mentioned|mentions|stated|states|noted|"
                                rf"notes|explained|explains|indicated|indicates))\s+(?:their|his|her|my)\s+(?:(?:older|younger|elder|little|"
                                rf"big|maternal|paternal|best|close|old|new|late)\s+)*({_EN_RELATIONS})\b(?:\s+(?-i:([A-Z][\w'-]*)))?|"
                                rf"{ZH_REPORTING}[，,:：]?\s*(?:自己|他|她|我)?的?(?:大|小|亲|好|老)?({_ZH_RELATIONS})(?!的))",
                                re.IGNORECASE)


def split_subject(text: str, participants: Iterable[str] = (), user_name: str | None = None) -> tuple[str | None, str]:
    """(the subject the sentence names, the rest of the sentence): "The user lives in Berlin." →
    ("user", "lives in Berlin."); ("Jack", "is a chef.") for "The user's friend Jack is a chef.";
    (None, the whole sentence) when it opens with no subject.

    `participants` are the conversation's named people and `user_name` the user's own name: a sentence that
    opens with one of them is theirs (the user's for `user_name`), whatever follows ("赵敏很喜欢喝咖啡。"),
    unless it goes on to their relative ("John's sister …", "张伟的妹妹…"); a name read from the sentence that
    is part of one of them ("Siobhán" of "Siobhán O'Brien") is that person."""
    stripped = _clean(text)
    names = [n for n in participants if n and n.strip()]
    if user_name and user_name.strip() and any(_fold(n) == _fold(user_name) for n in names):
        user_name = None  # a named human shares the user's name: the name is theirs (the user's facts read "The user")
    if user_name and user_name.strip():
        names.append(user_name)
    if names:
        return _participant_subject(stripped, names, user_name)
    for pattern, zh in ((_EN_RELATION, False), (_ZH_RELATION, True)):  # "The user's friend Jack …"
        if match := pattern.match(stripped):
            name, rest = _relatives_name(match, stripped, zh)
            if name is None and _PRONOUN_OWNER.match(stripped):
                continue  # "his colleague" with no name: whose, the sentence does not say
            if _FORMER.search(stripped[:match.start(1)]):  # "the user's ex-wife" is not their wife
                relation = ("前" if zh else "ex-") + _fold_relation(match.group(1), zh)
                return name or _relative(relation, None, zh), rest
            if name is None and (second := (_ZH_SECOND if zh else _EN_SECOND).match(rest)):
                first = _relative(match.group(1), None, zh)  # "The user's mother's brother …" → the uncle
                relation = _fold_relation(second.group(1), zh)
                kin = _KIN.get((first.split("的" if zh else " ")[-1], relation))
                joined = first + ("的" if zh else "'s ") + relation  # "the user's friend's mother"
                return (_relative(kin, None, zh) if kin else joined), rest[second.end():]
            return _relative(match.group(1), name, zh), rest
    for pattern, zh in ((_EN_HAS_RELATION, False), (_ZH_HAS_RELATION, True)):  # "The user has a brother who …"
        if match := pattern.match(stripped):
            return _relative(match.group("relation"), match.group("name"), zh), (" " if not zh else "") + match.group("tail")
    if ((_POSSESSIVE_OPENER.match(stripped) or _ZH_USERS_THING.match(stripped))
            and (agent := _agent(stripped) or _named_agent(stripped)) is not None):
        return agent  # "The user's speech was drafted by the assistant." → the assistant; "… tiled by Dario" → Dario
    for pattern, subject in ((_EN_ASSISTANT, "assistant"), (_ZH_ASSISTANT, "assistant"), (_EN_USER, "user"),
                             (_ZH_USER, "user")):
        if match := pattern.match(stripped):
            rest = stripped[match.end():]
            if subject == "user" and (reported := _REPORTED_RELATIVE.match(rest)):  # "… mentioned that their aunt …"
                zh = reported.group(3) is not None
                return (_relative(reported.group(3) if zh else reported.group(1), None if zh else reported.group(2), zh),
                        rest[reported.end():])
            return subject, rest
    if (match := _APPOSITION.match(stripped)) and match.group(1).split()[0].casefold() not in _NOT_NAMES:
        rest = stripped[len(match.group(1)):]  # ", the user's friend, is a chef." → "is a chef."
        return match.group(1), _RELATION_APPOSITION.sub("", rest, count=1)
    if (agent := _agent(stripped)) is not None:  # "The kitchen was painted by the user." → the user
        return agent
    if _opens_with_a_thing(stripped) and (agent := _named_agent(stripped)) is not None:
        return agent  # "The cake was baked by Maria." → Maria; "这本书由马俊翻译。" → 马俊
    for pattern in (_EN_INVERTED, _ZH_INVERTED):  # "Marrakech is the user's favourite city." → the user
        if (match := pattern.match(stripped)) and (named := split_subject(match.group("owner"))[0]) is not None:
            return named, match.group("head") + match.group("tail")
    if (match := _EN_BARE_ASSISTANT.match(stripped)) and _assistant_verb(match.group(2)):
        return "assistant", stripped[len(match.group(1)):]  # "AI suggested restarting the pod" (not "AI tools are …")
    if match := _FRONTED.match(stripped):  # "On Sundays, the user plays tennis." / "每天晚上，用户都会看书。"
        subject = "assistant" if re.match(r"(?i)the (?:ai )?assistant|(?:ai)?助手", match.group(2)) else "user"
        return subject, match.group(1) + stripped[match.end():]
    # "Mother is a nurse", "Daughter Emma is 7", "母亲是护士" (not "Manager at Google")
    if (match := _EN_BARE_RELATION.match(stripped)) and not _NOT_AFTER_A_NAME.match(stripped, match.end()):
        return _relative(match.group(1), match.group(2), False), stripped[match.end():]
    if match := _ZH_BARE_RELATION.match(stripped):  # "母亲是护士", "姐姐小丽是律师"
        name = zh_name_after_relation(stripped[match.end():])
        rest = stripped[match.end() + len(name or ""):]
        if _ZH_BARE_NEXT.match(rest):
            return _relative(match.group(1), name, True), rest
    if match := _EN_NAME.match(stripped):
        name = match.group(1)
        if name.split()[0].casefold() not in _NOT_NAMES and not _opens_without_a_name(match, stripped):
            return (f"{name}'s {match.group(2).casefold()}" if match.group(2) else name), stripped[match.end():]
    if match := _ZH_IS_RELATIVE.match(stripped):  # "大飞是用户的外甥。": only a person is the user's relative
        return match.group(1), stripped[match.end(1):]
    if (zh_name := zh_leading_name(stripped)) is not None and re.search(r"\w", rest := stripped[len(zh_name):]):
        if of_name := _ZH_SECOND.match(rest):  # "张伟的妹妹在读高中。" is about 张伟's sister
            return f"{zh_name}的{_fold_relation(of_name.group(1), True)}", rest[of_name.end():]
        return zh_name, rest
    for pattern in (_OTHER_NAME,):
        if match := pattern.match(stripped):
            name = match.group(1)
            if name.casefold() not in _NOT_NAMES and not name[0].islower() and not _opens_without_a_name(match, stripped):
                return name, stripped[match.end():]
    return None, stripped


def _participant_subject(stripped: str, names: list[str], user_name: str | None) -> tuple[str | None, str]:
    """`split_subject` with the conversation's names: the name the sentence opens with, else the name the
    rule reads standing for one of them, else what the rule reads."""
    def own(name: str) -> str:
        return "user" if user_name is not None and _fold(name) == _fold(user_name) else name

    if (opened := opening_participant(stripped, names)) is not None:
        name, rest = opened
        zh = bool(re.match(r"\s*的", rest))
        if relation := (_ZH_SECOND if zh else _EN_SECOND).match(rest.lstrip() if zh else rest):
            folded = _fold_relation(relation.group(1), zh)
            after = (rest.lstrip() if zh else rest)[relation.end():]
            if (named := _name_after(after, zh, names)) is not None:  # "Tim's colleague Priya …", "赵敏的同事王磊…"
                return own(named[0]), named[1]
            if own(name) == "user":
                return _relative(relation.group(1), None, zh), rest.lstrip()[relation.end():]
            return (f"{name}的{folded}" if zh else f"{name}'s {folded}"), (rest.lstrip() if zh else rest)[relation.end():]
        return own(name), re.sub(r"^'s\b", "", rest)
    if (inside := _participant_inside(stripped, names, user_name)) is not None:
        return inside
    subject, rest = split_subject(stripped)
    if subject is not None and ("的" in subject or "'s " in subject) and \
            (named := opening_participant(re.sub(r"^[,，]?\s*", "", rest), names)) is not None \
            and not re.match(r"\s*(?:的|'s\b)", named[1]):
        return own(named[0]), named[1]  # "用户的同事祁海峰会弹吉他": a name jieba does not know, but a participant's
    if subject is not None and canonical_subject(subject) not in ("user", "assistant") and "'s " not in subject \
            and "的" not in subject and (person := participant_named(subject, names)) is not None:
        return own(person), rest
    return subject, rest


# A report around a participant's fact: "The user said that Jack …", "According to Jack, he …", "用户说李娜…",
# "据用户说，邻居苗秀芝…". `source`: who reported it, when the frame names them.
_EN_FRAME = re.compile(rf"^(?:(?:the\s+)?(?:current\s+)?user\s+{EN_REPORTING}(?:\s+that)?|"
                       r"(?:according\s+to|per)\s+(?P<source>[^,]{1,40}?)\s*,)\s*", re.IGNORECASE)
_ZH_FRAME = re.compile(rf"^(?:{_ZH_USER_WORD}{ZH_REPORTING}了?[，,:：]?|据(?P<zh_source>[^，,]{{1,8}}?)所?(?:说|称|透露|介绍)?[，,])\s*")
_PRONOUN = re.compile(r"(?i:he|she|they)\b\s*|[他她]")
# Words between "the user's" and a participant's name that make the name an apposition of a relation ("The user's
# old deskmate Jack"), not an object ("the user's meeting with Jack"): lower-case words, no preposition.
_EN_OPENER = re.compile(r"^(?i:the\s+)?(?i:current\s+)?(?i:user)'s\s+")
_EN_NOT_RELATION = {"with", "to", "for", "from", "by", "at", "of", "and", "or", "about", "on", "in", "than", "like",
                    "is", "was", "are", "were", "has", "had"}
_ZH_OPENER = re.compile(rf"^{_ZH_USER_WORD}的")
_ZH_NOT_RELATION = re.compile(r"[和跟与把被给对向在从为比说让叫请找帮替的了是]")


def _participant_inside(stripped: str, names: list[str], user_name: str | None) -> tuple[str, str] | None:
    """A participant named after a report's frame or after a relation that is not in the rule's list ("The user's
    deskmate Jack …", "同事亓瑞雪…", "该用户的大学同桌李娜…"): that participant's. The conversation's name is the
    evidence, so this runs only with names, and only a participant (or a participant's relative) is taken."""
    def taken(found: tuple[str | None, str]) -> tuple[str, str] | None:
        subject = found[0]
        if subject is None or canonical_subject(subject) in ("user", "assistant"):
            return None
        person = subject.split("的")[0].split("'s ")[0]
        return (subject, found[1]) if participant_named(person, names) == person else None

    if frame := (_EN_FRAME.match(stripped) or _ZH_FRAME.match(stripped)):
        rest = stripped[frame.end():]
        source = frame.groupdict().get("source") or frame.groupdict().get("zh_source")
        if source and (pronoun := _PRONOUN.match(rest)) and (person := participant_named(source.strip(), names)):
            own = user_name is not None and person.casefold() == user_name.strip().casefold()
            return ("user" if own else person), (" " if not _HAN_RUN.match(rest) else "") + rest[pronoun.end():]
        return taken(_participant_subject(rest, names, user_name)) if rest else None
    if opener := _EN_OPENER.match(stripped):
        words = stripped[opener.end():].split(" ")
        for count in range(1, 4):
            lead = [w.strip(",") for w in words[:count]]
            if not all(re.fullmatch(r"[a-z][a-z-]*", w) and w not in _EN_NOT_RELATION for w in lead):
                return None
            if opening_participant(" ".join(words[count:]).lstrip(", "), names) is not None:
                return taken(_participant_subject(" ".join(words[count:]).lstrip(", "), names, user_name))
        return None
    opener = _ZH_OPENER.match(stripped)
    start = opener.end() if opener else 0
    for end in range(start + 1, min(len(stripped), start + (6 if opener else 4)) + 1):
        between = stripped[start:end]
        if not _HAN_RUN.fullmatch(between) or _ZH_NOT_RELATION.search(between):
            return None
        after = stripped[end:].lstrip("，, ")
        if opening_participant(after, names) is not None and (opener or re.fullmatch(_ZH_RELATIONS, between)
                                                              or _all_nouns(between)):
            return taken(_participant_subject(after, names, user_name))
    return None


_HAN_RUN = re.compile(r"[\u4e00-\u9fff]+")


def _all_nouns(words: str) -> bool:
    """Every word jieba cuts `words` into is a common noun ("同桌", "大学同桌"), not a time, place or verb (jieba
    tags 邻居 a verb: the relations the rule lists are taken before this is asked)."""
    import jieba.posseg  # lazy: jieba loads its dictionary on first use

    return all(w.flag in ("n", "ng") for w in jieba.posseg.cut(words))


_ZH_IS_RELATIVE = re.compile(rf"^([\u4e00-\u9fff]{{2,4}}?)是{_ZH_USER_WORD}的(?:大学|高中|初中|小学|大|小|亲|好|前|老)?(?:{_ZH_RELATIONS})")
_POSSESSIVE_OPENER = re.compile(rf"^(?:(?:the\s+)?(?:current\s+)?user's|(?:the\s+)?(?:ai\s+)?assistant's|"
                                rf"{_ZH_USER_WORD}的|{_ZH_ASSISTANT_WORD}的)", re.IGNORECASE)


def _agent(text: str) -> tuple[str, str] | None:
    """A passive's agent as the subject, and the rest: in the active voice in English ("The fence was
    painted by the user." → ("user", " painted the fence.")), without the agent in Chinese ("旧车被用户卖掉了。"
    → ("user", "旧车卖掉了。"); reordering it did not help the matcher in cross-validation)."""
    if (match := _EN_AGENT.match(text)) and (named := split_subject(match.group("agent"))[0]) is not None:
        thing = match.group("thing")
        thing = thing[:1].lower() + thing[1:] if re.match(r"(?:The|A|An|This|That|These|Those|His|Her|Their|Its)\b", thing) else thing
        tail = match.group("tail")
        end = re.search(r"[.!?。]+\s*$", tail)
        return named, (f" {match.group('verb')} {thing}{match.group('between')}{tail[:end.start()] if end else tail}"
                       f"{end.group() if end else ''}")
    if (match := _ZH_AGENT.match(text)) and (named := split_subject(match.group("agent"))[0]) is not None:
        return named, match.group("head") + match.group("tail")
    return None


def _named_agent(text: str) -> tuple[str, str] | None:
    """After a possessive opener, a passive's agent named by a name: "The user's bathroom was tiled by
    Dario." → ("Dario", " tiled the user's bathroom."); "用户浴室的瓷砖是由马俊贴的。" → ("马俊", "用户浴室的瓷砖贴的。")."""
    if (match := _EN_NAMED_AGENT.match(text)) and match.group("agent").split()[0].casefold() not in _NOT_NAMES:
        thing = match.group("thing")
        thing = thing[:1].lower() + thing[1:] if re.match(r"(?:The|A|An|This|That|These|Those|His|Her|Their|Its)\b", thing) else thing
        tail = match.group("tail")
        end = re.search(r"[.!?。]+\s*$", tail)
        return match.group("agent"), (f" {match.group('verb')} {thing}{match.group('between')}"
                                      f"{tail[:end.start()] if end else tail}{end.group() if end else ''}")
    if (match := _ZH_NAMED_AGENT.match(text)) and (agent := zh_leading_name(match.group("after"))) is not None:
        return agent, match.group("head") + match.group("after")[len(agent):]
    return None


_ZH_USERS_THING = re.compile(rf"^{_ZH_USER_WORD}[^，,。被由]{{0,20}}?的[^，,。被由]{{1,10}}?(?:是)?(?:被|由)")  # 用户浴室的瓷砖由…
_PRONOUN_OWNER = re.compile(r"^(?:(?i:his|her|their)\s|(?:他|她)们?的)")


def _relatives_name(match: re.Match[str], text: str, zh: bool) -> tuple[str | None, str]:
    """(the name a relation is followed by, the rest after it): "The user's boss Dr. Smith is strict." →
    "Dr. Smith"; "用户的哥哥建国是医生。" → "建国" (jieba, `zh_name_after_relation`); None when no name follows."""
    rest = text[match.end():]
    if not zh:
        name = match.group(2)
        if name is not None and name.split()[0].casefold() in _NOT_NAMES:
            return None, text[match.start(2):]
        return name, rest
    if latin := _ZH_LATIN_NAME.match(rest):
        return latin.group(1), rest[latin.end():]
    if (given := zh_name_after_relation(rest)) is not None:
        after = rest[rest.index(given) + len(given):]
        if relation := _ZH_SECOND.match(after):  # "用户的同事王磊的女儿…" is about 王磊's daughter
            return f"{given}的{_fold_relation(relation.group(1), True)}", after[relation.end():]
        return given, after
    return None, rest


def _name_after(rest: str, zh: bool, names: list[str]) -> tuple[str, str] | None:
    """(the name a relation is followed by, the rest after it): one of the conversation's names, else a name
    read as after "the user's <relation>"."""
    rest = re.sub(r"^[,，]?\s*", "", rest)
    if (opened := opening_participant(rest, names)) is not None:
        return opened
    name = zh_name_after_relation(rest) if zh else None
    if not zh and (match := re.match(rf"(?:{EN_PERSON})(?=[\s,.;:!?]|$)", rest)) and \
            match.group().split()[0].casefold() not in _NOT_NAMES:
        name = match.group()
    if name is None:
        return None
    return participant_named(name, names) or name, rest[len(name):]


def _opens_with_a_thing(text: str) -> bool:
    """Whether a sentence opens with a thing rather than a person, so that a passive's agent is its subject
    ("The cake was baked by Maria", "这本书由马俊翻译"; not "Mia was hired by …", "小刘被马俊骗了"). A memory
    that opens with its verb or an adverb ("is being tutored by Devika", "最近被马俊骗了") is the user's, as
    any subjectless memory is."""
    if not _HAN.match(text[:1]):
        return bool(_EN_THING_OPENER.match(text))
    if zh_leading_name(text) is not None or re.match(r"(?:我|你|他|她|它)", text):
        return False
    if re.match(r"[这那该此]", text):
        return True
    import jieba.posseg  # lazy: jieba loads its dictionary on first use; most sentences never get here

    head = re.split(r"是?[被由]", text, maxsplit=1)[0]
    words = [w.flag for w in jieba.posseg.cut(head)]
    return bool(words) and not words[0].startswith(("d", "t", "f", "p", "c", "v")) and \
        any(flag.startswith("n") and not flag.startswith("nr") for flag in words)


_HAN = re.compile(r"[\u3400-\u9fff]")


def _opens_without_a_name(match: re.Match[str], text: str) -> bool:
    """A verb or a label, not a person: nothing after it ("Supports Aston Villa"), a contraction ("Can't
    stand cilantro"), or one capitalised Latin word with a preposition, a particle, an article or a colon
    after it ("Works at Stripe", "Grew up in NOLA", "Job: nurse"), with a gerund after it ("Started learning
    Spanish"), with a verb's ending and no finite verb after it ("Loves sushi", "Cultivates orchids"), or with
    no verb after it at all ("Prefers dark mode", "Jogs daily")."""
    word, rest = match.group(1), text[match.end():]
    if not re.search(r"\w", rest) or "n't" in word.casefold():
        return True
    if " " in word and match.lastindex == 1 and _verbal(word.split()[0].casefold()):
        # a verb and its capitalised object, not a first name and surname: "Visited Paris in 2019", "Cooks
        # Italian food often" (a finite verb after it keeps the name: "Brooks Koepka plays golf")
        after = re.match(r"\s+([a-z]+)\b", rest)
        return bool(_NOT_AFTER_A_NAME.match(text, match.end())) or (after is not None and not _finite(after.group(1)))
    if " " in word or not re.match(r"[A-Za-z]", word) or match.lastindex != 1:
        return False
    if _NOT_AFTER_A_NAME.match(text, match.end()):
        return True
    verb = _verbal(word.casefold())
    after = re.match(r"\s+([a-z]+)\b", rest)
    if after is None:  # "Speaks French" (a name with a surname was read whole by _EN_NAME)
        return verb and bool(re.match(r"\s+[A-Z]", rest))
    following = after.group(1)
    if following in _AFTER_A_NAME:
        return False
    if following.endswith("ing") or (verb and not following.endswith("ed")):
        return True
    if following.endswith("ly"):  # an adverb: the word after it decides ("Mia actually likes", "Jogs daily")
        third = re.match(r"\s+[a-z]+\s+([a-z]+)\b", rest)
        return third is None or not _finite(third.group(1))
    # a name is followed by its verb: "Prefers dark mode", "Vegetarian since 2019" open with no name
    return not (_finite(following) or following in _AFTER_A_NAME_TOO)


def _verbal(word: str) -> bool:
    """A lower-case word shaped like a verb no given name is: a third-person ending (`_VERB_ENDING`), an
    irregular past, or a regular past of six letters or more whose ending no name has ("visited", "joined";
    not Mohammed, Alfred, Khaled)."""
    return (bool(_VERB_ENDING.search(word)) or word in _IRREGULAR_PAST
            or (len(word) >= 6 and word.endswith(("ted", "ded", "ned", "ved", "ied", "yed", "ked", "ped", "sed", "zed",
                                                   "hed", "ged", "ced"))))


def _assistant_verb(word: str) -> bool:
    """Whether the word after a bare "AI" / "Agent" is its verb: a past form or an auxiliary ("AI suggested",
    "AI will remind"), or one of the verbs such notes use in the present ("AI recommends"). Any other -s word
    is more likely a plural ("AI tools are popular", "AI ethics …"), which names no one."""
    return (word in _AFTER_A_NAME or word in _IRREGULAR_PAST or word.endswith("ed")
            or word in _ASSISTANT_PRESENT_VERBS)


_ASSISTANT_PRESENT_VERBS = frozenset("""suggests recommends advises proposes reminds notes says thinks explains
drafts writes generates created creates prefers plans uses helps answers replies warns offers""".split())


def _finite(word: str) -> bool:
    """Whether a lower-case word can be the verb after a person's name: an auxiliary or adverb of
    `_AFTER_A_NAME`, a form ending in -s or -ed, or an irregular past form."""
    return word in _AFTER_A_NAME or word in _IRREGULAR_PAST or word.endswith(("s", "ed"))


_RELATED_TO_USER = re.compile(rf"\s*(?:[,，]\s*|\s+(?:is|was)\s+|是)(?:the\s+)?(?:current\s+)?(?:user's|users'|(?:当前)?用户的)\s*"
                              rf"(?:(?i:{_EN_RELATIONS})\b|{_ZH_RELATIONS})", re.IGNORECASE)


def related_to_user(text: str, subject: str) -> bool:
    """Whether the sentence says that its subject, a person it opens with, is the user's relative, friend or
    colleague ("Jack, the user's friend, is a chef.", "Li Na is the user's cousin.", "张伟是用户的同事。"): then
    it is about that person, not the user."""
    cleaned = _clean(text)
    return bool(subject) and cleaned.startswith(subject) and _RELATED_TO_USER.match(cleaned, len(subject)) is not None


def fact_subject(text: str, label: str | None) -> str | None:
    """Who a fact is about, for the cross-subject guard: its subject label, unless its sentence names another
    person by a relation ("The user's mother is a nurse.", "John's sister is a doctor.", "Jack, the user's
    friend, is a chef.", "Li Na is the user's cousin."), which no label makes the user or the AI. A sentence
    that opens with any other name keeps its label: "Stripe hired the user" is the user's fact."""
    named = subject_of(text)
    if named is not None and canonical_subject(named) not in ("user", "assistant") and (
            "'s " in named or "的" in named or related_to_user(text, named)):
        return named
    return label


def subject_of(text: str, participants: Iterable[str] = (), user_name: str | None = None) -> str | None:
    """The subject a memory sentence names: "user", "assistant", a person's name or relation
    ("Jack", "the user's mother", "用户的妈妈"), or None when it opens with none of these; the conversation's
    names (`participants`, the user's own `user_name`) first, as `split_subject` reads them."""
    return split_subject(text, participants, user_name)[0]


def memory_subject(text: str, owner: str | None) -> str:
    """The subject of a memory stored without one (a seed given without a subject, a mem0 memory): the
    assistant's for an agent memory (mem0: `attributed_to: assistant`, "Suggested chamomile tea"), else the
    subject the sentence names, else the user's ("Works at Stripe"). One rule, so a subjectless memory is
    filed the same way whichever engine stored it."""
    return "assistant" if owner == "agent" else (subject_of(text) or "user")


def names_subject(text: str, subject: str | None) -> bool:
    """Whether the sentence is about `subject`: it opens with it, or (for a named person) mentions it."""
    named = subject_of(text)
    if named is not None and same_subject(named, subject):
        return True
    cls = subject_class(subject)
    if cls != "named" or named in ("user", "assistant"):
        return False
    return canonical_subject(subject) in _fold(text)


__all__ = ["canonical_subject", "fact_subject", "memory_subject", "names_subject", "related_to_user", "same_subject", "split_subject", "subject_class",
           "subject_of"]
