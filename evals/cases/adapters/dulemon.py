"""The DuLeMon sample (`samples.json`, JSON Lines, Chinese) as eval cases: one case per session.

Speakers: `Usr` is the current user (`role=user`, no name: the corpus gives none to the caller);
`Bot` is the AI (`role=assistant` without a name). The word-segmented text is joined back
("我 在 IT 部门 工作" -> "我在IT部门工作"). A session (16-20 utterances) is one write.

Gold: the user's persona facts that the session grounds (a `U<n>` tag on any utterance, the user's
or the bot's), rewritten from the first person ("我 喜欢 运动" -> "用户喜欢运动。"), subject "user".
58 bot utterances carry a user fact ("跟 你 一样 也是 IT 行业", U2): those stay the user's facts;
the case is tagged `bot-states-user-fact` when a fact is grounded only in bot turns. A name fact
("我 叫 魏建功") becomes `expect.profile.name`, not a fact, as in the curated suites. User facts
the session never grounds are not gold (nothing in the turns states them).

The bot's persona (`B<n>`) is left out of the gold. In DuLeMon it is the bot's configuration,
given to the bot before the chat (the paper's bot persona memory is preset, not learned), and the
engine remembers for the user: what the AI "suggested, produced or decided" is owner "agent", but
the bot reciting its role-play persona ("我 超级 爱 吃肉") is none of these. Storing it as the
user's fact is still wrong, and costs precision. The counts are kept in `meta.excluded`.

Flags: `unsaid_user_fact_first_stated_by_bot`: a fact from `user_no_said_persona` (not yet told to
the bot) that a bot turn states before any user turn does; the bot cannot know it, so the tag or
the list is wrong (none in the sample). `owner_not_named`: the persona line has no "我"
("这里 景色 很 美"), so its gold sentence names nobody. `--gold clean` drops both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from evals.cases.adapters._common import (
    Gold,
    Item,
    Label,
    Skipped,
    build_case,
    chunk_messages,
    desegment_zh,
    first_person_zh,
    resolve_files,
    utf8_errors,
)
from evals.cases.dataset import DatasetError

DATASET = "dulemon"
CLEAN_DROPS = frozenset({"unsaid_user_fact_first_stated_by_bot", "owner_not_named"})
_PERSONA = re.compile(r"^\s*([UB]\d+)\s*[:：]\s*(.*?)\s*$", re.S)
_UTTERANCE = re.compile(r"^\s*(Usr|Bot)\s*[:：]\s*(.*)$", re.S)
_NAME = re.compile(r"^我(?:叫|的名字(?:是|叫))([^，。,；;！!]+?)[。.!！]?$")


def iter_items(path: str, *, gold: Gold = "all", spec: str | None = None) -> Iterator[Item]:
    """Cases (or skips) of every session, reading one line at a time."""
    source = spec or f"{DATASET}:{path}"
    for file in resolve_files(path, ("samples*.json", "*.jsonl"), "DuLeMon"):
        with file.open("r", encoding="utf-8-sig") as fh, utf8_errors(file):
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                case_id = f"dulemon-{lineno:03d}"
                try:
                    session = json.loads(line)
                except json.JSONDecodeError as exc:
                    if lineno == 1 and line.lstrip().startswith("["):
                        raise DatasetError([f"{file}: expected JSON Lines (one session per line)"]) from None
                    yield Skipped(id=case_id, reason=f"invalid JSON on line {lineno}: {exc.msg}")
                    continue
                yield _session(session, case_id, lineno, source, gold)


def _session(session: Any, case_id: str, lineno: int, source: str, gold: Gold) -> Item:
    if not isinstance(session, dict) or not isinstance(session.get("conversation"), list):
        return Skipped(id=case_id, reason="no conversation list")
    persona: dict[str, tuple[str, str]] = {}  # id -> (list it came from, text)
    for key in ("bot_persona", "user_said_persona", "user_no_said_persona"):
        for raw in session.get(key) or []:
            m = _PERSONA.match(str(raw))
            if m:
                persona[m.group(1)] = (key, m.group(2))
    messages: list[dict[str, str]] = []
    grounded: dict[str, list[tuple[int, str]]] = {}  # persona id -> [(utterance number, Usr|Bot)]
    unresolved: list[str] = []
    for number, raw in enumerate(session["conversation"], 1):
        text, _, tag = str(raw).partition("\t")
        m = _UTTERANCE.match(text)
        if not m:
            return Skipped(id=case_id, reason=f"utterance {number} starts with neither 'Usr:' nor 'Bot:'")
        who, content = m.group(1), desegment_zh(m.group(2))
        messages.append({"role": "user" if who == "Usr" else "assistant", "content": content})
        tag = tag.strip()
        if tag:
            if tag in persona:
                grounded.setdefault(tag, []).append((number, who))
            else:
                unresolved.append(f"{number}:{tag}")
    labels: list[Label] = []
    profile: dict[str, str] = {}
    only_bot = False
    for pid, uses in grounded.items():
        origin, text = persona[pid]
        if not pid.startswith("U"):
            continue
        plain = desegment_zh(text)
        name = _NAME.match(plain)
        if name:
            profile["name"] = name.group(1).strip()
            continue
        reasons = [] if "我" in plain else ["owner_not_named"]
        if origin == "user_no_said_persona" and uses[0][1] == "Bot":
            reasons.append("unsaid_user_fact_first_stated_by_bot")
        only_bot = only_bot or all(who == "Bot" for _, who in uses)
        labels.append(Label(text=first_person_zh(text), subject="user", original=f"{pid}: {text}",
                            evidence=", ".join(f"{who}#{n}" for n, who in uses), reasons=reasons))
    excluded = {"bot_persona": sum(1 for k, _ in persona.values() if k == "bot_persona"),
                "user_fact_not_grounded": sum(1 for pid, (k, _) in persona.items()
                                              if k != "bot_persona" and pid not in grounded)}
    meta: dict[str, Any] = {"line": lineno, "excluded": excluded,
                            "persona_ids": {"grounded": sorted(grounded), "all": sorted(persona)}}
    if unresolved:
        meta["unresolved_tags"] = unresolved
    tags = ["dulemon", "user-unnamed", "silver-gold"] + (["bot-states-user-fact"] if only_bot else [])
    return build_case(dataset=DATASET, source=source, case_id=case_id, lang="zh", user_id=case_id,
                      turns=chunk_messages(messages), labels=labels, gold=gold, clean_drops=CLEAN_DROPS,
                      tags=tags, meta=meta, profile=profile)
