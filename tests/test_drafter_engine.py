"""The drafter stage end to end on the tiny random model: on-policy data from a real vLLM engine,
a few training steps, offline acceptance, and the checkpoint served by vLLM's CPU build as a
``draft_model`` drafter whose acceptance counters /metrics reports (issue 15).

Acceptance itself means nothing on random weights; what is checked is that every step runs on real
parts and hands the next one what it needs. The real run is benchmarks/spec_decode.py.
"""

from __future__ import annotations

import json

import httpx
import pytest

from specs.models import ensure_model
from autoresearch.workflows import load_pool
from engines import start_engine
from research import drafter

pytestmark = pytest.mark.engine


def test_a_drafter_trained_on_engine_replies_is_served_by_vllm(engine_slot, tiny_engine, definitions, tmp_path):
    spec = definitions.endpoint("tiny_random")
    pool = load_pool(spec).head(6)
    examples = drafter.generate_onpolicy(
        tiny_engine.base_url, tiny_engine.served_model, pool, max_tokens=12, concurrency=2
    )
    assert len(examples) == 6 and all(e.prompt_ids and e.output_ids for e in examples)
    engine_slot.release()  # one engine at a time on this host: ours comes next

    target = ensure_model(spec.model.path)
    train_set, held = drafter.split(examples, 2)
    trained = drafter.train(target, train_set, tmp_path / "draft", layers=2, steps=4, lr=1e-3)
    assert trained.steps == 4 and trained.train_examples == 4 and trained.train_tokens > 0
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert config["num_hidden_layers"] == 2
    offline = drafter.evaluate(tmp_path / "draft", held, tmp_path, k=2)
    assert offline.drafts > 0 and len(offline.accepted_per_position) == 2
    assert 1.0 <= offline.acceptance_length <= 3.0
    # acceptance is cumulative: position 1 is accepted only after position 0
    assert offline.accepted_per_position[1] <= offline.accepted_per_position[0]

    args = drafter.candidate_args(spec.engine.args, tmp_path / "draft", 2, spec.engine.kind)
    engine = start_engine(spec, args_override=args, workdir=tmp_path / "engine")
    try:
        before = drafter.read_metrics(engine.base_url, spec.engine.kind)
        r = httpx.post(
            engine.base_url + "/v1/completions",
            timeout=120,
            json={
                "model": engine.served_model,
                "prompt": "hello world",
                "max_tokens": 16,
                "temperature": 0,
                "ignore_eos": True,
            },
        )
        assert r.status_code == 200, r.text
        served = drafter.ServedAcceptance()
        served.add(before, drafter.read_metrics(engine.base_url, spec.engine.kind))
    finally:
        engine.stop()
    assert served.drafts > 0 and served.draft_tokens == 2 * served.drafts
    assert len(served.accepted_per_position) == 2
    assert served.acceptance_length is not None and 1.0 <= served.acceptance_length <= 3.0
