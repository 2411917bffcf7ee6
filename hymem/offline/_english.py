"""English rules: a human's first-person statements rewritten about their speaker, and advice turned into facts.

"I'm a nurse" -> "John is a nurse."; "my friend Jack is a chef" -> about Jack; "You should try yoga" from the AI
-> "The assistant suggested that the user try yoga." Small talk, questions and hedges leave nothing.
"""

from __future__ import annotations

import re

from hymem.offline._conversation import AI, Speaker, finish
from hymem.offline._occupations import is_job_en

_EN_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey)(?: there)?|well|oh|ah|yes|yeah|yep|yup|no|nope|ok|okay|sure|so|and|but|also|actually|"
    r"anyway|btw|by the way|haha|lol|great|cool|nice|right|hmm+|um+|uh+|wow|honestly|basically|fun fact)"
    r"(?=[\s,!.:;]|$)[\s,!.:;-]*",
    re.I,
)
_GREETING = re.compile(r"^(?:hi|hello|hey)\b", re.I)
_CONDITIONAL = re.compile(r"^(?:if|when|whenever|unless|although|though|because|while|once|as|since you)\b", re.I)
_TEMPORAL = re.compile(r"^(?:in|on|since|last|this|next|every|during|after|before|until|for)\b", re.I)
QUESTION_EN = re.compile(
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


def s_form(verb: str) -> str:
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


def en_pronouns(text: str, who: Speaker, listener: Speaker | None = None) -> str:
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


def en_clause(clause: str, who: Speaker, greeted: bool = False, listener: Speaker | None = None) -> str | None:
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
            return finish(f"{who.en} lives in {place}")
    head: str | None
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
            head, rest = "no longer", f"{s_form(first.lower())} {more}"
        else:
            head = "is no longer"
    if greeted and head == "is" and re.fullmatch(r"[A-Z][a-z]+", rest) and not is_job_en(rest):
        return finish(f"{who.en_poss} name is {rest}")
    rest = _drop_fillers(en_pronouns(rest, who, listener))
    return finish(" ".join([who.en, *adverbs, head, rest]))


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
    return s_form(verb), verb


_REL_EN = (r"(?:(?:best|old|older|younger|little|big|twin|close|good|new|step-?)\s+)?(?:friend|sister|brother|mom|mum|"
           r"mother|dad|father|wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|son|daughter|boss|colleague|"
           r"coworker|co-worker|cousin|uncle|aunt|neighbou?r|roommate|flatmate|manager|grandma|grandmother|grandpa|"
           r"grandfather|niece|nephew|kid|child|classmate|teammate|mentor)")
_THIRD_EN = re.compile(rf"^[Mm]y\s+(?P<rel>{_REL_EN}),?\s+(?P<name>[A-Z][\w'-]*),?\s+(?P<rest>[a-z].*)$")
_MOVE_EN = re.compile(r"^(?:has\s+|had\s+)?(?:just\s+|recently\s+)?(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<p>.+)$")
_MY_SKIP = re.compile(r"^[Mm]y\s+(?:pleasure|bad|question|apologies|goodness|god|gosh|thoughts|turn|point)\b")
_COMPOUND_EN = re.compile(r"^(?!I\b)(?:[Mm]y\s+)?[\w'-]+(?:\s+[\w'-]+)?\s+and\s+(?:I|me)\b|^(?:I|[Mm]e)\s+and\s+\w")
_CLAUSE_SPLIT = re.compile(r"(?:,?\s+(?:and|but|so)\s+|;\s*)(?=I\b|my\b)")


def en_statement(sentence: str, who: Speaker, listener: Speaker | None = None) -> list[tuple[str, str]]:
    """Facts (text, subject) in one English sentence spoken by the human `who`."""
    s = sentence.strip().replace("\u2019", "'")
    if s.endswith("?") or QUESTION_EN.match(s):
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


def third_rest(rest: str, who: Speaker, listener: Speaker | None = None) -> str:
    """What is said about a third person ("moved to Lisbon" -> "lives in Lisbon"), the speaker's words named."""
    if move := _MOVE_EN.match(rest):
        rest = f"lives in {_place(move.group('p')) or move.group('p')}"
    return _drop_fillers(en_pronouns(_TAIL_EN.split(rest)[0], who, listener))


def _en_part(clause: str, who: Speaker, greeted: bool, listener: Speaker | None) -> tuple[str, str] | None:
    """One clause: "my friend Jack is ..." (about Jack), "my X ..." or "I ..." (about the speaker)."""
    if third := _THIRD_EN.match(clause):
        rest = third_rest(third.group("rest"), who, listener)
        return finish(f"{third.group('name')}, {who.en_poss} {third.group('rel')}, {rest}"), third.group("name")
    if clause[:2].lower() == "my":
        if _MY_SKIP.match(clause) or len(clause.split()) < 3:
            return None
        rest = _TAIL_EN.split(clause[3:])[0]
        return finish(who.en_poss + " " + _drop_fillers(en_pronouns(rest, who, listener))), who.subject
    text = en_clause(clause, who, greeted, listener)
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


def _ai_pronouns_en(text: str, who: Speaker = AI) -> str:
    subs = ((r"\byou're\b|\byou are\b", "the user is"), (r"\byours?elf\b", "themselves"), (r"\byours\b", "the user's"),
            (r"\byour\b", "the user's"), (r"\byou\b", "the user"), (r"\bI'm\b|\bI am\b", f"{who.en} is"),
            (r"\bI\b", who.en), (r"\bmy\b", who.en_poss), (r"\bme\b", who.en))
    for pattern, repl in subs:
        text = re.sub(pattern, repl, text, flags=re.I)
    return text


def en_suggestion(sentence: str, who: Speaker = AI) -> str | None:
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
            return finish(f"{who.en} {verb} that the user {_ai_pronouns_en(x[4:], who)}")
        return finish(f"{who.en} {verb} {_ai_pronouns_en(x, who)}")
    if (m := _AI_YOU.match(s)) and len(m.group("x").split()) >= 2 and not _AI_NOT_ADVICE.match(m.group("x")):
        return finish(f"{who.en} suggested that the user {_ai_pronouns_en(m.group('x'), who)}")
    if (m := _AI_IMPERATIVE.match(s)) and len(s.split()) >= 2 and not _AI_NOT_ADVICE.match(s):
        x = m.group("x")
        return finish(f"{who.en} suggested that the user {x[:1].lower()}{_ai_pronouns_en(x[1:], who)}")
    if who is not AI:
        return None
    if m := _AI_HERE.match(s):
        return finish(f"the assistant provided {_ai_pronouns_en(m.group('x'))}")
    if m := _AI_FIX.match(s):
        np = re.sub(r"^my\b", "the", m.group("np"), flags=re.I).lower()
        return finish(f"the assistant suggested that {np} is {_ai_pronouns_en(m.group('x'))}")
    if m := _AI_DECIDE.match(s):
        verb, x = m.group("v").lower(), _ai_pronouns_en(m.group("x"))
        if "use" in verb:
            return finish(f"the assistant decided to use {x}")
        return finish(f"the assistant {'chose' if verb in ('chosen', 'went with') else verb} {x}")
    return None
