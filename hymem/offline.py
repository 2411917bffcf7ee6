"""The offline reference model: a deterministic heuristic behind a DSPy engine.

Why: the harness needs a default provider with no network and no randomness that still *reads* what it
is sent, so it can serve as a baseline row on unseen conversations. It answers hymem's three signatures
(ExtractFacts, ExtractWorking, ReconcileFacts) in the reply format of DSPy's JSONAdapter (ChatAdapter's
too), telling the task apart by the input fields of the last user message; demos before it are ignored.

The rules are regular expressions over English and Chinese sentences. Chat: a human's first-person
statements are rewritten about their speaker ("I'm a nurse" -> "John is a nurse."), people they name
become their own subjects, the AI's advice becomes the assistant's (owner "agent"), and the profile is
read from the current user's own facts. Working: lessons said outright, plus episodes read off the
trajectory (a tool error, what the AI said and ran, a tool output reporting success); project facts and
rules the user sets. Reconcile: memories of the same subject only, compared by slot (location, employer,
occupation, age, likes, and the negation of a claim).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import dspy
from dspy import lm15

MODEL = "offline/reference"

# --------------------------------------------------------------------------- prompt in, reply out

_HEADER = re.compile(r"^\[\[ ## (\w+) ## \]\]\n?")
_JSON_TAIL = re.compile(r"\n*Respond with a JSON object in the following order of fields:[^\n]*\Z")
_CHAT_TAIL = re.compile(r"\n*Respond with the corresponding output fields, starting with the field[^\n]*\Z")
_EXISTING = re.compile(r"\n\[\[ ## existing ## \]\]\n?")


def _prompt_fields(text: str) -> tuple[dict[str, str], bool]:
    """The input fields of one adapter-formatted user message, and whether it asks for ChatAdapter's format."""
    chat = False
    if tail := _JSON_TAIL.search(text):
        text = text[: tail.start()]
    elif tail := _CHAT_TAIL.search(text):
        text, chat = text[: tail.start()], True
    head = _HEADER.match(text)
    if head is None:
        raise ValueError("offline model: the last user message has no [[ ## field ## ]] section")
    name, body = head.group(1), text[head.end() :]
    if name in ("conversation", "trajectory"):
        return {name: body.strip("\n")}, chat
    if name == "new_facts" and (split := _EXISTING.search(body)):
        return {"new_facts": body[: split.start()].strip(), "existing": body[split.end() :].strip()}, chat
    raise ValueError(f"offline model: unknown task (first input field {name!r})")


def _format_reply(values: dict[str, Any], chat: bool) -> str:
    if not chat:
        return json.dumps(values, ensure_ascii=False, indent=2)
    parts = [f"[[ ## {k} ## ]]\n{json.dumps(v, ensure_ascii=False)}" for k, v in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def answer(text: str) -> str:
    """The reply to one adapter-formatted user message (the whole model, minus the DSPy plumbing)."""
    fields, chat = _prompt_fields(text)
    if "conversation" in fields:
        values = _extract_chat(fields["conversation"])
    elif "trajectory" in fields:
        values = _extract_working(fields["trajectory"])
    else:
        values = _reconcile(fields["new_facts"], fields["existing"])
    return _format_reply(values, chat)


# --------------------------------------------------------------------------- the rendered conversation

_NAME_LINE = re.compile(r"^(?:The user's name is\s+(?P<en>.+?)\.?|用户名叫\s*(?P<zh>.+?)[。.]?)\s*$")
_LABEL_LINE = re.compile(r"^\[(?P<label>[^\[\]\n]{1,80})\]:[ \t]?(?P<text>.*)$")
_CONTEXT_LABELS = {"system", "tool", "developer", "function"}


@dataclass(frozen=True)
class _Speaker:
    """Who a first-person sentence is about, and how to name them in a fact."""

    subject: str  # "user", "assistant" or the person's name
    en: str  # "the user", "John"
    zh: str  # "用户", "John"
    en_poss: str  # "the user's", "John's"
    zh_poss: str  # "用户的", "John的"


def _person(name: str) -> _Speaker:
    return _Speaker(name, name, name, f"{name}'s", f"{name}的")


USER = _Speaker("user", "the user", "用户", "the user's", "用户的")
AI = _Speaker("assistant", "the assistant", "助手", "the assistant's", "助手的")


@dataclass(frozen=True)
class _Turn:
    speaker: _Speaker | None  # None for system/tool context
    text: str


def _parse_rendered(text: str) -> tuple[str | None, list[_Turn]]:
    """Name line and turns of a rendered conversation (hymem.render's format, parsed leniently here).

    Unlabelled lines continue the message above; a leading backslash escapes a content line.
    """
    text = text.replace("\u2019", "'")
    name: str | None = None
    turns: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := _NAME_LINE.match(line.rstrip()):  # content lines that look like this arrive escaped
            name = (m.group("en") or m.group("zh")).strip()
        elif m := _LABEL_LINE.match(line):
            turns.append((m.group("label").strip(), [m.group("text")]))
        elif turns:
            turns[-1][1].append(line[1:] if line.startswith("\\") else line)
    out = []
    for label, lines in turns:
        low = label.casefold()
        speaker = USER if low == "user" else AI if low == "assistant" else None
        if speaker is None and low not in _CONTEXT_LABELS:
            speaker = _person(label)
        out.append(_Turn(speaker, "\n".join(lines)))
    return name, out


_SENT_SPLIT = re.compile(r"(?<=[。！？；])|(?<=[.!?;])(?=\s)|\n")  # "user?.name" and "3.11" stay whole
_CJK = re.compile(r"[\u4e00-\u9fff]")


_BULLET = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


def _sentences(text: str) -> list[str]:
    """Sentences of a message; a list item's bullet is dropped."""
    return [_BULLET.sub("", s.strip()) for s in _SENT_SPLIT.split(text) if s and s.strip()]


def _finish(text: str, zh: bool = False) -> str:
    text = re.sub(r"\s+", " ", text).strip().rstrip(",;:，；： ")
    text = re.sub(r"[.!。！]+$", "", text)
    if zh:
        text = re.sub(r"(?<=[\u4e00-\u9fff，])\s+|\s+(?=[\u4e00-\u9fff，])", "", text)
        return text + "。"
    return text[:1].upper() + text[1:] + "."


# --------------------------------------------------------------------------- English statements

_EN_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey)(?: there)?|well|oh|ah|yes|yeah|yep|yup|no|nope|ok|okay|sure|so|and|but|also|actually|"
    r"anyway|btw|by the way|haha|lol|great|cool|nice|right|hmm+|um+|uh+|wow|honestly|basically|fun fact)"
    r"(?=[\s,!.:;]|$)[\s,!.:;-]*",
    re.I,
)
_GREETING = re.compile(r"^(?:hi|hello|hey)\b", re.I)
_CONDITIONAL = re.compile(r"^(?:if|when|whenever|unless|although|though|because|while|once|as|since you)\b", re.I)
_TEMPORAL = re.compile(r"^(?:in|on|since|last|this|next|every|during|after|before|until|for)\b", re.I)
_QUESTION_EN = re.compile(
    r"^(?:what|where|when|why|how|who|which|whose|whom|"
    r"(?:do|does|did|can|could|would|will|should|is|are|am|have|has)\s+(?:you|i|we|it|there|he|she|they)\b)",
    re.I,
)
_DROP_ADV = {"also", "too", "now", "just", "actually", "really", "currently", "recently", "definitely", "totally",
             "absolutely", "even", "already", "finally", "honestly", "literally", "basically", "truly"}
_KEEP_ADV = {"usually", "still", "often", "always", "never", "sometimes", "mostly", "generally", "mainly", "only",
             "rarely", "seldom", "occasionally", "normally", "typically"}
_SKIP_LEMMAS = {"think", "thought", "guess", "hope", "wonder", "wondered", "mean", "meant", "agree", "understand",
                "suppose", "believe", "bet", "reckon", "appreciate", "apologize", "apologise", "see", "saw", "wish",
                "promise", "feel", "felt", "try", "tried", "need", "needed", "wanna", "gotta", "forgot", "remember",
                "hear", "heard", "would", "could", "should", "might", "may", "must", "shall"}
_NEEDS_OBJECT = {"be", "have", "do", "can", "will", "know", "like", "want", "love", "enjoy", "prefer", "use"}
_MODALS = {"can": "can", "cannot": "cannot", "can't": "cannot", "cant": "cannot", "will": "will",
           "won't": "will not", "wont": "will not"}
_IRREGULAR_PAST = {"was", "were", "had", "did", "went", "got", "bought", "made", "met", "took", "gave", "found",
                   "left", "began", "became", "ate", "drank", "grew", "ran", "wrote", "built", "sold", "taught",
                   "told", "spent", "lost", "won", "came", "knew", "said", "kept", "brought", "sent", "paid", "flew",
                   "drove", "rode", "wore", "fell", "broke", "chose", "spoke", "swam", "sang", "woke", "caught",
                   "fought", "sat", "stood", "slept", "held", "quit", "been"}
_SMALL_TALK = {
    "be": r"(?:(?:so|very|pretty|really|quite|a bit|kind of|super)\s+)*(?:fine|good|great|well|ok|okay|alright|"
    r"glad|happy|sorry|not sure|sure|excited|looking|wondering|trying|asking|here|back|doing|curious|afraid|"
    r"thinking|feeling|tired|hungry|bored|sleepy|busy|confused|stuck|lost|"
    r"on it|in|done|ready|all set|getting|seeing|having|going to try)\b",
    "know": r"(?:$|that|what|how|why|where|when|who|if|whether|right|it|you|i|,)",
    "like": r"(?:it|that|this|these|those|your|the idea|to hear|how|what)\b",
    "will": r"(?:try|check|think|let|keep|give it|look|see|do that|do it|get back|take|go with|consider|remember|be)\b",
    "can": r"(?:not wait|wait|see|help|do that|try|imagine|tell|believe)\b",
    "have": r"(?:a question|questions|a quick question|no idea|to|been thinking|an idea|a problem|got to)\b",
    "want": r"(?:to know|to ask|you|some|help|to check|to see|a|an|the|it|that)\b",
}
_LEMMA_GROUP = {"love": "like", "like": "like", "enjoy": "like", "is": "be", "has": "have", "will": "will",
                "can": "can", "know": "know", "want": "want"}
_TAIL_EN = re.compile(r",\s+(?:so|but|because|although|though|which|since|as)\b")  # a side remark, not the fact
_PLACE_JOIN = {"of", "de", "del", "la", "upon", "am", "on", "and"}


def _s_form(verb: str) -> str:
    if verb == "have":
        return "has"
    if verb in ("be", "am", "are"):
        return "is"
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        return verb + "es"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    return verb + "s"


def _gerund(verb: str) -> str:
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")):
        return verb[:-1] + "ing"
    if re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", verb):  # one short syllable: get -> getting
        return verb + verb[-1] + "ing"
    return verb + "ing"


def _place(text: str) -> str | None:
    """The capitalised place name at the start of `text` ("New York", "the Bay Area"), if there is one."""
    words, out = text.split(), []
    if len(words) > 1 and words[0].lower() == "the" and words[1][:1].isupper():
        out.append("the")
        words = words[1:]
    for i, word in enumerate(words):
        core = word.rstrip(",.;:!")
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if core[:1].isupper() or (core in _PLACE_JOIN and nxt[:1].isupper() and core != "and"):
            out.append(core)
        else:
            break
        if core != word:
            break
    return " ".join(out) if out and out != ["the"] else None


def _en_pronouns(text: str, who: _Speaker, listener: _Speaker | None = None) -> str:
    """Rewrite the speaker's own pronouns inside a clause ("my", "me", a second "I") about `who`.

    "you"/"your" name the `listener` when one is known (the one the speaker answers).
    """
    if listener is not None:
        text = re.sub(r"\byour\b", listener.en_poss, re.sub(r"\byou\b", listener.en, text, flags=re.I), flags=re.I)
    text = re.sub(r"\bI'm\b|\bI am\b", "they are", text)
    text = re.sub(r"\bI was\b", "they were", text)
    subs = ((r"\bI've\b", "they have"), (r"\bI'll\b", "they will"), (r"\bI'd\b", "they would"), (r"\bI\b", "they"),
            (r"\b[Mm]y\b", who.en_poss), (r"\b[Mm]ine\b", who.en_poss), (r"\bmyself\b", "themselves"),
            (r"\bme\b", who.en))
    for pattern, repl in subs:
        text = re.sub(pattern, repl, text)
    return text


_CONTRACTIONS = ((r"\bdoesn't\b", "does not"), (r"\bisn't\b", "is not"), (r"\baren't\b", "are not"),
                 (r"\bcan't\b", "cannot"), (r"\bwon't\b", "will not"), (r"\bdidn't\b", "did not"),
                 (r"\bhasn't\b", "has not"), (r"\bwasn't\b", "was not"))


def _drop_fillers(text: str) -> str:
    """Trailing "too"/"also"/"now" dropped and "doesn't" spelled out, so restatements compare equal."""
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    text = re.sub(r"(?:,\s*)?\s\b(?:too|as well|right now|now|also)\s*$", "", text.rstrip(".!"))
    return re.sub(r"\s+also\b", "", text)


def _en_clause(clause: str, who: _Speaker, greeted: bool = False, listener: _Speaker | None = None) -> str | None:
    """An "I ..." clause rewritten about `who` ("I'm a nurse" -> "John is a nurse."); None for small talk."""
    m = re.match(r"^I(?:'(?P<c>m|ve|ll|d)\b)?\s+(?P<rest>.+)$", clause.rstrip(".!;"))
    if m is None:
        return None
    words = m.group("rest").split()
    if c := m.group("c"):
        words = [{"m": "am", "ve": "have", "ll": "will", "d": "would"}[c], *words]
    adverbs = []
    while words and (words[0].lower().strip(",") in _DROP_ADV | _KEEP_ADV or [w.lower() for w in words[:2]] == [
            "no", "longer"]):
        if words[0].lower() == "no":
            adverbs.append("no longer")
            words = words[2:]
        elif (word := words.pop(0).lower().strip(",")) in _KEEP_ADV:
            adverbs.append(word)
    if not words or not re.fullmatch(r"[A-Za-z']+", words[0]):
        return None
    verb, tail = words[0].lower(), words[1:]
    nxt = tail[0].lower() if tail else ""
    if verb in ("moved", "relocated") or (verb in ("have", "had") and nxt in ("moved", "relocated")):
        after = " ".join(tail[1:] if verb in ("have", "had") else tail)
        if (to := re.match(r"^(?:back\s+)?(?:here\s+)?to\s+(.+)$", after)) and (place := _place(to.group(1))):
            return _finish(f"{who.en} lives in {place}")
    if verb in ("might", "may") and re.fullmatch(r"[a-z]+", nxt) and nxt not in ("be", "have", "not", "also", "as"):
        head, lemma, tail = "is considering", "consider", [_gerund(nxt), *tail[1:]]  # "I might move" -> "moving"
    else:
        head, lemma = _en_head(verb, tail)
    if head is None:
        return None
    if (head.endswith(" not") and nxt == "not") or (verb == "have" and nxt == "got"):
        tail = tail[1:]
    obj = tail
    if head.startswith(("does", "did")) and tail:
        lemma, obj = tail[0].lower(), tail[1:]
    if lemma in _SKIP_LEMMAS or (not obj and lemma in _NEEDS_OBJECT):
        return None
    group = _LEMMA_GROUP.get(lemma, lemma)
    if group in _SMALL_TALK and re.match(_SMALL_TALK[group], " ".join(obj).lower()):
        return None
    if group == "will" and len(tail) < 3:
        return None
    rest = _TAIL_EN.split(" ".join(tail))[0]
    if (anymore := re.search(r"\s+any ?more$", rest)) and head in ("does not", "is not") and rest[: anymore.start()]:
        rest = rest[: anymore.start()]  # "does not have a dog anymore" -> "no longer has a dog"
        if head == "does not":
            first, _, more = rest.partition(" ")
            head, rest = "no longer", f"{_s_form(first.lower())} {more}"
        else:
            head = "is no longer"
    if greeted and head == "is" and re.fullmatch(r"[A-Z][a-z]+", rest) and not _is_job_en(rest):
        return _finish(f"{who.en_poss} name is {rest}")
    rest = _drop_fillers(_en_pronouns(rest, who, listener))
    return _finish(" ".join([who.en, *adverbs, head, rest]))


def _en_head(verb: str, tail: list[str]) -> tuple[str | None, str]:
    """Third-person form of the first verb and the lemma used to spot small talk; (None, _) to skip."""
    neg = bool(tail) and tail[0].lower() == "not"
    if verb in ("am", "'m"):
        return ("is not" if neg else "is"), "be"
    if verb in ("was", "were"):
        return ("was not" if neg else "was"), "be"
    if verb in ("wasn't", "weren't"):
        return "was not", "be"
    if verb == "have":
        return ("has not" if neg else "has"), "have"
    if verb in ("haven't", "havent"):
        return "has not", "have"
    if verb in ("don't", "dont") or (verb == "do" and neg):
        return "does not", "do"
    if verb == "do":
        return "does", "do"
    if verb in ("didn't", "didnt") or (verb == "did" and neg):
        return "did not", "do"
    if verb in _MODALS:
        return _MODALS[verb], ("can" if verb.startswith("can") else "will")
    if verb in _SKIP_LEMMAS or verb.endswith("n't"):
        return None, verb
    if verb.endswith("ed") or verb in _IRREGULAR_PAST:
        return verb, verb
    return _s_form(verb), verb


_REL_EN = (r"(?:(?:best|old|older|younger|little|big|twin|close|good|new|step-?)\s+)?(?:friend|sister|brother|mom|mum|"
           r"mother|dad|father|wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|son|daughter|boss|colleague|"
           r"coworker|co-worker|cousin|uncle|aunt|neighbou?r|roommate|flatmate|manager|grandma|grandmother|grandpa|"
           r"grandfather|niece|nephew|kid|child|classmate|teammate|mentor)")
_THIRD_EN = re.compile(rf"^[Mm]y\s+(?P<rel>{_REL_EN}),?\s+(?P<name>[A-Z][\w'-]*),?\s+(?P<rest>[a-z].*)$")
_MOVE_EN = re.compile(r"^(?:has\s+|had\s+)?(?:just\s+|recently\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<p>.+)$")
_MY_SKIP = re.compile(r"^[Mm]y\s+(?:pleasure|bad|question|apologies|goodness|god|gosh|thoughts|turn|point)\b")
_COMPOUND_EN = re.compile(r"^(?!I\b)(?:[Mm]y\s+)?[\w'-]+(?:\s+[\w'-]+)?\s+and\s+(?:I|me)\b|^(?:I|[Mm]e)\s+and\s+\w")
_CLAUSE_SPLIT = re.compile(r"(?:,?\s+(?:and|but|so)\s+|;\s*)(?=I\b|my\b)")


def _en_statement(sentence: str, who: _Speaker, listener: _Speaker | None = None) -> list[tuple[str, str]]:
    """Facts (text, subject) in one English sentence spoken by the human `who`."""
    s = sentence.strip().replace("\u2019", "'")
    if s.endswith("?") or _QUESTION_EN.match(s):
        return []
    greeted = bool(_GREETING.match(s))
    while (m := _EN_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    if not re.match(r"^(?:I|[Mm]y)\b", s):
        pre = re.match(r"^(?P<pre>[^,]{1,40}),\s+(?P<rest>(?:I|[Mm]y)\b.*)$", s)
        if pre is None or _CONDITIONAL.match(pre.group("pre")):
            return []
        s = pre.group("rest")
        if _TEMPORAL.match(pre.group("pre")):
            s = s.rstrip(".!") + " " + pre.group("pre")[:1].lower() + pre.group("pre")[1:]
    if _COMPOUND_EN.search(s):
        return []
    return [fact for clause in _CLAUSE_SPLIT.split(s) if (fact := _en_part(clause.strip(), who, greeted, listener))]


def _third_rest(rest: str, who: _Speaker, listener: _Speaker | None = None) -> str:
    """What is said about a third person ("moved to Lisbon" -> "lives in Lisbon"), the speaker's words named."""
    if move := _MOVE_EN.match(rest):
        rest = f"lives in {_place(move.group('p')) or move.group('p')}"
    return _drop_fillers(_en_pronouns(_TAIL_EN.split(rest)[0], who, listener))


def _en_part(clause: str, who: _Speaker, greeted: bool, listener: _Speaker | None) -> tuple[str, str] | None:
    """One clause: "my friend Jack is ..." (about Jack), "my X ..." or "I ..." (about the speaker)."""
    if third := _THIRD_EN.match(clause):
        rest = _third_rest(third.group("rest"), who, listener)
        return _finish(f"{third.group('name')}, {who.en_poss} {third.group('rel')}, {rest}"), third.group("name")
    if clause[:2].lower() == "my":
        if _MY_SKIP.match(clause) or len(clause.split()) < 3:
            return None
        rest = _TAIL_EN.split(clause[3:])[0]
        return _finish(who.en_poss + " " + _drop_fillers(_en_pronouns(rest, who, listener))), who.subject
    text = _en_clause(clause, who, greeted, listener)
    return (text, who.subject) if text else None


# --------------------------------------------------------------------------- English suggestions of the AI

_AI_LEAD = re.compile(
    r"^(?:great question|good question|sure|okay|ok|great|good|alright|of course|certainly|absolutely|also|"
    r"alternatively|additionally|finally|first|firstly|second|secondly|then|next|otherwise|so|in that case|if so|"
    r"for example|for instance|maybe|perhaps|please|honestly|personally|i see|got it|noted|understood|yes|no)"
    r"(?=[\s,!.:;]|$)[\s,!.:;-]*",
    re.I,
)
_AI_SUGGEST = re.compile(r"^I(?:'d| would)?\s+(?:(?:strongly|highly|really|also|personally)\s+)?"
                         r"(?P<v>suggest|recommend|advise)(?:s|ed)?\s+(?:that\s+)?(?P<x>.+)$", re.I)
_AI_YOU = re.compile(r"^you\s+(?:(?:should|could|might|may|can|must|ought to)\s+(?:(?:also|probably|definitely|"
                     r"still|really|just)\s+)?(?:want\s+to\s+)?|need\s+to\s+)(?P<x>.+)$", re.I)
_AI_IMPERATIVE = re.compile(
    r"^(?P<x>(?:try|use|consider|check|run|install|add|set|make sure|restart|update|upgrade|avoid|keep|start|switch|"
    r"remove|pin|enable|disable|increase|reduce|replace|visit|drink|eat|take|book|bring|wear|call|go with|look into|"
    r"stick with|limit|practice|schedule|aim for|downgrade|delete|rename|clear|reinstall|configure|split|store|"
    r"cache|ask|talk to|plan|pack|buy)\b.+)$", re.I)
_AI_HERE = re.compile(r"^here(?:'s| is| are)\s+(?P<x>[^:]+)", re.I)
_AI_FIX = re.compile(r"^(?P<np>(?:the|a|one|my|a good|the best|the simplest|the easiest)\s+(?:\w+\s+)?(?:fix|solution|"
                     r"answer|option|approach|workaround|way|recommendation|suggestion|choice|bet))\s+"
                     r"(?:is|would be|was)\s+(?P<x>.+)$", re.I)
_AI_DECIDE = re.compile(r"^I(?:'ve| have)?\s+(?P<v>decided|chose|chosen|opted|went with|will use|'ll use|"
                        r"am going to use|'m going to use)\s+(?P<x>.+)$", re.I)
_AI_NOT_ADVICE = re.compile(r"^(?:do it|do this|do that|let me know|ask me|reach out|find|see|be|take care|"
                            r"keep (?:it up|in touch)|have (?:a|fun)|enjoy)\b", re.I)
_PAST = {"suggest": "suggested", "recommend": "recommended", "advise": "advised"}


def _ai_pronouns_en(text: str, who: _Speaker = AI) -> str:
    subs = ((r"\byou're\b|\byou are\b", "the user is"), (r"\byours?elf\b", "themselves"), (r"\byours\b", "the user's"),
            (r"\byour\b", "the user's"), (r"\byou\b", "the user"), (r"\bI'm\b|\bI am\b", f"{who.en} is"),
            (r"\bI\b", who.en), (r"\bmy\b", who.en_poss), (r"\bme\b", who.en))
    for pattern, repl in subs:
        text = re.sub(pattern, repl, text, flags=re.I)
    return text


def _en_suggestion(sentence: str, who: _Speaker = AI) -> str | None:
    """ "I suggest X" / "You should X" / "Try X" / "Here is X" / "The fix is X" -> "The assistant suggested ...".

    A named human's advice ("You should try yoga.") is theirs: "John suggested that the user try yoga."
    """
    s = sentence.strip().replace("\u2019", "'")
    if s.endswith("?"):
        return None
    while (m := _AI_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    s = s.rstrip(".!")
    if m := _AI_SUGGEST.match(s):
        verb, x = _PAST[m.group("v").lower()], m.group("x")
        if x.lower().startswith("you "):
            return _finish(f"{who.en} {verb} that the user {_ai_pronouns_en(x[4:], who)}")
        return _finish(f"{who.en} {verb} {_ai_pronouns_en(x, who)}")
    if (m := _AI_YOU.match(s)) and len(m.group("x").split()) >= 2 and not _AI_NOT_ADVICE.match(m.group("x")):
        return _finish(f"{who.en} suggested that the user {_ai_pronouns_en(m.group('x'), who)}")
    if (m := _AI_IMPERATIVE.match(s)) and len(s.split()) >= 2 and not _AI_NOT_ADVICE.match(s):
        x = m.group("x")
        return _finish(f"{who.en} suggested that the user {x[:1].lower()}{_ai_pronouns_en(x[1:], who)}")
    if who is not AI:
        return None
    if m := _AI_HERE.match(s):
        return _finish(f"the assistant provided {_ai_pronouns_en(m.group('x'))}")
    if m := _AI_FIX.match(s):
        np = re.sub(r"^my\b", "the", m.group("np"), flags=re.I).lower()
        return _finish(f"the assistant suggested that {np} is {_ai_pronouns_en(m.group('x'))}")
    if m := _AI_DECIDE.match(s):
        verb, x = m.group("v").lower(), _ai_pronouns_en(m.group("x"))
        if "use" in verb:
            return _finish(f"the assistant decided to use {x}")
        return _finish(f"the assistant {'chose' if verb in ('chosen', 'went with') else verb} {x}")
    return None


# --------------------------------------------------------------------------- Chinese statements and suggestions

_ZH_LEAD = re.compile(r"^(?:你好|您好|嗨|哈喽|哈啰|hi|hello|hey|嗯+|哦|噢|啊|对|是的|好的|好吧|其实|另外|还有|对了|"
                      r"顺便说一下|顺便说|然后|所以|不过|但是|而且|那个)[\s，,！!。~～]*", re.I)
_ZH_GREETING = re.compile(r"^(?:你好|您好|嗨|哈喽|哈啰|hi|hello|hey)", re.I)
_ZH_QUESTION = re.compile(r"[？?]$|[吗呢么][。！!]?$|什么|怎么|为什么|哪里|哪儿|哪个|多少|几点|是不是|有没有|能不能|"
                          r"可不可以|要不要|请问")
_ZH_SKIP_I = re.compile(r"^我(?:觉得|认为|想知道|想问|想请教|不知道|不太清楚|不确定|知道了|明白|懂了|同意|"
                        r"希望|猜|也这么|也是这么|很好|挺好|还好|没事|试试|会试试|去试试|看看|需要|请问|马上|先|再|"
                        r"有个问题|有一个问题|有点|正在找|在找|想找|记得|忘了|刚才|会的|可以|来了|来看|很高兴|很开心|"
                        r"太好|感觉)")
_REL_ZH = ("好朋友|男朋友|女朋友|朋友|老婆|妻子|太太|老公|丈夫|姐姐|妹妹|哥哥|弟弟|妈妈|母亲|爸爸|父亲|儿子|"
           "女儿|同事|老板|室友|邻居|表哥|表姐|表弟|表妹|堂哥|堂姐|堂弟|堂妹|爷爷|奶奶|外公|外婆|叔叔|阿姨|"
           "舅舅|领导|同学|上司|经理|闺蜜|发小")
_VERB_ZH = "是|在|住|喜欢|爱|有|会|今年|也|很|刚|已经|正在|要|想|就|不|每|搬|养|开|做|当|学|从|叫|和|跟|去|来|能|还"
_THIRD_ZH = re.compile(rf"^我的?(?P<rel>{_REL_ZH})(?P<name>(?!(?:{_VERB_ZH}))(?:[A-Za-z][A-Za-z'-]*|"
                       rf"[\u4e00-\u9fff]{{1,3}}?))\s*(?P<rest>(?:{_VERB_ZH}).+)$")
_MOVE_ZH = re.compile(r"^(?P<t>[^，,]{0,8}?)搬(?:家)?(?:到|去|来)了?(?P<p>[^，,的了啦呢]+)[了啦呢]?")
_ZH_FILLER = re.compile(r"^(?:也|现在|目前|如今)+|^(?:很|非常|特别|真的|超级?)(?=喜欢|爱)")


def _zh_pronouns(text: str, who: _Speaker) -> str:
    return re.sub(r"我(?!们)", who.zh, text.replace("我的", who.zh_poss))


def _zh_rest(rest: str, who: _Speaker, listener: _Speaker | None = None) -> str:
    """The predicate after the subject: fillers dropped, a move turned into where they live, "不…了" into "不再…"."""
    rest = re.split(r"[，,](?:但是|但|不过|所以|因为|可是)", _ZH_FILLER.sub("", rest))[0]
    rest = re.sub(r"^(?:已经)?不(?!再)(.+?)了$", r"不再\1", rest)
    if move := _MOVE_ZH.match(rest):
        rest = f"住在{move.group('p')}{rest[move.end():]}"
    if listener is not None:
        rest = re.sub(r"[你您]", listener.zh, rest.replace("你的", listener.zh_poss).replace("您的", listener.zh_poss))
    return _zh_pronouns(rest, who)


def _zh_statement(sentence: str, who: _Speaker, listener: _Speaker | None = None) -> list[tuple[str, str]]:
    """Facts (text, subject) in one Chinese sentence spoken by the human `who`."""
    s = sentence.strip()
    if _ZH_QUESTION.search(s):
        return []
    greeted = bool(_ZH_GREETING.match(s))
    while (m := _ZH_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    s = s.rstrip("。！!；;，, ")
    if "，我" in s or ",我" in s:
        parts = re.split(r"[，,](?=我(?!们))", s)
        return [fact for part in parts for fact in _zh_statement(part, who, listener)]
    if re.match(r"^我(?:和|跟|与)", s) or not re.match(r"^我(?!们)", s) or _ZH_SKIP_I.match(s):
        return []
    if third := _THIRD_ZH.match(s):
        rest = third.group("rest")
        if rest[:1] in ("和", "跟"):
            return []
        name = third.group("name")
        return [(_finish(f"{name}是{who.zh_poss}{third.group('rel')}，{_zh_rest(rest, who, listener)}", zh=True), name)]
    rest = _zh_rest(s[1:], who, listener)
    if len(rest) < 2:
        return []
    if greeted and (m := re.fullmatch(r"是(?:[A-Za-z][\w-]*|[\u4e00-\u9fff]{2,3})", rest)) and not _is_job_zh(rest[1:]):
        return [(_finish(f"{who.zh}叫{rest[1:]}", zh=True), who.subject)]
    return [(_finish(who.zh + rest, zh=True), who.subject)]


_ZH_AI_LEAD = re.compile(r"^(?:好的|当然|嗯|没问题|另外|此外|首先|其次|然后|最后|或者|如果是这样|那么|所以|"
                         r"也许|或许|请)[\s，,！!。:：]*")
_YOU_ZH = r"(?P<you>你们|您们|大家|你|您)"
_ZH_AI = (
    re.compile(rf"^(?:我)?(?:强烈|还是)?(?:建议|推荐){_YOU_ZH}?(?P<x>.+)$"),
    re.compile(rf"^{_YOU_ZH}(?:可以|应该|不妨|最好|需要|得|要)(?P<x>.+)$"),
    re.compile(r"^(?:可以|不妨)(?P<x>(?:试试|尝试).+)$"),
    re.compile(r"^(?P<x>(?:试试|尝试|记得|别忘了|避免|安装|运行|检查|重启|升级|更新|使用).+)$"),
)
_ZH_AI_FIX = re.compile(r"^(?P<np>解决办法|解决方法|解决方案|办法|方案|修复方法)是(?P<x>.+)$")


def _zh_suggestion(sentence: str, who: _Speaker = AI) -> str | None:
    """ "建议你…" / "你可以…" / "试试…" / "解决办法是…" from the AI -> "助手建议…" (a named human's: "王芳建议…")."""
    s = sentence.strip()
    if _ZH_QUESTION.search(s):
        return None
    while (m := _ZH_AI_LEAD.match(s)) and m.end() > 0:
        s = s[m.end() :]
    s = s.rstrip("。！!；;，, ")

    def swap(x: str) -> str:
        return re.sub(r"我(?!们)", who.zh, re.sub(r"[你您]", "用户", re.sub(r"[你您]们", "大家", x)))

    if (m := _ZH_AI_FIX.match(s)) and who is AI:
        return _finish(f"助手建议的{m.group('np')}是{swap(m.group('x'))}", zh=True)
    for number, pattern in enumerate(_ZH_AI):
        if (m := pattern.match(s)) and len(m.group("x")) >= 2:
            you = m.groupdict().get("you") or ("" if number == 0 else "你")
            target = "大家" if you.endswith(("们", "家")) else "用户" if you else ""
            return _finish(f"{who.zh}建议{target}{swap(m.group('x'))}", zh=True)
    return None


# --------------------------------------------------------------------------- occupations

_JOBS_EN = {
    "nurse", "doctor", "engineer", "developer", "programmer", "teacher", "professor", "student", "chef", "cook",
    "lawyer", "accountant", "designer", "architect", "scientist", "researcher", "writer", "journalist", "artist",
    "musician", "pilot", "driver", "manager", "consultant", "analyst", "dentist", "pharmacist", "therapist",
    "electrician", "plumber", "carpenter", "mechanic", "farmer", "baker", "barista", "waiter", "waitress", "cashier",
    "firefighter", "officer", "soldier", "photographer", "editor", "translator", "librarian", "veterinarian", "vet",
    "surgeon", "physician", "paramedic", "economist", "entrepreneur", "founder", "ceo", "cto", "intern",
    "freelancer", "tutor", "coach", "actor", "actress", "dancer", "singer", "painter", "banker", "trader", "realtor",
    "secretary", "receptionist", "clerk", "janitor", "tailor", "hairdresser", "nanny", "caregiver", "psychologist",
    "lecturer", "administrator", "admin", "technician", "salesperson", "marketer", "recruiter", "producer",
    "director", "executive", "investor", "retiree", "housewife", "homemaker", "dietitian", "nutritionist",
    "midwife", "cop", "guard", "author", "poet", "playwright", "novelist", "screenwriter", "lifeguard", "police",
    "sysadmin", "devops", "postdoc", "phd",
}
_JOB_ENDINGS = ("writer", "maker", "wright", "worker", "keeper", "designer", "engineer", "manager", "developer",
                "teacher", "smith", "ist", "eer", "ician", "grapher", "ologist")
_NOT_JOBS = {"list", "twist", "fist", "wrist", "mist", "gist", "exist", "assist", "insist", "resist", "persist",
             "beer", "deer", "peer", "cheer", "career", "steer", "sheer", "queer", "veneer"}
_JOBS_ZH = ("师", "员", "医生", "学生", "研究生", "博士生", "家", "工", "手", "者", "长", "官", "警察", "士",
            "匠", "会计", "记者", "老板", "经理", "主管", "总监", "模特", "秘书", "军人", "商人", "工人", "农民",
            "司机", "教授", "保姆", "编剧", "导演", "主播", "翻译", "编辑", "保安", "律师")


def _is_job_en(phrase: str) -> bool:
    words = phrase.lower().split()
    if not words or len(words) > 4:
        return False
    head = words[-1]
    return head in _JOBS_EN or (head not in _NOT_JOBS and head.endswith(_JOB_ENDINGS))


def _is_job_zh(phrase: str) -> bool:
    return 0 < len(phrase) <= 10 and phrase.endswith(_JOBS_ZH)


# --------------------------------------------------------------------------- extraction

def _dedupe(facts: list[dict[str, str]]) -> list[dict[str, str]]:
    seen, out = set(), []
    for fact in facts:
        key = (fact["subject"].casefold(), _norm(fact["text"]))
        if key not in seen:
            seen.add(key)
            out.append(fact)
    return out


def _fact(text: str, subject: str, owner: str) -> dict[str, str]:
    return {"text": text, "subject": subject, "owner": owner}


def _extract_chat(conversation: str) -> dict[str, Any]:
    """ExtractFacts: facts of every human speaker and the AI's suggestions; a profile of the current user only."""
    name, turns = _parse_rendered(conversation)
    facts: list[dict[str, str]] = []
    previous: _Speaker = AI
    for turn in turns:
        who = turn.speaker
        if who is None:
            continue
        listener = previous if previous != who else (AI if who is USER else USER)  # whom "you" means
        mentioned: tuple[str, str, str] | None = None  # whom "she"/"he" means, within one message
        for sentence in _sentences(turn.text):
            zh = bool(_CJK.search(sentence))
            if who is AI:
                if text := _zh_suggestion(sentence) if zh else _en_suggestion(sentence):
                    facts.append(_fact(text, "assistant", "agent"))
                continue
            found = _pronoun_statement(sentence, who, mentioned, zh) or (
                _zh_statement(sentence, who, listener) if zh else _en_statement(sentence, who, listener))
            if not found and who is not USER and (advice := _zh_suggestion(sentence, who) if zh else
                                                  _en_suggestion(sentence, who)):
                found = [(advice, who.subject)]
            facts.extend(_fact(text, subject, "user") for text, subject in found)
            mentioned = next((_mention(text, subject) for text, subject in found if subject != who.subject), mentioned)
        previous = who
    facts = _dedupe(facts)
    user_facts = [f["text"] for f in facts if f["subject"] == "user"]
    return {"facts": facts, "profile": _profile(name, user_facts)}


_PRONOUN_EN = re.compile(r"^(?:She|He)\s+(?P<rest>[a-z].*)$")
_PRONOUN_ZH = re.compile(r"^(?:她|他)(?!们)(?P<rest>.+)$")


def _mention(text: str, subject: str) -> tuple[str, str, str]:
    """(subject, English lead, Chinese lead) for "she"/"he" after a fact about `subject`.

    The lead keeps how the person was introduced: "Ana, the user's sister," / "小丽是用户的姐姐，".
    """
    en = re.match(rf"^{re.escape(subject)}, [^,]+,", text)
    zh = re.match(rf"^{re.escape(subject)}是[^，,。]+[，,]", text)
    return subject, en.group(0) if en else subject, zh.group(0) if zh else subject


def _pronoun_statement(sentence: str, who: _Speaker, mentioned: tuple[str, str, str] | None,
                       zh: bool) -> list[tuple[str, str]]:
    """ "My sister Ana lives in Rome. She is a lawyer." -> "Ana, the user's sister, is a lawyer."."""
    s = sentence.strip()
    if mentioned is None or (_ZH_QUESTION.search(s) if zh else s.endswith("?")):
        return []
    subject, lead_en, lead_zh = mentioned
    if zh and (m := _PRONOUN_ZH.match(s.rstrip("。！!"))):
        return [(_finish(lead_zh + _zh_rest(m.group("rest"), who), zh=True), subject)]
    if not zh and (m := _PRONOUN_EN.match(s)):
        return [(_finish(f"{lead_en} {_third_rest(m.group('rest'), who)}"), subject)]
    return []


_NAME_FACT = re.compile(r"^(?:The user's name is\s+(?P<en>[^,.;]+)|用户(?:叫|的名字是|的名字叫)(?P<zh>[^，,。；;]+))")


def _profile(name_line: str | None, user_facts: list[str]) -> dict[str, str | None]:
    """L0 profile from the name line and the current user's own facts; later statements win."""
    profile: dict[str, str | None] = dict.fromkeys(("name", "age", "gender", "occupation", "location"))
    said_name = origin = None
    for text in user_facts:
        if m := _NAME_FACT.match(text):
            said_name = (m.group("en") or m.group("zh")).strip()
        for kind, value in _slots(text, "user"):
            if kind in ("location", "occupation", "age"):
                profile[kind] = value
            elif kind == "origin":
                origin = value
    profile["location"] = profile["location"] or origin
    profile["name"] = name_line or said_name
    return profile


_LESSON_EN = re.compile(
    r"\b(?:the (?:fix|solution|workaround|root cause|cause|problem|issue|trick|culprit|reason|key) (?:was|is)|"
    r"fixed (?:it |this |that )?by|failed because|fails because|failing because|turned out|turns out|next time|"
    r"lesson(?: learned)?:|lesson learned|solved (?:it |this |that )?by|resolved (?:it |this |that )?by|"
    r"caused by|remember to|make sure to|(?:always|never) \w+ before|works once|worked once|worked after)",
    re.I,
)
_LESSON_ZH = re.compile(r"原因是|解决办法是|解决方法是|解决方案是|下次|教训|问题在于|根本原因|修复方法|原来是|经验是|"
                        r"记得先|应该先|通过.{1,30}解决")
_PROBLEM = re.compile(r"error|exception|traceback|\b(?:failed|failing|fails|failure|broken|crash(?:es|ed)?|"
                      r"rejected|not found|denied|timeout|timed out|(?-i:[A-Z]{1,4}\d{3,5}))\b|"
                      r"报错|错误|失败|异常|崩溃|超时", re.I)  # (?-i:...): "E501" is a code, "sha256" is not
_NO_PROBLEM = re.compile(r"\b(?:no|0|zero|without) (?:errors?|failures?|issues?|problems?)\b", re.I)
_SUCCESS = re.compile(r"\b(?:passed|passes|success|successful|successfully|compiled|no errors?|ok|running at|"
                      r"up to date|works now|resolved)\b|通过|成功|已修复", re.I)
_CALL = re.compile(r"^called\s+(?P<name>[\w.-]+)\((?P<args>.*)\)\s*$")
_TOOL_NAME = re.compile(r"^\([^()\n]{1,64}\) ")
_WORK_LEAD = re.compile(r"^(?:so|ok|okay|ah|aha|right|great|good|alright|finally|anyway|note|好的|所以|原来如此|嗯)"
                        r"(?=[\s,!.:;，！：]|$)[\s,!.:;，！：-]*", re.I)
_PROJ_EN = (r"project|repo|repository|codebase|code|app|application|service|services|team|company|stack|ci|pipeline|"
            r"server|servers|database|db|api|build|backend|frontend|product|tests|test suite|cluster|infra|"
            r"infrastructure|deployment|deployments|website|site|library|package|monorepo")
_WORK_POSS_EN = re.compile(rf"^(?:[Mm]y|[Oo]ur)\s+(?:[\w.-]+\s+){{0,2}}?(?:{_PROJ_EN})\b\s+\S", re.I)
_WORK_VERB_EN = re.compile(r"^(?P<s>[Ww]e|I)\s+(?:(?:always|usually|never|only|all|currently|still|mostly)\s+)*"
                           r"(?:use|deploy|run|ship|prefer|host|target|support|require|release|write|follow|store|"
                           r"build|test|develop|maintain|code|work|don't|do not|never)\b")
_WORK_ZH = re.compile(r"^(?:我的|我们的)(?:项目|仓库|代码库|代码|应用|服务|团队|公司|系统|数据库|后端|前端|网站|产品)|"
                      r"^我们(?!的).*(?:用|使用|部署|发布|采用|要求|遵循|规定|运行|托管|测试)|"
                      r"^我(?:一直|通常|总是|只)?(?:用|使用|偏好|习惯用|更喜欢)")


def _person_text(text: str, who: _Speaker, listener: _Speaker, zh: bool) -> str:
    """A lesson's first and second person named ("I fixed it" -> "The assistant fixed it")."""
    if zh:
        text = text.replace("我的", who.zh_poss).replace("你的", listener.zh_poss)
        return re.sub(r"[你您]", listener.zh, re.sub(r"我(?!们)", who.zh, text))
    subs = ((r"\bI'm\b|\bI am\b", f"{who.en} is"), (r"\bI've\b|\bI have\b", f"{who.en} has"),
            (r"\bI'll\b", f"{who.en} will"), (r"\bI'd\b", f"{who.en} would"), (r"\bI\b", who.en),
            (r"\b[Mm]y\b", who.en_poss), (r"\bme\b", who.en), (r"\byou're\b|\byou are\b", f"{listener.en} is"),
            (r"\byour\b", listener.en_poss), (r"\byou\b", listener.en))
    for pattern, repl in subs:
        text = re.sub(pattern, repl, text, flags=re.I if "you" in pattern else 0)
    return text


def _is_problem(line: str) -> bool:
    return bool(_PROBLEM.search(line)) and not _NO_PROBLEM.search(line)


_TECH_NOUN = re.compile(r"\b[Mm]y\s+(?P<tech>[A-Z][\w.+#-]*(?:\s+[A-Z][\w.+#-]*)?)\s+(?P<noun>project|app|application|"
                        r"service|repo|repository|codebase|site|website|api|backend|frontend|server|library|package|bot)\b")
_MY_NOUN = re.compile(rf"\b(?:my|our)\s+(?:[\w.+#-]+\s+)?(?P<noun>{_PROJ_EN})\b", re.I)
_RULE_EN = re.compile(r"^(?:please\s+)?(?P<adv>never|don't|do not|always|avoid)\s+(?!forget|worry|hesitate|mind)"
                      r"(?P<x>.+)$", re.I)
_USES = re.compile(r"^(?P<head>.+?\b(?:uses|targets|requires|supports|runs on|is written in|is built with))\s+"
                   r"(?P<objs>.+?)\.?$")
_TECH_NOUN_ZH = re.compile(r"我的(?P<tech>[A-Za-z][\w.+#-]*)\s*(?P<noun>项目|应用|服务|仓库|网站)")
_RULE_ZH = re.compile(r"^(?:请)?(?P<adv>不要|别|永远不要|绝不要|千万不要|总是|一定要)(?P<x>.{2,})$")
_WORK_SPLIT = re.compile(r"(?:,?\s+(?:and|but|so)\s+|;\s*)(?=(?:I|we|my|our)\b)|,\s+so\s+", re.I)


def _split_objects(text: str) -> list[str]:
    """ "The user's project uses Python 3.11 and pytest." -> one fact per short object."""
    m = _USES.match(text)
    objects = re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group("objs")) if m else []
    if len(objects) < 2 or any(not o or len(o.split()) > 4 for o in objects):
        return [text]
    return [_finish(f"{m.group('head')} {o}") for o in objects]


def _working_facts(sentence: str, who: _Speaker, memo: dict[str, str]) -> list[str]:
    """Durable facts a human states about themselves or their project, and the rules they set for the AI.

    `memo` remembers the last project noun the speaker used, so "It uses pytest" names it.
    """
    s = _WORK_LEAD.sub("", sentence.strip()).rstrip(".!。！")
    if _CJK.search(s):
        return _working_facts_zh(s, who)
    if s.endswith("?") or _QUESTION_EN.match(s):
        return []
    project = _Speaker(who.subject, f"{who.en_poss} project", f"{who.zh_poss}项目", f"{who.en_poss} project's",
                       f"{who.zh_poss}项目的")
    team = _Speaker(who.subject, f"{who.en_poss} team", f"{who.zh_poss}团队", who.en_poss, who.zh_poss)
    out: list[str] = []
    for part in _WORK_SPLIT.split(s):
        part = part.strip()
        if (it := re.match(r"^(?:it|this)\s+(?=[a-z])", part, re.I)) and memo.get("noun"):
            part = f"My {memo['noun']} {part[it.end():]}"
        if tech := _TECH_NOUN.search(part):
            out.append(_finish(f"{who.en_poss} {tech.group('noun').lower()} uses {tech.group('tech')}"))
        if noun := _MY_NOUN.search(part):
            memo["noun"] = noun.group("noun").lower()
        if rule := _RULE_EN.match(part):
            adv, x = rule.group("adv").lower(), _en_pronouns(rule.group("x"), who)
            wants = f"does not want the assistant to {x}" if adv in ("never", "don't", "do not") else (
                f"wants the assistant to {adv} {x}")
            out.append(_finish(f"{who.en} {wants}"))
        elif _WORK_POSS_EN.match(part) and not _is_problem(part):
            rest = re.sub(r"\b[Oo]ur\b", who.en_poss, part.split(" ", 1)[1])
            out.extend(_split_objects(_finish(who.en_poss + " " + _en_pronouns(rest, who))))
        elif verb := _WORK_VERB_EN.match(part):
            we = verb.group("s").lower() == "we"
            speaker = (project if re.match(r"we\s+(?:use|target)\b", part, re.I) else team) if we else who
            if text := _en_clause("I" + part[len(verb.group("s")) :], speaker):
                out.extend(_split_objects(text))
    return out


def _working_facts_zh(s: str, who: _Speaker) -> list[str]:
    if _ZH_QUESTION.search(s):
        return []
    out = []
    if tech := _TECH_NOUN_ZH.search(s):
        out.append(_finish(f"{who.zh_poss}{tech.group('noun')}使用{tech.group('tech')}", zh=True))
    if rule := _RULE_ZH.match(s):
        negative = rule.group("adv") not in ("总是", "一定要")
        want = "不希望助手" if negative else f"希望助手{rule.group('adv')}"
        out.append(_finish(f"{who.zh}{want}{rule.group('x')}", zh=True))
    elif _WORK_ZH.match(s):
        team = f"{who.zh_poss}团队"
        s = re.sub(r"^我们(?!的)", team, s.replace("我们的", who.zh_poss).replace("我的", who.zh_poss))
        out.append(_finish(re.sub(r"我(?!们)", who.zh, s), zh=True))
    return out


@dataclass
class _Episode:
    """An error seen in a tool's output, and what the AI said and ran until a tool reported success."""

    error: str
    command: str | None  # the call whose output showed the error
    notes: list[str]
    fixes: list[str]

    def lesson(self) -> str | None:
        fixes = [f for f in dict.fromkeys(self.fixes) if f != self.command]
        if not (self.notes or fixes):
            return None
        if any(_CJK.search(note) for note in self.notes):
            text = (f"`{self.command}` " if self.command else "") + f"报错“{self.error}”时：" + "".join(self.notes)
            return _finish(text + ("解决办法：" + "，然后".join(f"`{f}`" for f in fixes) if fixes else ""), zh=True)
        where = f"`{self.command}` failed" if self.command else "a step failed"
        text = f'When {where} with "{self.error}": ' + " ".join(self.notes)
        return _finish(text + (" Fix: " + ", then ".join(f"`{f}`" for f in fixes) if fixes else ""))


def _call_text(name: str, args: str) -> str:
    """A tool call as the command it ran, or its name and (short) arguments."""
    try:
        data = json.loads(args)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("cmd", "command", "script", "code"):
            if isinstance(data.get(key), str) and data[key].strip():
                return data[key].strip()[:160]
    return f"{name} {args}".strip()[:160]


def _extract_working(trajectory: str) -> dict[str, Any]:
    """ExtractWorking: lessons (what failed, what fixed it) and durable facts about the user's project.

    A lesson is either said outright ("the fix was ...", "原因是 ...") or read off an episode: an error in a
    tool's output, what the AI then said and ran, closed by a tool output that reports success.
    """
    _, turns = _parse_rendered(trajectory)
    experiences: list[dict[str, str]] = []
    facts: list[dict[str, str]] = []
    problem: str | None = None
    episode: _Episode | None = None
    last_call: str | None = None
    memo: dict[str, str] = {}
    for turn in turns:
        if turn.speaker is None:  # tool / system output
            lines = [line.strip() for line in _TOOL_NAME.sub("", turn.text, count=1).splitlines() if line.strip()]
            bad = [line[:120] for line in lines if _is_problem(line)]
            if bad:
                problem = " / ".join(dict.fromkeys([bad[0], bad[-1]]))
                episode = _Episode(problem, last_call, [], [])
            elif episode and any(_SUCCESS.search(line) for line in lines) and (text := episode.lesson()):
                experiences.append(_fact(text, "assistant", "agent"))
                episode = None
            continue
        if episode and turn.speaker is not AI:
            episode.notes = []  # the person redirected the work: what the AI said before no longer stands
        for line in turn.text.splitlines():
            if call := _CALL.match(line.strip()):
                last_call = _call_text(call.group("name"), call.group("args"))
                if episode:
                    episode.fixes.append(last_call)
                continue
            for sentence in _sentences(line):
                zh = bool(_CJK.search(sentence))
                listener = USER if turn.speaker is AI else AI
                spoken = _person_text(_WORK_LEAD.sub("", sentence.strip()), turn.speaker, listener, zh)
                if (_LESSON_ZH if zh else _LESSON_EN).search(sentence):
                    context = (f"（背景：{problem}）" if zh else f" (context: {problem})") if problem else ""
                    experiences.append(_fact(_finish(spoken.rstrip(".。!！") + context, zh), "assistant", "agent"))
                    continue
                if _is_problem(sentence):
                    problem = sentence.strip().rstrip(".。")[:160]
                if episode and (len(spoken) >= 4 if zh else len(spoken.split()) >= 2):
                    if turn.speaker is not AI:
                        spoken = f"{turn.speaker.zh}要求：{spoken}" if zh else f"{turn.speaker.en} asked: {spoken}"
                    episode.notes.append(_finish(spoken, zh))
                if turn.speaker is not AI:
                    facts.extend(_fact(t, turn.speaker.subject, "user") for t in _working_facts(sentence,
                                                                                               turn.speaker, memo))
    return {"experiences": _dedupe(experiences), "facts": _dedupe(facts)}


# --------------------------------------------------------------------------- reconcile

_NORM_DROP = re.compile(r"\b(?:too|also|as well|now)\b|[也]|现在")
_ADV_EN = r"(?:(?:still|now|currently|also|usually|really|originally)\s+)*"
_ADV_ZH = r"(?:也|现在|目前|如今|还|已经)*"
_STOP_EN = re.compile(r"[,;]|\s+(?:with|and|but|because|since|for|where|which|who|when|while|as|until|after|before|"
                      r"now|these days|at the moment)\b", re.I)
_STOP_JOB = re.compile(r"\s+(?:in|at|from|of|based|living|working|by|on)\b", re.I)
_SLOTS_EN = (
    ("location", re.compile(rf"^{_ADV_EN}(?:lives|is living|has been living|has lived|resides|is based|is staying)"
                            r"\s+in\s+(?P<v>.+)$", re.I)),
    ("location", re.compile(rf"^{_ADV_EN}(?:has\s+)?(?:just\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<v>.+)$",
                            re.I)),
    ("employer", re.compile(rf"^{_ADV_EN}(?:works|is working|has been working|has worked|is employed)\s+"
                            r"(?:at|for|by)\s+(?P<v>.+)$", re.I)),
    ("occupation", re.compile(rf"^{_ADV_EN}works as\s+(?:an?\s+)?(?P<v>.+)$", re.I)),
    ("occupation?", re.compile(rf"^{_ADV_EN}is\s+(?:now\s+)?an?\s+(?P<v>.+)$", re.I)),
    ("age", re.compile(rf"^{_ADV_EN}(?:is|turned)\s+(?P<v>\d{{1,3}})(?:\s+years?\s+old)?$", re.I)),
    ("origin", re.compile(rf"^{_ADV_EN}(?:is|comes)\s+(?:originally\s+)?from\s+(?P<v>.+)$", re.I)),
)
_PREF_EN = re.compile(rf"^{_ADV_EN}(?P<neg>does not |doesn't |never |no longer )?(?P<verb>likes?|loves?|enjoys?|hates?|"
                      r"dislikes?|prefers?)\s+(?P<v>.+)$", re.I)
_SLOTS_ZH = (
    ("location", re.compile(rf"^{_ADV_ZH}(?:是)?住在(?P<v>[^，,。；;的]+)")),
    ("location", re.compile(rf"^{_ADV_ZH}搬(?:家)?(?:到|去)了?(?P<v>[^，,。；;的了]+)")),
    ("employer", re.compile(rf"^{_ADV_ZH}在(?P<v>[^，,。；;]+?)(?:工作|上班|任职|实习)")),
    ("occupation?", re.compile(rf"^{_ADV_ZH}(?:是|当|做)(?:一名|一个|一位|个|名)?(?P<v>[^，,。；;]+?)。?$")),
    ("age", re.compile(rf"^{_ADV_ZH}(?:今年)?(?P<v>\d{{1,3}}|[一二三四五六七八九十两]{{1,3}})岁")),
    ("origin", re.compile(rf"^{_ADV_ZH}来自(?P<v>[^，,。；;]+)")),
)
_PREF_ZH = re.compile(rf"^{_ADV_ZH}(?P<neg>不|不太|不再)?(?P<verb>喜欢|爱|讨厌)(?P<v>[^，,。；;]+)")


_APPOSITIVE = re.compile(rf"^\s*,[^,]*,\s*|^是[^，,。]*的(?:{_REL_ZH})[，,]")


_USER_NAMES = {"user", "the user", "current user", "用户", "当前用户"}
_AI_NAMES = {"assistant", "the assistant", "ai", "agent", "助手", "ai助手"}


def _canon_subject(subject: str) -> str:
    """ "user", "assistant" or the folded name: the same rule the engine's cross-subject guard applies."""
    text = re.sub(r"\s+", " ", subject.strip()).casefold()
    return "user" if text in _USER_NAMES else "assistant" if text in _AI_NAMES else text


def _norm(text: str) -> str:
    return re.sub(r"[\W_]+", "", _NORM_DROP.sub("", text.casefold().replace("\u2019", "'")))


def _predicate(text: str, subject: str) -> str | None:
    """What a fact says about its own subject ("lives in Berlin"), or None when it is about someone else."""
    own = {"user": ("the user", "用户"), "assistant": ("the assistant", "助手")}.get(_canon_subject(subject))
    for head in own or (subject.strip(),):
        if head and text.casefold().startswith(head.casefold()):
            rest = text[len(head) :]
            if own is None and (appositive := _APPOSITIVE.match(rest)):
                rest = rest[appositive.end() :]
            if rest[:1].isalnum() and not _CJK.match(rest) and head[-1:].isalnum():
                return None  # "Johnny" is not "John"
            return rest.strip().rstrip(".。!！")
    return None


def _slots(text: str, subject: str) -> list[tuple[str, str]]:
    """(kind, value) slots a fact fills for its subject.

    Likes become ("like:<object>", "likes"/"dislikes"); every predicate is also a ("claim:<positive form>",
    "yes"/"no") slot, so "no longer has a dog" conflicts with "has a dog".
    """
    pred = _predicate(text, subject)
    if not pred:
        return []
    out = []
    zh = bool(_CJK.search(pred))
    for kind, pattern in _SLOTS_ZH if zh else _SLOTS_EN:
        if not (m := pattern.match(pred)):
            continue
        value = m.group("v").strip()
        if zh:
            value = value.split("的")[-1] if kind == "occupation?" else value
        else:
            value = _STOP_EN.split(value)[0]
            if kind.startswith("occupation"):
                value = _STOP_JOB.split(value)[0]
        if kind == "occupation?":
            if not (_is_job_zh(value) if zh else _is_job_en(value)):
                continue
            kind = "occupation"
        if value.strip():
            out.append((kind, value.strip()))
    if m := (_PREF_ZH if zh else _PREF_EN).match(pred):
        negative = bool(m.group("neg")) or m.group("verb").lower().startswith(("hate", "dislike", "讨厌"))
        obj = m.group("v") if zh else _STOP_EN.split(m.group("v"))[0]
        out.append((f"like:{_norm(obj)}", "dislikes" if negative else "likes"))
    positive, negated = _polarity(pred, zh)
    out.append((f"claim:{_claim_key(positive, zh)}", "no" if negated else "yes"))
    return out


def _claim_key(positive: str, zh: bool) -> str:
    """A predicate stripped of articles, aspect marks and counts: "养了一只猫" and "养猫" are one claim."""
    if zh:
        return _norm(re.sub(r"[了过着]|[一两二三四五六七八九十几]+[只个条本辆套位台件头匹]", "", positive))
    return _norm(re.sub(r"\b(?:a|an|the|one)\b", "", positive, flags=re.I))


_NEGATED_EN = (
    (re.compile(r"^(?:no longer|never)\s+(?P<rest>.+)$", re.I), "{rest}"),
    (re.compile(r"^(?:does not|doesn't)\s+(?P<verb>\w+)(?P<rest>.*)$", re.I), "{verb}{rest}"),
    (re.compile(r"^(?P<aux>is|was|has|can|will)\s+(?:not|no longer)\s+(?P<rest>.+)$", re.I), "{aux} {rest}"),
    (re.compile(r"^cannot\s+(?P<rest>.+)$", re.I), "can {rest}"),
)
_NEGATED_ZH = re.compile(r"^(?:不再|不|没)(?P<rest>.+)$")


def _polarity(pred: str, zh: bool) -> tuple[str, bool]:
    """A predicate's positive form and whether it was negated ("no longer has a dog" -> ("has a dog", True))."""
    if zh:
        m = _NEGATED_ZH.match(pred)
        return (m.group("rest"), True) if m else (pred, False)
    for pattern, template in _NEGATED_EN:
        if m := pattern.match(pred):
            parts = m.groupdict()
            if "verb" in parts:
                parts["verb"] = _s_form(parts["verb"].lower())
            return template.format(**parts), True
    return pred, False


def _compare(new: list[tuple[str, str]], old: list[tuple[str, str]]) -> str | None:
    """How two facts about one subject relate by slot: "same", "conflict", "refine" or None (unrelated)."""
    shared = [(v1, v2) for k1, v1 in new for k2, v2 in old if k1 == k2]
    if not shared:
        return None
    if any(_norm(v1) != _norm(v2) for v1, v2 in shared):
        return "conflict"
    kinds_new, kinds_old = ({k for k, _ in slots if not k.startswith("claim:")} for slots in (new, old))
    return "same" if kinds_new <= kinds_old else "refine"


def _json_list(raw: str, field: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(raw or "[]")
    except json.JSONDecodeError as exc:
        raise ValueError(f"offline model: {field} is not JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValueError(f"offline model: {field} must be a JSON list of objects")
    return data


def _reconcile(new_json: str, existing_json: str) -> dict[str, Any]:
    """ReconcileFacts: NOOP a known fact, SUPERSEDE a same-subject slot with a new value, else ADD."""
    existing = []
    for item in _json_list(existing_json, "existing"):
        try:
            existing.append((int(item["id"]), str(item.get("text", "")), str(item.get("subject", ""))))
        except (KeyError, TypeError, ValueError):
            continue
    ops: list[dict[str, Any]] = []
    touched: set[int] = set()
    for position, item in enumerate(_json_list(new_json, "new_facts")):
        index = item.get("index", position)
        index = index if isinstance(index, int) else position
        text, subject = str(item.get("text", "")), str(item.get("subject", ""))
        same = [(i, t) for i, t, s in existing if _canon_subject(s) == _canon_subject(subject)]
        new_slots = _slots(text, subject)
        relations = [(i, _norm(t) == _norm(text), _compare(new_slots, _slots(t, subject))) for i, t in same]
        op: dict[str, Any] = {"op": "ADD", "fact": index, "id": None}
        if (known := next((i for i, equal, rel in relations if equal or rel == "same"), None)) is not None:
            op = {"op": "NOOP", "fact": index, "id": known}
        else:
            for wanted, name in (("conflict", "SUPERSEDE"), ("refine", "UPDATE")):
                target = next((i for i, _, rel in relations if rel == wanted and i not in touched), None)
                if target is not None:
                    touched.add(target)
                    op = {"op": name, "fact": index, "id": target}
                    break
        ops.append(op)
    return {"ops": ops}


# --------------------------------------------------------------------------- the DSPy engine

def _request_text(request: lm15.Request) -> tuple[str, int]:
    """The last user message (the one to answer) and the character count of the whole prompt."""
    system = request.system
    system_text = system if isinstance(system, str) else "".join(getattr(p, "text", "") or "" for p in system or [])
    texts = [(m.role, m.text or "") for m in request.messages]
    users = [text for role, text in texts if role == "user"]
    if not users:
        raise ValueError("offline model: the request has no user message")
    return users[-1], len(system_text) + sum(len(text) for _, text in texts)


class OfflineEngine:
    """A DSPy custom engine: `complete(request)` answers hymem's signatures with the heuristic above."""

    def complete(self, request: lm15.Request) -> lm15.Response:
        text, prompt_chars = _request_text(request)
        reply = answer(text)
        tokens_in, tokens_out = math.ceil(prompt_chars / 4), math.ceil(len(reply) / 4)
        return lm15.Response(
            id=None,
            model=MODEL,
            message=lm15.Message.assistant([lm15.TextPart(reply)]),
            finish_reason="stop",
            usage=lm15.Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out),
        )

    def dump_state(self) -> dict[str, Any]:
        return {"version": 1}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> OfflineEngine:
        return cls()


class AsyncOfflineEngine:
    """The async twin DSPy uses for `acall`; the work is pure CPU, so it just calls the sync engine."""

    def __init__(self) -> None:
        self._sync = OfflineEngine()

    async def complete(self, request: lm15.Request) -> lm15.Response:
        return self._sync.complete(request)

    def dump_state(self) -> dict[str, Any]:
        return {"version": 1}

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> AsyncOfflineEngine:
        return cls()


def offline_lm(**kw: Any) -> dspy.LM:
    """The offline reference model as a `dspy.LM` (no cache, no retries unless `kw` says otherwise)."""
    kw.setdefault("cache", False)
    kw.setdefault("num_retries", 0)
    return dspy.LM(MODEL, engine=OfflineEngine(), async_engine=AsyncOfflineEngine(), **kw)


__all__ = ["MODEL", "AsyncOfflineEngine", "OfflineEngine", "answer", "offline_lm"]
