"""Short, finely resolved sweeps against stub OpenAI endpoints whose latency depends on load.

The stub (a small asyncio server in its own process) serves every request one at a time for a
fixed service time (``serial``: latency grows with the rate), or sends the first token at once
and then stalls (``stall``: a request in flight forever). Assertions are about behaviour: which
rates a sweep tries, how capacity is found and bounded, what is counted; never about timings.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import polars as pl
import pytest

from specs.config import EndpointSpec
from loadgen.compare import compare
from loadgen.noise import noise_floor, reference_capacity
from loadgen.results import LatencySummary, StepResult, SweepResult
from loadgen.runner import LagBounds
from loadgen.sweep import run_sweep
from specs.pool_schema import POOL_SCHEMA

# Send-lag detection has its own tests (test_loadgen_runner); a busy shared machine must not fail these.
LENIENT = LagBounds(p99_ms=1000.0, min_rate_ratio=0.7)

STUB = r"""
import asyncio, sys
from loadgen.nullserver import sse_body

mode, service_s, port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
BODY = sse_body(4).encode()
lock = asyncio.Lock()

def head(status, ctype, extra=""):
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\n{extra}").encode()

async def serve(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            headers = {}
            while True:
                h = await reader.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length") or 0)
            if n:
                await reader.readexactly(n)
            path = line.split()[1].decode()
            if not line.startswith(b"POST"):
                text = (b'{"object":"list","data":[{"id":"null-model","object":"model"}]}' if "models" in path
                        else b"# stub\n" if "metrics" in path else b"ok")
                writer.write(head(200, "text/plain", f"Content-Length: {len(text)}\r\n\r\n") + text)
                await writer.drain()
                continue
            if mode == "serial":  # one request at a time: queueing grows with the rate
                async with lock:
                    await asyncio.sleep(service_s)
                writer.write(head(200, "text/event-stream", f"Content-Length: {len(BODY)}\r\n\r\n") + BODY)
                await writer.drain()
            else:  # stall: first token now, the rest after service_s
                events = BODY.split(b"\n\n")
                first = events[0] + b"\n\n"
                rest = b"\n\n".join(events[1:])
                writer.write(head(200, "text/event-stream", "Transfer-Encoding: chunked\r\n\r\n")
                             + b"%x\r\n%s\r\n" % (len(first), first))
                await writer.drain()
                await asyncio.sleep(service_s)
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
                await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stub:
    def __init__(self, mode: str, service_s: float):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", STUB, mode, str(service_s), str(self.port)],  # noqa: S603
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def pool(n: int = 40) -> pl.DataFrame:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    return pl.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_offset_s": [0.1 * i for i in range(n)],
            "body": [body] * n,
            "prompt_tokens": [5] * n,
            "expected_output_tokens": [4] * n,
            "prefix_group": ["g"] * n,
            "logged_cached_tokens": [None] * n,
            "source": ["t"] * n,
        },
        schema=POOL_SCHEMA,
    )


def endpoint(url: str, sla: dict, **sweep) -> EndpointSpec:
    return EndpointSpec(
        name="stub",
        model={"path": "none", "served_name": "null-model"},
        engine={"kind": "external", "url": url},
        sla=sla,
        traffic={"kind": "sample"},
        sweep={"step_duration_s": 1.0, "min_requests": 8, "warmup_requests": 1, "refine_steps": 1, **sweep},
    )


@pytest.fixture
def stub(request, tmp_path, monkeypatch):
    """A running stub endpoint; the parameter is (mode, service seconds)."""
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path))  # no client calibration: sweeps only note it
    mode, service_s = request.param
    server = Stub(mode, service_s)
    try:
        yield server
    finally:
        server.stop()


def _attach(spec: EndpointSpec):
    from engines import start_engine

    return start_engine(spec)


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_failing_lowest_rate_extends_downwards_to_a_holding_rate_and_interpolates(stub):
    # 0.1 s per request, one at a time: 16 req/s is 1.6x what it can serve; a few req/s hold.
    spec = endpoint(stub.url, {"ttft_ms": 400, "max_error_rate": 0.01})
    sweep = run_sweep(_attach(spec), pool(), spec, rates=[16], lag_bounds=LENIENT)
    assert sweep.validity == "valid", sweep.invalid_reason
    rates = sweep.rates()
    assert rates[0] == 16 and not sweep.steps[0].within_sla
    assert any(s.within_sla for s in sweep.steps), rates  # the extension found a rate that holds
    assert all(r < 16 for r in rates[1:])  # it went down, never up past the failure
    assert sweep.capacity_below_rps is None and sweep.capacity_rps > 0 and sweep.capacity_bounded
    # Interpolated: strictly inside the bracket (highest pass below the lowest failure, that failure).
    lowest_fail = min(s.target_rate for s in sweep.steps if not s.within_sla)
    assert sweep.capacity_method == "interpolated"
    assert sweep.capacity_tested_rps < sweep.capacity_rps < lowest_fail
    assert sweep.min_rate == pytest.approx(1.0)  # default floor: the first rate / 16
    # Every step reports its wall time (warm-up and drain included) for budget estimates.
    assert all(s.wall_s and s.warmup_wall_s is not None and s.wall_s > s.warmup_wall_s for s in sweep.steps)
    assert sweep.wall_s >= sum(s.wall_s for s in sweep.steps)


@pytest.mark.parametrize("stub", [("serial", 0.6)], indirect=True)
def test_a_sweep_below_its_floor_says_so_and_a_win_over_it_is_a_finite_bound(stub):
    # 0.6 s per request against a 500 ms TTFT limit: no rate can hold.
    spec = endpoint(stub.url, {"ttft_ms": 500}, min_rate=0.5)
    base = run_sweep(_attach(spec), pool(), spec, rates=[2], lag_bounds=LENIENT)
    assert base.validity == "valid", base.invalid_reason
    assert base.rates() == [2, 1, 0.5]  # halving down to the floor, then it stops
    assert base.capacity_rps == 0.0 and base.capacity_below_rps == 0.5 and base.capacity_method == "below_floor"
    assert any("below 0.5 req/s" in n and "floor" in n for n in base.notes)

    floor = noise_floor([base])
    assert floor.capacity_below == [0.5] and reference_capacity(floor) == (0.5, True)
    lat = LatencySummary(p50=100, p90=150, p95=200, p99=250)
    win = SweepResult(
        endpoint="stub",
        engine_args=[],
        launch_config_hash="h",
        started_at=0,
        capacity_rps=3.0,
        steps=[
            StepResult(
                target_rate=3,
                achieved_rate=3,
                throughput_rps=3,
                duration_s=4,
                requests=12,
                errors=0,
                error_rate=0,
                ttft_ms=lat,
                itl_ms=lat,
                e2e_ms=lat,
                send_lag_ms=lat,
                within_sla=True,
            )
        ],
    )
    verdict = compare(floor, [win, win])
    assert verdict.verdict == "better" and verdict.ratio_bound == "lower"
    assert verdict.capacity_ratio == pytest.approx(6.0)  # at least 3 / 0.5
    assert "inf" not in verdict.evidence and "floor" in verdict.evidence


@pytest.mark.parametrize("stub", [("stall", 30.0)], indirect=True)
def test_requests_in_flight_at_the_drain_deadline_are_cut_and_counted(stub, tmp_path):
    # First token at once, then a 30 s stall: every request is still in flight when the drain ends.
    spec = endpoint(stub.url, {"ttft_ms": 500, "itl_ms": 100}, drain_s=0.5, warmup_timeout_s=1.0, min_rate=4)
    began = time.monotonic()
    sweep = run_sweep(_attach(spec), pool(), spec, rates=[4], lag_bounds=LENIENT, records_dir=tmp_path)
    elapsed = time.monotonic() - began
    step = sweep.steps[0]
    assert sweep.validity == "valid" and step.validity == "valid", step.invalid_reason
    assert step.requests > 0 and step.cut_requests == step.requests and step.errors == 0
    assert step.cut_before_first_token == 0 and step.ttft_ms.p95 is not None  # their first tokens were seen
    assert not step.within_sla and step.sla_ratios["itl"] is None  # a 30 s gap is open: worst case
    assert any("drain deadline" in v for v in step.sla_violations)
    assert sweep.drain_s == 0.5 and any("cut" in n for n in sweep.notes)
    frame = pl.read_parquet(step.records_path)
    assert frame["cut"].all()
    assert elapsed < 30  # no step waited for the stalled requests


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_verdict_round_holds_every_rate_and_its_queue_growth_gives_the_service_rate(stub):
    """One request at a time for 0.1 s serves 10 req/s. A ladder stops once the SLA is clearly broken; a
    verdict's round (stop_when_broken=False) holds every rate, and the TTFT growth of the overloaded steps
    puts the service rate (loadgen.queue_rate) near 10 req/s."""
    from loadgen.queue_rate import service_rate

    spec = endpoint(stub.url, {"ttft_ms": 500, "max_error_rate": 0.01}, step_duration_s=4.0, refine_steps=0)
    rates = [3.0, 13.0, 15.0, 17.0]
    ladder = run_sweep(_attach(spec), pool(), spec, rates=rates, lag_bounds=LENIENT)
    assert ladder.validity == "valid" and ladder.steps[0].within_sla
    assert len(ladder.steps) < len(rates) and ladder.rates() == rates[: len(ladder.steps)]  # stopped once broken
    held = run_sweep(_attach(spec), pool(), spec, rates=rates, lag_bounds=LENIENT, stop_when_broken=False)
    assert held.validity == "valid", held.invalid_reason
    assert held.rates() == rates
    assert held.steps[0].ttft_growth is not None and held.steps[0].ttft_growth["slope"] < 0.1  # it kept up
    served = service_rate(held.steps)
    assert served is not None and served.steps == 3
    assert 8.0 < served.rate < 11.5, served.describe()


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_sweep_with_the_host_probe_brackets_every_step_with_the_hosts_memory_speed(stub):
    """sweep.host_speed_probe: each step records the host's memory-pass time just before it and just before
    the next step (after the last: once more, the engine idle), and its service rate is stated at a common
    host speed; without it, no step records a reading and nothing is adjusted."""
    from loadgen.host_elasticity import host_adjustment
    from loadgen.queue_rate import common_host_s, service_rate
    from loadgen.report import step_table

    sla = {"ttft_ms": 500, "max_error_rate": 0.01}
    spec = endpoint(stub.url, sla, step_duration_s=2.0, refine_steps=0, estimator="service_rate", host_speed_probe=True)
    rates = [3.0, 13.0, 15.0]
    probed = run_sweep(_attach(spec), pool(), spec, rates=rates, lag_bounds=LENIENT, stop_when_broken=False)
    assert probed.validity == "valid", probed.invalid_reason
    readings = [st.host_memory_pass_s for st in probed.steps]
    assert all(len(r) == 2 and all(0 < x < 1.0 for x in r) for r in readings), readings
    assert all(r[1] == nxt[0] for r, nxt in zip(readings, readings[1:]))  # one probe between two steps
    host = host_adjustment([probed.steps], [probed.steps])  # one sweep: the prior's exponent
    assert host is not None and "common host speed" in service_rate(probed.steps, host=host).describe()
    assert all(row["host_pass_ms"] for row in step_table(probed))  # people see the host beside each step
    plain = endpoint(stub.url, sla, step_duration_s=2.0, refine_steps=0, estimator="service_rate")
    unprobed = run_sweep(_attach(plain), pool(), plain, rates=rates, lag_bounds=LENIENT, stop_when_broken=False)
    assert all(st.host_memory_pass_s == [] for st in unprobed.steps)
    assert common_host_s(unprobed.steps) is None


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_verdict_round_whose_lowest_rate_breaks_the_sla_still_holds_every_rate_before_going_down(stub):
    """A slowed side can be past the SLA at the round's lowest rate: a ladder then goes down to find a rate
    that holds; a verdict's round first holds the rest of its rates, which are the queued steps the
    service rate reads (before this, such a side gave one queued step a round)."""
    spec = endpoint(stub.url, {"ttft_ms": 300, "max_error_rate": 0.01}, step_duration_s=3.0, refine_steps=0)
    rates = [14.0, 16.0, 18.0]
    ladder = run_sweep(_attach(spec), pool(), spec, rates=rates, lag_bounds=LENIENT)
    assert not ladder.steps[0].within_sla and ladder.steps[1].target_rate < rates[0]  # went down at once
    held = run_sweep(_attach(spec), pool(), spec, rates=rates, lag_bounds=LENIENT, stop_when_broken=False)
    assert held.validity == "valid", held.invalid_reason
    assert held.rates()[:3] == rates and all(st.ttft_growth["slope"] > 0.1 for st in held.steps[:3])


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_an_endpoint_judged_by_its_service_rate_sweeps_on_until_its_queue_grows(stub):
    """An endpoint whose ladder ends below what the engine serves (or whose SLA breaks before its queue
    grows, as ITL does on a 2-core host) has no step for the service rate to read: with
    sweep.estimator "service_rate" the sweep goes on above its highest rate until two steps queued, one of
    them clearly (so repeats end past the same overload)."""
    from loadgen.queue_rate import queued, service_rate
    from loadgen.sweep import CLEAR_GROWTH, MAX_QUEUE_STEPS, QUEUED

    sla = {"ttft_ms": 500, "max_error_rate": 0.01}
    plain = endpoint(stub.url, sla, step_duration_s=3.0, refine_steps=0, rates=[3.0, 8.0])
    assert run_sweep(_attach(plain), pool(), plain, lag_bounds=LENIENT).rates() == [3.0, 8.0]
    spec = endpoint(stub.url, sla, step_duration_s=3.0, refine_steps=0, rates=[3.0, 8.0], estimator="service_rate")
    swept = run_sweep(_attach(spec), pool(), spec, lag_bounds=LENIENT)
    assert swept.validity == "valid" and swept.estimator == "service_rate", swept.invalid_reason
    assert swept.rates()[:2] == [3.0, 8.0] and len(swept.rates()) in (3, 4, 5) and min(swept.rates()[2:]) > 8.0
    assert any("service rate needs steps that queue" in n for n in swept.notes)
    growth = [st.ttft_growth["slope"] for st in swept.steps if queued(st)]
    assert len(growth) >= QUEUED and (max(growth) >= CLEAR_GROWTH or len(swept.rates()) == 2 + MAX_QUEUE_STEPS)
    served = service_rate(swept.steps)
    assert served is not None and served.steps >= 1 and 7.5 < served.rate < 12.0, served.describe()


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_steps_rate_alone_fixes_its_length_and_requests_whichever_way_the_ladder_went(stub):
    """Two sweeps whose SLA checks sent their ladders different ways (one broke at the first rung, one held
    past it) run every rate they share for the same length with the same requests: what lets the host
    exponent be fitted on repeated schedules (loadgen.host_elasticity). A step past a broken rate used to be held
    longer, so a repeat that broke one rung earlier served other requests there."""
    rates = [3.0, 6.0, 12.0, 16.0]
    sweep = dict(step_duration_s=1.0, min_requests=12, max_step_s=3.0, refine_steps=0, rates=rates)
    tight = endpoint(stub.url, {"ttft_ms": 60, "max_error_rate": 0.01}, **sweep, estimator="service_rate")
    loose = endpoint(stub.url, {"ttft_ms": 3000, "max_error_rate": 0.01}, **sweep, estimator="service_rate")
    a = run_sweep(_attach(tight), pool(), tight, lag_bounds=LENIENT)
    b = run_sweep(_attach(loose), pool(), loose, lag_bounds=LENIENT)
    assert a.validity == b.validity == "valid", (a.invalid_reason, b.invalid_reason)
    assert not a.steps[0].within_sla and b.steps[0].within_sla  # the two ladders went different ways
    common = sorted(set(a.rates()) & set(b.rates()))
    assert len(common) >= 2, (a.rates(), b.rates())
    for rate in common:
        (sa,), (sb,) = ([st for st in s.steps if st.target_rate == rate] for s in (a, b))
        assert sa.duration_s == pytest.approx(sb.duration_s) == pytest.approx(max(1.0, min(12 / rate, 3.0)))
        assert sa.requests == sb.requests, rate
    with pytest.raises(ValueError, match="queued_step_s is no longer honoured"):
        endpoint(stub.url, {"ttft_ms": 500}, rates=[3.0], estimator="service_rate", queued_step_s=5.0)


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_low_rate_step_stretches_for_min_requests_up_to_max_step_s(stub):
    """min_requests / rate sets a low rate's step length (8 requests at 2 req/s: 4 s, the default cap of
    4x step_duration_s); sweep.max_step_s caps it lower, and the step then holds fewer requests."""
    sla = {"ttft_ms": 500, "max_error_rate": 0.01}
    default = endpoint(stub.url, sla, refine_steps=0, rates=[2.0])
    capped = endpoint(stub.url, sla, refine_steps=0, rates=[2.0], max_step_s=2.0)
    (long,) = run_sweep(_attach(default), pool(), default, lag_bounds=LENIENT).steps
    (short,) = run_sweep(_attach(capped), pool(), capped, lag_bounds=LENIENT).steps
    assert long.duration_s == pytest.approx(4.0) and short.duration_s == pytest.approx(2.0)
    assert short.requests < long.requests


def _stall_sender_during(event_matches, stall_s: float = 1.5):
    """A progress callback that, on each step event ``event_matches`` accepts, stops the step's sender
    process (``python -m loadgen.runner``, a child of this one) for ``stall_s`` seconds once it is
    sending: a real host stall of the client. Returns (callback, stalled rates)."""
    import os
    import signal
    import threading
    from pathlib import Path

    stalled: list[float] = []

    def senders() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if proc.name.isdigit() and int(stat[1]) == os.getpid():
                    if b"loadgen.runner" in (proc / "cmdline").read_bytes():
                        found.append(int(proc.name))
            except (OSError, IndexError, ValueError):
                continue
        return found

    def connected(pid: int) -> bool:
        try:
            return any(os.readlink(fd).startswith("socket:") for fd in Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            return False

    def stall(rate: float) -> None:
        # once the sender holds its connections its schedule starts at once: a stop before that (a slow
        # start on a busy host) would only delay the schedule, not put the client behind it
        deadline = time.monotonic() + 10.0
        while not ((pids := senders()) and all(connected(p) for p in pids)) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(stall_s)
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        stalled.append(rate)

    def progress(event) -> None:
        if event.phase == "step" and event_matches(event):
            threading.Thread(target=stall, args=(event.rate,), daemon=True).start()

    return progress, stalled


@pytest.mark.parametrize("stub", [("serial", 0.1)], indirect=True)
def test_a_client_stall_above_a_broken_rate_ends_the_sweep_and_one_below_it_invalidates(stub):
    """The client stopped (SIGSTOP) through a step and its repeat: above a rate whose SLA already broke,
    the capacity is bracketed by the steps before it, so the sweep ends valid and notes the dropped step;
    before any rate broke, nothing bounds the capacity and the sweep is invalid (the client's fault)."""
    sla = {"ttft_ms": 500, "max_error_rate": 0.01}
    bounds = LagBounds(p99_ms=500.0, min_rate_ratio=0.5)
    spec = endpoint(stub.url, sla, step_duration_s=2.0, refine_steps=0, rates=[3.0, 16.0], estimator="service_rate")
    broke: list[float] = []

    def past_a_break(event) -> bool:
        return bool(broke) and event.rate > min(broke)

    stall, stalled = _stall_sender_during(past_a_break)

    def progress(event) -> None:
        if event.phase == "step_done" and event.step is not None and not event.step.within_sla:
            broke.append(event.rate)
        stall(event)

    swept = run_sweep(_attach(spec), pool(), spec, lag_bounds=bounds, progress=progress)
    assert broke and stalled, (broke, swept.notes)  # 16 req/s broke the SLA; the step above it was stalled
    assert swept.validity == "valid", swept.invalid_reason
    assert swept.rates() == [3.0, 16.0] and swept.capacity_bounded
    (dropped,) = [n for n in swept.notes if n.startswith(f"stopped at {stalled[0]:g} req/s, the step dropped")]
    assert "client fell behind" in dropped and "already broken at a lower rate" in dropped
    assert any(n.startswith(f"step at {stalled[0]:g} req/s repeated: client") for n in swept.notes)

    stall_first, stalled_first = _stall_sender_during(lambda event: event.rate == 3.0)
    early = run_sweep(_attach(spec), pool(), spec, lag_bounds=bounds, progress=stall_first)
    assert stalled_first and early.validity == "invalid"
    assert early.invalid_reason.startswith("step at 3 req/s: client fell behind"), early.invalid_reason
