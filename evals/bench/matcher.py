"""The matchers' cost, as ratios measured side by side in one process (BENCHMARKS.md, "Fact matching").

- throughput: labelled pairs decided per second by `semantic` and `text` (each text prepared once;
  the model load is reported apart), and their ratio;
- sentence models: seconds per sentence of e5 (the matcher's sentence model) over MiniLM's;
- share of a run: the wall time of scoring a finished run with a fresh matcher over the run's wall
  time (bundled suites, offline model, `--faults none`);
- linear in distinct texts: texts the semantic matcher embedded over the distinct texts of the run's
  cases, and embedding calls over cases (one batch per case).

- LoCoMo (issue 35): a replay of sampled LoCoMo cases over the engine's model (minilm) embedding the sampled cases'
  messages and gold facts alone (the issue's ratio: its 1,807 texts), over minilm embedding the texts the replay's
  engine embedded alone, and over the matcher's models encoding its texts alone (`--locomo N`); and scoring's share
  of a `sweep:fast` run (`--fast-share`).

Run with `python -m evals.bench.matcher [--repeat R]`.
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class _Counting:
    """An embedder wrapper counting calls and texts."""

    def __init__(self, inner: Any):
        self.inner, self.calls, self.texts = inner, 0, 0

    def embed(self, texts: list[str]) -> Any:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed(texts)


def throughput(repeat: int) -> dict[str, Any]:
    from evals.scoring.agreement import decide
    from evals.scoring.matcher import TextMatcher
    from evals.scoring.pairs import load_pairs
    from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, SemanticParams
    from hymem.embedder import make_embedder

    pairs = load_pairs(split="all")
    params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
    started = time.perf_counter()
    embedder = make_embedder(params.embedder)
    sentences = make_embedder(params.sentence_embedder)
    load_s = time.perf_counter() - started
    rates: dict[str, list[float]] = {"semantic": [], "text": []}
    for _ in range(repeat):
        for name, matcher in (("semantic", SemanticMatcher(params, embedder, sentence_embedder=sentences)),
                              ("text", TextMatcher())):
            started = time.perf_counter()
            decide(matcher, pairs)
            rates[name].append(len(pairs) / (time.perf_counter() - started))
    return {"pairs": len(pairs), "model_load_s": round(load_s, 2),
            "semantic_pairs_per_s": [round(r, 1) for r in rates["semantic"]],
            "text_pairs_per_s": [round(r, 1) for r in rates["text"]],
            "text_over_semantic": [round(t / s, 1) for t, s in zip(rates["text"], rates["semantic"], strict=True)]}


def sentence_models(repeat: int) -> dict[str, Any]:
    """Seconds per sentence of the matcher's sentence model (e5) over MiniLM's, alternated on the same
    texts (the labelled pairs' distinct gold texts), each model loaded and warmed first."""
    from evals.bench.engine import embed_seconds
    from evals.scoring.pairs import load_pairs
    from hymem.embedder import make_embedder

    texts = list(dict.fromkeys(p.gold.text for p in load_pairs(split="all")))
    models = {name: make_embedder(name) for name in ("minilm", "e5")}
    for model in models.values():
        model.embed(["warm up"])
    return {"sentences": len(texts), "e5_over_minilm_seconds": [
        round(seconds["e5"] / seconds["minilm"], 2) for seconds in embed_seconds(models, texts, repeat)]}


def run_share() -> dict[str, Any]:
    from evals.cases.dataset import load_cases
    from evals.pipeline import run_eval
    from evals.record import read_units
    from evals.run.runner import RunConfig
    from evals.scoring import score_pairs
    from evals.scoring.attribution import prepare_case
    from evals.scoring.semantic import PARAMS_FILE, SemanticMatcher, SemanticParams
    from hymem.embedder import make_embedder

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        started = time.perf_counter()
        run_eval(RunConfig(faults="none", out=out, progress=False, matcher="semantic"))
        run_s = time.perf_counter() - started
        runs = read_units(out)
        cases = {c.id: c for c in load_cases([str(Path("datasets"))])}
        pairs = [(cases[r.case_id], r) for r in runs if r.case_id in cases]
        params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
        embedder = _Counting(make_embedder(params.embedder))
        sentences = _Counting(make_embedder(params.sentence_embedder))
        matcher = SemanticMatcher(params, embedder, sentence_embedder=sentences)
        distinct: set[str] = set()

        class _Texts:
            def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
                distinct.update(gold)
                distinct.update(pred)

        for case, run in pairs:
            prepare_case(case, run, _Texts())  # the texts a case hands the matcher
        started = time.perf_counter()
        score_pairs(pairs, matcher)
        score_s = time.perf_counter() - started
    return {"cases": len(pairs), "run_wall_s": round(run_s, 1), "scoring_s": round(score_s, 1),
            "scoring_share_of_run": round(score_s / run_s, 3), "distinct_texts": len(distinct),
            "texts_embedded": embedder.texts + sentences.texts, "embed_calls": embedder.calls + sentences.calls,
            "sentence_texts_embedded": sentences.texts, "word_texts_embedded": embedder.texts}


LOCOMO = Path("/work/shared/datasets/locomo/locomo10.json")


def _timed_scoring() -> tuple[dict[str, float], Any]:
    """Seconds spent in `score_pairs` (the matcher's whole cost in a run), summed; and the patch to undo."""
    import evals.report.score_run as scoring  # report_run calls score_pairs through this module's name

    spent = {"scoring_s": 0.0}
    original = scoring.score_pairs

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent["scoring_s"] += time.perf_counter() - started

    scoring.score_pairs = timed

    def undo() -> None:
        scoring.score_pairs = original

    return spent, undo


def _recorded_engine_embeds() -> tuple[list[list[str]], Any]:
    """Every batch of texts the engine hands its embedder during a run (through the fault injector's wrapper, which
    the matcher never uses); and the patch to undo."""
    from evals.faults.inject import FaultyEmbedder

    calls: list[list[str]] = []
    original = FaultyEmbedder.embed

    def recording(self: Any, texts: list[str]) -> Any:
        calls.append(list(texts))
        return original(self, texts)

    FaultyEmbedder.embed = recording  # type: ignore[method-assign]

    def undo() -> None:
        FaultyEmbedder.embed = original  # type: ignore[method-assign]

    return calls, undo


ISSUE_BATCH = 32


def _seconds_to_embed(embedder: Any, batches: list[list[str]]) -> tuple[float, int]:
    """Seconds to embed each batch's texts not seen in an earlier batch, one call per batch (as the run's shared
    embedder does with its per-text cache); and how many distinct texts that was."""
    seen: set[str] = set()
    spent = 0.0
    for batch in batches:
        fresh = [t for t in dict.fromkeys(batch) if t not in seen]
        seen.update(fresh)
        if fresh:
            started = time.perf_counter()
            embedder.embed(fresh)
            spent += time.perf_counter() - started
    return spent, len(seen)


def _case_texts(cases: Sequence[Any]) -> list[list[str]]:
    """Each case's texts as issue 35 counted them: every message of its turns, then its gold facts' texts (for
    `--sample 60 --seed 1`: 1,279 messages + 528 gold facts = the issue's 1,807 texts)."""
    return [[str(m["content"]) for turn in case.turns for m in turn] + [f.text for f in case.expect.facts]
            for case in cases]


def locomo_ratio(sample: int, seed: int = 1, path: Path = LOCOMO, keep: Path | None = None) -> dict[str, Any]:
    """A LoCoMo replay (`--sample N --seed S --faults none`, minilm, the semantic matcher, a cold vector cache) over
    encoding texts alone, in the same process right after, each model loaded and warmed first. Three denominators:

    - `run_over_engine_embedding_alone` (issue 35's definition, "embedding the same 1,807 texts with the same model
      alone"): the engine's model (minilm) alone on the sampled cases' messages and gold facts' texts, sorted by
      length in batches of 32, its cheapest way (1,807 texts for `--sample 60 --seed 1`: the issue's count);
    - `run_over_engine_texts_alone` (the seventeenth session's reading): minilm alone on the texts the replay's
      engine embedded (every distinct text it sent its embedder, in the engine's batches; 439 for 60 units);
    - `run_over_matcher_encoding_alone` (the earlier sessions' figure): the matcher's models alone on the matcher's
      texts: each case's distinct predicates with e5 and their content words with MiniLM, one batch per model per
      case, as the matcher does (`run_over_e5_alone`: e5's part only).

    `keep`: the run's directory (its parquet files, to compare two codes' decisions); else a temporary one.
    """
    from evals.cases.adapters import load_spec
    from evals.pipeline import run_eval
    from evals.record import read_units
    from evals.run.runner import RunConfig
    from evals.scoring.attribution import prepare_case
    from evals.scoring.semantic import PARAMS_FILE, SemanticParams, _latin_content, prepare_text
    from hymem.embedder import make_embedder

    spent, undo = _timed_scoring()
    engine_calls, undo_recording = _recorded_engine_embeds()
    with tempfile.TemporaryDirectory() as tmp:
        out = keep if keep is not None else Path(tmp) / "run"
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            # the caches in the temporary directory, always: beside a kept run (`--keep /tmp/x`) they would be
            # `/tmp/.cache`, shared with every earlier run there, and the vectors warm
            outcome = run_eval(RunConfig(datasets=[f"locomo:{path}"], sample=sample, seed=seed, faults="none", out=out,
                                         progress=False, matcher="semantic", embedder="minilm",
                                         cache_dir=Path(tmp) / "cache" / "responses.sqlite"))
        finally:
            undo()
            undo_recording()
        run_s, run_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        runs = read_units(out)
    engine = make_embedder("minilm")
    engine.embed(["warm up"])
    engine_s, engine_texts = _seconds_to_embed(engine, engine_calls)
    sampled = _case_texts(load_spec(f"locomo:{path}", sample=sample, seed=seed))
    # The model at its best on those texts: sorted by length, in batches of ISSUE_BATCH. A batch per case pads every
    # message to the case's longest and cost 1.6x the CPU (20 cases, load ~4): that would flatter the ratio.
    by_length = sorted((t for texts in sampled for t in texts), key=len)
    issue_s = issue_cpu = 0.0  # the CPU too: the wall of a step measured minutes after the run moves with the load
    for i in range(0, len(by_length), ISSUE_BATCH):
        started, started_cpu = time.perf_counter(), time.process_time()
        engine.embed(by_length[i:i + ISSUE_BATCH])
        issue_s += time.perf_counter() - started
        issue_cpu += time.process_time() - started_cpu
    cases = {c.id: c for c in load_spec(f"locomo:{path}")}
    batches: list[list[str]] = []

    class _Texts:
        def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
            batches.append([*gold, *pred])

    for run in runs:
        prepare_case(cases[run.case_id], run, _Texts())
    params = SemanticParams.model_validate_json(PARAMS_FILE.read_text(encoding="utf-8"))
    sentences, words = make_embedder(params.sentence_embedder), make_embedder(params.embedder)
    sentences.embed(["warm up"])
    words.embed(["warm up"])
    seen_p: set[str] = set()
    seen_w: set[str] = set()
    e5_s = minilm_s = 0.0
    for batch in batches:
        prepared = [prepare_text(t) for t in dict.fromkeys(batch)]
        predicates = [p for p in dict.fromkeys(x.predicate for x in prepared) if p not in seen_p]
        content = [w for w in dict.fromkeys(w for x in prepared for w in _latin_content(x)) if w not in seen_w]
        seen_p.update(predicates)
        seen_w.update(content)
        started = time.perf_counter()
        if predicates:
            sentences.embed(predicates)
        e5_s += time.perf_counter() - started
        started = time.perf_counter()
        if content:
            words.embed(content)
        minilm_s += time.perf_counter() - started
    return {"cases": len(runs), "run_wall_s": round(run_s, 1), "units_s": round(outcome.units_seconds, 1),
            "scoring_s": round(spent["scoring_s"], 1),
            "issue_texts": sum(map(len, sampled)), "engine_embedding_alone_s": round(issue_s, 2),
            "run_over_engine_embedding_alone": round(run_s / issue_s, 2),
            "units_over_engine_embedding_alone": round(outcome.units_seconds / issue_s, 2),
            "run_cpu_over_engine_embedding_cpu": round(run_cpu / issue_cpu, 2),
            "run_cpu_s": round(run_cpu, 1), "engine_embedding_alone_cpu_s": round(issue_cpu, 2),
            "engine_texts": engine_texts, "engine_texts_alone_s": round(engine_s, 2),
            "run_over_engine_texts_alone": round(run_s / engine_s, 2),
            "units_over_engine_texts_alone": round(outcome.units_seconds / engine_s, 2),
            "predicates": len(seen_p), "words": len(seen_w), "e5_alone_s": round(e5_s, 1),
            "minilm_alone_s": round(minilm_s, 1), "run_over_e5_alone": round(run_s / e5_s, 2),
            "run_over_matcher_encoding_alone": round(run_s / (e5_s + minilm_s), 2),
            "divides_by": "engine embedding (issue 35): minilm alone on the sampled cases' messages + gold facts' "
                          "texts, sorted by length in batches of 32; engine texts: minilm alone on the replay's distinct embedded "
                          "texts; matcher: e5 on the run's distinct predicates + MiniLM on their content words"}


def fast_share(cache: Path | None = None) -> dict[str, Any]:
    """Scoring's share of a `--faults sweep:fast` run of the bundled suites (the CI gate's run), semantic matcher;
    the vector cache cold, or `cache/vectors.sqlite` (kept: a second run reads what the first encoded)."""
    from evals.pipeline import run_eval
    from evals.run.runner import RunConfig

    spent, undo = _timed_scoring()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        try:
            run_eval(RunConfig(faults="sweep:fast", out=Path(tmp) / "run", progress=False, matcher="semantic",
                               cache_dir=cache / "responses.sqlite" if cache is not None else None))
        finally:
            undo()
        run_s = time.perf_counter() - started
    return {"run_wall_s": round(run_s, 1), "scoring_s": round(spent["scoring_s"], 1),
            "scoring_share": round(spent["scoring_s"] / run_s, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.matcher")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--locomo", type=int, metavar="N", help="only: a LoCoMo replay of N sampled cases over "
                        "encoding its texts alone (issue 35)")
    parser.add_argument("--keep", type=Path, help="--locomo: keep the run in this directory")
    parser.add_argument("--fast-share", action="store_true", help="only: scoring's share of a sweep:fast run")
    parser.add_argument("--cache", type=Path, help="--fast-share: keep the vectors in this directory (run twice: warm)")
    args = parser.parse_args(argv)
    if args.locomo or args.fast_share:
        out: dict[str, Any] = {}
        if args.locomo:
            out["locomo"] = locomo_ratio(args.locomo, keep=args.keep)
        if args.fast_share:
            out["sweep_fast"] = fast_share(args.cache)
        print(json.dumps(out, indent=1))
        return 0
    through = throughput(args.repeat)
    print(json.dumps({"throughput": through,
                      "median_semantic_pairs_per_s": statistics.median(through["semantic_pairs_per_s"]),
                      "sentence_models": sentence_models(args.repeat),
                      "run": run_share()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
