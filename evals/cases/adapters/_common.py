"""What the corpus adapters share: label records, case building, text rewriting and streaming readers.

Each adapter turns its corpus into `Label`s (one per gold candidate, with the reasons it looks
suspicious) and messages; `build_case` then picks the gold for `--gold all|clean` and validates the
case through the same pydantic models and consistency checks as the curated suites.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from evals.cases.dataset import Case, DatasetError, gold_problems

Gold = Literal["all", "clean"]
MAX_MESSAGES_PER_WRITE = 30  # one `add` call holds at most this many messages, as a real caller's would
MAX_FACTS_PER_CASE = 40  # a write this size rarely states more; beyond it recall says little


class Label(BaseModel):
    """One gold candidate taken from a corpus label, rewritten to the gold conventions."""

    text: str  # the rewritten gold sentence ("The user …", "Melanie …", "用户…")
    subject: str  # "user" or the named human's name (never "assistant" here: see each adapter)
    original: str  # the corpus' own text of the label
    evidence: str = ""  # where the corpus grounds it (dia ids, utterance numbers, "persona")
    reasons: list[str] = Field(default_factory=list)  # why it looks wrong; empty = nothing suspicious
    clean_drop: bool = False  # `--gold clean` leaves it out (set by build_case from the adapter's policy)


class Skipped(BaseModel):
    """A corpus record that produced no case, and why."""

    id: str  # the record's id in the corpus (or its line / row)
    reason: str


Item = Case | Skipped


def chunk_messages(messages: Sequence[dict[str, Any]], limit: int = MAX_MESSAGES_PER_WRITE) -> list[list[dict]]:
    """Split one session into as few writes as the limit allows, of near-equal size."""
    if not messages:
        return []
    n = -(-len(messages) // limit)
    size, extra = divmod(len(messages), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(messages[start:end]))
        start = end
    return out


def build_case(*, dataset: str, source: str, case_id: str, lang: str, user_id: str, turns: list[list[dict]],
               labels: list[Label], gold: Gold, clean_drops: frozenset[str], tags: list[str],
               meta: dict[str, Any], profile: dict[str, str] | None = None) -> Item:
    """A validated case whose facts are the labels kept under `gold`, or a Skipped saying why not."""
    kept: list[Label] = []
    seen: set[str] = set()
    duplicates = 0
    for label in labels:
        label.clean_drop = any(r in clean_drops for r in label.reasons)
        if gold == "clean" and label.clean_drop:
            continue
        if label.text in seen:
            duplicates += 1
            continue
        seen.add(label.text)
        kept.append(label)
    if not turns:
        return Skipped(id=case_id, reason="no messages")
    if not kept:
        why = "every label is left out by --gold clean" if labels else "no gold labels"
        return Skipped(id=case_id, reason=why)
    meta = {"dataset": dataset, **meta, "gold": gold, "n_labels": len(labels),
            "flagged": [_flag_meta(lb) for lb in labels if lb.reasons]}
    if duplicates:
        meta["duplicate_labels"] = duplicates
    if len(kept) > MAX_FACTS_PER_CASE:
        meta["facts_truncated"] = len(kept) - MAX_FACTS_PER_CASE
        kept = kept[:MAX_FACTS_PER_CASE]
    data = {"id": case_id, "lang": lang, "user_id": user_id, "tags": tags, "turns": turns,
            "expect": {"facts": [{"text": lb.text, "subject": lb.subject, "owner": "user"} for lb in kept],
                       "profile": profile or {}},
            "meta": meta, "source": source}
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        return Skipped(id=case_id, reason="invalid case: " + "; ".join(str(e["msg"]) for e in exc.errors()))
    problems = gold_problems(case)
    if problems:
        return Skipped(id=case_id, reason="inconsistent gold: " + "; ".join(problems))
    return case


def _flag_meta(label: Label) -> dict[str, Any]:
    return {"text": label.text, "original": label.original, "subject": label.subject, "evidence": label.evidence,
            "reasons": list(label.reasons), "clean_drop": label.clean_drop}


# --- reading ---------------------------------------------------------------------------------------


@contextmanager
def utf8_errors(path: Path) -> Iterator[None]:
    """A file that stops decoding halfway is a DatasetError naming it, not a bare UnicodeDecodeError."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise DatasetError([f"{path}: invalid UTF-8: {exc.reason}"]) from None


def resolve_files(path: str, patterns: Sequence[str], what: str) -> list[Path]:
    """The corpus files named by PATH: the file itself, or a directory's files matching patterns, sorted."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        found = sorted({f for pat in patterns for f in p.rglob(pat) if f.is_file()})
        if not found:
            raise DatasetError([f"{p}: no {what} file ({', '.join(patterns)}) in this directory"])
        return found
    raise DatasetError([f"{p}: no such file or directory"])


def iter_json_array(path: Path, chunk_size: int = 1 << 16) -> Iterator[Any]:
    """The elements of a top-level JSON array, decoded one at a time as the file is read."""
    decoder = json.JSONDecoder()
    with path.open("r", encoding="utf-8-sig") as fh, utf8_errors(path):
        buf, pos, eof = "", 0, False

        def fill() -> bool:
            nonlocal buf, pos, eof
            more = fh.read(chunk_size)
            buf, pos = buf[pos:] + more, 0
            eof = not more
            return bool(more)

        def skip_ws() -> None:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos].isspace():
                    pos += 1
                if pos < len(buf) or not fill():
                    return

        skip_ws()
        if pos >= len(buf) or buf[pos] != "[":
            raise DatasetError([f"{path}: expected a JSON array at the top level"])
        pos += 1
        skip_ws()
        if pos < len(buf) and buf[pos] == "]":
            return
        while True:
            skip_ws()
            while True:  # an element touching the end of the buffer may be cut short: read on and retry
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or eof:
                        break
                except json.JSONDecodeError as exc:
                    if eof:
                        raise DatasetError([f"{path}: invalid JSON: {exc.msg}"]) from None
                fill()
            pos = end
            yield value
            skip_ws()
            if pos >= len(buf):
                raise DatasetError([f"{path}: invalid JSON: the array is not closed"])
            if buf[pos] == "]":
                return
            if buf[pos] != ",":
                raise DatasetError([f"{path}: invalid JSON: expected ',' or ']' after an element"])
            pos += 1


# --- text --------------------------------------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef"
_SEGMENT_SPACE = re.compile(rf"(?<=[{_CJK}]) +| +(?=[{_CJK}])")


def desegment_zh(text: str) -> str:
    """Undo word segmentation ("我 在 IT 部门 工作" -> "我在IT部门工作"); spaces between Latin words stay."""
    return _SEGMENT_SPACE.sub("", text).strip()


def end_sentence(text: str, lang: str) -> str:
    text = text.strip()
    if not text or text[-1] in ".!?。！？":
        return text
    return text + ("。" if lang == "zh" else ".")


def first_person_zh(text: str, subject: str = "用户") -> str:
    """"我 喜欢 运动" -> "用户喜欢运动。": a first-person persona line as a gold sentence."""
    return end_sentence(desegment_zh(text).replace("我", subject), "zh")


_ADVERBS = frozenset("""also really just always never often usually still recently currently absolutely only
sometimes actually definitely mostly especially totally truly rarely hardly even already frequently regularly
mainly secretly once now finally probably generally typically simply occasionally constantly""".split())
_UNCHANGED = frozenset("""can could will would should shall may might must did had was used got quit hurt put cut let
set bought went grew made found met lost won left took gave saw ran came became began broke built fell felt fought
flew forgot drove ate kept knew led said sold sent spent stood taught told thought understood wrote sang swam
can't couldn't won't wouldn't shouldn't didn't wasn't mustn't hadn't""".split())
_IRREGULAR = {"am": "is", "have": "has", "do": "does", "go": "goes", "were": "was", "don't": "doesn't",
              "haven't": "hasn't", "aren't": "isn't", "be": "is"}
_STOP_CONJUGATING = frozenset({"and", "or", "but", "too", "as", "myself", "who", "that", "which"})
_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?|\s+|.", re.S)


def conjugate(verb: str) -> str:
    """Third person singular of a verb after "I" ("love" -> "loves"); past forms and modals stay."""
    low = verb.lower().replace("’", "'")
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low in _UNCHANGED or low.endswith("ed") or not low.isalpha():
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def first_person_en(text: str, name: str | None = None) -> str:
    """"I love to ski." -> "The user loves to ski." (or "Sam loves to ski." when a name is given)."""
    subj = name or "the user"
    poss = f"{subj}'s"
    out: list[str] = []
    pending = False  # the last word was "I": the next verb (past adverbs) is conjugated
    said_i = False  # "I" has been the subject of a clause already
    for tok in _WORD.findall(text):
        low = tok.lower().replace("’", "'")
        if not tok.strip():
            out.append(tok)
            continue
        if not tok[0].isalpha():
            pending = pending and tok not in ",;:.!?()\""
            out.append(tok)
            continue
        if low == "i":
            # "my dog and I go": a plural subject keeps its verb; "I am 30 and I have" is a second clause
            pending = out[-2:-1] != ["and"] or said_i
            said_i = True
            out.append(subj)
            continue
        named = any(subj in piece for piece in out)  # after the first mention, "my" reads "their"
        replacement = {"i'm": f"{subj} is", "i've": f"{subj} has", "i'd": f"{subj} would", "i'll": f"{subj} will",
                       "my": "their" if named else poss, "mine": "theirs" if named else poss,
                       "me": "them" if named else subj, "myself": "themselves"}.get(low)
        if replacement is not None:
            out.append(replacement)
            said_i = said_i or low.startswith("i'")
            pending = False
        elif pending and low in _ADVERBS:
            out.append(tok)
        elif pending and low not in _STOP_CONJUGATING:
            out.append(conjugate(tok))
            pending = False
        elif out and out[-2:-1] in (["and"], ["but"], ["or"]) and low in _IRREGULAR and named:
            out.append(_IRREGULAR[low])  # "I work and have been …" -> "… and has been …"
        else:
            out.append(tok)
            pending = False
    sentence = "".join(out).strip()
    sentence = sentence[:1].upper() + sentence[1:]
    return end_sentence(sentence, "en")


# --- is a label voiced in the dialogue? (a heuristic, used only to flag) ------------------------------

_EN_STOP = frozenset("""the and for are was were been being have has had with from that this these those they them
their there here then than into onto about also very really just still currently now which who whom whose when where
while any some not but you your yours our ours his her hers its she him what how why all can could will would should
may might must does did doing done like likes liked love loves loved enjoy enjoys enjoyed lot lots much many more most
favorite favourite thing things get got one two time times year years day days make made want wanted going because
being kind really well good great new old way people person""".split())
_ZH_LIGHT = frozenset("的了是在一个我你他她它们和与及也都很呢吗吧啊这那有不没会要就还把被对于为从到说喜欢爱")


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def content_units(text: str, lang: str) -> set[str]:
    """Content-bearing units: stemmed English words of 3+ letters, or Chinese characters outside a stop list."""
    if lang == "zh":
        return {ch for ch in text if re.match(r"[\u4e00-\u9fff]", ch) and ch not in _ZH_LIGHT}
    return {_stem(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 3 and w not in _EN_STOP}


def coverage(label: set[str], said: set[str]) -> float:
    """Share of a label's content units found in what a speaker said (1.0 for a label with none)."""
    return len(label & said) / len(label) if label else 1.0
