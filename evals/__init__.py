"""Eval harness for hymem: datasets, runs, scoring and reports."""

import os

# Nothing in the harness may reach for the network: DSPy/LiteLLM would fetch a model price list.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__all__: list[str] = []
