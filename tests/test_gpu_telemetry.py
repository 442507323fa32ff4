"""GPU telemetry (NVML) and the engine stop that kills leftovers and checks GPU memory release.

The arithmetic is tested on samples fed directly (pure functions, no NVML stand-in); the
sampler and the stop check are tested for what they say on a host without NVML (this CPU
machine); the leftover kill on a real process group whose child ignores SIGTERM."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engines.gpu import (
    GpuReading,
    GpuSampler,
    GpuTick,
    RELEASE_TOLERANCE_BYTES,
    memory_used,
    summarize_ticks,
    wait_memory_released,
)
from engines.process import ManagedProcess, group_alive
from loadgen.watch import EngineWatch

GiB = 2**30
NO_NVML = memory_used()[0] is None


# -- the per-step summary ---------------------------------------------------------------------


def _tick(t: float, *readings: GpuReading) -> GpuTick:
    return GpuTick(t, readings)


def test_energy_is_the_integral_of_power_over_time():
    ticks = [
        _tick(0.0, GpuReading(0, util_pct=10, memory_used_bytes=40 * GiB, power_w=100.0)),
        _tick(1.0, GpuReading(0, util_pct=50, memory_used_bytes=60 * GiB, power_w=200.0)),
        _tick(3.0, GpuReading(0, util_pct=90, memory_used_bytes=50 * GiB, power_w=200.0)),
    ]
    out = summarize_ticks(ticks)
    # trapezoids: (100+200)/2 * 1 s + (200+200)/2 * 2 s = 150 + 400 J
    assert out["energy_j"] == pytest.approx(550.0)
    assert out["power_mean_w"] == pytest.approx(550.0 / 3.0)  # time-weighted, not (100+200+200)/3
    assert out["duration_s"] == pytest.approx(3.0)
    assert out["gpu_util_mean"] == pytest.approx(50.0) and out["gpu_util_max"] == 90.0
    assert out["memory_used_max_bytes"] == 60 * GiB
    assert out["samples"] == 3 and out["gpus"] == 1
    assert "energy_counter_j" not in out  # only when the driver's counter was read


def test_two_gpus_add_up_and_missing_readings_are_left_out():
    ticks = [
        _tick(
            0.0,
            GpuReading(0, util_pct=20, memory_used_bytes=10 * GiB, power_w=300.0),
            GpuReading(1, util_pct=40, memory_used_bytes=20 * GiB, power_w=None),
        ),
        _tick(
            2.0,
            GpuReading(0, util_pct=60, memory_used_bytes=30 * GiB, power_w=500.0),
            GpuReading(1, util_pct=None, memory_used_bytes=25 * GiB, power_w=100.0),
        ),
        _tick(
            4.0,
            GpuReading(0, util_pct=None, memory_used_bytes=None, power_w=500.0),
            GpuReading(1, util_pct=80, memory_used_bytes=5 * GiB, power_w=100.0),
        ),
    ]
    out = summarize_ticks(ticks, energy_counter_j=2345.0)
    # GPU 0: 800 J over 0-2 s + 1000 J over 2-4 s; GPU 1: 100 W over 2-4 s = 200 J
    assert out["energy_j"] == pytest.approx(2000.0)
    assert out["power_mean_w"] == pytest.approx(1800.0 / 4.0 + 100.0)  # per GPU over its own span, summed
    assert out["gpu_util_mean"] == pytest.approx((20 + 40 + 60 + 80) / 4) and out["gpu_util_max"] == 80
    assert out["memory_used_max_bytes"] == 55 * GiB  # the tick at 4 s lacks GPU 0's memory: not summed
    assert out["energy_counter_j"] == 2345.0 and out["gpus"] == 2


def test_no_numbers_are_made_up():
    assert summarize_ticks([]) == {"samples": 0.0}
    one = summarize_ticks([_tick(5.0, GpuReading(0, power_w=250.0))])
    assert one["power_mean_w"] == 250.0 and "energy_j" not in one  # one reading has no integral
    assert "gpu_util_mean" not in one and "memory_used_max_bytes" not in one


# -- the release check --------------------------------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_memory_released_after_the_drivers_delay():
    clock = _Clock()
    readings = iter([{0: 129 * GiB}, {0: 129 * GiB}, {0: 1 * GiB + 100 * 2**20}])
    check = wait_memory_released(
        {0: 1 * GiB},
        lambda: next(readings),
        before_stop={0: 130 * GiB},
        timeout_s=5.0,
        poll_s=0.5,
        clock=clock,
        sleep=clock.sleep,
    )
    assert check.status == "released" and not check.leak
    assert check.waited_s == pytest.approx(1.0)
    assert check.held_bytes == {0: 129 * GiB}


def test_memory_still_held_is_a_leak():
    clock = _Clock()
    check = wait_memory_released(
        {0: 0, 1: 0},
        lambda: {0: 129 * GiB, 1: RELEASE_TOLERANCE_BYTES},
        timeout_s=2.0,
        poll_s=0.5,
        clock=clock,
        sleep=clock.sleep,
    )
    assert check.leak and check.excess_bytes == {0: 129 * GiB}  # GPU 1 is within the tolerance
    assert check.waited_s >= 2.0 and "GPU 0: 129.00 GiB" in check.note
    assert json.loads(json.dumps(check.as_dict()))["excess_bytes"] == {"0": 129 * GiB}


# -- this host: no NVML -------------------------------------------------------------------------


@pytest.mark.skipif(not NO_NVML, reason="this host has NVML")
def test_sampler_without_nvml_says_so_and_gives_no_numbers():
    with GpuSampler(interval_s=0.05) as sampler:
        time.sleep(0.2)
    assert not sampler.available and sampler.ticks == []
    assert sampler.summary() == {}
    assert "no GPU telemetry" in sampler.note and ("NVML" in sampler.note or "nvidia-ml-py" in sampler.note)


class _StubEngine:
    base_url = "http://127.0.0.1:9"
    served_model = "m"

    def metrics(self):
        raise RuntimeError("no metrics")

    def reset_prefix_cache(self):
        pass

    def check_alive(self):
        pass


@pytest.mark.skipif(not NO_NVML, reason="this host has NVML")
def test_engine_watch_reports_no_device_metrics_without_nvml():
    with EngineWatch(_StubEngine(), interval_s=0.05) as watch:
        time.sleep(0.1)
    assert watch.device_summary() == {} and "no GPU telemetry" in watch.device_note


def test_engine_watch_does_not_read_local_gpus_for_a_remote_engine():
    engine = _StubEngine()
    engine.base_url = "http://inference.example.com:8000"
    with EngineWatch(engine, interval_s=0.05) as watch:
        pass
    assert watch.device_summary() == {} and watch.device_note == "no GPU telemetry: the engine is not on this host"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc: the step's CPU accounting is unmeasured")
def test_a_step_records_how_much_cpu_the_engine_got_and_what_the_host_stole(tmp_path):
    """A real process group as the engine: one that spins a core gets about a CPU second per second, one
    that sleeps next to nothing; the host's stolen share is a fraction. (Why: a sweep that ran slower
    than its repeat, serving the same requests, had less CPU or a slower one.)"""
    readings = {}
    for name, code in (("busy", "while True: pass"), ("idle", "import time; time.sleep(60)")):
        engine = _StubEngine()
        engine.process = ManagedProcess([sys.executable, "-c", code], tmp_path / f"{name}.log").start()
        try:
            time.sleep(0.3)  # started
            with EngineWatch(engine, interval_s=0.05) as watch:
                time.sleep(1.5)
            readings[name], _ = watch.summary()
        finally:
            engine.process.kill()
    busy, idle = readings["busy"]["engine_cpu_util"], readings["idle"]["engine_cpu_util"]
    assert busy > idle + 0.3 and idle < 0.2, readings
    assert all(0.0 <= r["host_steal_fraction"] <= 1.0 for r in readings.values())
    # an engine this project did not start has no process to read: unmeasured, not zero
    with EngineWatch(_StubEngine(), interval_s=0.05) as watch:
        time.sleep(0.1)
    assert "engine_cpu_util" not in watch.summary()[0]


# -- stop: leftovers and the GPU check -----------------------------------------------------------

LEADER = textwrap.dedent("""
    import signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"],
        stdout=open(sys.argv[2], "w"))
    open(sys.argv[1], "w").write(str(child.pid))
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))   # the leader ends on SIGTERM, its child does not
    time.sleep(120)
""")


def _wait_for(path: Path, text: str = "", timeout_s: float = 20.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never had {text!r}")


def _alive(pid: int) -> bool:
    """A live process (an orphan's zombie is dead already; PID 1 reaps it when it gets to it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def test_stop_kills_a_leftover_that_ignores_sigterm_by_pid(tmp_path):
    pid_file, child_out = tmp_path / "child.pid", tmp_path / "child.out"
    proc = ManagedProcess(
        [sys.executable, "-c", LEADER, str(pid_file), str(child_out)], tmp_path / "engine.log"
    ).start()
    try:
        child = int(_wait_for(pid_file))
        _wait_for(child_out, "ready")  # its SIGTERM handler is in place
        start = time.monotonic()
        code = proc.stop(term_timeout_s=10, leftover_grace_s=0.5)
        took = time.monotonic() - start
    finally:
        proc.kill()
    report = proc.stop_report
    assert code == 0 and report.returncode == 0 and not report.group_killed
    assert report.leftover_pids == [child] and "SIG_IGN" in report.leftover_commands[0]
    assert any("leftover" in w for w in report.warnings)
    assert not group_alive(proc.pgid) and not _alive(child)
    assert took < 8  # the grace, not the SIGTERM timeout
    if NO_NVML:
        assert report.gpu.status == "no-nvml"
        assert "NVML" in report.gpu.note or "nvidia-ml-py" in report.gpu.note
        assert not report.leak and not any("GPU" in w for w in report.warnings)
    assert json.loads(json.dumps(report.as_dict()))["leftover_pids"] == [child]


def test_stop_of_a_clean_group_kills_nothing(tmp_path):
    proc = ManagedProcess(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        tmp_path / "engine.log",
        env={**os.environ},
    ).start()
    _wait_for(tmp_path / "engine.log", "ready", timeout_s=60)  # running, past the interpreter's start-up
    code = proc.stop(leftover_grace_s=0.5)
    report = proc.stop_report
    assert code == -15, report.warnings  # the warning says the child's state and SIGTERM disposition
    assert report.leftover_pids == [] and not report.group_killed and report.warnings == []
    assert report.gpu is not None and (report.gpu.status == "no-nvml") == NO_NVML


def test_a_leader_that_ignores_sigterm_is_killed_and_the_warning_says_why(tmp_path):
    """The SIGKILL path names the cause from /proc, so a stop that took the whole timeout explains itself."""
    proc = ManagedProcess(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        tmp_path / "engine.log",
        env={**os.environ},
    ).start()
    _wait_for(tmp_path / "engine.log", "ready", timeout_s=60)
    code = proc.stop(term_timeout_s=1.0, leftover_grace_s=0.5)
    report = proc.stop_report
    assert code == -9 and report.group_killed and not group_alive(proc.pgid)
    assert any("ignored SIGTERM" in w and "SIGTERM ignored" in w for w in report.warnings), report.warnings


def test_an_engine_started_while_this_process_ignores_sigterm_still_stops_on_sigterm(tmp_path):
    """After an in-process Dagster run, SIGTERM takes SIGINT's handler, which is SIG_IGN under a shell's
    `&`; an ignored signal survives exec, so without care every engine started then ignores our stop."""
    import signal

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = ManagedProcess(
            [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
            tmp_path / "engine.log",
            env={**os.environ},
        ).start()
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
    _wait_for(tmp_path / "engine.log", "ready", timeout_s=60)
    assert "time.sleep(60)" in Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()  # the shim exec'd in place
    code = proc.stop(term_timeout_s=10.0, leftover_grace_s=0.5)
    assert code == -15 and not proc.stop_report.group_killed, proc.stop_report.warnings
