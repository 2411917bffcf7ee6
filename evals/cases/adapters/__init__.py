"""Public corpora as eval cases: `--dataset KIND:PATH` for LoCoMo, DuLeMon, MemoryBank and Synthetic-Persona-Chat.

Every adapter reads its corpus in place (nothing is copied into the repo), streams where the file
format allows it, and yields cases in the curated suites' format, validated by the same models.
The gold of these corpora is silver and incomplete (tag `silver-gold`): the labels say what is
known about each speaker, not everything a careful engine would store, so read recall and
attribution from them, and precision with care. Suspicious labels are flagged in `meta.flagged`
with reasons; `gold="clean"` leaves out the kinds each adapter's docstring names.

A plain `.jsonl` file or directory is delegated to `evals.cases.dataset`.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from evals.cases.adapters import dulemon, locomo, memorybank, persona_chat
from evals.cases.adapters._common import Gold, Item, Skipped
from evals.cases.dataset import Case, DatasetError, iter_cases, load_cases

ADAPTERS: dict[str, Callable[..., Iterator[Item]]] = {
    locomo.DATASET: locomo.iter_items,
    dulemon.DATASET: dulemon.iter_items,
    memorybank.DATASET: memorybank.iter_items,
    persona_chat.DATASET: persona_chat.iter_items,
}
CLEAN_DROPS: dict[str, frozenset[str]] = {
    locomo.DATASET: locomo.CLEAN_DROPS,
    dulemon.DATASET: dulemon.CLEAN_DROPS,
    memorybank.DATASET: memorybank.CLEAN_DROPS,
    persona_chat.DATASET: persona_chat.CLEAN_DROPS,
}
_KIND = re.compile(r"^([A-Za-z][A-Za-z0-9_]+):(.+)$", re.S)


def parse_spec(spec: str) -> tuple[str | None, str]:
    """("locomo", PATH) for "locomo:PATH"; (None, spec) for a plain .jsonl file or directory."""
    m = _KIND.match(str(spec))
    if not m or Path(spec).exists():
        return None, str(spec)
    kind, path = m.group(1), m.group(2)
    if kind not in ADAPTERS:
        raise DatasetError([f"{spec}: unknown dataset kind {kind!r} (known: {', '.join(sorted(ADAPTERS))})"])
    return kind, path


def iter_items(spec: str, *, gold: Gold = "all") -> Iterator[Item]:
    """Every case and skipped record of one spec, in corpus order (no sampling)."""
    if gold not in ("all", "clean"):
        raise DatasetError([f"--gold must be 'all' or 'clean', not {gold!r}"])
    kind, path = parse_spec(spec)
    if kind is None:
        yield from iter_cases(path)
        return
    yield from ADAPTERS[kind](path, gold=gold, spec=str(spec))


def iter_spec(spec: str, *, gold: Gold = "all", limit: int | None = None, sample: int | None = None,
              seed: int = 0) -> Iterator[Case]:
    """The spec's cases as a stream. `sample` draws N cases uniformly (seeded; corpus order kept) and
    has to read the whole corpus; `limit` then keeps the first `limit` cases and stops reading."""
    cases = (item for item in iter_items(spec, gold=gold) if isinstance(item, Case))
    yield from select_cases(cases, limit=limit, sample=sample, seed=seed)


def load_spec(spec: str, *, gold: Gold = "all", limit: int | None = None, sample: int | None = None,
              seed: int = 0) -> list[Case]:
    """All selected cases of one spec, or a DatasetError (plain .jsonl: the loader's all-or-nothing errors)."""
    kind, path = parse_spec(spec)
    if kind is None:
        return list(select_cases(iter(load_cases([path])), limit=limit, sample=sample, seed=seed))
    cases = list(iter_spec(spec, gold=gold, limit=limit, sample=sample, seed=seed))
    if not cases:
        raise DatasetError([f"{spec}: no cases (run `hymem-eval datasets audit {spec}` to see what was skipped)"])
    return cases


def dataset_name(case: Case) -> str:
    """The adapter's name ("locomo") for adapter cases, the file's stem for curated ones."""
    name = case.meta.get("dataset") if isinstance(case.meta, dict) else None
    return str(name) if name else (Path(case.source).stem if case.source else "cases")


def select_cases(cases: Iterator[Case], *, limit: int | None = None, sample: int | None = None,
                 seed: int = 0) -> Iterator[Case]:
    """`--sample N --seed S` then `--limit L` over a stream of cases."""
    for name, value in (("limit", limit), ("sample", sample)):
        if value is not None and value < 1:
            raise DatasetError([f"--{name} must be at least 1, not {value}"])
    if sample is not None:
        cases = iter(_reservoir(cases, sample, seed))
    return itertools.islice(cases, limit) if limit is not None else cases


def _reservoir(cases: Iterator[Case], n: int, seed: int) -> list[Case]:
    """A uniform sample of n cases in one pass (Algorithm R), returned in corpus order."""
    rng = random.Random(seed)
    kept: list[tuple[int, Case]] = []
    for i, case in enumerate(cases):
        if i < n:
            kept.append((i, case))
        else:
            j = rng.randrange(i + 1)
            if j < n:
                kept[j] = (i, case)
    return [case for _, case in sorted(kept, key=lambda pair: pair[0])]


__all__ = [
    "ADAPTERS",
    "CLEAN_DROPS",
    "Gold",
    "Skipped",
    "dataset_name",
    "iter_items",
    "iter_spec",
    "load_spec",
    "parse_spec",
    "select_cases",
]
