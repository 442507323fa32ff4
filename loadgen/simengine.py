"""A simulated engine whose capacity is known: the measuring instrument for the harness itself.

Not a stand-in for an engine under test. It answers the same streaming OpenAI API as a real
server, with a continuous-batching service model whose rates are set, so that a planted effect
(``speed``: every service time divided by it) is a capacity change of known size, and the
harness's false-verdict rate and power can be measured (``benchmarks/harness_power.py``).

The service model, one engine step at a time (prefill-first, as vLLM schedules):

* requests wait in a FIFO queue; at the start of a step, waiting requests join the running batch
  up to ``max_batch``;
* the step takes ``decode_base_ms + decode_ms_per_seq * running + prefill_ms_per_token * (prompt
  tokens admitted this step)``, times a per-step lognormal jitter (``step_jitter_cv``) and a
  per-start factor (``run_jitter_cv``: the between-run variance a real host shows), divided by
  ``speed``;
* at the end of a step, each running request gets one token (an admitted one its first); a
  request leaves after its output tokens.

:func:`simulate` runs the same scheduler in virtual time (no sockets: thousands of trials per
minute); :func:`start` serves it over HTTP in a process of its own (real client, real sweeps).

Faults, for the fault matrix (docs/reliability.md), counted over completion requests in the order
they arrive (the k-th, from 1): ``error_every`` N answers every N-th with HTTP 500, ``malformed_every``
M streams a broken SSE event in every M-th other one, ``hang`` reads every request and never answers
(the connection stays open; ``/health`` still answers, as a wedged engine's HTTP front end does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

SIM_MODEL = "sim-model"


@dataclass(frozen=True)
class ServiceModel:
    """Service rates of the simulated engine (milliseconds); ``speed`` > 1 is a faster engine."""

    prefill_ms_per_token: float = 0.02
    decode_base_ms: float = 5.0
    decode_ms_per_seq: float = 0.6
    max_batch: int = 48
    max_output_tokens: int = 64
    speed: float = 1.0
    step_jitter_cv: float = 0.05
    run_jitter_cv: float = 0.0
    error_every: int = 0
    malformed_every: int = 0
    hang: bool = False

    def planted(self, effect: float) -> "ServiceModel":
        """The same engine with a capacity change of ``effect`` (+0.10 = 10% more requests/s at the same
        latency): every service time is divided by 1 + effect, so every latency-vs-rate curve is the
        same curve on a rate axis stretched by 1 + effect, up to the client's fixed costs."""
        return replace(self, speed=self.speed * (1.0 + effect))

    def started(self, seed: int) -> "ServiceModel":
        """This engine as one start of it finds its host: ``run_jitter_cv`` drawn once into ``speed``."""
        if not self.run_jitter_cv:
            return self
        factor = _unit_lognormal(np.random.default_rng(seed), self.run_jitter_cv)
        return replace(self, speed=self.speed / factor, run_jitter_cv=0.0)


def _unit_lognormal(rng: np.random.Generator, cv: float) -> float:
    """A lognormal factor with mean 1 and coefficient of variation ``cv`` (1.0 when cv is 0)."""
    if not cv:
        return 1.0
    sigma2 = math.log1p(cv**2)
    return float(rng.lognormal(-0.5 * sigma2, math.sqrt(sigma2)))


@dataclass
class _Job:
    key: int
    prompt_tokens: int
    output_tokens: int
    emitted: int = 0
    admitted: bool = False


@dataclass
class BatchScheduler:
    """The service model's scheduler, shared by the HTTP server and the virtual-time simulation."""

    model: ServiceModel
    seed: int = 0
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.model = self.model.started(self.seed + 1)

    def submit(self, job: _Job) -> None:
        self.waiting.append(job)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def abort(self, keys: set[int]) -> None:
        """Drop jobs whose client went away (a real engine aborts them: vLLM does on disconnect)."""
        self.waiting = deque(j for j in self.waiting if j.key not in keys)
        self.running = [j for j in self.running if j.key not in keys]

    def step(self) -> tuple[float, list[tuple[_Job, bool]]]:
        """Run one engine step: (its duration in seconds, [(job, finished)] that got a token at its end)."""
        m = self.model
        admitted_tokens = 0
        while self.waiting and len(self.running) < m.max_batch:
            job = self.waiting.popleft()
            admitted_tokens += job.prompt_tokens
            self.running.append(job)
        jitter = _unit_lognormal(self.rng, m.step_jitter_cv)
        ms = m.decode_base_ms + m.decode_ms_per_seq * len(self.running) + m.prefill_ms_per_token * admitted_tokens
        duration = ms / 1000.0 * jitter / m.speed
        out = []
        still = []
        for job in self.running:
            job.emitted += 1
            done = job.emitted >= job.output_tokens
            out.append((job, done))
            if not done:
                still.append(job)
        self.running = still
        return duration, out


def simulate(
    model: ServiceModel, arrivals_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray, seed: int = 0
) -> list[list[float]]:
    """Virtual time: the token times (seconds from arrival) of each request, in arrival order."""
    sched = BatchScheduler(model, seed=seed)
    times: list[list[float]] = [[] for _ in range(len(arrivals_s))]
    order = np.argsort(arrivals_s, kind="stable")
    clock, nxt = 0.0, 0
    while nxt < len(order) or not sched.idle:
        if sched.idle:
            clock = max(clock, float(arrivals_s[order[nxt]]))
        while nxt < len(order) and arrivals_s[order[nxt]] <= clock:
            i = int(order[nxt])
            sched.submit(_Job(i, int(prompt_tokens[i]), max(1, min(int(output_tokens[i]), model.max_output_tokens))))
            nxt += 1
        duration, emitted = sched.step()
        clock += duration
        for job, _ in emitted:
            times[job.key].append(clock - float(arrivals_s[job.key]))
    return times


def virtual_step(
    model: ServiceModel,
    rate: float,
    duration_s: float,
    prompts: np.ndarray,
    outputs: np.ndarray,
    sla,
    *,
    seed: int,
    run_seed: int,
):
    """One open-loop step in virtual time: Poisson arrivals at ``rate`` (the schedule and the requests
    drawn from ``seed``, as a sweep step draws them), served by the model, judged like a real step."""
    from loadgen import arrivals
    from loadgen.results import LatencySummary, RequestRecord
    from loadgen.runner import RunOutcome
    from loadgen.stats import summarize

    schedule = arrivals.poisson(rate, duration_s, seed=seed)
    start = int(np.random.default_rng(seed).integers(0, len(prompts)))
    idx = (start + np.arange(len(schedule))) % len(prompts)
    times = simulate(model, schedule, prompts[idx], outputs[idx], seed=run_seed)
    records = [
        RequestRecord(
            request_id=str(i),
            scheduled_s=float(t),
            sent_s=float(t),
            ttft_s=tt[0],
            itl_s=np.diff(tt).tolist(),
            e2e_s=tt[-1],
            output_tokens=len(tt),
            status=200,
        )
        for i, (t, tt) in enumerate(zip(schedule, times))
    ]
    outcome = RunOutcome(
        records=records,
        validity="valid",
        reason=None,
        target_rate=rate,
        achieved_rate=rate,
        duration_s=duration_s,
        send_lag_ms=LatencySummary(),
        send_lag_max_ms=0.0,
        senders=1,
        connections_opened=0,
        client_errors=0,
        client_cpu_util=None,
        started_at=0.0,
    )
    return summarize(outcome, sla, target_rate=rate)


# --- the HTTP server (its own process) -----------------------------------------------------------


def _tokens_of(body: dict) -> int:
    """Prompt tokens, as a tokenizer would roughly count them: about four characters a token."""
    text = json.dumps(body.get("messages") or body.get("prompt") or "")
    return max(1, len(text) // 4)


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _Server:
    def __init__(self, model: ServiceModel, seed: int):
        self.sched = BatchScheduler(model, seed=seed)
        self.wake = asyncio.Event()
        self.streams: dict[int, tuple[asyncio.StreamWriter, int, asyncio.Future]] = {}
        self.next_key = 0
        self.requests = 0  # completion requests received (the faults count them)

    async def engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.sched.idle:
                self.wake.clear()
                await self.wake.wait()
            start = loop.time()
            duration, emitted = self.sched.step()
            await asyncio.sleep(max(0.0, start + duration - loop.time()))
            gone = {key for key, (writer, _, _) in self.streams.items() if writer.is_closing()}
            if gone:
                self.sched.abort(gone)
                for key in gone:
                    self.streams.pop(key)[2].set_result(None)
                emitted = [(job, done) for job, done in emitted if job.key not in gone]
            for job, done in emitted:
                writer, prompt, fut = self.streams[job.key]
                data = _sse(
                    {
                        "id": f"sim-{job.key}",
                        "object": "chat.completion.chunk",
                        "model": SIM_MODEL,
                        "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}],
                    }
                )
                if done:
                    del self.streams[job.key]
                    usage = {
                        "prompt_tokens": prompt,
                        "completion_tokens": job.output_tokens,
                        "total_tokens": prompt + job.output_tokens,
                    }
                    data += (
                        _sse(
                            {
                                "id": f"sim-{job.key}",
                                "object": "chat.completion.chunk",
                                "model": SIM_MODEL,
                                "choices": [],
                                "usage": usage,
                            }
                        )
                        + b"data: [DONE]\n\n"
                    )
                if not writer.is_closing():
                    writer.write(_chunk(data) + (b"0\r\n\r\n" if done else b""))
                if done:
                    fut.set_result(None)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:")), 0
                )
                body = await reader.readexactly(length) if length else b""
                if path.endswith("/completions"):
                    await self.generate(json.loads(body or b"{}"), writer)
                else:
                    metrics = (
                        f"# simulated engine\nsim:num_requests_running {len(self.sched.running)}\n"
                        f"sim:num_requests_waiting {len(self.sched.waiting)}\n"
                    ).encode()
                    text = {
                        "/health": b"ok",
                        "/metrics": metrics,
                        "/v1/models": json.dumps({"object": "list", "data": [{"id": SIM_MODEL}]}).encode(),
                    }.get(path, b"ok")
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                        + str(len(text)).encode()
                        + b"\r\n\r\n"
                        + text
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def generate(self, body: dict, writer: asyncio.StreamWriter) -> None:
        model, self.requests = self.sched.model, self.requests + 1
        if model.hang:
            await asyncio.Event().wait()  # never answers; the client's deadline ends it
        if model.error_every and self.requests % model.error_every == 0:
            text = json.dumps({"error": {"message": "simulated internal error", "code": 500}}).encode()
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(text)).encode()
                + b"\r\n\r\n"
                + text
            )
            return
        if model.malformed_every and self.requests % model.malformed_every == 0:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + _chunk(b'data: {"choices": [{"delta": {"content": " tok"\n\n')
                + b"0\r\n\r\n"
            )
            return
        prompt = _tokens_of(body)
        wanted = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        job = _Job(self.next_key, prompt, max(1, min(wanted, self.sched.model.max_output_tokens)))
        self.next_key += 1
        fut = asyncio.get_running_loop().create_future()
        self.streams[job.key] = (writer, prompt, fut)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.sched.submit(job)
        self.wake.set()
        await fut


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _serve(model: ServiceModel, port: int, seed: int) -> None:
    server = _Server(model, seed)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=4096)
    asyncio.get_running_loop().create_task(server.engine_loop())
    async with srv:
        await srv.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="simulated engine (harness instrument)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-json", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    model = ServiceModel(**json.loads(args.model_json))
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(_serve(model, args.port, args.seed))


@dataclass
class SimEngine:
    """A running simulated engine: what loadgen's sweeps need from an engine (see loadgen.watch.Engine)."""

    base_url: str
    port: int
    pid: int
    process: subprocess.Popen
    model: ServiceModel
    served_model: str = SIM_MODEL
    startup_s: float | None = None

    def metrics(self):
        """Requests running and waiting, as vLLM exports them (a soak waits for a queue to drain)."""
        import httpx

        from engines.metrics import snapshot_from_text

        return snapshot_from_text(
            httpx.get(f"{self.base_url}/metrics", timeout=5).text,
            time.time(),
            {"requests_running": "sim:num_requests_running", "requests_waiting": "sim:num_requests_waiting"},
            "sim:",
        )

    def reset_prefix_cache(self) -> None:
        """No prefix cache to reset."""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            from engines.base import EngineCrashed

            raise EngineCrashed(f"simulated engine exited with code {self.process.returncode}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout=5)

    def __enter__(self) -> "SimEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start(model: ServiceModel, *, seed: int = 0, timeout_s: float = 10.0, cpu: int | None = None) -> SimEngine:
    """Start the simulated engine on a free 127.0.0.1 port in a process of its own; return once it answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    argv = [
        sys.executable,
        "-m",
        "loadgen.simengine",
        "--port",
        str(port),
        "--model-json",
        json.dumps(asdict(model)),
        "--seed",
        str(seed),
    ]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    began = time.monotonic()
    process = subprocess.Popen(
        argv,
        start_new_session=True,
        stdin=subprocess.DEVNULL,  # noqa: S603
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    engine = SimEngine(f"http://127.0.0.1:{port}", port, process.pid, process, model)
    while time.monotonic() - began < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"simulated engine exited with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    engine.startup_s = time.monotonic() - began
                    return engine
        except OSError:
            time.sleep(0.05)
    engine.stop()
    raise RuntimeError(f"simulated engine did not answer on port {port} within {timeout_s:g}s")


if __name__ == "__main__":
    main()
