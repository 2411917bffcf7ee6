"""Checks of a command's arguments that need nothing heavy: run before dspy, pandas or a model is imported.

Why apart: a typo in `--embedder`, `--matcher`, `--lm`, `--program` or a dataset must answer in well under the
seconds those imports take, with one line and exit 2. Each check returns the problem as one line, or None; the
library code checks everything again when it loads (these only answer first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from evals.core.urls import url_problem

# evals.scoring.choose_matcher.SPECS_HELP, repeated so that building the parser imports no scorer (scipy, pandas): a bad
# flag answers at once. tests/cli/test_cli_latency.py checks the two agree.
MATCHER_SPECS_HELP = ("semantic (default: e5 and MiniLM, thesauri, explicit near-miss checks) | semantic-v1 (semantic frozen "
                      "as of issue 33: its own rule files and weights) | text (fast, no model) | llm:MODEL_SPEC (an LLM judge)")

EMBEDDER_NAMES = ("hash", "minilm", "minilm-torch", "e5")


def embedder_problem(spec: str | None) -> str | None:
    """`--embedder` as `hymem.embedder.make_embedder` takes it: a name, or openai[/MODEL][@URL]."""
    if spec is None or spec in EMBEDDER_NAMES:
        return None
    if spec == "openai" or spec.startswith(("openai/", "openai@")):
        _, _, url = spec[len("openai"):].lstrip("/").partition("@")
        if url:
            if (problem := url_problem(url)) is not None:
                return f"--embedder {spec}: {problem}"
        return None
    return (f"--embedder: unknown embedder {spec!r}: use {', '.join(EMBEDDER_NAMES)} or "
            "openai[/MODEL][@URL]")


def matcher_problem(spec: str | None, providers_file: Path | None = None) -> str | None:
    """`--matcher` as `evals.scoring.choose_matcher.make_matcher` takes it: semantic, semantic-<frozen>, text or llm:MODEL_SPEC."""
    if spec is None:
        return None
    spec = spec.strip()
    frozen = Path(__file__).parents[1] / "scoring" / "rules" / "frozen"  # evals.scoring.rulebook's, without its imports
    if spec in ("semantic", "text") or (spec.startswith("semantic-") and frozen.is_dir()
                                        and spec[9:] in {p.name for p in frozen.iterdir() if (p / "params.json").is_file()}):
        return None
    if spec.startswith("llm:") and spec[4:].strip():
        return None  # the judge's model spec is checked as --lm is, when the judge is made
    return f"--matcher: unknown spec {spec!r}; use {MATCHER_SPECS_HELP}"


def lm_problem(specs: Sequence[str], providers_file: Path | None) -> str | None:
    """`--lm` specs and the providers file, parsed as the runner parses them (keys are checked later)."""
    from evals.arms.providers import resolve_providers  # lazy: only an --lm to check loads the providers (and dspy)

    try:
        resolve_providers(list(specs), providers_file)
    except ValueError as exc:
        return str(exc)
    return None


def program_problem(path: Path | None) -> str | None:
    """`--program`: a tuned program's directory or its program.json (its content is checked when it loads)."""
    if path is None:
        return None
    file = path / "program.json" if path.is_dir() else path
    if not file.is_file():
        return f"--program: {path}: no program.json here (expected the --out directory of `hymem-eval tune`)"
    return None


def dataset_problem(specs: Iterable[str] | None, flag: str = "--dataset") -> str | None:
    """The JSONL files and directories among `specs` (NAME:PATH corpus specs go to their adapters), loaded and
    validated whole: every bad line is `file:line: field: problem`."""
    from evals.cases.dataset import load_cases  # lazy: only a dataset to check loads the case reader

    specs = list(specs or [])
    if any(not str(spec).strip() for spec in specs):
        return f"{flag} '': an empty path (give a .jsonl file or a directory of them)"
    files = [spec for spec in specs if ":" not in spec]
    if not files:
        return None
    try:
        load_cases(files)
    except (ValueError, OSError) as exc:
        return str(exc)
    return None
