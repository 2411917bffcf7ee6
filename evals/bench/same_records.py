"""Are two runs' records the same, to the last bit? (issue 35: a speed change may change no decision or score.)

A cost change to the engine or the matcher is checked by running the same command on both codes and comparing what
a reader of the runs sees: every facts row (match scores included), every case metric, every op and every anomaly,
exactly (`pandas.testing.assert_frame_equal(check_exact=True)`), and for `hymem-eval matcher eval` outputs every
labelled pair's decision and score (agreement.parquet). Timings and attempts are not compared: they are measured.

    python -m evals.bench.same_records RUN_A RUN_B        # two run directories
    python -m evals.bench.same_records EVAL_A EVAL_B      # two `matcher eval --out` directories
    python -m evals.bench.same_records --decide DIR       # every labelled pair's decision and score -> DIR

Exit 0 when every table present in either directory is equal, 1 (naming the tables) otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from evals.scoring.agreement import decide
from evals.scoring.pairs import load_pairs
from evals.scoring.semantic import SemanticMatcher

RUN_TABLES = ("facts", "case_metrics", "ops", "anomalies")
EVAL_TABLES = ("agreement", "decisions")


def differing_tables(a: Path, b: Path) -> dict[str, str]:
    """Each table of `RUN_TABLES` / `EVAL_TABLES` found in `a` or `b` that differs (or is missing from one): its name
    and why; empty when every one is exactly equal. Rows are compared in the order written (the report's order)."""
    found = [t for t in (*RUN_TABLES, *EVAL_TABLES) if (a / f"{t}.parquet").exists() or (b / f"{t}.parquet").exists()]
    if not found:
        return {"(none)": f"neither {a} nor {b} holds a run's or a matcher eval's tables"}
    out: dict[str, str] = {}
    for table in found:
        pa, pb = a / f"{table}.parquet", b / f"{table}.parquet"
        if not (pa.exists() and pb.exists()):
            out[table] = f"only in {pa.parent if pa.exists() else pb.parent}"
            continue
        try:
            pd.testing.assert_frame_equal(pd.read_parquet(pa), pd.read_parquet(pb), check_exact=True)
        except AssertionError as exc:
            out[table] = str(exc).splitlines()[0] if str(exc) else "differs"
    return out


def write_decisions(out: Path) -> Path:
    """`out/decisions.parquet`: every labelled pair (`datasets/matcher/pairs.jsonl`, all splits) as the committed
    semantic matcher decides it (`agreement.decide`, what `matcher eval` counts) and its score (`Matcher.similarity`),
    for comparing two codes pair by pair; agreement.parquet only holds the sums."""
    pairs = load_pairs(split="all")
    matcher = SemanticMatcher.load()
    said = decide(matcher, pairs)
    frame = pd.DataFrame({"gold": [p.gold.text for p in pairs], "pred": [p.pred.text for p in pairs],
                          "same": said, "score": [matcher.similarity(p.gold.text, p.pred.text) for p in pairs]})
    out.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(out / "decisions.parquet")
    return out / "decisions.parquet"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.same_records", description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, nargs="?")
    parser.add_argument("b", type=Path, nargs="?")
    parser.add_argument("--decide", type=Path, metavar="DIR", help="write every labelled pair's decision and score")
    args = parser.parse_args(argv)
    if args.decide is not None:
        print(write_decisions(args.decide))
        return 0
    if args.a is None or args.b is None:
        parser.error("give two directories to compare, or --decide DIR")

    differ = differing_tables(args.a, args.b)
    if "(none)" in differ:
        print(differ["(none)"])
    for table in (*RUN_TABLES, *EVAL_TABLES):
        path = args.a / f"{table}.parquet"
        if table in differ:
            print(f"{table}: DIFFERS: {differ[table]}")
        elif path.exists():
            print(f"{table}: equal ({len(pd.read_parquet(path))} rows)")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
