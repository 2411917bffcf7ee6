"""The prompt contract checked: the conversation, the name line and the candidates the prompts showed, against the
case's raw messages, read by `evals.core.prompt_reading` (not by `hymem.render`, whose bugs its own parser shares)."""

from __future__ import annotations

import difflib
import operator
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, repeat
from typing import Any

from evals.core.chunks import ChunkMemo, Chunks
from evals.core.prompt_reading import (
    NAME_LINE,
    NAME_STARTS,
    Said,
    conversation_of,
    label_of,
    languages,
    read_messages,
    section_json,
    structure,
    user_name,
)
from evals.core.row_passes import ListMemo
from evals.record import AnomalyKind, Witnessed


def check_conversation(messages: list[Said], text: str) -> list[Witnessed]:
    """(kind, witness) for every way `text` breaks the prompt contract for `messages`."""
    name = user_name(messages)
    langs = languages(messages)
    expected: list[tuple[str, str]] = [("header", label_of(m)) for m in messages]
    if name is not None:
        expected.insert(0, ("name", name))
    actual = structure(text)
    content_lines = {line for m in messages for line in m.content.splitlines()}
    found: list[Witnessed] = []

    def key(item: tuple[str, str, int, str]) -> tuple[str, str]:
        kind, value, _, line = item
        return (kind, _name_in(line) if kind == "name" else value)

    def show(item: tuple[str, str]) -> str:
        return f"The user's name is {item[1]}" if item[0] == "name" else f"[{item[1]}]: …"

    def extra(item: tuple[str, str, int, str]) -> None:
        kind, _, number, line = item
        if line in content_lines or any(line in c for c in content_lines):
            found.append((AnomalyKind.FORGED_HEADER, f"line {number + 1} {line[:120]!r} is message content a reader takes "
                                           f"for a {'name line' if kind == 'name' else 'speaker header'}"))
        elif kind == "name":
            found.append((AnomalyKind.NAME_LINE_WRONG, f"expected {'no name line' if name is None else 'one name line'}, "
                                             f"actual extra line {number + 1}: {line[:120]!r}"))
        else:
            found.append((AnomalyKind.PROMPT_LABEL_WRONG, f"expected no header here, actual line {number + 1}: {line[:120]!r}"))

    def missing(item: tuple[str, str]) -> None:
        kind = AnomalyKind.NAME_LINE_WRONG if item[0] == "name" else AnomalyKind.PROMPT_LABEL_WRONG
        found.append((kind, f"expected {show(item)!r}, actual: no such line"))

    matcher = difflib.SequenceMatcher(a=expected, b=[key(a) for a in actual], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace":
            for want, got in zip(expected[i1:i2], actual[j1:j2], strict=False):
                if want[0] == "name" or got[0] == "name":
                    found.append((AnomalyKind.NAME_LINE_WRONG, f"expected {show(want)!r}, actual line {got[2] + 1}: "
                                                     f"{got[3][:120]!r}"))
                else:
                    found.append((AnomalyKind.PROMPT_LABEL_WRONG, f"expected '[{want[1]}]: …', actual line {got[2] + 1}: "
                                                        f"{got[3][:120]!r}"))
            for want in expected[i1 + (j2 - j1):i2]:
                missing(want)
            for got in actual[j1 + (i2 - i1):j2]:
                extra(got)
        elif op == "delete":
            for want in expected[i1:i2]:
                missing(want)
        else:
            for got in actual[j1:j2]:
                extra(got)
    names = [a for a in actual if a[0] == "name" and _name_in(a[3]) == name]
    if name is not None and names:
        line = names[0][3]
        if names[0][2] != 0:
            found.append((AnomalyKind.NAME_LINE_WRONG, f"expected the name line first, actual line {names[0][2] + 1}: "
                                             f"{line[:120]!r}"))
        lang = "zh" if line.startswith(NAME_STARTS[1]) else "en"
        if lang not in langs or line != NAME_LINE[lang] + name:
            wanted = " or ".join(repr(NAME_LINE[x] + name) for x in sorted(langs))
            found.append((AnomalyKind.NAME_LINE_WRONG,
                          f"expected {wanted}, actual line {names[0][2] + 1}: {line[:120]!r}"))
    return found


def _name_in(line: str) -> str:
    start = next(s for s in NAME_STARTS if line.startswith(s))
    return line[len(start):].strip()


def check_prompts(raw_messages: list[dict[str, Any]], prompts: list[dict[str, str]], where: str
                  ) -> list[Witnessed]:
    """Check every extraction prompt of one write against the write's messages; witnesses name the call."""
    messages = read_messages(raw_messages)
    found: list[Witnessed] = []
    for number, prompt in enumerate(prompts):
        text = conversation_of(prompt.get("text", ""))
        if text is None:
            continue
        for kind, witness in check_conversation(messages, text):
            found.append((kind, f"{where}, call {number + 1} ({prompt.get('site')}): {witness}"))
    return list(dict.fromkeys(found))


def check_candidates(prompts: list[dict[str, str]], proposed: list[dict[str, Any]], live: Sequence[dict[str, Any]],
                     k: int, where: str) -> list[Witnessed]:
    """The reconcile prompt's existing memories are the retrieval the engine promises: for each kind among the
    new facts (n of them), between min(k, L) and min(n*k, L) of the user's L live memories of that kind, each one
    live and of a kind some new fact has. For a one-fact write that is exactly min(k, L), so a retrieval that
    drops or adds a candidate is seen whatever the memories say. `live` is the user's live memories before the
    write, `proposed` the write's proposed facts (their kinds), `k` the candidates per fact the harness set."""
    found: list[Witnessed] = []
    by_id: Mapping[Any, Any] | None = None
    live_of: Counter[str] = Counter()
    for number, prompt in enumerate(prompts):
        if prompt.get("site") != "lm.reconcile":
            continue
        text = prompt.get("text", "")
        facts = section_json(text, "new_facts", "\n\n[[ ## existing ## ]]")
        existing = section_json(text, "existing", "\n\nRespond with")
        if not isinstance(facts, list) or not isinstance(existing, list) or len(facts) != len(proposed):
            continue
        call = f"{where}, call {number + 1} (lm.reconcile)"
        kinds = [str(f.get("kind") or "fact") for f in proposed]
        if by_id is None:  # once per write, not per reconcile prompt: each reads every live memory
            by_id, raw_counts = _kinds_by_id(live)
            live_of = _kind_counts(raw_counts)
        shown = [e.get("id") if isinstance(e, dict) else None for e in existing]
        strays = [i for i in shown if _kind(by_id.get(i, _ABSENT)) not in kinds]
        if strays:
            found.append((AnomalyKind.RECONCILE_CANDIDATES_WRONG, f"{call}: existing memories {strays} are not live "
                                                                  f"memories of the user of a new fact's kind"))
        for kind in sorted(set(kinds)):
            n, total = kinds.count(kind), live_of[kind]
            count = sum(1 for i in shown if i in by_id and _kind(by_id[i]) == kind)
            low, high = min(k, total), min(n * k, total)
            if not low <= count <= high:
                want = f"{low}" if low == high else f"{low} to {high}"
                found.append((AnomalyKind.RECONCILE_CANDIDATES_WRONG,
                              f"{call}: {count} existing {kind} memories shown for {n} new {kind}(s), expected {want} "
                              f"({total} live, {k} candidates per fact)"))
    return found


_ABSENT = object()  # an id that is no live memory's: of no kind


def _kind(raw: Any) -> str | None:
    """A memory's kind as the reconcile contract reads it ("fact" when it has none)."""
    return None if raw is _ABSENT else str(raw or "fact")


def _kinds_by_id(live: Sequence[dict[str, Any]]) -> tuple[Mapping[Any, Any], Counter[Any]]:
    """Each live memory's raw kind by its id (the last memory of an id), and how many ids have each raw kind:
    per write, over every live memory of the user, so made chunk by chunk for a state read's `Chunks`
    (`_chunked_kinds`), else from the last write's list (`ListMemo`) from its first row that is not the same
    object, when no id was there twice; else at C speed over the whole list. Both are kept for the next
    write's: read them, never change them."""
    if isinstance(live, Chunks):
        chunked = _chunked_kinds(live)
        if chunked is not None:
            return chunked
    hit = _KINDS.last("live", live)
    if (hit is not None and len(hit[2][0]) == len(hit[1])  # no id twice in the last list: each row its own entry
            and len(hit[1]) + len(live) - 2 * hit[0] <= 64 + len(live) // 8):  # few rows to take out and put in
        start, old, (old_by_id, old_counts) = hit
        by_id, counts = dict(old_by_id), Counter(old_counts)
        for row in old[start:]:
            counts[by_id.pop(row.get("id"))] -= 1
        for row in live[start:]:
            by_id[row.get("id")] = raw = row.get("kind")
            counts[raw] += 1
        if len(by_id) == len(live):  # still no id twice: the same as made whole
            counts = +counts  # kinds no id has any more left out, as a count made whole has them
            _KINDS.keep("live", live, (by_id, counts))
            return by_id, counts
    by_id = dict(zip(map(dict.get, live, repeat("id")), map(dict.get, live, repeat("kind")), strict=True))
    counts = Counter(by_id.values())
    _KINDS.keep("live", live, (by_id, counts))
    return by_id, counts


def _chunk_kinds(chunk: Sequence[dict[str, Any]]) -> tuple[dict[Any, Any], Counter[Any], Any, Any] | None:
    """A chunk's raw kinds by id, how many ids have each, and its smallest and largest id; None when an id is
    there twice or the ids are not integers in increasing order (then made whole)."""
    ids: list[Any] = list(map(dict.get, chunk, repeat("id")))
    if not all(type(i) is int for i in ids) or any(map(operator.ge, ids, ids[1:])):
        return None
    by_id = dict(zip(ids, map(dict.get, chunk, repeat("kind")), strict=True))
    return by_id, Counter(by_id.values()), (ids[0] if ids else None), (ids[-1] if ids else None)


_CHUNK_KINDS: ChunkMemo[tuple[dict[Any, Any], Counter[Any], Any, Any] | None] = ChunkMemo(_chunk_kinds)


class _KindsByChunk(Mapping[Any, Any]):
    """Raw kinds by id over chunks whose ids are distinct (each chunk's increasing, and each above the last
    chunk's): a lookup asks each chunk's map, with no map of every id made."""

    def __init__(self, maps: list[dict[Any, Any]]):
        self._maps = maps

    def __getitem__(self, key: Any) -> Any:
        for found in self._maps:
            if key in found:
                return found[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self._maps)

    def __len__(self) -> int:
        return sum(map(len, self._maps))


def _chunked_kinds(live: Chunks[dict[str, Any]]) -> tuple[Mapping[Any, Any], Counter[Any]] | None:
    """`_kinds_by_id` from each chunk's, made once per chunk (`ChunkMemo`): O(chunks) per write. None when the
    ids are not distinct integers increasing from chunk to chunk (then made as before)."""
    made = [m for m in map(_CHUNK_KINDS.of, live.chunks) if m is None or m[0]]
    if any(m is None for m in made):
        return None
    parts = [m for m in made if m is not None]
    if any(a[3] >= b[2] for a, b in zip(parts, parts[1:], strict=False)):
        return None
    counts: Counter[Any] = Counter()
    for part in parts:
        counts.update(part[1])
    return _KindsByChunk([part[0] for part in parts]), counts


# the last live rows `_kinds_by_id` read: (their kinds by id, how many ids have each raw kind)
_KINDS: ListMemo[tuple[dict[Any, Any], Counter[Any]]] = ListMemo(max_keys=1)


def _kind_counts(raw_counts: Counter[Any]) -> Counter[str]:
    """How many live memories there are of each kind, from the counts by raw kind."""
    out: Counter[str] = Counter()
    for raw, n in raw_counts.items():
        kind = _kind(raw)
        assert kind is not None
        out[kind] += n
    return out


__all__ = ["check_candidates", "check_conversation", "check_prompts"]
