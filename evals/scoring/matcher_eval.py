"""`hymem-eval matcher eval` and `matcher fit`: one library function each."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from evals.core.redact import write_parquet, write_text
from evals.scoring.agreement import AGREEMENT_COLUMNS, card_of, evaluate, format_agreement, remember, undecided
from evals.scoring.choose_matcher import MatcherSpecError, make_matcher
from evals.scoring.pairs import BUNDLED_PAIRS, Pair, PairsError, load_pairs, pairs_hash
from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, fit_semantic
from hymem.embedder import make_embedder

AGREEMENT_SCHEMA = pa.schema([("matcher", pa.string()), ("split", pa.string()), ("lang", pa.string()),
                              ("category", pa.string()), ("metric", pa.string()), ("value", pa.float64()),
                              ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("n", pa.int64())])
assert AGREEMENT_SCHEMA.names == AGREEMENT_COLUMNS


class MatcherEvalError(ValueError):
    """Bad input to `matcher eval` / `matcher fit` (exit 2)."""


class NothingMeasured(RuntimeError):
    """`matcher eval` ran, but the matcher decided no pair (an LLM judge whose every call failed): the agreement
    it wrote is not a measurement (exit 1). `text` and `path` are what it printed and wrote."""

    def __init__(self, message: str, text: str, path: Path) -> None:
        super().__init__(message)
        self.text, self.path = text, path


def matcher_eval(spec: str | None, *, pairs: Path | None, split: str | None, out: Path, seed: int = 0,
                 providers_file: Path | None = None) -> tuple[str, Path]:
    """Agreement of the matcher with the pairs; writes `out/agreement.parquet`; returns (text, path).
    `providers_file`: where an `llm:NAME` judge's name is looked up, as `run --providers`."""
    path = Path(pairs) if pairs is not None else BUNDLED_PAIRS
    bundled = path.resolve() == BUNDLED_PAIRS.resolve()
    split = split or ("heldout" if bundled else "all")
    try:
        chosen = load_pairs(path, split)
    except PairsError as exc:
        raise MatcherEvalError(str(exc)) from exc
    if not chosen:
        raise MatcherEvalError(f"{path}: no pairs in split {split!r}")
    out = Path(out)
    try:  # before any matcher work: a judge's calls are not spent on a result that cannot be written
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MatcherEvalError(f"--out {out}: cannot create the directory: {exc.strerror or exc}") from exc
    judge_options = {"attempts_dir": out, "cache_file": out.parent / ".cache" / "responses.sqlite",
                     "providers_file": providers_file}
    try:
        matcher = make_matcher(spec, **judge_options)
    except MatcherSpecError as exc:
        raise MatcherEvalError(str(exc)) from exc
    frame, rate = evaluate(matcher, chosen, split, seed)
    failed = int(undecided(matcher, chosen).sum())
    target = out / "agreement.parquet"
    write_parquet(frame, target, AGREEMENT_SCHEMA)
    if (attempts := getattr(matcher, "attempts_frame", None)) is not None:  # the judge's calls, site `judge`
        write_parquet(attempts(), out / "attempts.parquet")  # redacted: a judge's error may echo its key
    if hasattr(matcher, "close"):
        matcher.close()
    if bundled and split == "heldout" and not failed:  # the card every run's manifest shows
        remember(frame, matcher, chosen, out.parent / ".cache" / "matcher_agreement.json")
    text = f"pairs: {path} ({split}, {len(chosen)})\n" + format_agreement(frame, rate)
    if fitted := in_sample(matcher, chosen):
        text += (f"in-sample: {fitted} of {len(chosen)} pairs are in the calibration split the matcher's parameters "
                 f"were fitted on ({BUNDLED_PAIRS.name}): agreement over them is not a held-out measure (the held-out "
                 "figure: --split heldout without --pairs)\n")
    if failed:
        health = matcher.health() if hasattr(matcher, "health") else {}
        text += (f"undecided: {failed} of {len(chosen)} pairs ({health.get('judge_errors')} of "
                 f"{health.get('judge_calls')} judge calls failed; first: {health.get('judge_first_error')}), "
                 "counted as disagreeing with their labels; not recorded as the matcher's held-out agreement "
                 "(run again: the calls that succeeded are cached)\n")
    if failed == len(chosen):
        raise NothingMeasured(f"the matcher decided none of the {len(chosen)} pairs (every judge call failed): the "
                              "agreement written is not a measurement", text, target)
    return text, target


def in_sample(matcher: object, pairs: list[Pair]) -> int:
    """How many of the pairs the matcher's parameters were fitted on: the semantic matcher's, fitted on the
    bundled calibration split, recognised by content (a copy of the file under another name too)."""
    fitted_on = str(getattr(getattr(matcher, "params", None), "fitted_on", ""))
    if not fitted_on.startswith(BUNDLED_PAIRS.name):
        return 0

    def key(p: Pair) -> tuple[str, str, str, str]:
        return p.gold.text, p.gold.subject, p.pred.text, p.pred.subject

    fitted = {key(p) for p in load_pairs(BUNDLED_PAIRS, "calibration")}
    return sum(key(p) in fitted for p in pairs)


def matcher_fit(*, pairs: Path | None, out: Path | None) -> str:
    """Fit the semantic matcher on the calibration split of the pairs and save its parameters, with
    the held-out agreement measured afterwards (the card runs show; nothing is fitted on it)."""
    path = Path(pairs) if pairs is not None else BUNDLED_PAIRS
    try:
        calibration = load_pairs(path, "calibration")
        heldout = load_pairs(path, "heldout")
    except PairsError as exc:
        raise MatcherEvalError(str(exc)) from exc
    target = Path(out) if out is not None else PARAMS_FILE
    if target.is_dir() or not target.parent.is_dir():  # said before the fit, not after it
        raise MatcherEvalError(f"--out {target}: {'is a directory' if target.is_dir() else 'no such directory'}")
    try:
        params = fit_semantic(calibration, source=path.name)
    except ValueError as exc:  # too few pairs, or one class only (in the file or in a cross-validation fold)
        raise MatcherEvalError(f"{path}: cannot fit on its {len(calibration)} calibration pairs: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    if heldout:
        # not `SemanticMatcher.load()`: the committed parameters may weigh other features than the new ones
        frame, _ = evaluate(SemanticMatcher(params, make_embedder(params.embedder)), heldout, "heldout")
        params.heldout = {**card_of(frame), "pairs_hash": pairs_hash(heldout)}
    try:
        write_text(target, params.model_dump_json(indent=2) + "\n")
    except OSError as exc:
        raise MatcherEvalError(f"--out {target}: cannot write: {exc.strerror or exc}") from exc
    return f"fitted on {len(calibration)} calibration pairs of {path}: {target}\n{params.model_dump_json(indent=2)}\n"


__all__ = ["AGREEMENT_SCHEMA", "MatcherEvalError", "NothingMeasured", "in_sample", "matcher_eval", "matcher_fit"]
