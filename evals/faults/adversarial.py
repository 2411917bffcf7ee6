"""Well-formed but adversarial model replies: what a guard in the engine's code must refuse.

Why: the offline model never proposes a cross-subject merge or files a third party's statement under the
user, so the engine's guards against those are never exercised by a fault-free run. Each kind here takes
the model's real reply to the real prompt and changes exactly one decision into a forbidden one:

- ``cross_subject_update`` / ``cross_subject_supersede`` / ``cross_subject_delete`` (lm.reconcile): an op
  that changes a candidate memory of another subject than the new fact's;
- ``double_update`` (lm.reconcile): two new facts of one subject both UPDATE one candidate of that subject;
  the engine applies the first and must refuse the second (it is added instead), so neither fact is lost,
  and the memory updated in place keeps its `created_at` and moves its `updated_at`. The offline model never
  UPDATEs (it supersedes), so this is also the sweep's only in-place update;
- ``same_subject_update`` / ``same_subject_supersede`` (lm.reconcile): a new fact UPDATEs or SUPERSEDEs a
  candidate of its own subject (one of another owner first, when the prompt offers one), an op the engine may
  apply: the model rarely proposes either, so the rows an applied UPDATE or SUPERSEDE leaves (owner, kind, request
  id, timestamps, vector) were never checked. What it leaves is checked op by op (`evals.check.applied_ops`), and here:
  applied, the target holds (or is superseded by) the fact; refused, the target is kept and the fact added;
- ``third_party_as_user`` (lm.extract, lm.extract_working): a named human's fact filed under the user (subject
  "user"): a friend in a chat, or a teammate on a coding trajectory;
- ``third_party_as_assistant`` (lm.extract, lm.extract_working): a named human's fact filed under the AI (subject
  "assistant", the owner left as the model gave it), the confusion the spec's roles invite: a named human speaks
  on role=assistant;
- ``profile_from_third_party`` (lm.extract): an L0 profile update (name, occupation) taken from what a
  named human said;
- ``profile_other_name`` (lm.extract): the profile names a named user otherwise than the role=user message
  does, which is the trusted input for the name (spec 3): the profile keeps the message's name.

The engine must refuse each (both facts stay, the profile is untouched) and still succeed. A kind applies
only where the prompt offers the chance (a candidate of another subject, a named speaker's fact), which
the control run records as an opportunity so a sweep plans only faults that can fire.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evals.core.prompt_reading import NAME_LINE, conversation_of, section_json
from evals.core.rows import is_live
from evals.core.subject_reading import canonical as canonical_subject
from evals.core.subject_reading import read_subject as subject_of
from evals.record import AnomalyKind, Witnessed

CROSS_SUBJECT_ADVERSARIAL = ("cross_subject_update", "cross_subject_supersede", "cross_subject_delete")
SAME_SUBJECT_ADVERSARIAL = ("same_subject_update", "same_subject_supersede")
RECONCILE_ADVERSARIAL = (*CROSS_SUBJECT_ADVERSARIAL, "double_update", *SAME_SUBJECT_ADVERSARIAL)
THIRD_PARTY_ADVERSARIAL = ("third_party_as_user", "third_party_as_assistant")  # both paths: a fact, no profile
EXTRACT_ADVERSARIAL = (*THIRD_PARTY_ADVERSARIAL, "profile_from_third_party", "profile_other_name")
ADVERSARIAL_KINDS = (*RECONCILE_ADVERSARIAL, *EXTRACT_ADVERSARIAL)

_USER = {"user", "the user", "current user", "用户", "当前用户"}
_ASSISTANT = {"assistant", "the assistant", "ai", "agent", "助手", "ai助手"}
_RESERVED = {"user", "assistant", "system", "tool"}
_HEADER = re.compile(r"^\[([^\]\n]{1,64})\]: (.*)$")
_WORD = re.compile(r"[A-Za-z][A-Za-z-]{3,}")
_HAN_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")


def person_key(subject: Any) -> str:
    """user, assistant, or the person's name folded (the harness's own reading of a subject)."""
    text = " ".join(str(subject or "").split()).casefold()
    return "user" if text in _USER else "assistant" if text in _ASSISTANT else text


def _about(item: dict[str, Any]) -> str:
    """Who a fact or memory of a reconcile prompt is about, as the adversary reads it: a relative of the user its
    sentence names ("用户妈妈也是护士", "The user's mother is a nurse"), whatever its label says, else its label.
    Why not the engine's `fact_subject`: an adversary that reads subjects through the function under test cannot
    offer the merge that function's bug lets through (a model's mislabel is exactly where the guard matters)."""
    named = subject_of(str(item.get("text") or ""))
    if named is not None and canonical_subject(named) not in ("user", "assistant") and ("'s " in named or "的" in named):
        return person_key(named)
    return person_key(item.get("subject"))


def _json(text: str | None) -> Any:
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def reconcile_reply(kind: str, prompt: str, reply: str) -> tuple[str, dict[str, Any]] | None:
    """The real reconcile reply with one cross-subject merge spliced in, and what was injected; None when the
    prompt has no new fact and candidate of different subjects (or the reply is not a JSON object)."""
    facts = section_json(prompt, "new_facts", "\n\n[[ ## existing ## ]]")
    existing = section_json(prompt, "existing", "\n\nRespond with")
    decoded = _json(reply)
    if not isinstance(facts, list) or not isinstance(existing, list) or not isinstance(decoded, dict):
        return None
    if kind == "double_update":
        return _double_update(facts, existing, decoded)
    if kind in SAME_SUBJECT_ADVERSARIAL:
        return _same_subject(kind.removeprefix("same_subject_").upper(), facts, existing, decoded)
    pairs = [(f, c) for f in facts for c in existing
             if isinstance(f, dict) and isinstance(c, dict) and _about(f) != _about(c)]
    if not pairs:
        return None
    # Two different people, neither the user, when the prompt offers them (Kate's fact and John's memory, "the
    # user's sister" and "the user's mother"): a guard that only tells the user from everyone else, or that
    # compares subjects loosely, lets that merge through although it refuses every user-vs-named one.
    pair = next((p for p in pairs if "user" not in (_about(p[0]), _about(p[1]))), pairs[0])
    fact, target = pair
    op = kind.removeprefix("cross_subject_").upper()
    ops = [o for o in decoded.get("ops") or [] if isinstance(o, dict) and o.get("id") != target["id"]
           and (op == "DELETE" or o.get("fact") != fact["index"])]
    ops.append({"op": op, "fact": fact["index"], "id": target["id"]})
    injected = {"op": op, "fact_text": fact.get("text"), "fact_subject": fact.get("subject"),
                "target_id": target["id"], "target_text": target.get("text"), "target_subject": target.get("subject")}
    return json.dumps({**decoded, "ops": ops}, ensure_ascii=False), injected


def _double_update(facts: list[Any], existing: list[Any], decoded: dict[str, Any]
                   ) -> tuple[str, dict[str, Any]] | None:
    """The reply with two new facts of one subject both UPDATing one candidate of that subject (the ops on those
    facts and that candidate replaced); None when no candidate shares its subject with two new facts."""
    for target in existing:
        if not isinstance(target, dict):
            continue
        same = [f for f in facts if isinstance(f, dict) and isinstance(f.get("index"), int)
                and person_key(f.get("subject")) == person_key(target.get("subject"))]
        if len(same) < 2 or same[0].get("text") == same[1].get("text"):
            continue
        first, second = same[0], same[1]
        ops = [o for o in decoded.get("ops") or [] if isinstance(o, dict) and o.get("id") != target["id"]
               and o.get("fact") not in (first["index"], second["index"])]
        ops += [{"op": "UPDATE", "fact": first["index"], "id": target["id"]},
                {"op": "UPDATE", "fact": second["index"], "id": target["id"]}]
        injected = {"op": "UPDATE", "target_id": target["id"], "target_text": target.get("text"),
                    "target_subject": target.get("subject"), "fact_texts": [first.get("text"), second.get("text")]}
        return json.dumps({**decoded, "ops": ops}, ensure_ascii=False), injected
    return None


def _same_subject(op: str, facts: list[Any], existing: list[Any], decoded: dict[str, Any]
                  ) -> tuple[str, dict[str, Any]] | None:
    """The reply with one new fact UPDATing or SUPERSEDing a candidate of the same subject (as the adversary reads
    it) and another text: one of another owner first, else the most similar (the first listed). The ops on that
    fact and that candidate are replaced. None when no such pair is offered."""
    pairs = [(f, c) for f in facts for c in existing if isinstance(f, dict) and isinstance(c, dict)
             and isinstance(f.get("index"), int) and _about(f) == _about(c) and f.get("text") != c.get("text")]
    if not pairs:
        return None
    fact, target = next((p for p in pairs if p[0].get("owner") != p[1].get("owner")), pairs[0])
    ops = [o for o in decoded.get("ops") or [] if isinstance(o, dict) and o.get("id") != target["id"]
           and o.get("fact") != fact["index"]]
    ops.append({"op": op, "fact": fact["index"], "id": target["id"]})
    injected = {"op": op, "fact_text": fact.get("text"), "fact_subject": fact.get("subject"),
                "fact_owner": fact.get("owner"), "target_id": target["id"], "target_text": target.get("text"),
                "target_subject": target.get("subject"), "target_owner": target.get("owner")}
    return json.dumps({**decoded, "ops": ops}, ensure_ascii=False), injected


def _speakers(prompt: str) -> tuple[dict[str, list[str]], list[str]]:
    """Named humans' lines by name, and the user's lines, from the prompt's rendered conversation."""
    conversation = conversation_of(prompt) or ""
    named: dict[str, list[str]] = {}
    users: list[str] = []
    current: list[str] | None = None
    for line in conversation.split("\n"):
        match = _HEADER.match(line)
        if match:
            label = match.group(1)
            current = users if label == "user" else None if label.lower() in _RESERVED else \
                named.setdefault(label, [])
            line = match.group(2)
        if current is not None:
            current.append(line)
    return named, users


def extract_reply(kind: str, prompt: str, reply: str) -> tuple[str, dict[str, Any]] | None:
    """The real extraction reply with a third party's statement filed under the user (a fact, or the profile)."""
    decoded = _json(reply)
    if not isinstance(decoded, dict):
        return None
    if kind == "profile_other_name":
        user = _user_name(prompt)
        if user is None:
            return None
        other = "Alex" if user.casefold() != "alex" else "Sam"  # any other name than the name line's
        return json.dumps({**decoded, "profile": {**(decoded.get("profile") or {}), "name": other}},
                          ensure_ascii=False), {"name": user, "proposed": other}
    named, users = _speakers(prompt)
    if not named:
        return None
    by_class = {person_key(name): name for name in named}
    if kind in THIRD_PARTY_ADVERSARIAL:
        facts = decoded.get("facts") or []
        index = next((i for i, f in enumerate(facts) if isinstance(f, dict)
                      and person_key(f.get("subject")) in by_class), None)
        if index is None:
            return None
        fact = dict(facts[index])
        speaker = by_class[person_key(fact.get("subject"))]
        filed = ({"subject": "user", "owner": "user"} if kind == "third_party_as_user" else
                 {"subject": "assistant", "owner": fact.get("owner", "user")})
        facts = [*facts[:index], {**fact, **filed}, *facts[index + 1:]]
        return json.dumps({**decoded, "facts": facts}, ensure_ascii=False), {"text": fact.get("text"),
                                                                                "speaker": speaker, **filed}
    user_text = "\n".join(users).casefold()
    user = _user_name(prompt)
    for speaker, lines in named.items():
        if user is not None and speaker.casefold() == user.casefold():
            continue  # a namesake of the user: their name is the user's too
        value = _their_word("\n".join(lines), f"{user_text}\n{(user or '').casefold()}", speaker)
        if value is not None:
            profile = {**(decoded.get("profile") or {}), "name": speaker, "occupation": value}
            return json.dumps({**decoded, "profile": profile}, ensure_ascii=False), {"speaker": speaker,
                                                                                      "values": [speaker, value]}
    return None


def _user_name(prompt: str) -> str | None:
    """The name on the rendered conversation's name line, if it has one."""
    first = (conversation_of(prompt) or "").split("\n", 1)[0]
    for prefix in NAME_LINE.values():
        if first.startswith(prefix):
            return first[len(prefix):].strip() or None
    return None


def _their_word(said: str, user_text: str, speaker: str) -> str | None:
    """A word only the named human said (never the user): the last such English word, or two Han characters."""
    words = [w for w in _WORD.findall(said) if w.casefold() not in user_text and w.casefold() != speaker.casefold()]
    if words:
        return words[-1]
    for run in reversed(_HAN_RUN.findall(said)):
        for end in range(len(run), 1, -1):
            pair = run[end - 2:end]
            if pair not in user_text and pair not in speaker:
                return pair
    return None


def adversarial_reply(kind: str, prompt: str, reply: str) -> tuple[str, dict[str, Any]] | None:
    if kind in RECONCILE_ADVERSARIAL:
        return reconcile_reply(kind, prompt, reply)
    return extract_reply(kind, prompt, reply)


def adversarial_anomalies(kind: str, injected: dict[str, Any], user_id: str, before: Any, after: Any
                          ) -> list[Witnessed]:
    """What the store shows after an adversarial reply the engine had to refuse (StoreStates before/after)."""
    found: list[Witnessed] = []
    memories = {row["id"]: row for row in after.tables.get("memories", [])}
    if kind == "double_update":
        found += _double_update_anomalies(injected, user_id, before, memories)
    elif kind in SAME_SUBJECT_ADVERSARIAL:
        found += _same_subject_anomalies(injected, user_id, before, memories)
    elif kind in CROSS_SUBJECT_ADVERSARIAL:
        target = memories.get(injected["target_id"])
        kept = target is not None and is_live(target) \
            and target.get("text") == injected["target_text"]
        if not kept:
            now = "gone" if target is None else ("superseded" if target.get("superseded_by") is not None else
                                                "deleted" if target.get("deleted_at") is not None else
                                                f"now {target.get('text')!r} ({target.get('subject')})")
            found.append((AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED, f"{injected['op']} of memory {injected['target_id']} "
                          f"({injected['target_text']!r}, subject {injected['target_subject']}) by a fact about "
                          f"{injected['fact_subject']} ({injected['fact_text']!r}) was applied: the memory is {now}"))
        if injected["op"] != "DELETE" and injected["fact_text"] not in _live_texts(memories, user_id):
            # refused, the op's fact must still be stored (added beside the target): a refusal is no licence to drop it
            found.append((AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED, f"the refused {injected['op']} of memory "
                          f"{injected['target_id']} dropped its fact about {injected['fact_subject']} "
                          f"({injected['fact_text']!r}): it is not stored, so the merge still lost a fact"))
    elif kind in THIRD_PARTY_ADVERSARIAL:
        filed_as = injected.get("subject", "user")
        anomaly = AnomalyKind.THIRD_PARTY_AS_USER if filed_as == "user" else AnomalyKind.THIRD_PARTY_AS_AI
        for row in memories.values():
            if row.get("text") != injected["text"] or row.get("superseded_by") is not None or \
                    row.get("deleted_at") is not None:
                continue
            if person_key(row.get("subject")) == filed_as:
                found.append((anomaly, f"{injected['speaker']}'s fact {injected['text']!r} was stored "
                                       f"as memory {row['id']} with subject {row.get('subject')!r}"))
            elif row.get("owner") != injected.get("owner", "user"):
                # re-filed under the speaker, but not as the reply gave it: a named human is never owner "agent"
                found.append((anomaly, f"{injected['speaker']}'s fact {injected['text']!r} was "
                                       f"re-filed as memory {row['id']} (subject {row.get('subject')!r}) "
                                       f"with owner {row.get('owner')!r}, not the reply's "
                                       f"{injected.get('owner', 'user')!r}"))
    elif kind == "profile_other_name":
        rows = [r for r in after.tables.get("profiles", []) if r.get("user_id") == user_id]
        profile = _json(rows[0].get("basic_info")) if rows else None
        name = profile.get("name") if isinstance(profile, dict) else None
        if "profiles" in after.tables and name != injected["name"]:  # (an engine without hymem's L0 table: no check)
            found.append((AnomalyKind.PROFILE_UPDATE_LOST, f"the user is named {injected['name']!r} by the role=user "
                          f"message, the extraction proposed {injected['proposed']!r}, and profile() has name {name!r}"))
    else:
        def profile_of(state: Any) -> str:
            rows = [r for r in state.tables.get("profiles", []) if r.get("user_id") == user_id]
            return (rows[0].get("basic_info") or "") if rows else ""

        old, new = profile_of(before).casefold(), profile_of(after)
        leaked = [v for v in injected["values"] if v.casefold() in new.casefold() and v.casefold() not in old]
        if leaked:
            found.append((AnomalyKind.PROFILE_FROM_THIRD_PARTY, f"the user's profile took {leaked} from what "
                                                      f"{injected['speaker']} said: {new[:200]}"))
    return found


def _live_texts(memories: dict[Any, dict[str, Any]], user_id: str) -> set[Any]:
    """The texts of the user's live memories (neither superseded nor deleted) after the write."""
    return {row.get("text") for row in memories.values() if row.get("user_id") == user_id
            and is_live(row)}


def _same_subject_anomalies(injected: dict[str, Any], user_id: str, before: Any, memories: dict[Any, dict[str, Any]]
                            ) -> list[Witnessed]:
    """A same-subject UPDATE or SUPERSEDE is applied (the target holds the fact, or is superseded by a live memory
    that does, with the fact's subject and owner) or refused (the target kept, the fact added); never anything else.
    An applied UPDATE keeps the target's created_at and moves its updated_at."""
    op, target_id = injected["op"], injected["target_id"]
    target = memories.get(target_id)
    old = next((row for row in before.tables.get("memories", []) if row.get("id") == target_id), None)
    head = (f"{op} of memory {target_id} ({injected['target_text']!r}, {injected['target_subject']}/"
            f"{injected['target_owner']}) by the fact {injected['fact_text']!r} ({injected['fact_subject']}/"
            f"{injected['fact_owner']})")
    want = {"text": injected["fact_text"], "subject": injected["fact_subject"], "owner": injected["fact_owner"]}

    def holds(row: dict[str, Any] | None) -> list[str]:
        return [f"{f}={(row or {}).get(f)!r}" for f, v in want.items() if (row or {}).get(f) != v]

    live = target is not None and is_live(target)
    if live and target is not None and old is not None and target.get("text") == old.get("text"):  # refused
        if injected["fact_text"] not in _live_texts(memories, user_id):
            return [(AnomalyKind.APPLIED_OP_WRONG, f"{head}: the target was kept but the fact is not stored")]
        return []
    if op == "UPDATE":
        if not live:
            return [(AnomalyKind.UPDATE_WRONG, f"{head}: the memory is no longer live after it: {target}")]
        assert target is not None
        wrong = holds(target)
        if old is not None and (target.get("created_at") != old.get("created_at")
                                or not (target.get("updated_at") or 0) > (old.get("updated_at") or 0)):
            wrong.append(f"created_at {old.get('created_at')} -> {target.get('created_at')}, updated_at "
                         f"{old.get('updated_at')} -> {target.get('updated_at')}")
        return [(AnomalyKind.UPDATE_WRONG, f"{head}: applied in place, the memory has " + "; ".join(wrong))] \
            if wrong else []
    new = memories.get(target.get("superseded_by")) if target is not None else None
    if new is None or new.get("superseded_by") is not None or new.get("deleted_at") is not None:
        return [(AnomalyKind.APPLIED_OP_WRONG, f"{head}: the target is neither kept nor superseded by a live "
                 f"memory: {target}")]
    wrong = holds(new)
    return [(AnomalyKind.APPLIED_OP_WRONG, f"{head}: the memory superseding it ({new.get('id')}) has "
             + "; ".join(wrong))] if wrong else []


def _double_update_anomalies(injected: dict[str, Any], user_id: str, before: Any, memories: dict[Any, dict[str, Any]]
                             ) -> list[Witnessed]:
    """Both facts of a double UPDATE live after the write; the memory updated in place keeps its created_at and
    moves its updated_at (timestamps are left out of every state comparison)."""
    found: list[Witnessed] = []
    target_id = injected["target_id"]
    lost = [text for text in injected["fact_texts"] if text not in _live_texts(memories, user_id)]
    if lost:
        found.append((AnomalyKind.UPDATE_WRONG, f"two UPDATEs of memory {target_id} ({injected['target_text']!r}) in "
                      f"one write: {lost} not live after it (the second op on a memory already changed must be "
                      "refused and its fact added, never overwrite the first)"))
    old = next((row for row in before.tables.get("memories", []) if row.get("id") == target_id), None)
    new = memories.get(target_id)
    if old is not None and new is not None and new.get("text") != old.get("text") and (
            new.get("created_at") != old.get("created_at") or not new.get("updated_at", 0) > old.get("updated_at", 0)):
        found.append((AnomalyKind.UPDATE_WRONG, f"memory {target_id} updated in place to {new.get('text')!r}: "
                      f"created_at {old.get('created_at')} -> {new.get('created_at')}, updated_at "
                      f"{old.get('updated_at')} -> {new.get('updated_at')} (an update keeps created_at and moves "
                      "updated_at)"))
    return found


__all__ = ["ADVERSARIAL_KINDS", "CROSS_SUBJECT_ADVERSARIAL", "EXTRACT_ADVERSARIAL", "RECONCILE_ADVERSARIAL",
           "SAME_SUBJECT_ADVERSARIAL",
           "THIRD_PARTY_ADVERSARIAL",
           "adversarial_anomalies", "adversarial_reply", "person_key"]
