"""Measurement against the real vLLM CPU server with the tiny model (endpoint tiny_random).

Relations, not absolute numbers: a sweep finds a knee and a capacity; a server killed during a step
invalidates that step and the sweep while keeping the steps before it. (That a --max-num-seqs 1
baseline is beaten far outside its noise floor on a real engine is the research graph's verdict,
tests/test_dagster_pipeline.py::test_candidate_is_judged_adopted_and_reviewed.)
"""

import json
import os
import signal
import threading
import time

import polars as pl
import pytest

from dagster_project.lib import load_definitions
from specs.paths import definitions_dir
from loadgen.report import render_text
from loadgen.runner import LagBounds
from loadgen.sweep import run_sweep
from specs.pool_schema import POOL_SCHEMA

pytestmark = pytest.mark.engine

STEP_S = 4.0
# Send-lag detection has its own tests (test_loadgen_runner, against the null endpoint). Here the engine
# and the client share two cores: while vLLM's CPU workers run, every process on this host (even a plain
# sleep loop at nice -10) sees stalls of 0.3-5 s now and then, so these relation tests tolerate them.
BOUNDS = LagBounds(p99_ms=5000.0, min_rate_ratio=0.7)


def small_pool(n: int = 24, output_tokens: int = 128) -> pl.DataFrame:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = []
    for i in range(n):
        prompt = " ".join(words[(i + k) % len(words)] for k in range(30))
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        rows.append(
            {
                "request_id": f"q{i}",
                "arrival_offset_s": i * 0.5,
                "body": json.dumps(body),
                "prompt_tokens": 40,
                "expected_output_tokens": output_tokens,
                "prefix_group": "g",
                "logged_cached_tokens": None,
                "source": "test",
            }
        )
    return pl.DataFrame(rows, schema=POOL_SCHEMA)


@pytest.fixture(scope="module")
def spec():
    return load_definitions(definitions_dir()).endpoint("tiny_random")


def show(event) -> None:
    if event.phase in ("step_done", "done"):
        print(f"[{time.strftime('%H:%M:%S')}] {event.message}", flush=True)


@pytest.mark.timeout(900)
def test_sweep_finds_a_knee_and_a_bounded_capacity_with_engine_metrics(tiny_engine, spec):
    """One automatic sweep on the session's tiny-model engine (shared with other tests)."""
    first = run_sweep(
        tiny_engine,
        small_pool(),
        spec,
        step_duration_s=STEP_S,
        max_steps=6,
        repeats_label="automatic",
        lag_bounds=BOUNDS,
        client_retries=1,
        progress=show,
    )
    print(render_text(first))
    assert first.validity == "valid", first.invalid_reason
    assert first.capacity_rps > 0 and first.capacity_bounded
    assert first.knee_rate is not None and first.knee_rate <= max(first.rates())
    # the capacity is a rate within the SLA that the sweep measured, below the first rate past the knee
    assert first.capacity_rps <= max(first.rates())
    # Engine metrics were sampled during steps and kept with them.
    assert all(step.engine_metrics.get("samples", 0) > 0 for step in first.steps)
    assert any(step.engine_metrics.get("prompt_tokens_delta", 0) > 0 for step in first.steps)


def test_server_killed_during_a_step_invalidates_it_and_keeps_earlier_steps(spec, engine_slot):
    from engines import start_engine

    engine_slot.release()  # one engine at a time on this host: this test kills its own

    pool = small_pool()
    with start_engine(spec) as engine:
        killed = threading.Event()

        def progress(event):
            if event.phase == "step" and event.step_index == 1 and not killed.is_set():

                def kill():
                    time.sleep(1.5)
                    os.killpg(engine.pid, signal.SIGKILL)
                    killed.set()

                threading.Thread(target=kill, daemon=True).start()

        started = time.monotonic()
        crashed = run_sweep(
            engine,
            pool,
            spec,
            rates=[1.0, 2.0, 3.0],
            step_duration_s=6.0,
            progress=progress,
            repeats_label="crash",
            lag_bounds=BOUNDS,
            client_retries=1,
        )
        print(render_text(crashed))
        assert killed.is_set()
        assert time.monotonic() - started < 150
        assert crashed.validity == "invalid" and "engine" in crashed.invalid_reason
        assert len(crashed.steps) == 2
        assert crashed.steps[0].validity == "valid" and crashed.steps[0].requests > 0
        assert crashed.steps[1].validity == "invalid" and "engine" in crashed.steps[1].invalid_reason
