"""DSPy signatures for the write chain: extraction (chat, working) and reconcile.

Prompts live in the signature docstrings (one English, one Chinese for
extraction); typed outputs let the adapter validate owners and op names.
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field, StrictInt

from hymem.models import OpName, Owner


class ExtractedFact(BaseModel):
    """A fact as the model proposes it: the subject is named, the owner is explicit."""

    text: str = Field(description="one self-contained sentence that names its subject")
    subject: str = Field(description='"user", "assistant", or the person\'s name')
    owner: Owner = Field(description='"user" for facts about people, "agent" for what the AI produced')


class BasicProfile(BaseModel):
    """L0 basic_info of the current user only (never another speaker)."""

    name: str | None = None
    age: str | None = None
    gender: str | None = None
    occupation: str | None = None
    location: str | None = None


class ReconcileOp(BaseModel):
    """One reconcile decision; `fact` indexes new_facts, `id` names an existing memory."""

    op: OpName
    # strict: `"id": true` or `"fact": "0"` is a reply that breaks the schema, not memory 1 or fact 0
    fact: StrictInt | None = Field(default=None, description="index into new_facts (ADD/UPDATE/SUPERSEDE/NOOP)")
    id: StrictInt | None = Field(default=None, description="id of an existing memory (UPDATE/SUPERSEDE/DELETE/NOOP)")


_EXTRACT_EN = """Extract durable memories from a conversation seen from the current user's point of view.

Speakers: `[user]` is the current user (their name, if known, is on the first line "The user's name is X").
`[Name]` (any other bracketed name) is another real person, not the AI. `[assistant]` is the AI assistant.
`[system]` and `[tool]` lines are context, never a speaker's own statements.

Rules:
- A fact about the current user reads "The user ..." with subject "user" and owner "user".
- A fact about another named person names them ("John is a nurse in Berlin.") with subject "John" and
  owner "user" -- a named human is never owner "agent", even though they speak on the assistant role.
- People the user talks about (e.g. "my friend Jack is a chef") are facts about them by name
  (subject "Jack", text "Jack, the user's friend, is a chef.").
- What the AI assistant suggested, produced or decided is about the assistant: subject "assistant",
  owner "agent". It is never the user's fact unless the user adopts it.
- One fact per sentence; skip greetings, questions and small talk. Nothing to remember -> facts = [].
- profile describes ONLY the current user (name from the name line; their own job, city, age).
  Never put another person's job or city into profile. Unknown fields are null."""

_EXTRACT_ZH = """从当前用户的视角，从对话中抽取可长期保存的记忆。

说话人：`[user]` 是当前用户（若已知姓名，第一行写作“用户名叫X”）。`[姓名]`（任何其他方括号里的名字）
是另一位真人，不是 AI。`[assistant]` 是 AI 助手。`[system]` 与 `[tool]` 只是上下文，不是说话人的陈述。

规则：
- 当前用户的事实写作“用户……”，subject 为 "user"，owner 为 "user"。
- 其他具名真人的事实以姓名为主体（“John是柏林的护士。”），subject 为该姓名，owner 为 "user"；
  具名真人即使使用 assistant 角色，也绝不是 owner "agent"。
- 用户提到的第三方（如“我的朋友Jack是厨师”）以其姓名为主体（subject "Jack"）。
- AI 助手给出的建议、方案或产出以 assistant 为主体：subject "assistant"，owner "agent"；
  除非用户采纳，否则不是用户的事实。
- 每句一个事实；跳过寒暄、提问和闲聊。没有可记的内容时 facts = []。
- profile 只描述当前用户（姓名取自姓名行；本人的职业、城市、年龄）。绝不能把他人的职业或城市写进 profile。
  未知字段为 null。"""


class ExtractFacts(dspy.Signature):
    __doc__ = _EXTRACT_EN

    conversation: str = dspy.InputField(desc="the rendered conversation")
    facts: list[ExtractedFact] = dspy.OutputField(desc="facts to remember; [] when there are none")
    profile: BasicProfile = dspy.OutputField(desc="updates to the current user's basic profile")


ExtractFactsZh = ExtractFacts.with_instructions(_EXTRACT_ZH)


class ExtractWorking(dspy.Signature):
    """Extract what is worth keeping from an agent's working (coding) trajectory.

    experiences: reusable lessons the agent learned (what failed, what fixed it, how to do it next time),
    each one self-contained; subject "assistant", owner "agent".
    facts: durable facts about the user or their project stated in the trajectory ("The user's project
    uses Python 3.11."), subject "user" (or the person's name), owner "user"; what the AI produced is
    owner "agent". Routine steps with nothing to learn -> both lists empty."""

    trajectory: str = dspy.InputField(desc="the rendered working trajectory")
    experiences: list[ExtractedFact] = dspy.OutputField(desc="lessons learned; [] when there are none")
    facts: list[ExtractedFact] = dspy.OutputField(desc="durable facts; [] when there are none")


class ReconcileFacts(dspy.Signature):
    """Decide how new facts change the existing memories of one user.

    For each new fact (by its index in new_facts) choose one op:
    ADD (new information), UPDATE (same subject, refines an existing memory: give its id),
    SUPERSEDE (same subject, replaces an outdated memory such as a moved city or changed job: give its id),
    NOOP (already known: give the id that already says it). DELETE an existing id only when a new fact
    about the SAME subject says it is no longer true.
    NEVER UPDATE, SUPERSEDE or DELETE across subjects: "The user likes coffee" and "John likes coffee" are
    two separate facts and both stay. Only ids listed in existing may be named.
    Return the list of ops; return [] only when nothing changes."""

    new_facts: str = dspy.InputField(desc='JSON list of {"index", "text", "subject", "owner"}')
    existing: str = dspy.InputField(desc='JSON list of {"id", "text", "subject", "owner"} retrieved by similarity')
    ops: list[ReconcileOp] = dspy.OutputField(desc="the ops; [] means no changes")


__all__ = [
    "BasicProfile",
    "ExtractFacts",
    "ExtractFactsZh",
    "ExtractWorking",
    "ExtractedFact",
    "ReconcileFacts",
    "ReconcileOp",
]
