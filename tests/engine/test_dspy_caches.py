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


def test_the_strict_adapter_sends_the_messages_dspys_json_adapter_formats_for_every_engine_signature():
    import dspy

    from hymem.llm import StrictJSONAdapter
    from hymem.signatures import ExtractFacts, ExtractFactsZh, ExtractWorking, ReconcileFacts

    demo = {"conversation": "[user]: I live in Rome.", "facts": [], "profile": {"location": "Rome"}}
    for signature, inputs, demos in [
        (ExtractFacts, {"conversation": "The user's name is Tim.\n[user]: I'm a nurse."}, [demo]),
        (ExtractFactsZh, {"conversation": "[user]: 我是一名老师。"}, []),
        (ExtractWorking, {"trajectory": "[tool pytest]: 1 failed"}, []),
        (ReconcileFacts, {"new_facts": '[{"index": 0}]', "existing": "[]"}, []),
    ]:
        for _ in range(2):  # the second call is answered from the memos
            assert StrictJSONAdapter().format(signature, demos, inputs) == \
                dspy.JSONAdapter().format(signature, demos, inputs)


def test_memoised_resolve_adapter_answers_as_dspy_does():
    import dspy
    from dspy.adapters import decision
    from dspy.adapters.types.decision import Noul
    from dspy.predict import predict as predict_module

    from hymem.signatures import ExtractFacts, ReconcileFacts

    class Check(dspy.Signature):
        claim: str = dspy.InputField()
        holds: Noul = dspy.OutputField()

    memo, original = predict_module.resolve_adapter, decision.resolve_adapter
    assert memo is not original  # installed where Predict looks it up
    adapter, lm = dspy.JSONAdapter(), dspy.LM("openai/gpt-4o-mini")
    for signature in (ExtractFacts, ReconcileFacts, Check):
        for _ in range(2):  # the second call is answered from the memo
            mine, theirs = (f(lm, adapter, signature, {}, signature) for f in (memo, original))
            assert type(mine) is type(theirs) and (mine is adapter) == (theirs is adapter)
    for resolve in (memo, original):  # per-field settings are never memoised: DSPy answers (here, refuses)
        with pytest.raises(ValueError, match="unsupported outputs"):
            resolve(lm, adapter, ReconcileFacts, {"ops": {"threshold": 0.7}}, ReconcileFacts)


def test_memoised_proxy_lookup_follows_every_change_of_the_environment(monkeypatch):
    import urllib.request

    from dspy._vendor.lm15.transports import _proxy

    assert _proxy.getproxies is not urllib.request.getproxies_environment  # the memo is where DSPy calls it
    for name in [n for n in list(__import__("os").environ) if n.lower().endswith("_proxy") or n == "REQUEST_METHOD"]:
        monkeypatch.delenv(name)
    steps = [("https_proxy", "http://p:3128"), ("HTTP_PROXY", "http://q:1"), ("http_proxy", "http://lower:2"),
             ("REQUEST_METHOD", "GET"), ("http_proxy", ""), ("ALL_PROXY", "http://all:3"), ("https_proxy", None)]
    for name, value in steps:
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
        got = _proxy.getproxies()
        assert got == urllib.request.getproxies_environment()
        got["poisoned"] = "x"  # each caller gets its own dict
        assert "poisoned" not in _proxy.getproxies()
