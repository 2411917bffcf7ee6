"""The DSPy caches change no result: same metadata answers (copies the caller may mutate), same parses."""

from __future__ import annotations

import pydantic
import pytest

import hymem.llm  # noqa: F401  (installs the caches)
from hymem.dspy_caches import cached_type_adapter
from hymem.signatures import ExtractedFact


@pytest.mark.parametrize("provider, model", [("openai", "gpt-4o-mini"), ("openai", "offline"), ("vllm", "my-model")])
def test_memoised_model_info_answers_as_dspy_does_and_each_caller_gets_its_own_copy(provider, model):
    from dspy.clients import costs, model_metadata

    original = model_metadata.model_info
    assert costs.model_info is not original  # the memo is installed where DSPy's cost code looks it up
    first = costs.model_info(provider, model)
    assert first == original(provider, model)
    first["poisoned"] = True
    assert "poisoned" not in costs.model_info(provider, model)


def test_cached_type_adapters_are_built_once_and_validate_as_fresh_ones():
    assert cached_type_adapter(list[ExtractedFact]) is cached_type_adapter(list[ExtractedFact])
    data = [{"text": "Tim works at Stripe.", "subject": "Tim", "owner": "user"}]
    assert cached_type_adapter(list[ExtractedFact]).validate_python(data) == \
        pydantic.TypeAdapter(list[ExtractedFact]).validate_python(data)
    with pytest.raises(pydantic.ValidationError):
        cached_type_adapter(list[ExtractedFact]).validate_python([{"text": "x", "subject": "y", "owner": "nobody"}])
