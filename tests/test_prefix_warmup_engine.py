"""A step's starting cache, and `engine up`, against the real vLLM CPU server.

- After the prefix-cache reset before a step, the pool's hot prefix groups are warmed (one prefill-only
  request each), so a step's first request of a group finds its system prompt cached, as it would on a
  production server; with ``warm_prefix_groups: 0`` the same request finds nothing.
- ``autoresearch engine up`` leaves the engine serving after the command exits, until ``engine down``.
"""

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest

from loadgen.runner import LagBounds, run_open_loop
from loadgen.step import StepRunner, prefix_representatives
from specs.pool_schema import POOL_SCHEMA

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parent.parent


def two_group_pool() -> pl.DataFrame:
    """Two tenants, each with its own long system prompt, four questions each; group a is the larger."""
    rows = []
    for group, count, topic in (("a", 5, "billing"), ("b", 3, "shipping")):
        system = " ".join(
            f"Rule {k}: answer {topic} questions politely and cite policy {topic}-{k}." for k in range(25)
        )
        for i in range(count):
            body = {
                "model": "m",
                "max_tokens": 4,
                "temperature": 0.0,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Question {i} about my {topic} case number {i * 7919}?"},
                ],
            }
            rows.append(
                {
                    "request_id": f"{group}{i}",
                    "arrival_offset_s": float(len(rows)),
                    "body": json.dumps(body),
                    "prompt_tokens": 400,
                    "expected_output_tokens": 4,
                    "prefix_group": f"sys:{group}",
                    "logged_cached_tokens": None,
                    "source": "test",
                }
            )
    return pl.DataFrame(rows, schema=POOL_SCHEMA)


def test_prefix_representatives_are_the_most_frequent_groups_first():
    pool = two_group_pool()
    bodies = prefix_representatives(pool, 8)
    assert [json.loads(b)["messages"][1]["content"].split()[4] for b in bodies] == ["billing", "shipping"]
    assert len(prefix_representatives(pool, 1)) == 1 and prefix_representatives(pool, 0) == []
    assert prefix_representatives(pool.drop("prefix_group"), 8) == []


def test_a_step_starts_with_the_pools_hot_prefixes_cached(smollm_engine, smollm_spec):
    engine, pool = smollm_engine, two_group_pool()
    bodies, ids = pool["body"].to_list(), pool["request_id"].to_list()
    probe = bodies[3]  # a billing question that is not the group's representative

    def hits_after_reset(prefix_bodies: list[str]) -> float:
        runner = StepRunner(
            engine,
            smollm_spec,
            bodies,
            ids,
            senders=1,
            lag_bounds=LagBounds(1e9, 0.0, 10**9),
            timeout_s=120,
            records_dir=None,
            prefix_bodies=prefix_bodies,
        )
        runner.reset()
        before = engine.metrics().prefix_cache_hits_total
        outcome = run_open_loop(
            engine.base_url,
            engine.served_model,
            [probe],
            np.zeros(1),
            lag_bounds=LagBounds(1e9, 0.0, 10**9),
            timeout_s=120,
        )
        assert all(r.ok for r in outcome.records)
        return engine.metrics().prefix_cache_hits_total - before

    cold = hits_after_reset([])
    warm = hits_after_reset(prefix_representatives(pool, 8))
    assert cold == 0  # the reset alone leaves nothing: the group's first request of a step misses
    assert warm >= 200  # the billing system prompt (about 400 tokens) was cached before the step began


def test_engine_up_leaves_the_engine_serving_until_engine_down(engine_slot):
    engine_slot.release()  # one engine at a time on this host

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "autoresearch.cli", "engine", *args, "tiny_random", "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )

    up = cli("up")
    try:  # stop it whatever happens: `engine up` leaves it running by design
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        status = json.loads(cli("status").stdout)  # another process, after `engine up` exited
        assert status["healthy"] is True and status["pid"] == state["pid"]
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(state["base_url"] + "/health", timeout=5)
