"""The open-loop runner against the nginx null endpoint: what it records, how it fails, when it is invalid."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from loadgen import arrivals, nullserver
from loadgen.runner import LagBounds, run_open_loop
from loadgen.sse import parse_stream, prepare_body

pytestmark = pytest.mark.skipif(
    shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
    reason="nginx not installed (scripts/setup.sh installs it)",
)

BODY = {"model": "x", "messages": [{"role": "user", "content": "hello " * 30}], "max_tokens": 16}
LOOSE = LagBounds(p99_ms=1000.0, min_rate_ratio=0.5)


@pytest.fixture(scope="module")
def null():
    server = nullserver.start()
    yield server
    server.stop()


def test_prepare_body_forces_streaming_usage_and_model():
    path, data = prepare_body(json.dumps(BODY), "served")
    body = json.loads(data)
    assert path == "/v1/chat/completions" and body["model"] == "served" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert prepare_body({"prompt": "hi"}, None)[0] == "/v1/completions"
    with pytest.raises(ValueError, match="neither"):
        prepare_body({"input": "x"}, None)


def test_parse_stream_times_tokens_by_arrival_and_reads_usage():
    chunk = lambda text: ('data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % text).encode()
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}\n\n'
    role = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    whole = chunk("b")
    pieces = [
        (1.0, role + chunk("a")[:10]),
        (2.0, chunk("a")[10:] + whole[:5]),
        (3.0, whole[5:] + chunk("c")),
        (4.0, usage + b"data: [DONE]\n\n"),
    ]
    out = parse_stream(pieces)
    assert out.token_times == [2.0, 3.0, 3.0]  # an event is timed by the piece that completed it
    assert (out.output_tokens, out.prompt_tokens, out.cached_tokens, out.error) == (3, 7, 4, None)
    err = parse_stream([(0.0, b'data: {"error":{"message":"boom"}}\n\n')])
    assert err.error == "boom"


def test_records_every_request_with_tokens_latency_and_lag(null):
    schedule = arrivals.poisson(100.0, 2.0, seed=0)
    out = run_open_loop(null.url, "null-model", [BODY], schedule, lag_bounds=LOOSE, request_ids=["r"])
    assert len(out.records) == len(schedule)
    assert out.valid, out.reason
    for rec in out.records:
        assert rec.ok and rec.status == 200 and rec.output_tokens == 16 and rec.prompt_tokens == 32
        assert rec.sent_s >= rec.scheduled_s - 1e-6  # never early
        assert 0 <= rec.ttft_s <= rec.e2e_s and len(rec.itl_s) == 15
    assert [r.request_id for r in out.records][:2] == ["r#0", "r#1"]
    assert out.achieved_rate == pytest.approx(out.target_rate, rel=0.05)


def test_burst_grows_the_pool_instead_of_throttling(null):
    schedule = np.zeros(300)  # all due at once: open loop means all go out at once
    out = run_open_loop(null.url, None, [BODY], schedule, lag_bounds=LOOSE, warm_connections=2, spare_connections=0)
    assert all(r.ok for r in out.records)
    assert out.connections_opened > 2  # grew on demand


def test_several_sender_processes_share_one_schedule(null):
    schedule = arrivals.constant(200.0, 1.5)
    out = run_open_loop(
        null.url, None, [BODY, {"prompt": "x", "max_tokens": 16}], schedule, senders=2, lag_bounds=LOOSE
    )
    assert out.senders == 2 and len(out.records) == len(schedule)
    assert all(r.ok and r.output_tokens == 16 for r in out.records)
    assert sorted(r.scheduled_s for r in out.records) == pytest.approx(schedule.tolist())


def test_unreachable_server_gives_errors_not_silence():
    schedule = arrivals.constant(20.0, 0.5)
    from engines.process import free_port

    out = run_open_loop(f"http://127.0.0.1:{free_port()}", None, [BODY], schedule, lag_bounds=LOOSE)
    assert len(out.records) == len(schedule)
    assert all(not r.ok and "connect" in r.error for r in out.records)


def test_stop_check_aborts_the_run_with_its_reason(null):
    start = time.monotonic()
    schedule = arrivals.constant(50.0, 10.0)
    out = run_open_loop(
        null.url,
        None,
        [BODY],
        schedule,
        lag_bounds=LOOSE,
        stop_check=lambda: "engine crashed: test" if time.monotonic() - start > 1.0 else None,
    )
    assert time.monotonic() - start < 5
    assert out.validity == "invalid" and "engine crashed: test" in out.reason
    assert len(out.records) == len(schedule)
    assert any(r.error and r.error.startswith("not sent") for r in out.records)
    assert sum(r.ok for r in out.records) > 20


STARVED = """
import json, sys
from loadgen import arrivals
from loadgen.runner import run_open_loop
out = run_open_loop(sys.argv[1], None, [{"messages": [{"role": "user", "content": "hi"}]}],
                    arrivals.constant(200.0, 3.0), duration_s=3.0)
print(json.dumps({"validity": out.validity, "reason": out.reason, "p99": out.send_lag_ms.p99}))
"""


def test_client_starved_of_cpu_is_detected_as_client_bound(null):
    """SIGSTOP/SIGCONT duty cycle (stopped 60 ms of every 100): the client cannot keep its schedule."""
    proc = subprocess.Popen([sys.executable, "-c", STARVED, null.url], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # let it start and warm up
    try:
        while proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.06)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.04)
    except ProcessLookupError:
        pass
    result = json.loads(proc.communicate(timeout=60)[0].strip().splitlines()[-1])
    assert result["validity"] == "invalid"
    assert "client fell behind" in result["reason"]
    assert result["p99"] > 10
