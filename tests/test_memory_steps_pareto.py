"""Per-step view, Pareto front, cost and energy, and the Parquet export, on real DuckDB files.

Sweeps are built the way the load generator builds them: request records -> loadgen.stats.summarize ->
SweepResult, with NVML-shaped samples summarised by engines.gpu.summarize_ticks on the "GPU" endpoint;
records go through the real MemoryStore. The same memory is read back by the duckdb CLI and polars.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from specs.config import EndpointSpec
from engines.gpu import GpuReading, GpuTick, summarize_ticks
from loadgen.results import RequestRecord, SweepResult
from loadgen.runner import RunOutcome
from loadgen.stats import summarize
from helpers_memory import duckdb_cli
from memory_db import Conditions, ExperimentRecord, MemoryStore, RunRecord
from memory_db.export import export_parquet
from memory_db.queries import pareto_curves, pareto_points

DURATION_S = 4.0
TOKENS = 32


def spec(name: str, args: list[str], gpus: int, price: float | None) -> EndpointSpec:
    return EndpointSpec(
        name=name,
        model={"path": "m"},
        engine={"kind": "vllm", "args": args},
        hardware={"gpu_type": "H200" if gpus else "cpu", "gpu_count": gpus, "price_per_gpu_hour_usd": price},
        sla={"ttft_ms": 400, "itl_ms": 60},
        traffic={"kind": "sample"},
    )


def step(endpoint: EndpointSpec, rate: float, decode_ms: float, ttft_ms: float, power_w: float | None):
    """One held rate: every request streams TOKENS tokens ``decode_ms`` apart after ``ttft_ms``."""
    n = int(rate * DURATION_S)
    records = []
    for i in range(n):
        sent = i / rate
        itl = [decode_ms / 1000] * (TOKENS - 1)
        records.append(
            RequestRecord(
                request_id=f"r{i}",
                scheduled_s=sent,
                sent_s=sent,
                ttft_s=ttft_ms / 1000,
                itl_s=itl,
                e2e_s=ttft_ms / 1000 + sum(itl),
                output_tokens=TOKENS,
                status=200,
            )
        )
    outcome = RunOutcome(
        records=records,
        validity="valid",
        reason=None,
        target_rate=rate,
        achieved_rate=rate,
        duration_s=DURATION_S,
        send_lag_ms=summarize.__globals__["summary_ms"]([]),
        send_lag_max_ms=None,
        senders=1,
        connections_opened=1,
        client_errors=0,
        client_cpu_util=None,
        started_at=1.8e9,
    )
    result = summarize(outcome, endpoint.sla, target_rate=rate)
    if power_w is not None:  # what loadgen.watch puts in device_metrics from NVML samples
        ticks = [
            GpuTick(
                t=t,
                readings=tuple(
                    GpuReading(gpu=g, util_pct=90.0, power_w=power_w) for g in range(endpoint.hardware.gpu_count)
                ),
            )
            for t in (0.0, DURATION_S / 2, DURATION_S)
        ]
        result = result.model_copy(update={"device_metrics": summarize_ticks(ticks)})
    return result


def sweep(endpoint: EndpointSpec, points: list[tuple[float, float, float]], power_w: float | None) -> SweepResult:
    steps = [step(endpoint, rate, decode, ttft, power_w) for rate, decode, ttft in points]
    held = [s.target_rate for s in steps if s.within_sla]
    return SweepResult(
        endpoint=endpoint.name,
        engine_args=endpoint.engine.args,
        launch_config_hash=endpoint.launch_config_hash(),
        started_at=1.8e9,
        steps=steps,
        capacity_rps=max(held, default=0.0),
        gpu_divisor=endpoint.hardware.capacity_divisor,
    )


CONDITIONS = Conditions(model="m", engine="vllm", engine_version="0.32.0", workload_signature="wl")


@pytest.fixture
def memory(store: MemoryStore) -> MemoryStore:
    """Two endpoints: a 2-GPU one priced per GPU-hour, with power telemetry and three configurations
    (a baseline, a bigger batch that trades per-user speed for throughput, a worse one); a CPU one."""
    base = spec("gpu_chat", ["--max-num-seqs", "8"], 2, 4.0)
    big = spec("gpu_chat", ["--max-num-seqs", "64"], 2, 4.0)
    slow = spec("gpu_chat", ["--max-num-seqs", "8", "--enforce-eager"], 2, 4.0)
    # (rate, decode ms, TTFT ms): the bigger batch holds a higher rate with slower decode per user;
    # the eager one is slower per user and breaks the ITL limit earlier.
    runs = [
        (base, "baseline", None, [(2, 10, 50), (4, 12, 80), (8, 80, 900)]),
        (big, "candidate", ("max_num_seqs", {"--max-num-seqs": "64"}), [(2, 14, 50), (8, 25, 120), (16, 40, 300)]),
        (slow, "candidate", ("cuda_graphs", {"--enforce-eager": None}), [(2, 20, 60), (4, 70, 200)]),
    ]
    for k, (endpoint, kind, change, points) in enumerate(runs):
        experiment_id = None
        if change is not None:
            experiment_id = f"c1:{change[0]}"
            store.record(
                ExperimentRecord(
                    experiment_id=experiment_id,
                    endpoint=endpoint.name,
                    campaign_id="c1",
                    conditions=CONDITIONS,
                    bottleneck="batch_limit",
                    technique=change[0],
                    change=change[1],
                    verdict="better" if k == 1 else "worse",
                )
            )
        for repeat in range(2):
            store.record(
                RunRecord.from_sweep(
                    sweep(endpoint, points, power_w=350.0),
                    run_id=f"gpu-{k}-{repeat}",
                    kind=kind,
                    campaign_id="c1",
                    experiment_id=experiment_id,
                    price_per_gpu_hour_usd=endpoint.hardware.price_per_gpu_hour_usd,
                )
            )
    cpu = spec("cpu_chat", [], 0, None)
    store.record(
        RunRecord.from_sweep(sweep(cpu, [(1, 30, 100), (2, 50, 200)], power_w=None), run_id="cpu-0", kind="baseline")
    )
    return store


def test_step_view_has_one_row_per_step_with_percentiles_cost_and_energy(memory: MemoryStore):
    steps = memory.query("SELECT * FROM v_run_steps ORDER BY endpoint, run_id, step_index")
    runs = memory.query("SELECT run_id, len(json_extract(steps, '$[*]')) AS n FROM runs")
    assert steps.height == runs["n"].sum()
    for column in (
        "ttft_p50_ms",
        "ttft_p99_ms",
        "itl_p95_ms",
        "tpot_p50_ms",
        "e2e_p99_ms",
        "errors",
        "output_tokens_per_s",
        "target_rate",
        "users",
        "gpu_power_mean_w",
    ):
        assert column in steps.columns
    gpu = steps.filter(pl.col("endpoint") == "gpu_chat")
    assert gpu["gpu_divisor"].unique().to_list() == [2]
    # joules per token = mean power over the step (both GPUs) / output tokens per second
    expected = gpu["gpu_power_mean_w"] / gpu["output_tokens_per_s"]
    assert (gpu["joules_per_output_token"] - expected).abs().max() < 1e-9
    assert gpu["gpu_power_mean_w"].min() == pytest.approx(2 * 350.0)
    # $ per million tokens = price x GPUs per hour / tokens per hour
    expected_usd = 4.0 * 2 / 3600 / gpu["output_tokens_per_s"] * 1e6
    assert (gpu["usd_per_million_output_tokens"] - expected_usd).abs().max() < 1e-6
    cpu = steps.filter(pl.col("endpoint") == "cpu_chat")
    assert cpu["joules_per_output_token"].null_count() == cpu.height  # no power telemetry on a CPU host
    assert cpu["usd_per_million_output_tokens"].null_count() == cpu.height  # no price given


def test_pareto_front_marks_configurations_no_other_dominates(memory: MemoryStore, tmp_path: Path):
    with memory.connect() as con:
        points, curves = pareto_points(con, "gpu_chat"), pareto_curves(con, "gpu_chat")
    assert len(points) == 3 and all(p["runs"] == 2 for p in points)
    for p in points:  # the front, checked against the definition
        dominated = any(
            q is not p
            and q["output_tokens_per_s_per_gpu"] >= p["output_tokens_per_s_per_gpu"]
            and q["user_tokens_per_s_p50"] >= p["user_tokens_per_s_p50"]
            and (q["output_tokens_per_s_per_gpu"], q["user_tokens_per_s_p50"])
            != (p["output_tokens_per_s_per_gpu"], p["user_tokens_per_s_p50"])
            for q in points
        )
        assert p["on_front"] is (not dominated)
    labels = {p["label"]: p for p in points}
    assert set(labels) == {"baseline", 'max_num_seqs {"--max-num-seqs":"64"}', 'cuda_graphs {"--enforce-eager":null}'}
    assert labels["baseline"]["on_front"] and labels['max_num_seqs {"--max-num-seqs":"64"}']["on_front"]
    assert not labels['cuda_graphs {"--enforce-eager":null}']["on_front"]
    # at capacity: the highest rate within the SLA
    steps = memory.query("SELECT run_id, max(target_rate) AS r FROM v_run_steps WHERE within_sla GROUP BY run_id")
    assert labels["baseline"]["capacity_step_rps"] == steps.filter(pl.col("run_id") == "gpu-0-0")["r"][0]
    from loadgen.plots import pareto_png

    png = pareto_png(points, curves, tmp_path / "pareto.png", title="gpu_chat")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(curves) == memory.query("SELECT * FROM v_run_steps WHERE endpoint = 'gpu_chat'").height


@pytest.mark.skipif(duckdb_cli() is None, reason="the duckdb CLI is not installed (pip install duckdb-cli)")
def test_step_view_and_parquet_export_read_with_duckdb_cli_and_polars(memory: MemoryStore, tmp_path: Path):
    view = subprocess.run(
        [
            duckdb_cli(),
            "-readonly",
            "-csv",
            str(memory.path),
            "-c",
            "SELECT endpoint, count(*) AS steps, max(ttft_p99_ms) AS ttft FROM v_run_steps "
            "GROUP BY endpoint ORDER BY endpoint",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert view.returncode == 0, view.stderr
    stored = memory.query("SELECT endpoint, count(*) AS steps FROM v_run_steps GROUP BY endpoint ORDER BY endpoint")
    lines = view.stdout.strip().splitlines()
    assert [tuple(line.split(",")[:2]) for line in lines[1:]] == [(e, str(n)) for e, n in stored.iter_rows()]

    out = tmp_path / "steps"
    written = export_parquet(memory, out)
    assert sorted(p.parent.name for p in written) == ["endpoint=cpu_chat", "endpoint=gpu_chat"]
    frame = pl.scan_parquet(str(out / "**" / "*.parquet"), hive_partitioning=True).collect()
    full = memory.query("SELECT * FROM v_run_steps")
    assert frame.height == full.height and set(frame.columns) == set(full.columns)
    assert frame.filter(pl.col("endpoint") == "gpu_chat")["joules_per_output_token"].null_count() == 0
    cli = subprocess.run(
        [
            duckdb_cli(),
            "-csv",
            "-c",
            f"SELECT endpoint, count(*) FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true) "
            "GROUP BY endpoint ORDER BY endpoint",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert [tuple(line.split(",")) for line in cli.stdout.strip().splitlines()[1:]] == [
        (e, str(n)) for e, n in stored.iter_rows()
    ]


def test_cli_memory_export_parquet(memory: MemoryStore, tmp_path: Path):
    out = tmp_path / "cli-export"
    done = subprocess.run(
        [sys.executable, "-m", "autoresearch.cli", "memory", "export", "--parquet", str(out), "--db", str(memory.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (out / "endpoint=gpu_chat" / "steps.parquet").exists() and "2 endpoint partition(s)" in done.stdout


def test_review_cost_and_energy_agree_with_the_memory(memory: MemoryStore, tmp_path: Path):
    """The review report's figures at capacity are the memory's (same step, same formulas); a CPU host
    and a missing price are said plainly."""
    from research.review import capacity_economics, economics_lines

    big = spec("gpu_chat", ["--max-num-seqs", "64"], 2, 4.0)
    sweeps = [sweep(big, [(2, 14, 50), (8, 25, 120), (16, 40, 300)], power_w=350.0) for _ in range(2)]
    report = capacity_economics(sweeps, big)
    with memory.connect() as con:
        point = next(p for p in pareto_points(con, "gpu_chat") if p["config_hash"] == big.launch_config_hash())
    for column in ("output_tokens_per_s_per_gpu", "usd_per_million_output_tokens", "joules_per_output_token"):
        assert report[column] == pytest.approx(point[column], rel=1e-9)
    cpu = spec("cpu_chat", [], 0, None)
    cpu_report = capacity_economics([sweep(cpu, [(1, 30, 100)], power_w=None)], cpu)
    assert cpu_report["joules_per_output_token"] is None and cpu_report["usd_per_million_output_tokens"] is None
    text = "\n".join(economics_lines([("baseline", [sweep(cpu, [(1, 30, 100)], power_w=None)])], cpu))
    assert "Energy: no power telemetry (CPU host)." in text and "no price per GPU-hour" in text
    assert "$4 per GPU-hour x 2" in "\n".join(economics_lines([("candidate", sweeps)], big))
