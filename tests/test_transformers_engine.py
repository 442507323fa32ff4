"""`transformers serve` as a real engine on this CPU machine (tiny random model, float32).

The engine gives no /metrics, no profiler, no logprobs and no token ids, and its OpenAI routes
reject vLLM's extra fields. On it:

- correctness is checked on greedy text (the adapter's ``can_give`` says so): a reference captured
  from the baseline, an identical candidate passes the lossless check labelled "greedy text", and a
  lower-precision candidate (bf16) shows where its outputs first diverge;
- the load generator leaves out every field the adapter says the engine rejects (a recording
  server shows the bodies);
- a short headless campaign gets a valid baseline, greedy-checked correctness on its candidates and
  at least one real proposal in the engine's own vocabulary (no vLLM flags).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from specs.config import CampaignSpec, DefinitionSet
from specs.engine_args import apply_diff, parse_args
from engines.transformers_serve import TRANSFORMERS_REJECTED_FIELDS, TRANSFORMERS_SERVE_FLAGS
from loadgen.runner import run_open_loop
from research.correctness import capture_reference, check_candidate, judge_greedy_text

CHAT = {
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 4,
    "tool_choice": "auto",
    "user": "u1",
    "response_format": {"type": "text"},
    "temperature": 0.0,
}


class _Recorder:
    """An SSE chat server that records request bodies and, like transformers serve, sends usage
    without being asked (no stream_options)."""

    def __init__(self):
        self.bodies: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                recorder.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                events = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("a", "b", "c")]
                events.append(
                    {
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
                    }
                )
                data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_load_generator_leaves_out_the_fields_the_engine_rejects():
    server = _Recorder()
    try:
        plain = run_open_loop(server.url, "m", [CHAT], np.zeros(1), timeout_s=10)
        assert "stream_options" in server.bodies[-1] and "tool_choice" in server.bodies[-1]  # vLLM gets them
        stripped = run_open_loop(
            server.url, "m", [CHAT], np.zeros(2), timeout_s=10, omit_fields=TRANSFORMERS_REJECTED_FIELDS
        )
        explicit = run_open_loop(server.url + "/v1", "m", [CHAT], np.zeros(1), timeout_s=10, omit_fields={"user"})
        again = run_open_loop(server.url, "m", [CHAT], np.zeros(1), timeout_s=10)
    finally:
        server.close()
    sent = server.bodies
    for body in sent[1:3]:
        assert not set(body) & TRANSFORMERS_REJECTED_FIELDS, body
        assert body["stream"] is True and body["messages"] == CHAT["messages"] and body["max_tokens"] == 4
    assert "user" not in sent[3] and "stream_options" in sent[3]
    assert "stream_options" in sent[4]  # nothing is remembered between runs
    # Output tokens still come from the usage the engine sends unasked (4), not the 3 content events.
    for outcome in (plain, stripped, explicit, again):
        assert all(r.ok and r.output_tokens == 4 for r in outcome.records)


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_transformers_serve_correctness_is_checked_on_greedy_text(engine_slot, definitions: DefinitionSet):
    spec = definitions.endpoint("tiny_transformers")
    args = list(spec.engine.args)
    engine = engine_slot.get(spec)
    adapter = engine.adapter
    assert not adapter.can_give("logprobs") and not adapter.can_give("token_ids")
    reference = capture_reference(engine.base_url, engine.served_model, args, adapter=adapter)
    assert reference.evidence == "greedy_text" and reference.route == "completions"
    assert reference.tokenizer and reference.unit == "tokens"  # the model's own tokenizer.json
    assert len(reference.sequences) == 8 and all(s.output_ids and s.output_text for s in reference.sequences)

    same = check_candidate(engine.base_url, engine.served_model, reference, args, lossy=False, adapter=adapter)
    assert same.checked and same.evidence == "greedy_text" and same.passed and same.lossless_equivalent
    assert same.greedy_identical == same.greedy_total == 8 and same.distribution is None
    assert "evidence: greedy text" in same.summary() and same.label == "lossless, checked on greedy text"

    bf16 = apply_diff(args, {"--dtype": "bfloat16"})
    other = engine_slot.get(spec, bf16)
    lossy = check_candidate(other.base_url, other.served_model, reference, bf16, lossy=True, adapter=other.adapter)
    engine_slot.release()
    print("bf16 vs float32 reference:", lossy.summary())
    assert lossy.checked and lossy.evidence == "greedy_text" and lossy.mode == "lossy" and lossy.flag_for_review
    diverged = [s for s in lossy.sequences if not s.identical]
    assert diverged, "bf16 kept every greedy token of the float32 reference"
    for s in diverged:
        assert s.first_divergence is not None and s.matched_prefix == s.first_divergence
        assert s.first_divergence <= s.reference_length
    assert lossy.mean_matched_prefix_fraction is not None and lossy.mean_matched_prefix_fraction < 1.0
    assert f"prompt {diverged[0].prompt_index} at token {diverged[0].first_divergence}" in lossy.reason
    declared_lossless = judge_greedy_text(reference, bf16, lossy.sequences, lossy=False)
    assert not declared_lossless.passed and "CHANGED" in declared_lossless.reason


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_a_campaign_on_transformers_serve_gets_greedy_checked_correctness_and_real_proposals(
    tmp_path: Path, engine_slot, definitions: DefinitionSet
):
    from research.campaign import run_campaign
    from research.state import StateStore

    engine_slot.release()  # one engine at a time on this machine
    endpoint = definitions.endpoint("tiny_transformers")
    endpoint = endpoint.model_copy(
        update={
            "sweep": endpoint.sweep.model_copy(
                update=dict(
                    rates=[0.5, 1.0],
                    step_duration_s=4,
                    min_requests=3,
                    warmup_requests=1,
                    max_steps=3,
                    repeats=2,
                    refine_steps=0,
                )
            )
        }
    )
    campaign = CampaignSpec(
        name="tiny_transformers_test",
        endpoint=endpoint.name,
        deadline_minutes=30,
        gpu_hours=1,
        subagents=1,
        repeats=1,
        max_rounds=1,
        proposer="rules",
        profile_seconds=0,
        extra_repeats=0,
    )
    lines: list[str] = []
    started = time.monotonic()
    outcome = run_campaign(
        campaign,
        endpoint,
        state_dir=tmp_path / "state",
        proposer="rules",
        progress=lambda m: (lines.append(m), print(m, flush=True)),
    )
    log = "\n".join(lines)
    state = StateStore(tmp_path / "state", campaign.name).load()
    assert state.reference is not None and state.failed_baseline is None, log  # a valid baseline
    assert outcome.reference_capacity is not None, log
    reference = next(iter(state.reference_outputs.values()))
    assert reference.evidence == "greedy_text" and len(reference.sequences) == 8, log
    assert "reference outputs: evidence greedy_text" in log

    proposals = [p for r in state.rounds for p in r.proposals]
    assert proposals, log  # a real proposal for this engine
    for p in proposals:  # the engine's own knobs, no vLLM flags; internal settings through its own overlay
        assert set(p.engine_arg_diff) <= TRANSFORMERS_SERVE_FLAGS | {"--overlay"}, p
        overlay = p.engine_arg_diff.get("--overlay")
        assert overlay is None or overlay.startswith("transformers_cb_config="), p
    run = [e for e in state.experiments.values() if e.verdict != "skipped" and e.correctness is not None]
    assert run, log
    for e in run:
        c = e.correctness
        assert c.checked and c.evidence == "greedy_text" and c.greedy_total == 8, log
        if not e.lossy:
            assert c.passed and c.greedy_identical == 8, c.summary()
        assert set(parse_args(e.engine_args)) <= TRANSFORMERS_SERVE_FLAGS
    # The engines never saw a field they reject.
    logs = [p.read_text(errors="replace") for p in (tmp_path / "state").rglob("engine.log")]
    assert logs and not any("422 Unprocessable" in text or "Ignoring unsupported fields" in text for text in logs)
    print(f"campaign test took {time.monotonic() - started:.0f} s")
