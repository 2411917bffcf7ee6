"""Providers: `--lm` specs and a providers file → one `Provider` each, which makes `dspy.LM`s per case.

A factory per case (rather than one LM) lets calibration providers such as the oracle answer
from the case being replayed. HTTP providers read their key from the environment only; a
missing key is a one-line error before any work, and no key is ever written anywhere.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dspy
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evals.arms import local_server  # called through the module: tests stand a fake server in for llama.cpp
from evals.arms.local_server import LocalServerError, LocalSettings
from evals.arms.oracle import oracle_factory
from evals.arms.slots import ConnectionSlots, Slots
from evals.cases.dataset import Case
from evals.core.redact import redact_url, register_secret, register_url
from evals.core.structured import Structured, StructuredLM, effective_structured
from evals.core.urls import url_problem
from hymem.offline import offline_lm

LMFactory = Callable[[Case], dspy.BaseLM]
LOCAL_MAX_TOKENS = 512  # a local model's default reply cap (hymem's replies are well under it)
LOCAL_TIMEOUT = 600.0  # seconds: a 135M model on one busy core takes ~17 s for a first ~1,100-token prompt

# The environment variable a provider prefix reads its key from (DSPy/LiteLLM's own names).
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
           "groq": "GROQ_API_KEY", "mistral": "MISTRAL_API_KEY", "together_ai": "TOGETHERAI_API_KEY",
           "deepseek": "DEEPSEEK_API_KEY", "openrouter": "OPENROUTER_API_KEY", "fireworks_ai": "FIREWORKS_API_KEY"}


class ProviderConfig(BaseModel):
    """One provider, from `--lm` or a `[[provider]]` table of the providers file."""

    model_config = ConfigDict(extra="forbid")

    name: str  # how the provider is named in reports (the --lm spec by default)
    model: str = ""  # offline | oracle[:...] | a DSPy model string such as openai/gpt-4o-mini (local: openai/NAME)
    local: str | None = None  # serve this local model (smollm2 or a .gguf path) for the run: `--lm local:NAME`
    api_base: str | None = None  # an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = None  # the environment variable holding the key (default by prefix)
    timeout: float = Field(default=60.0, gt=0)  # seconds per request, explicit (DSPy's default is 600)
    max_connections: int = Field(default=8, ge=1)  # concurrent requests to this provider (run: unset -> --concurrency)
    max_attempts: int = Field(default=3, ge=1)  # per call, only without fault injection; 429 honours Retry-After
    input_price: float | None = Field(default=None, ge=0)  # USD per 1M prompt tokens (else the local price table)
    output_price: float | None = Field(default=None, ge=0)  # USD per 1M completion tokens
    structured: Structured | None = None  # response_format per call (evals/core/structured.py); unset: json_schema
    # for a local model, else DSPy's choice by model name
    max_tokens: int | None = Field(default=None, ge=1)  # reply length cap per call (runaway generation, cost)

    @model_validator(mode="after")
    def _local_defaults(self) -> ProviderConfig:
        """A local model is served under its own name; without a model the provider has nothing to call."""
        if self.local is not None:
            self.model = self.model or f"openai/{local_server.served_name(self.local)}"
            if self.structured is None:
                self.structured = "json_schema"  # llama.cpp constrains decoding to the schema
            if self.max_tokens is None:
                self.max_tokens = LOCAL_MAX_TOKENS
        elif not self.model:
            raise ValueError("model: required (or local)")
        return self

    @field_validator("api_base")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        """A malformed endpoint is named as such, not later mistaken for a missing key."""
        if value is not None:
            if (problem := url_problem(value)) is not None:
                raise ValueError(problem)
            register_url(value)  # its credentials (user:password@, ?key=) are redacted from every output
        return value

    @field_validator("name")
    @classmethod
    def _a_name(cls, value: str) -> str:
        """Reports, tables and --lm name a provider by it: an empty or padded name would be no name."""
        if not value.strip() or value != value.strip():
            raise ValueError(f"{value!r} is not a name: use non-empty text without surrounding spaces")
        return value

    @field_validator("model")
    @classmethod
    def _a_model(cls, value: str) -> str:
        """offline, oracle[:...] or PREFIX/MODEL, as --lm takes them: anything else fails every call later
        ('' is left to `_local_defaults`: a local model names its own)."""
        if value in ("", "offline", "oracle") or value.startswith("oracle:"):
            return value
        prefix, _, name = value.partition("/")
        if not prefix.strip() or not name.strip() or value != value.strip():
            raise ValueError(f"{value!r} is not a model: use offline, oracle[:...] or a DSPy model string such as "
                             "openai/gpt-4o-mini")
        return value

    @property
    def is_http(self) -> bool:
        return self.model not in ("offline", "oracle") and not self.model.startswith("oracle:")

    def effective_structured(self) -> Structured | None:
        """What this provider's calls send as response_format (None: not an HTTP provider)."""
        if not self.is_http:
            return None
        if self.structured is not None:
            return self.structured

        try:  # DSPy's catalogue, by model name (offline: LITELLM_LOCAL_MODEL_COST_MAP)
            return effective_structured(StructuredLM(self.model, api_base=self.api_base))
        except Exception:  # a model string DSPy cannot resolve fails on its first call, with its own error
            return None

    def spec(self) -> dict[str, Any]:
        """What this provider asks and how its replies are costed, as the manifest records and hashes it: the
        model, the endpoint it calls (`endpoint`, so one set by the environment counts too) and the prices.
        Never a key; transport settings (timeout, attempts, connections) stay out, as --concurrency does."""
        base = endpoint(self.model, self.api_base) if self.is_http else None
        spec = {"model": self.model, "api_base": redact_url(base) if base else None,  # credentials never recorded
                "input_price": self.input_price, "output_price": self.output_price,
                "structured": self.effective_structured(), "max_tokens": self.max_tokens}
        if self.local is not None:  # the served file, not the free port it happened to get

            spec.pop("api_base")
            spec["local"] = self.local
            with contextlib.suppress(Exception):
                spec["local_file"] = local_server.model_file(self.local).name
        return {k: v for k, v in spec.items() if v is not None}


def endpoint(model: str, api_base: str | None = None) -> str | None:
    """The base URL an LM of `model` calls: `api_base` when given, else the one LiteLLM reads from the environment
    for the model's prefix (DSPy's native engine hands a call to LiteLLM whenever `<PREFIX>_API_BASE` or
    `<PREFIX>_BASE_URL` is set; LiteLLM reads OPENAI_BASE_URL before OPENAI_API_BASE, other prefixes the other
    way round). None: the provider's own default endpoint."""
    if api_base:
        return api_base
    prefix = model.split("/", 1)[0].upper() if "/" in model else "OPENAI"
    names = ("BASE_URL", "API_BASE") if prefix == "OPENAI" else ("API_BASE", "BASE_URL")
    url = next((os.environ[f"{prefix}_{n}"] for n in names if os.environ.get(f"{prefix}_{n}")), None)
    register_url(url)
    return url


def parse_lm_spec(spec: str) -> ProviderConfig:
    """`offline`, `oracle[:k=v,...]`, `local:NAME`, `MODEL` or `MODEL@URL` (`openai/m@http://127.0.0.1:8000/v1`)."""
    if spec in ("offline", "oracle") or spec.startswith("oracle:"):
        return ProviderConfig(name=spec, model=spec)
    if spec.startswith("local:") and spec.removeprefix("local:"):
        # one request at a time (the server handles one), and a timeout a slow CPU needs
        return ProviderConfig(name=spec, local=spec.removeprefix("local:"), max_connections=1, timeout=LOCAL_TIMEOUT)
    model, sep, url = spec.partition("@")
    if not model or "/" not in model or (sep and not url.startswith(("http://", "https://"))):
        raise ValueError(f"--lm {redact_url(spec)!r}: use offline, oracle[:key=value,...], local:NAME (smollm2 or a "
                         ".gguf path), a DSPy model string such as openai/gpt-4o-mini, or MODEL@URL for an "
                         "OpenAI-compatible endpoint")
    # named without the URL's credentials: the name is every report's provider column and the resume key
    try:
        return ProviderConfig(name=redact_url(spec), model=model, api_base=url or None)
    except ValidationError as exc:  # one line, not pydantic's block
        raise ValueError(f"--lm {redact_url(spec)!r}: {_one_line(exc)}") from None


def _one_line(exc: ValidationError) -> str:
    """A validation error as `field: problem; ...` on one line."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {str(e['msg']).removeprefix('Value error, ')}"
                     for e in exc.errors())


def load_providers_file(path: Path) -> list[ProviderConfig]:
    """A TOML file of `[[provider]]` tables (see README). Every problem is one line, `file: provider[i].field:
    problem`, so a user sees all of them at once and none is buried in a validation dump."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"--providers {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                         f"{exc.start})") from None
    except RecursionError:
        raise ValueError(f"--providers {path}: nested too deeply to be a providers file") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--providers {path}: {exc}") from None
    entries = data.get("provider", [])
    if not isinstance(entries, list):
        raise ValueError(f"--providers {path}: provider: use [[provider]] tables")
    out, problems, names = [], [], set()
    for i, entry in enumerate(entries):
        try:
            config = ProviderConfig.model_validate(entry)
        except ValidationError as exc:
            found = []
            for error in exc.errors():
                field = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in error["loc"])
                problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
                found.append(f"provider[{i}]{field}: {problem.removeprefix('Value error, ')}")
            # the model check runs after the fields': with another field wrong, say it is missing too
            if isinstance(entry, dict) and not entry.get("model") and "local" not in entry \
                    and not any(line.startswith(f"provider[{i}]: model:") for line in found):
                found.insert(0, f"provider[{i}].model: required (or local)")
            problems += [f"--providers {path}: {line}" for line in found]
            continue
        if config.api_key_env and (value := os.environ.get(config.api_key_env)):
            register_secret(value)  # a key the file names is a secret whether or not this run calls it
        if config.name in names:
            problems.append(f"--providers {path}: provider[{i}].name: {config.name!r} is already a provider's name")
        names.add(config.name)
        out.append(config)
    if problems:
        raise ValueError("\n".join(problems))
    if not out:
        raise ValueError(f"--providers {path}: no [[provider]] tables")
    return out


def resolve_providers(specs: Sequence[str], providers_file: Path | None) -> list[ProviderConfig]:
    """`--lm` specs (a name from the providers file, or a spec) plus the file's providers."""
    known = {p.name: p for p in load_providers_file(providers_file)} if providers_file else {}
    if not specs:
        return list(known.values()) or [ProviderConfig(name="offline", model="offline")]
    return [known[s] if s in known else parse_lm_spec(s) for s in specs]


def _is_loopback(url: str | None) -> bool:
    host = urlparse(url).hostname if url else None
    if host in ("localhost",):
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key(config: ProviderConfig) -> str | None:
    """The key from the environment; a placeholder for a loopback endpoint; else a one-line error."""
    env = config.api_key_env or KEY_ENV.get(config.model.split("/", 1)[0])
    value = os.environ.get(env) if env else None
    if value:
        register_secret(value)  # redacted from every output from now on
        return value
    if _is_loopback(endpoint(config.model, config.api_base)):  # the endpoint the environment sets counts too
        return "local-no-key"
    if env is None:
        return None  # a provider DSPy configures by itself (e.g. its own environment variables)
    raise ValueError(f"--lm {config.name}: set {env} in the environment (keys are never read from flags or files)")


_LOCAL_SLOTS: dict[str, ConnectionSlots] = {}
_LOCAL_SLOTS_LOCK = threading.Lock()


class Provider:
    """A configured provider: makes an LM per case and shares one connection limit across them."""

    def __init__(self, config: ProviderConfig, cases: Sequence[Case] = ()):
        self.config = config
        self.name = config.name
        self.connections: Slots = ConnectionSlots(config.max_connections)  # a Ray run swaps in cluster-wide slots
        self._cases = list(cases)
        self._factories: dict[tuple[int | None, float | None], LMFactory] = {}
        self._kwargs: dict[str, Any] = {}
        if config.local is not None and config.api_base is None:  # started here, stopped when the process ends

            try:
                settings = LocalSettings(max_tokens=max(config.max_tokens or 0, LOCAL_MAX_TOKENS))  # a safety net
                config = self.config = config.model_copy(update={"api_base": local_server.endpoint_for(config.local, settings)})
            except LocalServerError as exc:
                raise ValueError(f"--lm {config.name}: {exc}") from None
        if (local := config.local) is not None:
            # llama-cpp-python's server runs one request at a time and (interrupt_requests) a second one cuts the
            # first: every provider of this process on one local model shares one connection
            config = self.config = config.model_copy(update={"max_connections": 1})
            with _LOCAL_SLOTS_LOCK:
                self.connections = _LOCAL_SLOTS.setdefault(local, ConnectionSlots(1))
        if config.is_http:
            key = api_key(config)  # raises before any work when missing
            self._kwargs = {"cache": False, "num_retries": 0, "timeout": config.timeout}
            if config.max_tokens is not None:
                self._kwargs["max_tokens"] = config.max_tokens
            if config.api_base:
                self._kwargs["api_base"] = config.api_base
            if key is not None:
                self._kwargs["api_key"] = key
        self._factory = self.sampling()

    def sampling(self, seed: int | None = None, temperature: float | None = None) -> LMFactory:
        """The LM factory of one epoch: HTTP providers get `seed` and `temperature` as request parameters
        (when given); the noisy oracle draws its errors from `seed`; offline and the exact oracle are
        deterministic and take neither."""
        key = (seed, temperature)
        if key not in self._factories:
            self._factories[key] = self._make(seed, temperature)
        return self._factories[key]

    def _make(self, seed: int | None, temperature: float | None) -> LMFactory:
        config = self.config
        if config.model == "offline":
            return lambda case: offline_lm()
        if not config.is_http:
            return oracle_factory(config.model, self._cases, seed=seed)
        kwargs = dict(self._kwargs)
        if seed is not None:
            kwargs["seed"] = seed
        if temperature is not None:
            kwargs["temperature"] = temperature
        return lambda case: StructuredLM(config.model, structured=config.structured, **kwargs)

    def lm(self, case: Case) -> dspy.BaseLM:
        return self._factory(case)

    def http_lm(self) -> dspy.BaseLM:
        """An HTTP provider's LM outside any case (the judge's), as its default factory makes it for every case."""
        if not self.config.is_http:
            raise ValueError(f"{self.config.name} is not an HTTP provider: its LM depends on the case")
        return StructuredLM(self.config.model, structured=self.config.structured, **self._kwargs)

    @property
    def supports_inprocess_faults(self) -> bool:
        return not self.config.is_http


def provider_factory(spec: str, cases: Sequence[Case] = ()) -> LMFactory:
    """The LM factory of one `--lm` spec (kept for callers that need only the factory)."""
    return Provider(parse_lm_spec(spec), cases).lm
