"""MemoryBank / SiliconFriend (`memory_bank_{en,cn}.json`) as eval cases: one case per simulated user.

Speakers: `query` is the current user (`role=user`, `name` = the user's name from
`meta_information`), `response` the AI companion (`role=assistant`, no name). Each of the ten days
is one write (4-6 query/response pairs), so a case is the user's ten days, in date order.

Gold: the only per-speaker labels are the user-level `meta_information`. Its `hobbies` become one
fact each ("The user enjoys painting." / "用户喜欢绘画。", subject "user"), its `name` the expected
profile name. `personality` and `speaking_style` are left out: they describe how the simulated user
was prompted ("gentle, shy", "soft-spoken"), are never stated as facts and would only lower recall.
The AI companion's side has no labels at all (the probing questions come without answers), so the
gold holds no assistant facts; the AI's recommendations the engine stores count against precision.

Flags (a word-overlap heuristic, not a judgement): a hobby whose content words the user's queries
do not contain is `not_stated_by_user`, or `stated_only_by_assistant` when the AI's responses do
(the AI suggested it: storing it as the user's fact is the attribution error). `--gold clean` drops
both. Synonyms ("hiking" for "mountaineering") are flagged too; the audit lists them for reading.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evals.cases.adapters._common import (
    Gold,
    Item,
    Label,
    Skipped,
    build_case,
    content_units,
    coverage,
    end_sentence,
    resolve_files,
)
from evals.cases.dataset import DatasetError

DATASET = "memorybank"
CLEAN_DROPS = frozenset({"not_stated_by_user", "stated_only_by_assistant"})
STATED = 0.5  # share of a hobby's content words that must appear in a speaker's turns
_SPLIT = re.compile(r"\s*[，、,；;]\s*")


def iter_items(path: str, *, gold: Gold = "all", spec: str | None = None) -> Iterator[Item]:
    """Cases (or skips) of every user of every language file under PATH (en before cn when a folder)."""
    source = spec or f"{DATASET}:{path}"
    files = resolve_files(path, ("memory_bank_*.json",), "MemoryBank")
    files.sort(key=lambda f: (_lang(f) != "en", str(f)))
    for file in files:
        try:
            users = json.loads(file.read_text(encoding="utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetError([f"{file}: invalid JSON: {exc}"]) from None
        if not isinstance(users, dict):
            raise DatasetError([f"{file}: expected a JSON object keyed by user name"])
        lang = _lang(file)
        for index, (key, user) in enumerate(users.items(), 1):
            yield _user(key.strip(), user, index, lang, source, gold, file.name)


def _lang(file: Path) -> str:
    stem = file.stem.lower()
    return "zh" if stem.endswith(("_cn", "_zh")) else "en"


def _user(key: str, user: Any, index: int, lang: str, source: str, gold: Gold, filename: str) -> Item:
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-") if key.isascii() else ""
    case_id = f"{lang}-{index:02d}" + (f"-{slug}" if slug else "")
    if not isinstance(user, dict) or not isinstance(user.get("history"), dict):
        return Skipped(id=case_id, reason="no history")
    info = user.get("meta_information") or {}
    name = str(info.get("name") or user.get("name") or key).strip()
    writes, queries, responses = [], [], []
    for day in sorted(user["history"]):
        messages = []
        for pair in user["history"][day] or []:
            query, response = str(pair.get("query") or "").strip(), str(pair.get("response") or "").strip()
            if query:
                messages.append({"role": "user", "name": name, "content": query})
                queries.append(query)
            if response:
                messages.append({"role": "assistant", "content": response})
                responses.append(response)
        if messages:
            writes.append(messages)
    said_user = content_units(" ".join(queries), lang)
    said_ai = content_units(" ".join(responses), lang)
    labels = []
    for hobby in (h.strip() for h in _SPLIT.split(str(info.get("hobbies") or ""))):
        hobby = re.sub(r"^(?:and|以及|和)\s*", "", hobby).strip(" .。")
        if not hobby:
            continue
        units = content_units(hobby, lang)
        reasons = []
        if coverage(units, said_user) < STATED:
            reasons.append("stated_only_by_assistant" if coverage(units, said_ai) >= STATED else "not_stated_by_user")
        labels.append(Label(text=_hobby_fact(hobby, lang), subject="user", original=hobby,
                            evidence="meta_information.hobbies", reasons=reasons))
    meta = {"file": filename, "user": key, "days": sorted(user["history"]),
            "excluded": {"personality": 1 if info.get("personality") else 0,
                         "speaking_style": 1 if info.get("speaking_style") else 0}}
    tags = ["memorybank", "user-named", "ai-companion", "silver-gold"] + (["multi-turn"] if len(writes) > 1 else [])
    return build_case(dataset=DATASET, source=source, case_id=case_id, lang=lang, user_id=f"memorybank-{case_id}",
                      turns=writes, labels=labels, gold=gold, clean_drops=CLEAN_DROPS, tags=tags, meta=meta,
                      profile={"name": name} if name else {})


def _hobby_fact(hobby: str, lang: str) -> str:
    if lang == "zh":
        return end_sentence(f"用户喜欢{hobby}", "zh")
    if len(hobby) > 1 and hobby[1].islower():
        hobby = hobby[0].lower() + hobby[1:]
    return end_sentence(f"The user enjoys {hobby}", "en")
