"""The oracle providers: a model that answers from the case's gold, optionally with errors injected.

Why: the attribution metrics need a calibration row. `--lm oracle` answers extraction and reconcile from
the case being replayed (through the same JSON adapter format as a real model), so every attribution
metric must come out 1.0; `--lm oracle:flip_owner=R,swap_subject=R,drop=R,seed=S` perturbs exactly
round(R x n) of the n gold facts of the run per error kind, so the reported metrics must recover R.

Extraction emits all of a case's gold facts at its last turn and nothing before (the final state is
what is scored); the engine's rendering of each turn tells the oracle which turn it is answering.
Reconcile NOOPs a fact already stored with the same subject, SUPERSEDEs the seeded memory an
`expect.updates` entry names, ADDs everything else (so the seed write ADDs every seeded memory), and
never names a memory of another subject.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

import dspy
from dspy import lm15
from pydantic import BaseModel, ConfigDict

from evals.cases.dataset import Case, ExpectedFact, ProfileField
from evals.core.subject_reading import canonical as canonical_subject
from hymem.messages import normalize_messages
from hymem.render import render_conversation, render_working
from hymem.sites import current_call_site

ErrorKind = Literal["flip_owner", "swap_subject", "drop"]
ERROR_KINDS: tuple[ErrorKind, ...] = ("flip_owner", "swap_subject", "drop")
MODEL = "oracle/gold"
_PROFILE_FIELDS: tuple[ProfileField, ...] = ("name", "age", "gender", "occupation", "location")
_SECTION = re.compile(r"^\[\[ ## (\w+) ## \]\]$", re.M)
_TAIL = "\n\nRespond with "


class OracleError(ValueError):
    """The oracle was asked something its case cannot answer (an unknown turn or task)."""


class OracleSpec(BaseModel):
    """A parsed `oracle[:key=value,...]` provider spec."""

    model_config = ConfigDict(frozen=True)

    flip_owner: float = 0.0  # share of gold facts whose owner is flipped user <-> agent
    swap_subject: float = 0.0  # share whose structured subject moves to a wrong class (text unchanged)
    drop: float = 0.0  # share never emitted
    seed: int = 0  # seeds the choice of perturbed facts

    @property
    def noisy(self) -> bool:
        return any(getattr(self, kind) > 0 for kind in ERROR_KINDS)


class Perturbation(BaseModel):
    """One injected error: which gold fact of the case, and what it became."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    fact: int  # index into the case's expect.facts
    text: str  # the gold fact's text (never changed)
    before: str | None = None  # flip_owner: the gold owner; swap_subject: the gold subject
    after: str | None = None  # flip_owner: the emitted owner; swap_subject: the emitted subject


def parse_oracle_spec(spec: str) -> OracleSpec:
    """`oracle` or `oracle:flip_owner=0.2,swap_subject=0.1,drop=0.1,seed=7`; ValueError says what is wrong."""
    if spec == "oracle":
        return OracleSpec()
    if not spec.startswith("oracle:"):
        raise ValueError(f"--lm {spec!r} is not an oracle spec (oracle or oracle:key=value,...)")
    usage = f"keys are {', '.join(ERROR_KINDS)} (rates in [0, 1]) and seed (an integer)"
    values: dict[str, Any] = {}
    for item in spec.removeprefix("oracle:").split(","):
        key, sep, raw = (part.strip() for part in item.partition("="))
        if not sep or not key or not raw:
            raise ValueError(f"--lm {spec!r}: {item.strip()!r} is not key=value; {usage}")
        if key in values:
            raise ValueError(f"--lm {spec!r}: {key} is given twice")
        if key == "seed":
            try:
                values[key] = int(raw)
            except ValueError:
                raise ValueError(f"--lm {spec!r}: seed must be an integer, got {raw!r}") from None
        elif key in ERROR_KINDS:
            try:
                rate = float(raw)
            except ValueError:
                rate = math.nan
            if not 0.0 <= rate <= 1.0:  # also refuses nan
                raise ValueError(f"--lm {spec!r}: {key} must be a rate in [0, 1], got {raw!r}")
            values[key] = rate
        else:
            raise ValueError(f"--lm {spec!r}: unknown key {key!r}; {usage}")
    return OracleSpec(**values)


# --------------------------------------------------------------------------- the noise plan

def _named_people(case: Case) -> list[str]:
    """Named people of a case in order of appearance: gold subjects, seeded subjects, named speakers."""
    names = [f.subject for f in [*(case.expect.facts or []), *case.memories]]
    names += [m["name"] for turn in case.turns for m in turn
              if m.get("role") == "assistant" and isinstance(m.get("name"), str) and m["name"].strip()]
    out: list[str] = []
    for name in (n.strip() for n in names):
        if canonical_subject(name) not in ("user", "assistant") and name not in out:
            out.append(name)
    return out


def _wrong_subject(subject: str, case: Case) -> str:
    """A subject of a wrong class: named -> user, user -> a named person (else assistant), assistant -> user."""
    cls = canonical_subject(subject)
    if cls == "user":
        people = _named_people(case)
        return people[0] if people else "assistant"
    return "user"


def _perturbation(kind: ErrorKind, index: int, fact: ExpectedFact, case: Case) -> Perturbation:
    if kind == "flip_owner":
        return Perturbation(kind=kind, fact=index, text=fact.text, before=fact.owner,
                            after="agent" if fact.owner == "user" else "user")
    if kind == "swap_subject":
        return Perturbation(kind=kind, fact=index, text=fact.text, before=fact.subject,
                            after=_wrong_subject(fact.subject, case))
    return Perturbation(kind=kind, fact=index, text=fact.text)


def plan_perturbations(spec: OracleSpec, cases: Sequence[Case]) -> list[list[Perturbation]]:
    """Per case (aligned with `cases`), the errors to inject.

    The n gold facts of all cases are numbered in case order; each kind independently perturbs the first
    round(rate x n) of a shuffle seeded by (seed, kind), so a kind's choice does not depend on the other
    rates and a higher rate perturbs a superset of the facts a lower one does.
    """
    slots = [(c, i) for c, case in enumerate(cases) for i in range(len(case.expect.facts or []))]
    out: list[list[Perturbation]] = [[] for _ in cases]
    for kind in ERROR_KINDS:
        order = list(range(len(slots)))
        random.Random(f"{spec.seed}:{kind}").shuffle(order)
        for slot in sorted(order[: round(getattr(spec, kind) * len(slots))]):
            c, i = slots[slot]
            out[c].append(_perturbation(kind, i, (cases[c].expect.facts or [])[i], cases[c]))
    for items in out:
        items.sort(key=lambda p: (p.fact, ERROR_KINDS.index(p.kind)))
    return out


def oracle_plan(spec: str | OracleSpec, cases: Sequence[Case]) -> dict[str, list[Perturbation]]:
    """The perturbations `oracle_factory(spec, cases)` injects, by case id (every case has a key)."""
    parsed = parse_oracle_spec(spec) if isinstance(spec, str) else spec
    ids = [case.id for case in cases]
    if len(set(ids)) != len(ids):
        raise ValueError("oracle_plan: case ids repeat across the given cases; key them by position instead "
                         "(plan_perturbations)")
    return dict(zip(ids, plan_perturbations(parsed, cases), strict=True))


# --------------------------------------------------------------------------- answering a case

def _norm(text: str) -> str:
    """The engine stores texts with whitespace collapsed; compare them the same way."""
    return " ".join(str(text).split())


_SITE_FIELD = {"lm.extract": "conversation", "lm.extract_working": "trajectory", "lm.reconcile": "new_facts"}


def _fields(prompt: str, site: str | None) -> dict[str, str]:
    """Input fields of one JSON-adapter user message for the call site the engine named.

    Only the first field may hold free text (conversation, trajectory); reconcile's fields are JSON, whose
    strings never contain a raw newline, so a section header inside a conversation cannot split it wrongly.
    """
    if site not in _SITE_FIELD:
        raise OracleError(f"oracle: no task for call site {site!r} (it answers only inside an engine call)")
    tail = prompt.rfind(_TAIL)
    body = prompt[:tail] if tail >= 0 else prompt
    first = _SECTION.search(body)
    if first is None or first.start() != 0 or first.group(1) != _SITE_FIELD[site]:
        raise OracleError(f"oracle: a {site} prompt must start with its [[ ## {_SITE_FIELD[site]} ## ]] section")
    name = first.group(1)
    if name in ("conversation", "trajectory"):
        return {name: body[first.end():].strip("\n")}
    head, sep, rest = body[first.end():].partition("\n[[ ## existing ## ]]\n")
    if not sep:
        raise OracleError("oracle: a reconcile prompt without its [[ ## existing ## ]] section")
    return {"new_facts": head.strip(), "existing": rest.strip()}


def _json_list(raw: str, field: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(raw or "[]")
    except json.JSONDecodeError as exc:
        raise OracleError(f"oracle: {field} is not JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise OracleError(f"oracle: {field} must be a JSON list of objects")
    return data


class OracleEngine:
    """A DSPy custom engine answering hymem's signatures from one case's gold (plus its perturbations)."""

    def __init__(self, case: Case, perturbations: Sequence[Perturbation] = (), model: str = MODEL):
        self.case = case
        self.perturbations = list(perturbations)
        self.model = model
        self._renders: list[str | None] | None = None

    # ---- which turn
    def _rendered_turns(self) -> list[str | None]:
        if self._renders is None:
            render = render_working if self.case.path == "working" else render_conversation
            renders: list[str | None] = []
            for turn in self.case.turns:
                try:
                    renders.append(render(normalize_messages(turn)).strip("\n"))
                except ValueError:  # the engine refuses this turn too; it can never be asked about it
                    renders.append(None)
            self._renders = renders
        return self._renders

    def _is_last_turn(self, rendered: str) -> bool:
        turns = [i for i, text in enumerate(self._rendered_turns()) if text == rendered.strip("\n")]
        if not turns:
            raise OracleError(f"oracle: case {self.case.id!r} has no turn that renders as the conversation asked "
                              f"about ({rendered[:120]!r}...)")
        return len(self.case.turns) - 1 in turns

    # ---- extraction
    def emitted_facts(self) -> list[dict[str, str | None]]:
        """The gold facts as the oracle states them (dropped ones left out), with their kind."""
        by_fact: dict[int, list[Perturbation]] = {}
        for p in self.perturbations:
            by_fact.setdefault(p.fact, []).append(p)
        out = []
        for i, fact in enumerate([] if self.case.expect.no_memory else self.case.expect.facts or []):
            errors = {p.kind: p for p in by_fact.get(i, [])}
            if "drop" in errors:
                continue
            owner = errors["flip_owner"].after if "flip_owner" in errors else fact.owner
            subject = errors["swap_subject"].after if "swap_subject" in errors else fact.subject
            out.append({"text": fact.text, "subject": subject, "owner": owner, "kind": fact.kind})
        return out

    def _extract(self, rendered: str, working: bool) -> dict[str, Any]:
        if working != (self.case.path == "working"):
            raise OracleError(f"oracle: case {self.case.id!r} is on path {self.case.path!r}, asked to extract "
                              f"{'a trajectory' if working else 'a conversation'}")
        last = self._is_last_turn(rendered)
        facts = self.emitted_facts() if last else []
        strip = [{k: f[k] for k in ("text", "subject", "owner")} for f in facts]
        if working:
            return {"experiences": [s for s, f in zip(strip, facts, strict=True) if f["kind"] == "experience"],
                    "facts": [s for s, f in zip(strip, facts, strict=True) if f["kind"] != "experience"]}
        profile = dict(self.case.expect.profile) if last else {}
        return {"facts": strip, "profile": {k: profile.get(k) for k in _PROFILE_FIELDS}}

    # ---- reconcile
    def _reconcile(self, new_json: str, existing_json: str) -> dict[str, Any]:
        new = _json_list(new_json, "new_facts")
        existing = _json_list(existing_json, "existing")
        replaces = {_norm(u.new): _norm(u.old) for u in self.case.expect.updates}
        ops = []
        for position, fact in enumerate(new):
            index, text = fact.get("index", position), _norm(fact.get("text", ""))
            same = [e for e in existing if canonical_subject(str(e.get("subject", "")))
                    == canonical_subject(str(fact.get("subject", "")))]
            known = next((e["id"] for e in same if _norm(e.get("text", "")) == text), None)
            old = next((e["id"] for e in same if text in replaces and _norm(e.get("text", "")) == replaces[text]),
                       None)
            if known is not None:
                ops.append({"op": "NOOP", "fact": index, "id": known})
            elif old is not None:
                ops.append({"op": "SUPERSEDE", "fact": index, "id": old})
            else:
                ops.append({"op": "ADD", "fact": index, "id": None})
        return {"ops": ops}

    # ---- the engine protocol
    def answer(self, prompt: str, site: str | None) -> str:
        """The reply (one JSON object) to one adapter-formatted user message at call site `site`."""
        fields = _fields(prompt, site)
        if "conversation" in fields:
            values = self._extract(fields["conversation"], working=False)
        elif "trajectory" in fields:
            values = self._extract(fields["trajectory"], working=True)
        else:
            values = self._reconcile(fields["new_facts"], fields["existing"])
        return json.dumps(values, ensure_ascii=False)

    def complete(self, request: lm15.Request) -> lm15.Response:
        users = [m.text or "" for m in request.messages if m.role == "user"]
        if not users:
            raise OracleError("oracle: the request has no user message")
        reply = self.answer(users[-1], current_call_site())
        tokens_in, tokens_out = math.ceil(sum(len(u) for u in users) / 4), math.ceil(len(reply) / 4)
        return lm15.Response(
            id=None,
            model=self.model,
            message=lm15.Message.assistant([lm15.TextPart(reply)]),
            finish_reason="stop",
            usage=lm15.Usage(input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out),
        )


def hash_seed(spec_seed: int, epoch_seed: int) -> int:
    """One integer from the spec's seed and an epoch's seed (distinct epochs, distinct draws)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{spec_seed}:{epoch_seed}".encode()).digest()[:4], "big")


def oracle_lm(case: Case, perturbations: Sequence[Perturbation] = (), model: str = MODEL) -> dspy.LM:
    """The oracle for one case as a `dspy.LM` (no cache, no retries)."""
    return dspy.LM(model, engine=OracleEngine(case, perturbations, model), cache=False, num_retries=0)


def oracle_factory(spec: str, cases: Sequence[Case], seed: int | None = None) -> Callable[[Case], dspy.BaseLM]:
    """An LM factory for `--lm oracle[:...]`; a noisy spec is planned over `cases` (all of the run's).

    `seed`: an epoch's sampling seed (run --epochs); the noisy oracle then draws its errors from
    (spec seed, epoch seed), so each epoch perturbs its own facts at the same rates. None: the spec's seed.
    """
    parsed = parse_oracle_spec(spec)
    if seed is not None and parsed.noisy:
        parsed = parsed.model_copy(update={"seed": hash_seed(parsed.seed, seed)})
    if not parsed.noisy:
        return lambda case: oracle_lm(case)
    plan = plan_perturbations(parsed, cases)
    by_case = {(c.source, c.line, c.id): p for c, p in zip(cases, plan, strict=True)}
    model = f"oracle/noisy-{parsed.seed}"

    def factory(case: Case) -> dspy.BaseLM:
        key = (case.source, case.line, case.id)
        if key not in by_case:
            raise ValueError(f"--lm {spec}: case {case.id!r} was not among the cases its errors were planned over")
        return oracle_lm(case, by_case[key], model)

    return factory


__all__ = [
    "ERROR_KINDS",
    "MODEL",
    "OracleEngine",
    "OracleError",
    "OracleSpec",
    "Perturbation",
    "oracle_factory",
    "oracle_lm",
    "oracle_plan",
    "parse_oracle_spec",
    "plan_perturbations",
]
