"""ReconcileFacts: memories of the same subject compared by slot (location, employer, occupation, age, likes,
and the negation of a claim) to NOOP, UPDATE, SUPERSEDE or ADD.

Subjects are compared with `hymem.reconciler.canonical_subject`, the rule the engine's cross-subject guard applies,
so the model never proposes an op the engine would refuse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hymem.offline._chinese import REL_ZH
from hymem.offline._conversation import CJK
from hymem.offline._english import s_form
from hymem.offline._occupations import is_job_en, is_job_zh
from hymem.subjects import canonical_subject, same_subject

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


_APPOSITIVE = re.compile(rf"^\s*,[^,]*,\s*|^是[^，,。]*的(?:{REL_ZH})[，,]")


def norm(text: str) -> str:
    return re.sub(r"[\W_]+", "", _NORM_DROP.sub("", text.casefold().replace("\u2019", "'")))


def _predicate(text: str, subject: str) -> str | None:
    """What a fact says about its own subject ("lives in Berlin"), or None when it is about someone else."""
    own = {"user": ("the user", "用户"), "assistant": ("the assistant", "助手")}.get(canonical_subject(subject))
    for head in own or (subject.strip(),):
        if head and text.casefold().startswith(head.casefold()):
            rest = text[len(head) :]
            if own is None and (appositive := _APPOSITIVE.match(rest)):
                rest = rest[appositive.end() :]
            if rest[:1].isalnum() and not CJK.match(rest) and head[-1:].isalnum():
                return None  # "Johnny" is not "John"
            return rest.strip().rstrip(".。!！")
    return None


def fact_slots(text: str, subject: str) -> list[tuple[str, str]]:
    """(kind, value) slots a fact fills for its subject.

    Likes become ("like:<object>", "likes"/"dislikes"); every predicate is also a ("claim:<positive form>",
    "yes"/"no") slot, so "no longer has a dog" conflicts with "has a dog".
    """
    pred = _predicate(text, subject)
    if not pred:
        return []
    out = []
    zh = bool(CJK.search(pred))
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
            if not (is_job_zh(value) if zh else is_job_en(value)):
                continue
            kind = "occupation"
        if value.strip():
            out.append((kind, value.strip()))
    if m := (_PREF_ZH if zh else _PREF_EN).match(pred):
        negative = bool(m.group("neg")) or m.group("verb").lower().startswith(("hate", "dislike", "讨厌"))
        obj = m.group("v") if zh else _STOP_EN.split(m.group("v"))[0]
        out.append((f"like:{norm(obj)}", "dislikes" if negative else "likes"))
    positive, negated = _polarity(pred, zh)
    out.append((f"claim:{_claim_key(positive, zh)}", "no" if negated else "yes"))
    return out


def _claim_key(positive: str, zh: bool) -> str:
    """A predicate stripped of articles, aspect marks and counts: "养了一只猫" and "养猫" are one claim."""
    if zh:
        return norm(re.sub(r"[了过着]|[一两二三四五六七八九十几]+[只个条本辆套位台件头匹]", "", positive))
    return norm(re.sub(r"\b(?:a|an|the|one)\b", "", positive, flags=re.I))


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
                parts["verb"] = s_form(parts["verb"].lower())
            return template.format(**parts), True
    return pred, False


def _compare(new: list[tuple[str, str]], old: list[tuple[str, str]]) -> str | None:
    """How two facts about one subject relate by slot: "same", "conflict", "refine" or None (unrelated)."""
    shared = [(v1, v2) for k1, v1 in new for k2, v2 in old if k1 == k2]
    if not shared:
        return None
    if any(norm(v1) != norm(v2) for v1, v2 in shared):
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


def reconcile_facts(new_json: str, existing_json: str) -> dict[str, Any]:
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
        same = [(i, t) for i, t, s in existing if same_subject(s, subject)]
        new_slots = fact_slots(text, subject)
        relations = [(i, norm(t) == norm(text), _compare(new_slots, fact_slots(t, subject))) for i, t in same]
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
