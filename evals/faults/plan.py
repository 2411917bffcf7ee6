"""Fault kinds, call sites, plans, and the outcome each fault must produce.

The expected outcome of every (call site, kind) pair is the engine issue's
failure table, kept once, here, next to the kinds. Faults are injected at the
`dspy.LM` engine, the embedder and the store's failpoints, so the engine's real
adapter and parsing code runs on every faulty reply.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, PrivateAttr

from evals.faults.adversarial import (
    ADVERSARIAL_KINDS,
    EXTRACT_ADVERSARIAL,
    RECONCILE_ADVERSARIAL,
    THIRD_PARTY_ADVERSARIAL,
)

# Call sites, in the order a write reaches them.
LM_SITES = ("lm.extract", "lm.extract_working", "lm.reconcile")
EMBED_SITE = "embed"
STORE_SITES = ("store.commit", "store.faiss")
SITES = (*LM_SITES, EMBED_SITE, *STORE_SITES)
MEM0_EXTRACT = "mem0.extract"  # the site name of mem0's extraction reply, which has its own schema (not faulted here)

LM_KINDS = ("unavailable", "timeout", "rate_limit", "empty_body", "non_json_200", "empty_content", "garbage",
            "truncated_json", "wrong_schema")
# A reply object whose list field is null (`{"ops": null}`, `{"facts": null, ...}`): a broken reply, never "no
# changes" or "nothing to remember" (only a literal [] is; spec reconcile-failure.md).
RECONCILE_KINDS = (*LM_KINDS, "unknown_id", "null_ops", *RECONCILE_ADVERSARIAL)
# A working trajectory has no profile, so of the adversarial extraction kinds only a named human's fact filed
# under the user or the AI applies there (a teammate on the call: the engine re-files it on both paths).
EXTRACT_WORKING_KINDS = (*LM_KINDS, "null_facts", *THIRD_PARTY_ADVERSARIAL)
EXTRACT_KINDS = (*LM_KINDS, "null_facts", *EXTRACT_ADVERSARIAL)
EMBED_KINDS = ("embed_error", "embed_nan", "embed_wrong_dim")
STORE_KINDS = ("store_error",)
KINDS = (*RECONCILE_KINDS, "null_facts", *EXTRACT_ADVERSARIAL, *EMBED_KINDS, *STORE_KINDS)


# Faults on the wire (HTTP providers, through `evals.arms.proxy`), and the failure class each one is.
WIRE_KINDS = ("http_500", "http_502", "http_503", "http_429", "drop_connection", "empty_body", "empty_content",
              "null_content", "non_json_body", "truncated_json", "wrong_schema", "latency")
_WIRE_CLASS = {"http_500": "unavailable", "http_502": "unavailable", "http_503": "unavailable",
               "http_429": "unavailable", "drop_connection": "unavailable", "empty_body": "empty",
               "empty_content": "empty", "null_content": "empty", "non_json_body": "parse",
               "truncated_json": "parse", "wrong_schema": "parse", "latency": None}


def wire_kinds_for(site: str) -> tuple[str, ...]:
    """Kinds for an HTTP provider: LM calls are faulted on the wire; embedding and store stay in-process."""
    return WIRE_KINDS if site in LM_SITES else kinds_for(site)


def kinds_for(site: str) -> tuple[str, ...]:
    """The fault kinds that apply at a call site."""
    if site == "lm.reconcile":
        return RECONCILE_KINDS
    if site == "lm.extract":
        return EXTRACT_KINDS
    if site == "lm.extract_working":
        return EXTRACT_WORKING_KINDS
    if site == EMBED_SITE:
        return EMBED_KINDS
    if site in STORE_SITES:
        return STORE_KINDS
    raise ValueError(f"unknown call site {site!r}")


class Expected(BaseModel):
    """What a write must return under one fault (None = field must be unset)."""

    success: bool
    error_code: str | None = None
    agent_error_code: str | None = None
    reconcile_error_code: str | None = None
    retry_safe: bool = True


_LM_CLASS: dict[str, str] = {"unavailable": "unavailable", "timeout": "unavailable", "rate_limit": "unavailable",
             "empty_body": "empty", "non_json_200": "parse", "empty_content": "empty", "garbage": "parse",
             "truncated_json": "parse", "wrong_schema": "parse", "unknown_id": "parse", "null_ops": "parse",
             "null_facts": "parse"}
_EXTRACT_CODE = {"unavailable": "LLM_ERROR", "empty": "EMPTY_RESPONSE", "parse": "JSON_PARSE_FAILED"}
_RECONCILE_CODE = {"unavailable": "LLM_UNAVAILABLE", "empty": "EMPTY_RESPONSE", "parse": "JSON_PARSE_FAILED"}


def expected_outcome(site: str, kind: str) -> Expected:
    """The failure table: which fields and codes a write must return under this fault."""
    if site in LM_SITES and kind in _WIRE_CLASS:  # the same table, reached over HTTP
        failure = _WIRE_CLASS[kind]
        if failure is None:
            return Expected(success=True)  # a slow but correct reply changes nothing
    elif kind not in kinds_for(site):
        raise ValueError(f"fault {kind!r} does not apply at {site!r}")
    elif kind in ADVERSARIAL_KINDS:
        # A well-formed reply the engine's code guard must refuse: nothing crosses subjects, the profile
        # keeps only the user's own words, and the write succeeds (evals.faults.adversarial checks the store).
        return Expected(success=True)
    else:
        failure = _LM_CLASS.get(kind)
    if site in LM_SITES:
        if failure is None:
            raise ValueError(f"fault {kind!r} has no failure class at {site!r}")
        return expected_for_class(site, failure)
    if site == EMBED_SITE:
        return Expected(success=False, error_code="EMBEDDING_FAILED")
    if site == "store.commit":
        return Expected(success=False, error_code="STORE_FAILED")
    return Expected(success=True)  # store.faiss: after the commit; the index is rebuilt from SQLite


def expected_for_class(site: str, failure: str) -> Expected:
    """The failure table's outcome for a failure class (unavailable | empty | parse) at a model or embedding call
    site, whether a fault was injected or the model's own reply broke the write (evals.check.natural)."""
    if site == EMBED_SITE:
        return Expected(success=False, error_code="EMBEDDING_FAILED")
    if site == "lm.reconcile":
        return Expected(success=False, agent_error_code="RECONCILE_FAILED",
                        reconcile_error_code=_RECONCILE_CODE[failure])
    if site in LM_SITES:
        return Expected(success=False, error_code=_EXTRACT_CODE[failure])
    raise ValueError(f"no failure class applies at {site!r}")


@dataclass(frozen=True)
class Fault:
    """One fault to inject: at the `occurrence`-th call (0-based) of `site` within one write."""

    site: str
    kind: str
    occurrence: int = 0


class FaultPlan(BaseModel):
    """`none`, `sweep` (every reached site × applicable kind, per write), `sweep:fast` or `random:RATE`.

    `sweep:fast` faults each applicable (site, kind) pair the run reaches in at most `FAST_UNITS_PER_PAIR`
    units, in distinct cases, instead of at every write and call of every case. The runner first replays
    every case fault-free with a probe plan (`probe()`), which records what each write offered; `designate`
    then picks the units, and only the cases given one are replayed again with their faults.
    """

    name: str
    rate: float = 0.0
    fast: bool = False
    # sweep:fast after designation: unit key (provider|case|write) → the faults, as (site, kind, occurrence)
    picks: dict[str, list[tuple[str, str, int]]] | None = None
    _offered: dict[str, list[Fault]] = PrivateAttr(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        if spec in ("none", "sweep"):
            return cls(name=spec)
        if spec == "sweep:fast":
            return cls(name="sweep", fast=True)
        if spec.startswith("random:"):
            try:
                rate = float(spec.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"--faults {spec!r}: RATE must be a number, e.g. random:0.1") from None
            if not 0.0 < rate <= 1.0:
                raise ValueError(f"--faults {spec!r}: RATE must be in (0, 1]")
            return cls(name="random", rate=rate)
        raise ValueError(f"--faults {spec!r}: use none, sweep, sweep:fast or random:RATE")

    def __str__(self) -> str:
        if self.name == "random":
            return f"random:{self.rate}"
        return "sweep:fast" if self.fast else self.name

    def faults_for_write(self, reached: dict[str, int], seed: int, unit_key: str, *,
                         sites: tuple[str, ...] = SITES, kinds: Callable[[str], tuple[str, ...]] | None = None,
                         ) -> list[Fault]:
        """The faults to run for one write, given the call sites (and their counts) it reached.

        Deterministic in (plan, seed, unit_key): the same plan and seed replay the same faults,
        whatever the order or concurrency of the run. `sites` and `kinds` default to hymem's; another
        engine under test passes its own. A `sweep:fast` probe records the write's candidates and runs none.
        """
        if self.name == "none":
            return []
        kinds = kinds or kinds_for
        candidates = [Fault(site, kind, occurrence) for site in sites if site in reached
                      for occurrence in range(reached[site]) for kind in kinds(site)
                      if kind not in ADVERSARIAL_KINDS or reached.get(opportunity_key(site, kind, occurrence))]
        if self.fast:
            if self.picks is None:  # the probe: what this write offers, for `designate`
                self._offered[unit_key] = candidates
                return []
            chosen = {tuple(pick) for pick in self.picks.get(unit_key, [])}
            return [f for f in candidates if (f.site, f.kind, f.occurrence) in chosen]
        if self.name == "sweep":
            return candidates
        return [f for f in candidates if _draw(seed, unit_key, f) < self.rate]

    def probe(self) -> FaultPlan:
        """A `sweep:fast` plan with nothing designated: its replays run no fault and record what each write offers."""
        return FaultPlan(name=self.name, fast=True)

    @property
    def offered(self) -> dict[str, list[Fault]]:
        """unit key → the faults that write offered, as recorded by this probe plan."""
        return dict(self._offered)

    def designate(self, offered: dict[str, list[Fault]], seed: int) -> FaultPlan:
        """The `sweep:fast` plan that faults each (provider, site, kind) pair offered anywhere in at most
        `FAST_UNITS_PER_PAIR` units, in distinct cases, each at the pair's first write and call in its case.

        Cases are ranked by a seeded hash of (provider, case), and each pair goes to the first cases in that
        rank that offer it, so the pairs gather in few cases (fewer replays) and the choice is the same
        whatever order the probe ran in.
        """
        first: dict[tuple[str, str, str, str], tuple[int, int, Fault]] = {}  # (provider, case, site, kind) → earliest
        for key, faults in offered.items():
            provider, case_id, index = key.rsplit("|", 2)
            for fault in faults:
                slot = (provider, case_id, fault.site, fault.kind)
                here = (int(index), fault.occurrence, fault)
                if slot not in first or here[:2] < first[slot][:2]:
                    first[slot] = here
        by_pair: dict[tuple[str, str, str], list[str]] = {}
        for provider, case_id, site, kind in first:
            by_pair.setdefault((provider, site, kind), []).append(case_id)
        picks: dict[str, list[tuple[str, str, int]]] = {}
        for (provider, site, kind), case_ids in sorted(by_pair.items()):
            ranks = {case_id: _rank(seed, provider, case_id) for case_id in case_ids}
            for case_id in sorted(case_ids, key=lambda c: (ranks[c], c))[:FAST_UNITS_PER_PAIR]:
                write, occurrence, _ = first[(provider, case_id, site, kind)]
                picks.setdefault(f"{provider}|{case_id}|{write}", []).append((site, kind, occurrence))
        return FaultPlan(name=self.name, fast=True, picks=picks)

    def designated_cases(self) -> set[tuple[str, str]]:
        """(provider, case id) of every case that `designate` gave a fault to."""
        return {tuple(key.rsplit("|", 2)[:2]) for key in self.picks or {}}  # type: ignore[misc]


FAST_UNITS_PER_PAIR = 2  # sweep:fast: faulted units per (provider, site, kind) pair, each in its own case


def _rank(seed: int, provider: str, case_id: str) -> bytes:
    return hashlib.sha256(f"{seed}|fast|{provider}|{case_id}".encode()).digest()


def opportunity_key(site: str, kind: str, occurrence: int) -> str:
    """The `reached` entry a control write records when an adversarial kind could fire at this call."""
    return f"{site}#{kind}#{occurrence}"


def _draw(seed: int, unit_key: str, fault: Fault) -> float:
    digest = hashlib.sha256(f"{seed}|{unit_key}|{fault.site}|{fault.kind}|{fault.occurrence}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).random()
