"""ExtractWorking, the working path: lessons from a coding agent's trajectory and facts about the user's project.

Why apart from the chat path: a trajectory holds tool calls and their outputs, and what it leaves is about the
work (what failed and what fixed it, the project, the rules the user sets), not about people.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from hymem.offline._chat import dedupe, fact_record
from hymem.offline._chinese import ZH_QUESTION
from hymem.offline._conversation import AI, CJK, USER, Speaker, finish, parse_rendered, sentences
from hymem.offline._english import QUESTION_EN, en_clause, en_pronouns

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


def _person_text(text: str, who: Speaker, listener: Speaker, zh: bool) -> str:
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
    if m is None or len(objects) < 2 or any(not o or len(o.split()) > 4 for o in objects):
        return [text]
    return [finish(f"{m.group('head')} {o}") for o in objects]


def _working_facts(sentence: str, who: Speaker, memo: dict[str, str]) -> list[str]:
    """Durable facts a human states about themselves or their project, and the rules they set for the AI.

    `memo` remembers the last project noun the speaker used, so "It uses pytest" names it.
    """
    s = _WORK_LEAD.sub("", sentence.strip()).rstrip(".!。！")
    if CJK.search(s):
        return _working_facts_zh(s, who)
    if s.endswith("?") or QUESTION_EN.match(s):
        return []
    project = Speaker(who.subject, f"{who.en_poss} project", f"{who.zh_poss}项目", f"{who.en_poss} project's",
                       f"{who.zh_poss}项目的")
    team = Speaker(who.subject, f"{who.en_poss} team", f"{who.zh_poss}团队", who.en_poss, who.zh_poss)
    out: list[str] = []
    for part in _WORK_SPLIT.split(s):
        part = part.strip()
        if (it := re.match(r"^(?:it|this)\s+(?=[a-z])", part, re.I)) and memo.get("noun"):
            part = f"My {memo['noun']} {part[it.end():]}"
        if tech := _TECH_NOUN.search(part):
            out.append(finish(f"{who.en_poss} {tech.group('noun').lower()} uses {tech.group('tech')}"))
        if noun := _MY_NOUN.search(part):
            memo["noun"] = noun.group("noun").lower()
        if rule := _RULE_EN.match(part):
            adv, x = rule.group("adv").lower(), en_pronouns(rule.group("x"), who)
            wants = f"does not want the assistant to {x}" if adv in ("never", "don't", "do not") else (
                f"wants the assistant to {adv} {x}")
            out.append(finish(f"{who.en} {wants}"))
        elif _WORK_POSS_EN.match(part) and not _is_problem(part):
            rest = re.sub(r"\b[Oo]ur\b", who.en_poss, part.split(" ", 1)[1])
            out.extend(_split_objects(finish(who.en_poss + " " + en_pronouns(rest, who))))
        elif verb := _WORK_VERB_EN.match(part):
            we = verb.group("s").lower() == "we"
            speaker = (project if re.match(r"we\s+(?:use|target)\b", part, re.I) else team) if we else who
            if text := en_clause("I" + part[len(verb.group("s")) :], speaker):
                out.extend(_split_objects(text))
    return out


def _working_facts_zh(s: str, who: Speaker) -> list[str]:
    if ZH_QUESTION.search(s):
        return []
    out = []
    if tech := _TECH_NOUN_ZH.search(s):
        out.append(finish(f"{who.zh_poss}{tech.group('noun')}使用{tech.group('tech')}", zh=True))
    if rule := _RULE_ZH.match(s):
        negative = rule.group("adv") not in ("总是", "一定要")
        want = "不希望助手" if negative else f"希望助手{rule.group('adv')}"
        out.append(finish(f"{who.zh}{want}{rule.group('x')}", zh=True))
    elif _WORK_ZH.match(s):
        team = f"{who.zh_poss}团队"
        s = re.sub(r"^我们(?!的)", team, s.replace("我们的", who.zh_poss).replace("我的", who.zh_poss))
        out.append(finish(re.sub(r"我(?!们)", who.zh, s), zh=True))
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
        if any(CJK.search(note) for note in self.notes):
            text = (f"`{self.command}` " if self.command else "") + f"报错“{self.error}”时：" + "".join(self.notes)
            return finish(text + ("解决办法：" + "，然后".join(f"`{f}`" for f in fixes) if fixes else ""), zh=True)
        where = f"`{self.command}` failed" if self.command else "a step failed"
        text = f'When {where} with "{self.error}": ' + " ".join(self.notes)
        return finish(text + (" Fix: " + ", then ".join(f"`{f}`" for f in fixes) if fixes else ""))


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


def extract_working(trajectory: str) -> dict[str, Any]:
    """ExtractWorking: lessons (what failed, what fixed it) and durable facts about the user's project.

    A lesson is either said outright ("the fix was ...", "原因是 ...") or read off an episode: an error in a
    tool's output, what the AI then said and ran, closed by a tool output that reports success.
    """
    _, turns = parse_rendered(trajectory)
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
                experiences.append(fact_record(text, "assistant", "agent"))
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
            for sentence in sentences(line):
                zh = bool(CJK.search(sentence))
                listener = USER if turn.speaker is AI else AI
                spoken = _person_text(_WORK_LEAD.sub("", sentence.strip()), turn.speaker, listener, zh)
                if (_LESSON_ZH if zh else _LESSON_EN).search(sentence):
                    context = (f"（背景：{problem}）" if zh else f" (context: {problem})") if problem else ""
                    experiences.append(fact_record(finish(spoken.rstrip(".。!！") + context, zh), "assistant", "agent"))
                    continue
                if _is_problem(sentence):
                    problem = sentence.strip().rstrip(".。")[:160]
                if episode and (len(spoken) >= 4 if zh else len(spoken.split()) >= 2):
                    if turn.speaker is not AI:
                        spoken = f"{turn.speaker.zh}要求：{spoken}" if zh else f"{turn.speaker.en} asked: {spoken}"
                    episode.notes.append(finish(spoken, zh))
                if turn.speaker is not AI:
                    said = _working_facts(sentence, turn.speaker, memo)
                    facts.extend(fact_record(t, turn.speaker.subject, "user") for t in said)
    return {"experiences": dedupe(experiences), "facts": dedupe(facts)}
