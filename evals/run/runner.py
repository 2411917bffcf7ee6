"""The eval runner: cases → (arm × case × epoch) units → the arms' engines → the checks → `units.jsonl`.

Units run concurrently, each on a fresh store in a temporary directory. Every
finished unit is appended to `units.jsonl` at once, so an interrupted run loses
nothing and `--resume` redoes only what did not finish.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from evals.arms.accounting import ResponseCache
from evals.arms.base import DEFAULT_SYSTEM, arm_label
from evals.arms.embedders import embedder_spec, resolve_embedder
from evals.arms.providers import Provider, resolve_providers
from evals.arms.registry import check_system, open_arm, validate_arm
from evals.cases.adapters import dataset_name, load_spec
from evals.cases.dataset import (
    Case,
    DatasetError,
    bundled_dataset_dir,
    case_hash,
    dataset_hash,
    load_cases,
    message_problems,
)
from evals.core.errors import UsageError
from evals.core.redact import register_run_secrets
from evals.faults.plan import FaultPlan
from evals.record import (
    UNITS_FILE,
    CaseRun,
    JournalHead,
    JournalWriter,
    RunDirError,
    UnitsWriter,
    atomic_write_text,
    epoch_seed,
    in_report_order,
    read_manifest,
    read_units,
    remove_journal,
    remove_journal_dir,
    write_manifest,
)
from evals.run.executors import EXECUTORS, UnitTask, run_local
from evals.run.executors.ray_executor import RayUnavailable, _ray, check_address, run_ray
from evals.run.provenance import Manifest, git_state, package_versions
from evals.run.replay import CaseReplayer, UnitModels, case_writes
from evals.run.rundir_lock import LOCK_FILE, RunDirBusy, RunDirLock
from evals.run.scratch import drain as drain_scratch
from hymem import __version__
from hymem.program import MemoryProgram

log = logging.getLogger("hymem.eval")
REPO_ROOT = Path(__file__).resolve().parents[2]


class RunConfig(BaseModel):
    """What `hymem-eval run` was asked to do."""

    datasets: list[str] = Field(default_factory=list)  # empty: the bundled datasets
    providers: list[str] = Field(default_factory=list)  # --lm specs or provider names; empty: offline
    providers_file: Path | None = None  # a TOML file of [[provider]] tables
    systems: list[str] = Field(default_factory=lambda: [DEFAULT_SYSTEM])  # engines under test: hymem | mem0
    cache: bool = True  # reuse successful HTTP replies (reports/.cache/responses.sqlite)
    cache_dir: Path | None = None  # the cache file, when not the default
    max_connections: int | None = None  # every provider's connection limit; None: the providers file's, else concurrency
    embedder: str | None = None  # None: minilm when installed, else hash
    faults: str = "sweep"
    seed: int = 0
    epochs: int = 1  # run every (provider, case) unit this many times, epoch e with sampling seed epoch_seed(seed, e)
    temperature: float | None = None  # sampling temperature for providers that take one; None: the provider's own
    concurrency: int = 2  # requests to each provider at once; units in flight: units_in_flight(concurrency)
    units: int | None = None  # --units-in-flight: local executor's units in flight; None: units_in_flight(concurrency)
    out: Path | None = None
    resume: bool = False
    progress: bool = True
    gold: str = "all"  # "clean" leaves out labels an adapter flagged as misattributed
    limit: int | None = None  # per dataset spec: at most this many cases
    sample: int | None = None  # per dataset spec: a seeded sample of this many cases (seed = --seed)
    program: Path | None = None  # a tuned program (`hymem-eval tune --out DIR`); None: the built-in prompts
    executor: str = "local"  # local: a thread pool here | ray: one Ray task per unit
    ray_address: str | None = None  # --executor ray: join this cluster; None starts a local Ray instance
    workers: int | None = None  # --executor ray: tasks in flight (and a local instance's CPUs); None: --concurrency
    matcher: str | None = None  # --matcher SPEC: semantic (default) | text | llm:MODEL_SPEC


def units_in_flight(concurrency: int) -> int:
    """The units the local executor keeps in flight for `--concurrency C`: C + ceil(C / 4).

    A unit holds a connection only while one of its LM calls runs; between calls it runs its own CPU (the
    engine's write, the checks, the store). With only C units in flight the C connections idle for that
    share of every unit; a quarter more keeps them busy (Inspect AI runs max_connections + 1 samples for
    the same reason). The connection limit, not this number, bounds what a provider sees at once.
    """
    return concurrency + -(-concurrency // 4)


def _prompt_hash(program: Any = None) -> str:
    return (program if program is not None else MemoryProgram()).prompt_fingerprint()


def _load(specs: list[str], config: RunConfig) -> list[Case]:
    """Curated JSONL files and corpus adapters (`locomo:PATH`, ...); every spec is validated before any work."""
    if config.gold not in ("all", "clean"):
        raise UsageError("--gold must be all or clean")
    gold: Literal["all", "clean"] = "clean" if config.gold == "clean" else "all"
    if all(":" not in spec for spec in specs) and config.limit is None and config.sample is None:
        # one pass that reports every bad line of every file together
        return _one_file_per_name(_unique_ids(load_cases(specs)))
    cases: list[Case] = []
    for spec in specs:
        cases += load_spec(spec, gold=gold, limit=config.limit, sample=config.sample, seed=config.seed)
    _unique_ids(cases)
    # A corpus adapter builds its messages in code: they pass the engine's own check too, before any work.
    problems = [f"{c.source or 'dataset'}:{c.line or c.id}: {problem}" for c in cases for problem in message_problems(c)]
    if problems:
        raise DatasetError(problems)
    return _one_file_per_name(cases)


def _unique_ids(cases: list[Case]) -> list[Case]:
    """A unit is (provider, case id, epoch): two cases of one id, in two files, would share their units (resume
    would skip the second, scoring would read one's gold for both), so they are refused, with or without --limit."""
    ids = [c.id for c in cases]
    if len(ids) != len(set(ids)):
        dupes = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise UsageError(f"case ids repeat across datasets: {dupes}")
    return cases


def _one_file_per_name(cases: list[Case]) -> list[Case]:
    """Curated cases are scored and gated per dataset, named by the file's stem: two files of one name
    (a/chat_en.jsonl, b/chat_en.jsonl) would be merged into one dataset, so they are refused."""
    files: dict[str, set[str]] = {}
    for case in cases:
        if case.source and not (isinstance(case.meta, dict) and case.meta.get("dataset")):
            files.setdefault(dataset_name(case), set()).add(str(Path(case.source).resolve()))
    clashes = [f"{', '.join(sorted(paths))} are all dataset {name!r}: rename all but one (scores and gate rules"
               " are per dataset, named by the file)" for name, paths in sorted(files.items()) if len(paths) > 1]
    if clashes:
        raise DatasetError(clashes)
    return cases


@dataclass
class Prepared:
    """What a run starts from, every part checked before any work."""

    cases: list[Case]
    plan: FaultPlan
    factories: dict[str, Any]  # provider name -> Provider
    embedder_name: str
    embedder: Any  # the loaded, shared embedder
    manifest: Manifest
    run_dir: Path
    program: Any  # the tuned MemoryProgram, or None for the built-in prompts
    datasets: dict[str, str] = field(default_factory=dict)  # case id -> its dataset's name, named once per run


ProgramLoader = Callable[[Path | None, Sequence[Case]], Any]


def prepare(config: RunConfig, *, matcher_spec: str, load_program: ProgramLoader) -> Prepared:
    """Validate everything before any work: datasets, plan, providers, embedder, run directory, tuned program.

    `matcher_spec` is the checked `--matcher` (scoring's, recorded in the manifest); `load_program` loads `--program`
    and refuses one tuned on these cases (tuning's): both are given by the pipeline above this stage."""
    register_run_secrets([*config.providers, config.embedder, config.matcher])  # before any call can echo one
    try:
        plan = FaultPlan.parse(config.faults)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if config.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if config.units is not None and config.units < 1:
        raise UsageError("--units-in-flight must be at least 1")
    if config.units is not None and config.executor == "ray":
        raise UsageError("--units-in-flight goes with the local executor; with --executor ray, --workers sets the "
                         "tasks in flight")
    if plan.fast and config.executor == "ray":
        raise UsageError("--faults sweep:fast runs on the local executor (it designates its faulted units between "
                         "two passes); use --faults sweep with --executor ray")
    if config.epochs < 1:
        raise UsageError("--epochs must be at least 1")
    if config.temperature is not None and not 0 <= config.temperature <= 2:
        raise UsageError("--temperature must be between 0 and 2")
    if config.workers is not None and config.workers < 1:
        raise UsageError("--workers must be at least 1")
    if config.executor not in EXECUTORS:
        raise UsageError(f"--executor must be one of {', '.join(EXECUTORS)}")
    if config.ray_address is not None and not config.ray_address.strip():  # e.g. "$HEAD" unset: never run here instead
        raise UsageError("--ray-address is empty: give HOST:PORT, ray://HOST:PORT or auto, or leave it out to "
                         "start a local Ray instance")
    if config.executor != "ray" and (config.ray_address is not None or config.workers is not None):
        raise UsageError("--ray-address and --workers go with --executor ray")
    if config.executor == "ray":
        try:
            _ray()
            if config.ray_address:
                check_address(config.ray_address)
        except (RayUnavailable, ValueError) as exc:
            raise UsageError(str(exc)) from exc
    specs = config.datasets or [str(bundled_dataset_dir())]
    try:
        cases = _load(specs, config)
    except (ValueError, OSError) as exc:  # DatasetError lists every bad line as file:line: field: problem
        raise UsageError(str(exc)) from exc
    if not cases:
        raise UsageError(f"no cases found in {specs}")
    try:
        configs = resolve_providers(config.providers, config.providers_file)
        if config.max_connections is not None and config.max_connections < 1:
            raise ValueError("--max-connections must be at least 1")
        configs = [c.model_copy(update={"max_connections": connection_limit(c, config)}) for c in configs]
        factories = {c.name: Provider(c, cases) for c in configs}  # keys are checked here, before any work
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if len(factories) != len(configs):
        raise UsageError("provider names repeat: give each --lm or [[provider]] a distinct name")
    systems = _systems(config)
    try:
        for system in systems:
            check_system(system)  # a missing extra is a one-line error naming it
            for provider in factories.values():
                validate_arm(system, provider.config)
    except (ValueError, ImportError) as exc:
        raise UsageError(str(exc)) from exc
    if config.program is not None and DEFAULT_SYSTEM not in systems:  # it would only change the manifest's hash
        raise UsageError(f"--program tunes hymem's prompts, and this run has no hymem arm (--system "
                         f"{' --system '.join(systems)}): add --system hymem or leave --program out")
    for name, provider in factories.items() if DEFAULT_SYSTEM in systems else ():  # others: faults on the wire
        if plan.name != "none" and not provider.supports_inprocess_faults and not provider.config.api_base:
            raise UsageError(f"--lm {name}: faults reach an HTTP provider on the wire, through a local fault proxy "
                             "in front of its endpoint: give the endpoint explicitly (MODEL@URL or api_base)")
    embedder_name = embedder_spec(config.embedder)

    commit, dirty = git_state(REPO_ROOT)
    program = load_program(config.program, cases)
    names = {c.id: dataset_name(c) for c in cases}  # what every unit records as its dataset (ids are unique)
    manifest = Manifest(run_id="", datasets=specs, dataset_hash=dataset_hash(cases), n_cases=len(cases),
                        case_hashes={f"{names[c.id]}/{c.id}": case_hash(c) for c in cases},
                        providers=[arm_label(s, name) for s in systems for name in factories], embedder=embedder_name,
                        faults=str(plan), seed=config.seed, epochs=config.epochs, temperature=config.temperature,
                        concurrency=config.concurrency,
                        units_in_flight=None if config.executor == "ray" else _units_in_flight(config),
                        max_connections={name: p.config.max_connections for name, p in factories.items()},
                        provider_specs={name: p.config.spec() for name, p in factories.items()},
                        engine_version=__version__, prompt_hash=_prompt_hash(program),
                        program=str(config.program) if config.program is not None else None,
                        git_commit=commit, git_dirty=dirty, packages=package_versions())
    manifest.manifest_hash = manifest.compute_hash()
    try:  # the run directory's lock (taken by _run_dir) is freed when the run cannot start after all
        run_dir = _run_dir(config, manifest, cases)  # resume mismatches, unusable directories: before the model loads
        manifest.run_id = run_dir.name
        manifest.matcher_spec = matcher_spec
        embedder = resolve_embedder(embedder_name)
    except BaseException:
        if config.out is not None:
            release_run_dir(config.out)
        raise
    return Prepared(cases=cases, plan=plan, factories=factories, embedder_name=embedder_name, embedder=embedder[1],
                    manifest=manifest, run_dir=run_dir, program=program, datasets=names)


def connection_limit(provider: Any, config: RunConfig) -> int:
    """A provider's requests at once: --max-connections, else its providers-file `max_connections`, else
    --concurrency."""
    if config.max_connections is not None:
        return config.max_connections
    if "max_connections" in provider.model_fields_set:
        return int(provider.max_connections)
    return config.concurrency


def _units_in_flight(config: RunConfig) -> int:
    return config.units if config.units is not None else units_in_flight(config.concurrency)


def _systems(config: RunConfig) -> list[str]:
    return list(dict.fromkeys(config.systems)) or [DEFAULT_SYSTEM]


_LOCKS: dict[Path, RunDirLock] = {}  # run directories this process holds (evals.run.rundir_lock), until its run ends


def lock_run_dir(run_dir: Path, what: str = "--out") -> None:
    """Own `run_dir` (which exists) for this run: a second writer gets a UsageError naming the holder."""
    key = Path(run_dir).resolve()
    if key in _LOCKS:
        return
    try:
        _LOCKS[key] = RunDirLock.acquire(run_dir, what)
    except RunDirBusy as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{what} {run_dir}: cannot lock the run directory: {exc.strerror or exc}") from None


def release_run_dir(run_dir: Path) -> None:
    lock = _LOCKS.pop(Path(run_dir).resolve(), None)
    if lock is not None:
        lock.release()


def _own_files(name: str) -> bool:
    """Files a run directory may hold before its run starts: its lock, and a write check in progress."""
    return name == LOCK_FILE or name.startswith(".hymem-write-check-")


def _refuse_used(out: Path) -> None:
    """A new run's --out must not hold a run, nor anyone else's files."""
    if (out / "manifest.json").exists():
        raise UsageError(f"--out {out} already holds a run; use --resume to continue it")
    if out.is_dir() and any(not _own_files(p.name) for p in out.iterdir()):
        raise UsageError(f"--out {out} is a directory that holds other files and no run; give an empty or "
                         "new directory")


def _run_dir(config: RunConfig, manifest: Manifest, cases: list[Case]) -> Path:
    """The run directory, checked before any work and owned by this process from then on (a lock held until
    the run ends): a resumed run must be this run, with readable records of its own units; a new run needs an
    empty (or new) directory it can write to. Never another run's or a user's files."""
    if config.resume:
        if config.out is None:
            raise UsageError("--resume needs --out DIR of the run to continue")
        path = config.out / "manifest.json"
        if not path.is_file():
            raise UsageError(f"--resume: {path} does not exist")
        lock_run_dir(config.out, "--resume --out")  # before its records are read: no other process writes them
        try:
            old = read_manifest(config.out)
        except RunDirError as exc:
            raise UsageError(f"--resume: {_first_line(exc)}") from None
        if old.manifest_hash != manifest.manifest_hash:
            detail = _changed_providers(old, manifest) or f"manifest hash {old.manifest_hash} != {manifest.manifest_hash}"
            raise UsageError(f"--resume: {config.out} was run with different inputs ({detail}); start a new run instead")
        try:
            _done_units(config.out, _planned(manifest, cases, config.epochs))
        except (ValueError, OSError) as exc:  # a foreign or garbage record in the middle of units.jsonl
            raise UsageError(f"--resume: {config.out / 'units.jsonl'}: {_first_line(exc)}") from None
        _check_writable(config.out, "--out")
        manifest.created = old.created
        return config.out
    if config.out is not None:
        out = config.out
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file, not a directory")
        if (out / LOCK_FILE).exists():
            lock_run_dir(out)  # a run still writing it is named, not mistaken for a finished one
        _refuse_used(out)  # unlocked first: a directory refused is left as it was
        _check_writable(out, "--out")
        lock_run_dir(out)
        _refuse_used(out)  # and again under the lock: another run may have started in between
        return out
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(manifest.created))
    reports = Path.cwd() / "reports"  # where the user runs it
    _check_writable(reports, "the default run directory (./reports; give --out DIR)")
    return reports / f"{stamp}-{manifest.manifest_hash[:6]}"


def _check_writable(directory: Path, what: str) -> None:
    """Create `directory` if needed and prove a file can be written in it, or a one-line UsageError."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".hymem-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{what}: cannot write to {directory}: {exc.strerror or exc}") from None


def _first_line(exc: BaseException) -> str:
    """One line naming the problem (a pydantic error: its first field and message)."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where + ': ' if where else ''}{first['msg']}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _changed_providers(old: Manifest, new: Manifest) -> str:
    """What a resumed run's providers changed, e.g. `provider x: model 'openai/a' -> 'openai/b'`; '' when the
    old manifest has no specs (a run from before they were recorded) or none changed."""
    changes = []
    for name, spec in new.provider_specs.items():
        before = old.provider_specs.get(name)
        if before is None or before == spec:
            continue
        fields = [f"{k} {before.get(k)!r} -> {spec.get(k)!r}" for k in sorted({*before, *spec})
                  if before.get(k) != spec.get(k)]
        changes.append(f"provider {name}: {', '.join(fields)}")
    if changes and old.model_copy(update={"provider_specs": new.provider_specs}).compute_hash() != new.manifest_hash:
        changes.append("and other inputs")
    return "; ".join(changes)


def _planned(manifest: Manifest, cases: list[Case], epochs: int) -> set[tuple[str, str, int]]:
    """Every (provider, case_id, epoch) unit of the run: a record of any other unit is not this run's."""
    return {(label, case.id, epoch) for label in manifest.providers for case in cases for epoch in range(epochs)}


def _done_units(run_dir: Path, planned: set[tuple[str, str, int]] | None = None) -> dict[tuple[str, str, int], CaseRun]:
    if not (run_dir / UNITS_FILE).exists():
        return {}
    return {(r.provider, r.case_id, r.epoch): r for r in read_units(run_dir, planned)}


def sampling_seed(config: RunConfig, epoch: int) -> int | None:
    """The sampling seed providers get in `epoch`; None with one epoch (today's requests, unchanged)."""
    return epoch_seed(config.seed, epoch) if config.epochs > 1 else None


@dataclass
class UnitsRun:
    """The run's units, finished (resumed ones included), in arm, case, epoch order."""

    runs: list[CaseRun]
    seconds: float  # wall time of the unit phase (replay + checks), without loading and reporting


def run_units(config: RunConfig, prepared: Prepared, state: dict[str, int],
              on_unit: Callable[[CaseRun], None] | None = None) -> UnitsRun:
    """Replay every unit not already done, appending each to `units.jsonl` as it finishes (`state["saved"]`
    counts them for an interrupt's message) and handing it to `on_unit` (the scorer's work ahead). The manifest
    (with the matcher's card) is written before the first."""
    cases, plan, factories, manifest, run_dir, program = (prepared.cases, prepared.plan, prepared.factories,
                                                          prepared.manifest, prepared.run_dir, prepared.program)
    embedder_name, embedder = prepared.embedder_name, prepared.embedder
    arms = []
    try:  # what each system needs for the whole run (mem0: the local server); closed when the run ends
        for system in _systems(config):
            arms += [open_arm(system, factories[name], embedder_name) for name in factories]
    except ValueError as exc:
        for arm in arms:
            arm.close()
        raise UsageError(str(exc)) from exc
    logging.getLogger("hymem.store").setLevel(logging.CRITICAL)  # injected FAISS faults are logged by design
    run_dir.mkdir(parents=True, exist_ok=True)
    lock_run_dir(run_dir, "the run directory")  # the default one is made here; --out was locked when checked
    done = _done_units(run_dir) if config.resume else {}
    for unit in done:  # saved, but the run stopped before their journals were removed
        remove_journal(run_dir, *unit)
    state["saved"] = len(done)
    names = [arm.label for arm in arms]
    todo = [(a, c, e) for a in arms for e in range(config.epochs) for c in cases if (a.label, c.id, e) not in done]
    if todo or not config.resume:  # a resume with nothing to run keeps the manifest until its report is rewritten
        write_manifest(run_dir, manifest)  # (one that crashed would otherwise leave a finished run "unfinished")
    cache = ResponseCache(config.cache_dir or run_dir.parent / ".cache" / "responses.sqlite",
                          prompt_hash=manifest.prompt_hash) \
        if config.cache and any(p.config.is_http for p in factories.values()) else None
    runs = list(done.values())
    units_file = UnitsWriter(run_dir)

    def replay_with(unit_plan: FaultPlan) -> Callable[[tuple[Any, Case, int]], CaseRun]:
        def one(unit: tuple[Any, Case, int]) -> CaseRun:
            arm, case, epoch = unit
            provider = factories[arm.provider]
            lm = provider.sampling(sampling_seed(config, epoch), config.temperature)
            system = partial(arm.make, seed=sampling_seed(config, epoch), temperature=config.temperature) \
                if arm.make is not None else None  # another engine samples each epoch as hymem does
            journal = JournalWriter(run_dir, JournalHead(provider=arm.label, case_id=case.id, epoch=epoch,
                                                         dataset=prepared.datasets[case.id],
                                                         writes_total=len(case_writes(case))))
            try:  # each finished write saved while the unit runs; dropped once its record is in units.jsonl
                models = UnitModels(lm_factory=lm, embedder=embedder, program=program, accounting=provider,
                                    cache=cache if provider.config.is_http else None)
                return CaseReplayer(case, prepared.datasets[case.id], arm.label, models, unit_plan, config.seed,
                                    epoch=epoch, system=system, on_write=_unit_progress(bar, case.id, config.progress),
                                    journal=journal.write_done).run()
            finally:
                journal.close()
        return one

    bar = _progress(len(todo), config.progress, total_done=len(done))
    calls, faults, started = 0, sum(len(r.faults) for r in runs), time.monotonic()
    results: Generator[CaseRun, None, None] | None = None
    try:
        if config.executor == "ray":
            results = _ray_results(todo, config, factories, embedder_name, plan, cases, cache, program, manifest,
                                   prepared.datasets, run_dir, lambda task: _unit_progress(bar, task.case.id,
                                                                                           config.progress))
        elif plan.fast:
            results = _fast_sweep(todo, replay_with, plan, config, run_dir)
        else:
            results = run_local(todo, replay_with(plan), _units_in_flight(config))
        for result in results:
            units_file.append(result)
            remove_journal(run_dir, result.provider, result.case_id, result.epoch)
            state["saved"] += 1
            if on_unit is not None:
                on_unit(result)
            runs.append(result)
            calls += sum(1 for a in result.attempts if a.site != "embed" and not a.cache_hit)
            faults += len(result.faults)
            bar.update(1)
            rate = calls / max(1e-9, time.monotonic() - started)
            bar.set_postfix_str(f"faults {faults} · LM calls {calls} ({rate:.1f}/s)", refresh=False)
    finally:
        if results is not None:
            results.close()  # an interrupt cancels the units still running (threads not started, Ray tasks)
        try:
            units_file.close()
        except OSError:
            pass  # the write that failed is being reported; what was fsynced is kept
        bar.close()
        if cache is not None:
            cache.close()
        for arm in arms:
            arm.close()
    remove_journal_dir(run_dir)  # every unit's record is saved: no journal is left
    drain_scratch()  # the units' scratch directories, removed in the background, are gone too
    units_seconds = time.monotonic() - started
    return UnitsRun(runs=in_report_order(runs, names), seconds=units_seconds)


FAST_PLAN_FILE = "sweep_fast.json"  # the designated sweep:fast plan, kept so --resume replays the same one


def _fast_sweep(units: list[tuple[Any, Case, int]], replay_with: Callable[[FaultPlan], Any], plan: FaultPlan,
                config: RunConfig, run_dir: Path) -> Generator[CaseRun, None, None]:
    """`--faults sweep:fast`: replay every unit with the probe plan (controls and their checks, no fault), designate
    the faulted units from what the writes offered, then yield the probe's runs of the cases given no fault and
    fresh replays, with their faults, of the cases given one.

    The designation is saved before any unit is: a resumed run replays its missing units with the plan the
    whole run was designated (a designation over only the missing units would fault other cases, and one
    case's epochs differently)."""
    probe = plan.probe()
    saved = run_dir / FAST_PLAN_FILE
    if config.resume and saved.is_file():
        final = FaultPlan.model_validate_json(saved.read_text(encoding="utf-8"))
        chosen = final.designated_cases()
        yield from run_local([u for u in units if (u[0].label, u[1].id) not in chosen], replay_with(probe),
                             _units_in_flight(config))
    else:
        probed = list(run_local(units, replay_with(probe), _units_in_flight(config)))
        final = probe.designate(probe.offered, config.seed)
        atomic_write_text(saved, final.model_dump_json())
        chosen = final.designated_cases()
        yield from (run for run in probed if (run.provider, run.case_id) not in chosen)
    yield from run_local([u for u in units if (u[0].label, u[1].id) in chosen], replay_with(final),
                         _units_in_flight(config))


def _ray_results(todo: list[tuple[Any, Case, int]], config: RunConfig, factories: dict[str, Any], embedder_spec: str,
                 plan: FaultPlan, cases: list[Case], cache: Any, program: Any, manifest: Manifest,
                 datasets: dict[str, str], run_dir: Path, progress: Callable[[UnitTask], Any]
                 ) -> Generator[CaseRun, None, None]:
    """The units as Ray tasks: each carries its case; the driver keeps writing `units.jsonl` itself, and each
    unit's journal from the lines its worker sends back (with `write i/N` on the bar)."""
    tasks = [UnitTask(case=case, dataset=datasets[case.id], label=arm.label, system=arm.system,
                      provider=factories[arm.provider].config, embedder=embedder_spec, plan=str(plan),
                      seed=config.seed, epoch=epoch, sampling_seed=sampling_seed(config, epoch),
                      temperature=config.temperature,
                      cache_path=str(cache.path) if cache is not None else None, program=program,
                      prompt_hash=manifest.prompt_hash)
             for arm, case, epoch in todo]
    limits = {name: p.config.max_connections for name, p in factories.items()}
    return run_ray(tasks, workers=config.workers or config.concurrency, address=config.ray_address,
                   limits=limits, cases=cases, run_token=manifest.manifest_hash + str(manifest.created),
                   run_dir=run_dir, progress=progress)


LONG_UNIT_SECONDS = 2.0  # a unit still writing after this long shows its writes on the bar, at most this often


def _unit_progress(bar: Any, case_id: str, enabled: bool) -> Callable[[int, int], None] | None:
    """Progress from inside a long unit (issue 35): `case: write i/N` on the cases bar, once the unit has run
    LONG_UNIT_SECONDS and then at most that often (tqdm's bar takes its own lock)."""
    if not enabled:
        return None
    started = time.monotonic()
    last = [started]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= LONG_UNIT_SECONDS and done < total:
            last[0] = now
            bar.set_postfix_str(f"{case_id}: write {done}/{total} ({now - started:.0f} s)")
    return show


def _progress(total: int, enabled: bool, total_done: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"cases (resumed {total_done})" if total_done else "cases", unit="case",
                disable=not enabled, file=sys.stderr, dynamic_ncols=True)


__all__ = ["Prepared", "RunConfig", "UnitsRun", "lock_run_dir", "prepare", "release_run_dir", "run_units", "sampling_seed"]
