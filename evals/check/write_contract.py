"""The write contract checked on every successful write, not only under faults.

Why: the offline model never exercises most promises of a write (history kept whole, a request id
written once, a store that reopens to the same answers, one user's writes serialised), so a bug in
them moves no score. Each check here is a pure function from what the harness observed to
(kind, witness) pairs; the replayer gathers the observations.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from evals.check.checker import consistency_anomalies, short_diff
from evals.core.prompt_reading import Said, read_messages, user_name
from evals.core.rows import is_live
from evals.core.store_state import StoreState, canonical, diff_states
from evals.core.subject_reading import same_person as same_subject
from evals.core.subject_reading import unlabelled_memory_subject as memory_subject
from evals.record import AnomalyKind, Witnessed

HISTORY_LIMIT = 2000  # HyMemoryClient's documented history_limit: non-user messages are cut to it plus "…"


def history_block(raw_messages: list[dict[str, Any]], limit: int = HISTORY_LIMIT) -> list[Said]:
    """What `history()` must return for one chat write: user messages whole and named by the block's name
    line, the others cut to `limit`, a system message under its role only, a tool message with its tool name."""
    messages = read_messages(raw_messages)
    name = user_name(messages)
    out = []
    for m in messages:
        content = m.content if m.role == "user" or len(m.content) <= limit else m.content[:limit] + "…"
        who = name if m.role == "user" else (m.name if m.role in ("assistant", "tool") else None)
        if m.role == "assistant" and (who or "").lower() == "assistant":
            who = None
        out.append(Said(role=m.role, name=who, content=content))
    return out


def history_mismatch(expected: list[Said], actual: list[Any]) -> str | None:
    """The first difference between the messages written so far and `history()`, or None."""
    got = [Said(role=getattr(m, "role", None) or m["role"], name=_get(m, "name"), content=_get(m, "content") or "")
           for m in actual]
    for i, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want != have:
            at = next((k for k, (x, y) in enumerate(zip(want.content, have.content, strict=False)) if x != y),
                      min(len(want.content), len(have.content)))
            start = max(0, at - 40)
            return (f"message {i}: wrote {want.role}/{want.name!r} ({len(want.content)} characters), history has "
                    f"{have.role}/{have.name!r} ({len(have.content)} characters); from character {at}: wrote "
                    f"{want.content[start:at + 60]!r}, history {have.content[start:at + 60]!r}")
    if len(expected) != len(got):
        return f"wrote {len(expected)} messages, history has {len(got)}"
    return None


def _get(message: Any, field: str) -> Any:
    return message.get(field) if isinstance(message, dict) else getattr(message, field, None)


PROFILE_FIELDS = ("age", "gender", "occupation", "location")  # BasicProfile's fields besides the name
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_CJK = re.compile(r"[\u3400-\u9fff]")


def profile_kept(raw_messages: list[dict[str, Any]], prompts: list[dict[str, str]], profile: dict[str, Any],
                 earlier: dict[str, str] | None = None) -> list[Witnessed]:
    """After a successful chat write, `profile()` holds what the user stated in it (spec: later statements win),
    and still holds what the user stated in earlier writes (`earlier`, field -> value) for every field this write's
    extraction reply proposed nothing for: a merge never drops a field it was not given.

    Stated: the user's name when a user message is named, and each profile value of the write's extraction
    reply that the user's own messages of this write contain as a whole word (as the user wrote it). That is
    the part of the reply the engine's documented filter (a value only a named human's words support, or a named
    human's name, is not the user's) can never drop: a value a named human also said stays when the user said it.
    A value the model paraphrased ("dev" for "developer") is not checked.
    """
    found: list[Witnessed] = []
    proposed, stated = _extracted_profile(prompts), stated_profile(raw_messages, prompts)
    for field, value in (earlier or {}).items():
        if proposed.get(field) is None and field not in stated and str(profile.get(field) or "").strip() != value:
            found.append((AnomalyKind.PROFILE_UPDATE_LOST, f"the user stated {field} {value!r} in an earlier write and "
                          f"this write proposed no {field}, but profile() has {profile.get(field)!r} after it: {profile}"))
    for field, value in stated.items():
        if str(profile.get(field) or "").strip() == value:
            continue
        if field == "name":
            found.append((AnomalyKind.PROFILE_UPDATE_LOST, f"the user is named {value!r} in this write, but profile() "
                          f"has name {profile.get('name')!r} after it: {profile}"))
        else:
            found.append((AnomalyKind.PROFILE_UPDATE_LOST, f"the user said {field} {value!r} in this write "
                          f"and the extraction proposed it, but profile() has {profile.get(field)!r} after it: "
                          f"{profile}"))
    return found


def stated_profile(raw_messages: list[dict[str, Any]], prompts: list[dict[str, str]]) -> dict[str, str]:
    """The profile values a chat write states (see `profile_kept`): field -> value, stripped."""
    messages = read_messages(raw_messages)
    stated: dict[str, str] = {}
    name = (user_name(messages) or "").strip()
    if name:
        stated["name"] = name
    proposed = _extracted_profile(prompts)
    said = _fold("\n".join(m.content for m in messages if m.role == "user"))
    humans = {_fold(m.name) for m in messages if m.role == "assistant" and m.name and m.name.strip()}
    for field in PROFILE_FIELDS:
        value = proposed.get(field)
        if isinstance(value, str) and _stated(_fold(value), said) and _fold(value) not in humans:
            stated[field] = value.strip()
    return stated


def _extracted_profile(prompts: list[dict[str, str]]) -> dict[str, Any]:
    """The profile object of the write's last chat extraction reply (strict JSON, as the engine reads it), or {}."""
    replies = [p.get("reply") for p in prompts if p.get("site") == "lm.extract" and p.get("reply") is not None]
    if not replies:
        return {}
    text = str(replies[-1]).strip()
    fenced = _FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return {}
    profile = value.get("profile") if isinstance(value, dict) else None
    return profile if isinstance(profile, dict) else {}


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().strip()


def _stated(value: str, said: str) -> bool:
    """`value` occurs in `said` as whole words: not inside a longer word ("Ber" in "Berlin"); Chinese runs of
    two or more characters match anywhere (no word breaks)."""
    if len(value) < 2:
        return False
    if _CJK.search(value):
        return len(_CJK.findall(value)) >= 2 and value in said
    return re.search(rf"(?<![\w]){re.escape(value)}(?![\w])", said) is not None


def replay_anomalies(before: StoreState, after: StoreState, duplicate: bool | None, success: bool
                     ) -> list[Witnessed]:
    """The same request_id sent again after a successful write: nothing changes and the result says duplicate."""
    found: list[Witnessed] = []
    if canonical(before) != canonical(after):
        found.append((AnomalyKind.DOUBLE_WRITE, "replaying the same request_id changed the store: "
                      + short_diff(diff_states(before, after))))
    if duplicate is False or not success:
        found.append((AnomalyKind.DOUBLE_WRITE, f"replaying the same request_id returned success={success}, "
                                      f"duplicate={duplicate} instead of the first result marked duplicate"))
    return found


def changed_payloads(path: str, payload: Any) -> list[tuple[str, Any]]:
    """(what changed, payload) variants of a write's payload, each differing from it in one field the request
    fingerprint must cover: a speaker's name (every message of that name, so a named user stays one person),
    and the content of the last message (the first memory's text, owner and kind for already-extracted memories). Empty
    when the payload has no such field (e.g. not a list of dicts)."""
    if not isinstance(payload, list) or not payload or not all(isinstance(m, dict) for m in payload):
        return []
    out: list[tuple[str, Any]] = []
    if path == "extracted":
        first = payload[0]
        if isinstance(first.get("text"), str):
            out.append(("the first memory's text", [{**first, "text": first["text"] + " (changed)"}, *payload[1:]]))
        # the owner and kind a memory is stored with are the payload too ("agent" / "experience" when not given)
        owner = "user" if first.get("owner", "user") == "agent" else "agent"
        kind = "fact" if first.get("kind", "fact") == "experience" else "experience"
        out += [(f"the first memory's owner -> {owner!r}", [{**first, "owner": owner}, *payload[1:]]),
                (f"the first memory's kind -> {kind!r}", [{**first, "kind": kind}, *payload[1:]])]
        return out
    named = next((m["name"] for m in payload if m.get("role") in ("user", "assistant", "system")
                  and isinstance(m.get("name"), str) and m["name"].strip()), None)
    if named is not None:
        renamed = named + "2"
        out.append((f"speaker name {named!r} -> {renamed!r}",
                    [{**m, "name": renamed} if m.get("name") == named and m.get("role") != "tool" else m
                     for m in payload]))
    last = next((i for i in range(len(payload) - 1, -1, -1) if isinstance(payload[i].get("content"), str)), None)
    if last is not None:
        out.append((f"message {last}'s content", [{**m, "content": m["content"] + " (changed)"} if i == last else m
                                                  for i, m in enumerate(payload)]))
    return out


def reuse_anomalies(rid: str, results: list[tuple[str, Any]], before: StoreState, after: StoreState
                    ) -> list[Witnessed]:
    """A successful write's request_id re-sent with a changed payload (`results`: (what changed, its result)):
    each must be refused as REQUEST_ID_REUSED, and the store must not change."""
    found: list[Witnessed] = []
    for what, result in results:
        code = (getattr(result, "codes", None) or {}).get("error_code")
        if result.success or code != "REQUEST_ID_REUSED":
            found.append((AnomalyKind.REQUEST_ID_REUSE_MISSED, (
                f"request {rid} re-sent with {what} changed returned success={result.success}, "
                f"duplicate={result.duplicate}, error_code={code} instead of REQUEST_ID_REUSED")))
    if canonical(before) != canonical(after):
        found.append((AnomalyKind.REQUEST_ID_REUSE_MISSED, f"re-sending request {rid} with a changed payload changed "
                      "the store: " + short_diff(diff_states(before, after))))
    return found


def user_rows(state: StoreState, user_id: str) -> StoreState:
    """The rows of one user in every table (each whole: ids and timestamps too), without the FAISS part."""
    return StoreState(tables={t: [r for r in rows if r.get("user_id") == user_id] for t, rows in state.tables.items()},
                      faiss={})


def cross_user_anomalies(user: str, stranger: str, rid: str, result: Any, before: StoreState, after: StoreState,
                         searches: dict[tuple[str, str], list[tuple[int, float]]],
                         user_searched_before: dict[str, list[tuple[int, float]]]) -> list[Witnessed]:
    """Another user (`stranger`) writes the case's first payload, under the case user's `rid`, to the case's store.

    Both users' data share the store but nothing else: the write succeeds as a new one (not a duplicate, not
    REQUEST_ID_REUSED), the case user's rows stay as they were (every column), and every search answers only
    the searching user's memories, the case user's the same as before. `searches`: (searching user, query) ->
    (id, score), k = every live memory of the store; `user_searched_before`: query -> the case user's answers
    before the stranger's write."""
    found: list[Witnessed] = []
    code = (getattr(result, "codes", None) or {}).get("error_code")
    if result.duplicate or not result.success:
        found.append((AnomalyKind.CROSS_USER_LEAK, (
            f"user {stranger!r} writing under request_id {rid!r}, which user {user!r} used, returned "
            f"success={result.success}, duplicate={result.duplicate}, error_code={code}: request ids are per user")))
    changed = diff_states(user_rows(before, user), user_rows(after, user))
    if changed:
        found.append((AnomalyKind.CROSS_USER_LEAK, f"user {stranger!r}'s write changed user {user!r}'s rows: "
                      + short_diff(changed)))
    owner = {row.get("id"): row.get("user_id") for row in after.tables.get("memories", [])}
    for (who, query), hits in sorted(searches.items()):
        foreign = [(mid, owner.get(mid)) for mid, _ in hits if owner.get(mid) != who]
        if foreign:
            found.append((AnomalyKind.CROSS_USER_LEAK, f"user {who!r}'s search {query[:80]!r} returned "
                          f"memories of other users (id, user): {foreign[:5]}"))
        elif who == user and query in user_searched_before and user_searched_before[query] != hits:
            found.append((AnomalyKind.CROSS_USER_LEAK, f"user {user!r}'s search {query[:80]!r} returned {hits} after "
                          f"user {stranger!r}'s write, {user_searched_before[query]} before"))
    return found


_READ_FIELDS = ("text", "subject", "owner", "kind", "request_id", "created_at", "updated_at")


def live_rows(state: StoreState, user_id: str) -> list[dict[str, Any]]:
    """The user's live memory rows (neither superseded nor deleted), oldest (lowest id) first."""
    return sorted((r for r in state.tables.get("memories", []) if r.get("user_id") == user_id
                   and is_live(r)), key=lambda r: r["id"])


def subjectless_misfiled(sent: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """Each memory sent without a subject, against the live row holding its text: filed as the harness reads
    it (`evals.core.subject_reading`), not by the engine's own rule, so a bug in that rule shows here."""
    found = []
    by_text = {row.get("text"): row for row in rows}
    for memory in sent:
        row = by_text.get(memory.get("text"))
        want = memory_subject(str(memory.get("text")), memory.get("owner"))
        if row is not None and not same_subject(row.get("subject"), want):
            found.append(f"{memory.get('text')!r} (owner {memory.get('owner')!r}), sent without a subject, was filed "
                         f"under {row.get('subject')!r}; the harness reads {want!r}")
    return found


def read_anomalies(user_id: str, state: StoreState, memories: list[dict[str, Any]],
                   searches: dict[tuple[str, int], list[tuple[int, float]]]) -> list[Witnessed]:
    """What the reads answer, against the store's live rows after a write (`READ_WRONG`).

    Why: every other check sorts search answers by id and asks for every live memory, so the ranking, `k` and
    get_all's filter went unchecked. `memories`: get_all(); `searches`: (query, k) -> (id, score) in the engine's
    order. get_all must be exactly the live rows, oldest first, each field as stored, with created_at <=
    updated_at; a search with k = every live memory must answer each once, best first (scores non-increasing,
    ties to the lower id); one with a smaller k, the first k of that answer."""
    found: list[Witnessed] = []
    live = live_rows(state, user_id)
    got = [m.get("id") for m in memories]
    if got != [r["id"] for r in live]:
        found.append((AnomalyKind.READ_WRONG, f"get_all() answered ids {got[:20]}, the live rows are "
                      f"{[r['id'] for r in live][:20]} (oldest first)"))
    else:
        for memory, row in zip(memories, live, strict=True):
            wrong = [f for f in _READ_FIELDS if memory.get(f) != row.get(f)]
            if wrong:
                found.append((AnomalyKind.READ_WRONG, f"get_all()'s memory {row['id']} has "
                              + ", ".join(f"{f}={memory.get(f)!r}" for f in wrong) + " but the row "
                              + ", ".join(f"{f}={row.get(f)!r}" for f in wrong)))
                break
    stamped = next((r for r in live if None not in (r.get("created_at"), r.get("updated_at"))
                    and r["created_at"] > r["updated_at"]), None)
    if stamped is not None:
        found.append((AnomalyKind.READ_WRONG, f"memory {stamped['id']} ({str(stamped.get('text'))[:60]!r}) was "
                      f"created at {stamped['created_at']} after its last update at {stamped['updated_at']}"))
    ids = {r["id"] for r in live}
    full = {query: hits for (query, k), hits in searches.items() if k >= len(live)}
    for (query, k), hits in sorted(searches.items()):
        where = f"search({query[:60]!r}, k={k})"
        if len(hits) > k:
            found.append((AnomalyKind.READ_WRONG, f"{where} answered {len(hits)} memories"))
        elif k >= len(live) and sorted(mid for mid, _ in hits) != sorted(ids):
            found.append((AnomalyKind.READ_WRONG, f"{where} answered ids {sorted(mid for mid, _ in hits)[:20]}, "
                          f"the live memories are {sorted(ids)[:20]}"))
        elif any((-s, mid) > (-t, nid) for (mid, s), (nid, t) in zip(hits, hits[1:], strict=False)):
            found.append((AnomalyKind.READ_WRONG, f"{where} answered {hits[:8]}: not best first"))
        elif query in full and k < len(live) and hits != full[query][:k]:
            found.append((AnomalyKind.READ_WRONG, f"{where} answered {hits}, the first {k} of "
                          f"k={len(live)}'s answer are {full[query][:k]}"))
    return found


def reopen_anomalies(before: StoreState | None, after: StoreState | None, reopened: dict[str, Any],
                     references: dict[str, dict[str, Any]]) -> list[Witnessed]:
    """Close and reopen: the same logical state, and the same search answers as each reference (before
    closing; an index rebuilt from SQLite). A reopen that rebuilds the index is fine; serving a stale one is not."""
    found: list[Witnessed] = []
    if before is not None and after is not None and canonical(before) != canonical(after):
        found.append((AnomalyKind.REOPEN_DIVERGED, "state changed across close and reopen: "
                      + short_diff(diff_states(before, after))))
    for label, other in references.items():
        for query in sorted(set(reopened) | set(other)):
            if reopened.get(query) != other.get(query):
                found.append((AnomalyKind.REOPEN_DIVERGED, f"search {query[:80]!r} after reopening returned (id, score) "
                              f"{reopened.get(query)} but {other.get(query)} {label}"))
                break
    return found


def concurrency_anomalies(calls: list[tuple[str, str, list[dict]]], results: list[Any], history: list[Any],
                          episodes: int, state: StoreState, dim: int) -> list[Witnessed]:
    """One user's writes sent from several threads at once, each request_id by more than one thread.

    `calls`: (path, request_id, messages) per thread, `results` in the same order. Each request id must be
    written exactly once (every other sender told duplicate), each success must land (episode and
    history), and history must be the written blocks whole, in some order, never interleaved.
    """
    found: list[Witnessed] = []
    by_rid: dict[str, list[Any]] = {}
    for (_, rid, _), result in zip(calls, results, strict=True):
        by_rid.setdefault(rid, []).append(result)
    written = {rid for rid, rs in by_rid.items() if any(r is not None and r.success and not r.duplicate for r in rs)}
    for rid, rs in sorted(by_rid.items()):
        fresh = [r for r in rs if r is not None and r.success and not r.duplicate]
        if len(fresh) > 1:
            found.append((AnomalyKind.DOUBLE_WRITE, f"request {rid} sent by {len(rs)} threads at once was written "
                                          f"{len(fresh)} times"))
        failed = [r for r in rs if r is None or not r.success]
        if fresh and failed:
            found.append((AnomalyKind.CONCURRENT_WRITE_LOST, f"request {rid}: one sender succeeded, another failed "
                                                   f"instead of being told duplicate: {_codes(failed[0])}"))
    if episodes != len(written):
        found.append((AnomalyKind.CONCURRENT_WRITE_LOST, f"{len(written)} writes succeeded, the episode counter says "
                                               f"{episodes}"))
    blocks = {rid: history_block(messages) for path, rid, messages in calls if path == "chat" and rid in written}
    got = [Said(role=_get(m, "role"), name=_get(m, "name"), content=_get(m, "content") or "") for m in history]
    position, left = 0, dict(blocks)
    while position < len(got):
        match = next((rid for rid, block in left.items() if got[position:position + len(block)] == block), None)
        if match is None:
            found.append((AnomalyKind.CONCURRENT_WRITE_INTERLEAVED, f"history message {position} "
                          f"({got[position].role}: {got[position].content[:100]!r}) starts no written block whole"))
            break
        position += len(left.pop(match))
    else:
        if left:
            found.append((AnomalyKind.CONCURRENT_WRITE_LOST, f"the messages of {sorted(left)} are missing from history"))
    found += [(a.kind, a.witness) for a in consistency_anomalies(state, dim)]
    return list(dict.fromkeys(found))


def _codes(result: Any) -> str:
    if result is None:
        return "raised"
    return f"success={result.success} error_code={getattr(result, 'error_code', None)}"


__all__ = ["HISTORY_LIMIT", "changed_payloads", "concurrency_anomalies", "cross_user_anomalies", "history_block",
           "history_mismatch", "reopen_anomalies", "replay_anomalies", "reuse_anomalies", "user_rows"]
