"""The semantic matcher's words, tables and pattern alternatives, read from per-language data files.

The code of `evals.scoring` keeps the logic (how a pattern is put together, what a match means); the files
hold the words: `rules/live/{shared,en,zh}.toml` are what `--matcher semantic` (and `text`) read, and
`rules/frozen/<name>/` is a frozen copy, with the fitted parameters of its day (`params.json`), that
`--matcher semantic-<name>` reads through the same code: a baseline whose verdicts stay put while the live
rules change.

A file is one TOML table per module (`[checks]`, `[quantities]`, …) whose keys hold one of: a list of words
or pattern alternatives (in order: the first alternative that matches wins), a pattern, a table of words to
numbers, of words to (dimension, factor), or of names to patterns. Every pattern and alternative must
compile. A file that breaks this is refused on load with its path and the key (`RulesError`).

Which set is read is a context (`use`): a matcher enters its own around its work, so a frozen and a live
matcher can run side by side in one process; outside any, the live set is read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import re
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, RootModel, ValidationError

RULES_DIR = Path(__file__).with_name("rules")
LIVE_DIR = RULES_DIR / "live"
FROZEN_DIR = RULES_DIR / "frozen"
FILES = ("shared", "en", "zh")  # shared: script-neutral (quotes, symbols); en, zh: one language each


class RulesError(ValueError):
    """A rule file that cannot be used: the message names the file and the key."""


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid pattern ({exc}): {value!r}") from exc
    return value


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


Pattern = Annotated[str, AfterValidator(_non_blank), AfterValidator(_compiles)]
Entry = (list[Pattern] | Pattern | dict[str, float] | dict[str, tuple[str, float]] | dict[str, Pattern])


class RuleFile(RootModel[dict[str, dict[str, Entry]]]):
    """One rule file: module -> key -> entry (word list, pattern, number table, unit table or pattern table)."""


def _read(path: Path) -> dict[str, dict[str, Entry]]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RulesError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path}: not TOML: {exc}") from exc
    try:
        return RuleFile.model_validate(raw).root
    except ValidationError as exc:
        # a union reports once per member: name each key once, with the member's error that got furthest
        seen: dict[str, str] = {}
        for error in sorted(exc.errors(), key=lambda e: -len(e["loc"])):
            loc = [str(p) for p in error["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith(("list", "dict", "str"))))]
            key = ".".join(loc[:2])
            seen.setdefault(key, f"{'.'.join(loc)}: {error['msg']}")
        raise RulesError("\n".join(f"{path}: {msg}" for msg in seen.values())) from exc


class RuleSet:
    """One directory of rule files, read and validated once. `key` tells sets apart (its files' digest)."""

    def __init__(self, directory: Path, name: str):
        self.directory, self.name = directory, name
        self._files: dict[str, dict[str, dict[str, Entry]]] = {}
        digest = hashlib.sha256()
        for file in FILES:
            path = directory / f"{file}.toml"
            self._files[file] = _read(path)
            digest.update(path.read_bytes())
        self.digest = digest.hexdigest()[:12]

    def __repr__(self) -> str:
        return f"RuleSet({self.name!r}, {self.digest})"

    def _entry(self, file: str, key: str) -> tuple[Entry, Path]:
        module, _, name = key.partition(".")
        path = self.directory / f"{file}.toml"
        try:
            return self._files[file][module][name], path
        except KeyError:
            raise RulesError(f"{path}: {key}: missing (the code reads it)") from None

    def words(self, file: str, key: str) -> tuple[str, ...]:
        """A list entry, in order."""
        entry, path = self._entry(file, key)
        if not isinstance(entry, list):
            raise RulesError(f"{path}: {key}: expected a list of words")
        return tuple(entry)

    def alternatives(self, file: str, key: str) -> str:
        """A list entry as one alternation (`a|b|c`, in order), or a pattern entry as written."""
        entry, path = self._entry(file, key)
        if isinstance(entry, str):
            return entry
        if not isinstance(entry, list):
            raise RulesError(f"{path}: {key}: expected a list of alternatives or a pattern")
        return "|".join(entry)

    def table(self, file: str, key: str) -> dict[str, Any]:
        """A table entry, in the file's order."""
        entry, path = self._entry(file, key)
        if not isinstance(entry, dict):
            raise RulesError(f"{path}: {key}: expected a table")
        return dict(entry)


@functools.cache
def rule_set(directory: Path, name: str) -> RuleSet:
    return RuleSet(directory, name)


def live() -> RuleSet:
    """The live rules: what `semantic` reads."""
    return rule_set(LIVE_DIR, "live")


def frozen_names() -> tuple[str, ...]:
    """The frozen baselines shipped (`rules/frozen/<name>/`), each a matcher spec `semantic-<name>`."""
    if not FROZEN_DIR.is_dir():
        return ()
    return tuple(sorted(p.name for p in FROZEN_DIR.iterdir() if (p / "params.json").is_file()))


def frozen(name: str) -> RuleSet:
    """A frozen baseline's rules."""
    if name not in frozen_names():
        raise RulesError(f"no frozen rules {name!r} in {FROZEN_DIR} (there are: {', '.join(frozen_names()) or 'none'})")
    return rule_set(FROZEN_DIR / name, name)


_ACTIVE: contextvars.ContextVar[RuleSet | None] = contextvars.ContextVar("hymem_matcher_rules", default=None)


def active() -> RuleSet:
    """The rules of the matcher at work in this context; the live rules outside any."""
    return _ACTIVE.get() or live()


@contextlib.contextmanager
def use(rules: RuleSet) -> Iterator[None]:
    """Read `rules` within the block (this thread or task only)."""
    token = _ACTIVE.set(rules)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


T = TypeVar("T")


def compiled(build: Callable[[RuleSet], T]) -> Callable[[], T]:
    """A module's patterns and tables, built from the active rules once per rule set: `_k = compiled(build)`,
    then `_k().NAME` in the code."""
    cache: dict[int, tuple[RuleSet, T]] = {}
    lock = threading.Lock()

    def get() -> T:
        rules = active()
        hit = cache.get(id(rules))
        if hit is None or hit[0] is not rules:
            with lock:
                hit = cache[id(rules)] = (rules, build(rules))
        return hit[1]

    functools.update_wrapper(get, build)
    return get


__all__ = ["FILES", "FROZEN_DIR", "LIVE_DIR", "RuleFile", "RuleSet", "RulesError", "active", "compiled", "frozen",
           "frozen_names", "live", "rule_set", "use"]
