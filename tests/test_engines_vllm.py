"""Real vLLM CPU servers: answers, metrics, prefix-cache reset, crash detection, clean stop.

One SmolLM2 server (the session's engine slot) serves the SmolLM2 tests; the crash test
starts its own tiny-model server because it kills it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from engines import EngineCrashed, RunningEngine, engine_identity, start_engine
from engines.process import group_alive, group_members

pytestmark = pytest.mark.engine

# > 2 CPU KV blocks (block size 128) of identical prefix so a repeat can hit the cache.
LONG_SYSTEM = " ".join(f"Rule {i}: answer politely, cite the order number, never promise refunds." for i in range(40))


def chat(engine: RunningEngine, content: str, system: str | None = None, max_tokens: int = 24) -> dict:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    response = httpx.post(
        f"{engine.openai_base_url}/chat/completions",
        timeout=120,
        json={"model": engine.served_model, "messages": messages, "max_tokens": max_tokens, "temperature": 0},
    )
    response.raise_for_status()
    return response.json()


def cached_tokens(body: dict) -> int:
    details = body["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def test_smollm_answers_coherently(smollm_engine: RunningEngine) -> None:
    body = chat(smollm_engine, "What is the capital of France? Answer in one short sentence.")
    assert "Paris" in body["choices"][0]["message"]["content"]
    assert smollm_engine.identity.engine == "vllm"
    assert smollm_engine.identity.engine_version.startswith("vllm")
    assert smollm_engine.identity == engine_identity(smollm_engine.spec)  # same without starting


def test_metrics_snapshot_follows_traffic(smollm_engine: RunningEngine) -> None:
    before = smollm_engine.metrics()
    body = chat(smollm_engine, "Name three colours.", max_tokens=12)
    after = smollm_engine.metrics()
    assert after.prompt_tokens_total - before.prompt_tokens_total == body["usage"]["prompt_tokens"]
    assert after.generation_tokens_total - before.generation_tokens_total == body["usage"]["completion_tokens"]
    assert after.requests_running == 0 and after.requests_waiting == 0
    assert 0.0 <= after.kv_cache_usage <= 1.0
    assert after.prefix_cache_queries_total > before.prefix_cache_queries_total
    assert any(key.startswith("vllm:time_to_first_token_seconds") for key in after.raw)


def test_prefix_cache_reset(smollm_engine: RunningEngine) -> None:
    smollm_engine.reset_prefix_cache()
    first = chat(smollm_engine, "Where is my order 1234?", system=LONG_SYSTEM, max_tokens=4)
    second = chat(smollm_engine, "Where is my order 1234?", system=LONG_SYSTEM, max_tokens=4)
    assert first["usage"]["prompt_tokens"] > 256
    assert cached_tokens(first) == 0
    assert cached_tokens(second) > 0
    hits_before = smollm_engine.metrics().prefix_cache_hits_total
    smollm_engine.reset_prefix_cache()
    third = chat(smollm_engine, "Where is my order 1234?", system=LONG_SYSTEM, max_tokens=4)
    assert cached_tokens(third) == 0
    assert smollm_engine.metrics().prefix_cache_hits_total == hits_before


def test_stop_leaves_nothing_behind(smollm_engine: RunningEngine, engine_slot) -> None:
    pid = smollm_engine.pid
    assert len(group_members(pid)) >= 2  # API server and engine core
    engine_slot.release()  # stops the shared engine; a later test gets a fresh one
    assert not group_alive(pid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(httpx.HTTPError):
        httpx.get(smollm_engine.base_url + "/health", timeout=2)


def test_crash_mid_request_is_detected(definitions, engine_slot) -> None:
    engine_slot.release()  # at most one engine at a time
    engine = start_engine(definitions.endpoint("tiny_random"))
    try:
        outcome: dict = {}

        def stream() -> None:
            start = time.monotonic()
            try:
                with httpx.stream(
                    "POST",
                    f"{engine.openai_base_url}/chat/completions",
                    timeout=httpx.Timeout(30.0),
                    json={
                        "model": engine.served_model,
                        "stream": True,
                        "max_tokens": 1500,
                        "ignore_eos": True,
                        "messages": [{"role": "user", "content": "go"}],
                    },
                ) as r:
                    for _ in r.iter_lines():
                        outcome.setdefault("first_chunk", time.monotonic())
                outcome["completed"] = True
            except httpx.HTTPError as exc:
                outcome["error"] = exc
            outcome["elapsed"] = time.monotonic() - start

        client = threading.Thread(target=stream, daemon=True)
        client.start()
        deadline = time.monotonic() + 60
        while "first_chunk" not in outcome and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "first_chunk" in outcome, "stream never started"
        os.kill(engine.pid, signal.SIGKILL)  # the API server dies; its engine-core child is orphaned
        killed_at = time.monotonic()
        client.join(timeout=30)
        assert not client.is_alive(), "client request hung after the engine died"
        assert "error" in outcome and "completed" not in outcome
        assert time.monotonic() - killed_at < 30
        with pytest.raises(EngineCrashed) as info:
            engine.check_alive(hang_timeout_s=5)
        assert info.value.returncode == -signal.SIGKILL
        assert info.value.log_tail and info.value.log_tail in str(info.value)
    finally:
        pid = engine.pid
        engine.stop()
    assert not group_alive(pid)  # the orphaned children went too
