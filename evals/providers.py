"""Providers: turn an `--lm` spec into a factory of `dspy.LM`s, one per case.

A factory (rather than one LM) lets calibration providers such as the oracle
answer from the case being replayed; ordinary providers ignore the case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dspy

from evals.dataset import Case

LMFactory = Callable[[Case], dspy.BaseLM]


def provider_factory(spec: str, cases: Sequence[Case] = ()) -> LMFactory:
    """`offline`, `oracle[:key=value,...]`, or any DSPy model string (`openai/gpt-4o-mini`, ...).

    `cases` are all the cases of the run: the noisy oracle chooses its errors over their gold facts.
    """
    if spec == "oracle" or spec.startswith("oracle:"):
        from evals.oracle import oracle_factory

        return oracle_factory(spec, cases)
    if spec == "offline":
        from hymem.offline import offline_lm

        return lambda case: offline_lm()
    if not spec or "/" not in spec:
        raise ValueError(f"--lm {spec!r}: use offline, oracle[:key=value,...] or a DSPy model string such as "
                         "openai/gpt-4o-mini")
    return lambda case: dspy.LM(spec, cache=False, num_retries=0, timeout=60)


def supports_inprocess_faults(factory: LMFactory, probe: Any) -> bool:
    """True when the provider's LM has a custom engine the injector can wrap."""
    engine = getattr(factory(probe), "engine", None)
    return engine is not None and not isinstance(engine, str)
