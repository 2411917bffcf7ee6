"""`hymem-eval`: a thin command line; each command calls one library function.

Exit codes: 0 finished (whatever the verdict), 1 a gate or --fail-on-invalid tripped,
2 bad input or usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch a price list


def _run(args: argparse.Namespace) -> int:
    from evals.runner import RunConfig, UsageError, run_eval

    config = RunConfig(datasets=args.dataset or [], providers=args.lm or ["offline"], embedder=args.embedder,
                       faults=args.faults, seed=args.seed, concurrency=args.concurrency, out=args.out,
                       resume=args.resume, progress=not args.no_progress)
    try:
        outcome = run_eval(config)
    except UsageError as exc:
        print(f"hymem-eval run: {exc}", file=sys.stderr)
        return 2
    print(f"verdict: {outcome.verdict}  ({outcome.units} units)")
    print(f"report: {outcome.run_dir / 'summary.md'}")
    if args.fail_on_invalid and outcome.verdict == "invalid":
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hymem-eval", description="Evaluate LLM memory writes: attribution, "
                                     "cross-subject merges and rollback under injected faults.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="replay datasets through the engine, inject faults, write a report")
    run.add_argument("--dataset", action="append", metavar="PATH",
                     help="a .jsonl file or a directory of them (repeatable; default: the bundled datasets)")
    run.add_argument("--lm", action="append", metavar="SPEC",
                     help="provider: offline, oracle[:flip_owner=R,swap_subject=R,drop=R,seed=S], or a DSPy model string "
                     "(repeatable: side-by-side comparison)")
    run.add_argument("--embedder", default=None, help="minilm | hash | openai[/MODEL][@URL] (default: minilm "
                     "when installed, else hash)")
    run.add_argument("--faults", default="sweep", help="none | sweep | random:RATE (default: sweep)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--concurrency", type=int, default=2)
    run.add_argument("--out", type=Path, default=None, help="run directory (default: reports/<run_id>/)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    run.add_argument("--fail-on-invalid", action="store_true", help="exit 1 when the verdict is invalid")
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("hymem-eval: interrupted; finished units are saved (continue with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
