"""The GPU cap: GPU leases across processes, and a headless campaign that runs its candidates in
parallel up to max_concurrent_gpus, each engine on its own GPU, with the same winner as a serial run.

No GPU is needed: the host's GPUs are declared with AUTORESEARCH_GPUS, the engine is a stand-in
server (it answers /health and greedy completions: :data:`SERVE`) and the sweeps are stubs that sleep and record what the
engine process was given (its CUDA_VISIBLE_DEVICES, read from /proc)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specs.config import CampaignSpec, EndpointSpec, HardwareSpec, SweepSpec
from dagster_project.lib import load_definitions
from specs.engine_args import parse_args
from specs.paths import definitions_dir
from engines.gpu_lease import GpuUnavailable, acquire
from research.campaign import run_campaign
from research.state import ProposalRecord, StateStore
from test_campaign import pool, sweep

HOLD = """
import sys
from engines.gpu_lease import acquire
lease = acquire(int(sys.argv[2]), lock_dir=sys.argv[1], devices=["0", "1"], wait_s=0)
print(",".join(lease.devices), flush=True)
sys.stdin.readline()  # hold until told to go
"""


def _holder(lock_dir: Path, count: int = 1) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(lock_dir), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return proc, proc.stdout.readline().strip()


# ------------------------------------------------------------------------------------------ leases
def test_leases_keep_gpus_apart_across_processes_and_free_them_when_the_holder_dies(tmp_path: Path):
    holder, held = _holder(tmp_path)
    try:
        assert held == "0"
        with acquire(1, lock_dir=tmp_path, devices=["0", "1"], wait_s=0) as mine:
            assert mine.devices == ("1",) and mine.env == {
                "CUDA_VISIBLE_DEVICES": "1",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            }
            with pytest.raises(GpuUnavailable, match="no 1 free GPU"):
                acquire(1, lock_dir=tmp_path, devices=["0", "1"], wait_s=0.3, poll_s=0.1)
        # released at the end of the block: another lease in this process gets it back
        with acquire(1, lock_dir=tmp_path, devices=["0", "1"], wait_s=0) as again:
            assert again.devices == ("1",)
    finally:
        holder.kill()  # no release: the kernel drops the lock with the process
        holder.wait()
    with acquire(2, lock_dir=tmp_path, devices=["0", "1"], wait_s=2, poll_s=0.1) as both:
        assert both.devices == ("0", "1")
    with pytest.raises(GpuUnavailable, match="needs 3 GPU"):
        acquire(3, lock_dir=tmp_path, devices=["0", "1"])
    assert acquire(1, lock_dir=tmp_path, devices=[]) is None  # a host without GPUs: nothing to lease
    assert acquire(0, lock_dir=tmp_path, devices=["0"]) is None


def test_a_waiting_lease_gets_the_gpu_once_the_engine_that_inherited_it_exits(tmp_path: Path):
    lease = acquire(1, lock_dir=tmp_path, devices=["0"], wait_s=0)
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"], pass_fds=lease.fds)
    lease.release()  # the starter lets go; the engine still holds the GPU
    started = time.monotonic()
    with acquire(1, lock_dir=tmp_path, devices=["0"], wait_s=20, poll_s=0.05) as next_lease:
        waited = time.monotonic() - started
        assert engine.poll() is not None, "leased while the engine still ran"
        assert next_lease.devices == ("0",) and waited > 0.5
    engine.wait()


def test_leases_exclude_threads_of_one_process(tmp_path: Path):
    got: list[str] = []
    barrier = threading.Barrier(2)

    def take():
        lease = acquire(1, lock_dir=tmp_path, devices=["0", "1"], wait_s=0)
        got.extend(lease.devices)
        barrier.wait(timeout=10)  # both hold at once
        lease.release()

    threads = [threading.Thread(target=take) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert sorted(got) == ["0", "1"]


def test_engines_per_campaign_follow_the_gpu_cap():
    cpu = load_definitions(definitions_dir()).endpoint("support_smollm")
    gpu1 = cpu.model_copy(update={"hardware": HardwareSpec(gpu_type="H200", gpu_count=1)})
    gpu2 = cpu.model_copy(update={"hardware": HardwareSpec(gpu_type="H200", gpu_count=2)})
    spec = CampaignSpec(name="c", endpoint="support_smollm", max_concurrent_gpus=4)
    assert spec.concurrent_engines(cpu) == 1  # a CPU host: one engine at a time
    assert spec.concurrent_engines(gpu1) == 4
    assert spec.concurrent_engines(gpu2) == 2
    assert CampaignSpec(name="c", endpoint="x", max_concurrent_gpus=1).concurrent_engines(gpu2) == 1


# ------------------------------------------------------------------------------------------ campaign
STAND_IN = """\
#!{python}
# Stands in for the engine's interpreter: `-m vllm... --port N` serves /health and greedy completions on N.
import http.server, json, sys
args = sys.argv[1:]
if "--port" not in args:
    sys.exit(0)  # the version query: no engine package here
"""

#: The stand-in engine's routes, after its header: /health, and /v1/completions answering a fixed function
#: of the prompt (its words reversed), the same on every configuration, as a lossless change keeps the
#: outputs. That is real evidence: the campaign captures it as the reference's greedy text and compares
#: every candidate's outputs with it (a win whose outputs were never compared is not adopted).
SERVE = """
class Engine(http.server.BaseHTTPRequestHandler):
    def _send(self, code, payload=None):
        body = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send(200 if self.path == "/health" else 404)
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/completions" or not isinstance(request.get("prompt"), str):
            return self._send(404)
        text = " " + " ".join(reversed(request["prompt"].split()))
        self._send(200, {"choices": [{"text": text[: 4 * int(request.get("max_tokens") or 16)]}]})
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Engine).serve_forever()
"""


#: --max-num-seqs -> (capacity, sleep per sweep): the best candidate finishes last, the worst first
CANDIDATES = {"4": (1.0, 0.4), "8": (3.0, 0.9), "16": (4.0, 1.6), "32": (2.0, 0.2)}


class Recorder:
    """A stub sweep: sleeps, records the engine process's CUDA_VISIBLE_DEVICES and its own start/end."""

    def __init__(self):
        self.calls: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, engine, pool_, spec):
        environ = Path(f"/proc/{engine.pid}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in environ if b"=" in e)
        seqs = parse_args(engine.spec.engine.args)["--max-num-seqs"]
        capacity, sleep_s = CANDIDATES.get(seqs, (2.0, 0.1))
        start = time.monotonic()
        time.sleep(sleep_s)
        with self.lock:
            self.calls.append(
                {
                    "seqs": seqs,
                    "gpus": env.get("CUDA_VISIBLE_DEVICES"),
                    "order": env.get("CUDA_DEVICE_ORDER"),
                    "start": start,
                    "end": time.monotonic(),
                }
            )
        return sweep(capacity, args=tuple(engine.spec.engine.args))


def _propose(endpoint, diagnosis, state, n, skip):
    return [
        ProposalRecord(
            proposal_id=f"p{i}",
            title=f"--max-num-seqs {v}",
            technique="raise_max_num_seqs",
            engine_arg_diff={"--max-num-seqs": v},
        )
        for i, v in enumerate(CANDIDATES)
    ][:n]


def _endpoint(tmp_path: Path) -> EndpointSpec:
    stand_in = tmp_path / "engine-python"
    stand_in.write_text(STAND_IN.format(python=sys.executable) + SERVE)
    stand_in.chmod(0o755)
    (tmp_path / "model").mkdir()
    base = load_definitions(definitions_dir()).endpoint("tiny_random")
    return base.model_copy(
        update={
            "model": base.model.model_copy(update={"path": str(tmp_path / "model")}),
            "engine": base.engine.model_copy(
                update={"python": str(stand_in), "args": ["--max-num-seqs", "2"], "env": {}, "startup_timeout_s": 30}
            ),
            "hardware": HardwareSpec(gpu_type="H200", gpu_count=1),
            "sweep": SweepSpec(rates=[0.5, 1, 2, 3, 4], repeats=2),
        }
    )


def _campaign(tmp_path: Path, endpoint: EndpointSpec, cap: int, folder: str):
    spec = CampaignSpec(
        name="cap",
        endpoint=endpoint.name,
        max_concurrent_gpus=cap,
        subagents=4,
        repeats=2,
        max_rounds=1,
        proposer="rules",
        deadline_minutes=30,
        gpu_hours=5,
    )
    recorder = Recorder()
    lines: list[str] = []
    outcome = run_campaign(
        spec,
        endpoint,
        state_dir=tmp_path / folder,
        pool=pool(),
        sweep_fn=recorder,
        diagnose_fn=lambda *a: {"bottlenecks": []},
        propose_fn=_propose,
        progress=lines.append,
    )
    return outcome, StateStore(tmp_path / folder, "cap").load(), recorder.calls, lines


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in events:  # an end sorts before a start at the same instant
        now += step
        most = max(most, now)
    return most


def test_a_campaign_runs_candidates_in_parallel_up_to_the_cap_each_on_its_own_gpu(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "0,1")  # a pretend two-GPU host
    monkeypatch.setenv("AUTORESEARCH_GPU_LOCKS", str(tmp_path / "leases"))
    endpoint = _endpoint(tmp_path)
    parallel, p_state, p_calls, lines = _campaign(tmp_path, endpoint, cap=2, folder="parallel")
    serial, s_state, s_calls, _ = _campaign(tmp_path, endpoint, cap=1, folder="serial")

    for outcome in (parallel, serial):
        assert outcome.finished and outcome.reference_capacity == 2.0, outcome
    # the same verdicts, in the same (proposal) order, and the same winner as the serial run
    assert parallel.best_args == serial.best_args == ["--max-num-seqs", "16"]
    assert p_state.rounds[0].experiment_ids == s_state.rounds[0].experiment_ids
    assert list(p_state.experiments) == list(s_state.experiments)
    assert {e: (r.verdict, r.confirmed, r.capacity_mean) for e, r in p_state.experiments.items()} == {
        e: (r.verdict, r.confirmed, r.capacity_mean) for e, r in s_state.experiments.items()
    }
    assert p_state.rounds[0].adopted == s_state.rounds[0].adopted
    # the winner's outputs were compared with the reference's: the stand-in's greedy text is the evidence
    assert [r.evidence for r in p_state.reference_outputs.values()] == ["greedy_text"]
    adopted = p_state.experiments[p_state.rounds[0].adopted]
    assert adopted.correctness.checked and adopted.correctness.passed

    # each candidate's sweeps ran on one engine, pinned to one GPU of the host
    candidates = [c for c in p_calls if c["seqs"] in CANDIDATES]
    assert len(candidates) == 2 * len(CANDIDATES)
    assert {c["gpus"] for c in p_calls} == {"0", "1"}
    # a lease's index is NVML's (PCI bus order): CUDA's default order (fastest first) could name another GPU
    assert {c["order"] for c in p_calls} == {"PCI_BUS_ID"}
    engines = {}
    for c in candidates:
        run = engines.setdefault(c["seqs"], {"gpus": set(), "start": c["start"], "end": c["end"]})
        run["gpus"].add(c["gpus"])
        run["start"], run["end"] = min(run["start"], c["start"]), max(run["end"], c["end"])
    assert all(len(run["gpus"]) == 1 for run in engines.values())
    # at most two engines at once, and two did run at once; two at once never shared a GPU
    spans = [(r["start"], r["end"]) for r in engines.values()]
    assert _most_at_once(spans) == 2
    for a in engines.values():
        for b in engines.values():
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:
                assert a["gpus"] != b["gpus"]
    # the serial run never overlapped, and it recorded the finish order = launch order; the parallel
    # one finished in another order (the fastest first), which the records do not show
    assert _most_at_once([(c["start"], c["end"]) for c in s_calls]) == 1
    finish = sorted(engines, key=lambda s: engines[s]["end"])
    assert finish != list(CANDIDATES)
    assert any("[cand-" in line for line in lines)  # parallel progress names its experiment


def test_a_host_without_known_gpus_runs_experiments_one_at_a_time(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AUTORESEARCH_GPUS", "")  # no GPUs: nothing to pin two engines apart
    monkeypatch.setenv("AUTORESEARCH_GPU_LOCKS", str(tmp_path / "leases"))
    outcome, _, calls, lines = _campaign(tmp_path, _endpoint(tmp_path), cap=2, folder="nogpu")
    assert outcome.best_args == ["--max-num-seqs", "16"]
    assert _most_at_once([(c["start"], c["end"]) for c in calls]) == 1
    assert {c["gpus"] for c in calls} == {None} and any("one at a time" in line for line in lines)
