"""Tuning's models from `--lm`-style specs, through the same plumbing as `run`.

`offline`, a DSPy model string, `MODEL@URL` or a providers-file name: keys come from the
environment only, HTTP calls get the provider's timeout, retries (Retry-After honoured) and
connection limit, and every attempt becomes an `attempts.parquet` row. Tuning keeps no response
cache: an optimiser samples the same prompt on purpose, and each call asks the model afresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import pandas as pd

from evals.arms.accounting import AccountingLM, AttemptLog, price_table
from evals.arms.providers import Provider, resolve_providers
from evals.scoring.usage import COLUMNS
from hymem.offline import offline_lm
from hymem.sites import _site, current_call_site

# The site of a call no engine round makes: MIPROv2 proposing, GEPA reflecting.
OPTIMIZER_SITE = "tune.optimizer"


class TuneLM(AccountingLM):
    """An HTTP provider's LM for tuning: calls outside an engine round are recorded at OPTIMIZER_SITE."""

    def __call__(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        if current_call_site() is not None:
            return super().__call__(prompt=prompt, messages=messages, **kwargs)
        token = _site.set(OPTIMIZER_SITE)
        try:
            return super().__call__(prompt=prompt, messages=messages, **kwargs)
        finally:
            _site.reset(token)


class TuneModels:
    """Every model a tuning run uses, made once per spec, and the attempts of the HTTP ones."""

    def __init__(self, providers_file: Path | None = None):
        self.providers_file = providers_file
        self._made: dict[str, dspy.BaseLM] = {}
        self._logs: list[AttemptLog] = []

    def lm(self, spec: Any, flag: str) -> dspy.BaseLM:
        """The LM of `spec` (a spec string, or a `dspy.BaseLM` used as it is); ValueError names `flag`."""
        if isinstance(spec, dspy.BaseLM):
            return spec
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"{flag}: expected a model spec, got {spec!r}")
        if spec not in self._made:
            self._made[spec] = self._make(spec, flag)
        return self._made[spec]

    def _make(self, spec: str, flag: str) -> dspy.BaseLM:
        try:
            (config,) = resolve_providers([spec], self.providers_file)
        except ValueError as exc:
            raise ValueError(str(exc).replace("--lm", flag, 1)) from None
        if config.model == "offline":
            return offline_lm()
        if not config.is_http:
            raise ValueError(f"{flag} {spec}: the oracle answers from the case being replayed; tuning needs a model "
                             "that answers the prompt (offline, a DSPy model string or MODEL@URL)")
        try:
            provider = Provider(config)
        except ValueError as exc:  # a missing key
            raise ValueError(str(exc).replace("--lm", flag, 1)) from None
        log = AttemptLog(provider=config.name, case_id="(tune)")
        self._logs.append(log)
        return TuneLM.wrap(provider.http_lm(), provider=provider, log=log, injector=None, cache=None, retries=True,
                           prices=price_table())

    def attempts_frame(self) -> pd.DataFrame:
        """One row per HTTP attempt of the run (site lm.* for engine rounds, tune.optimizer otherwise)."""
        rows = [{"dataset": "(tune)", **a.model_dump(exclude={"schema_version"})} for log in self._logs for a in log.rows]
        return pd.DataFrame(rows, columns=COLUMNS).astype({"latency_s": "float64", "cache_hit": "bool"})


__all__ = ["OPTIMIZER_SITE", "TuneLM", "TuneModels"]
