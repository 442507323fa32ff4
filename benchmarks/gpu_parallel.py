"""Two candidates at once on two H200s: the GPU cap and GPU leases on a real two-GPU host, and whether
two engines side by side disturb each other's measurements.

``run --part round`` (GPU machine ``nvidia-h200-x2``, one call): the shipped ``chat_azure_h200`` campaign
with ``max_concurrent_gpus: 2``: its baseline, then one round of two candidates measured at once (each
engine on a GPU leased by ``engines.gpu_lease``), then the same round from the same baseline run serially
(cap 1). NVML is sampled every half second throughout: which GPU holds each engine's memory (its process
list), matched against the engine's lease (``CUDA_VISIBLE_DEVICES`` read from the engine process), and
how many engines each GPU ever held. Shortened for a 10-minute call, and said so in the record: two
baseline sweeps (the least a floor takes), rates 2-6 req/s without a bisection step, no soak and no profile (those have their own
benchmarks, docs/gpu.md); the candidates are two the earlier campaign measured
(``--cb-max-batch-tokens 16384``, ``--cb-num-blocks 512``).

``run --part interference`` (one call): one engine on GPU 0 judged against itself by the product's paired
sequential verdict (``loadgen.sequential.sequential_verdict``), side A measured with the engine on GPU 1
idle, side B while that engine serves open-loop load at the capacity guess. ``better``/``worse`` beyond
the noise means the two GPUs' engines interfere (a shared PCIe root, host cores, memory bandwidth) and the
harness must serialise measurements or pin host cores; ``same`` with its MDE says how small an
interference it could have seen.

``report`` (here): the calls' records in ``benchmarks/results/gpu_parallel/`` -> ``benchmarks/results/gpu_parallel.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_campaign import definitions, pool  # noqa: E402
from benchmarks.gpu_transformers_serve import MODEL_NAME, WORK, build_model  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CANDIDATES = {"--cb-max-batch-tokens": "16384", "--cb-num-blocks": "512"}  # one flag each, one per engine
RATES = [2.0, 3.0, 4.0, 6.0]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------------ what NVML sees
class GpuWatch:
    """Samples every GPU's compute processes and memory in use every ``period`` seconds (a thread)."""

    def __init__(self, period: float = 0.5):
        from engines.gpu import _open_nvml

        self.nvml, why = _open_nvml()
        if self.nvml is None:
            raise SystemExit(why)
        n = self.nvml.nvmlDeviceGetCount()
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        self.gpus = [
            {
                "index": i,
                "uuid": _text(self.nvml.nvmlDeviceGetUUID(h)),
                "bus": _text(self.nvml.nvmlDeviceGetPciInfo(h).busId),
            }
            for i, h in enumerate(self.handles)
        ]
        self.samples: list[dict] = []
        self.period, self._stop = period, threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-watch", daemon=True)

    def __enter__(self) -> "GpuWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        from engines.gpu import _close_nvml

        _close_nvml(self.nvml)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            t = time.time()
            for i, h in enumerate(self.handles):
                try:
                    procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
                    used = self.nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
                except Exception as exc:  # noqa: BLE001 - a sample lost, not the run
                    self.samples.append({"t": t, "gpu": i, "error": repr(exc)})
                    continue
                self.samples.append(
                    {
                        "t": round(t, 2),
                        "gpu": i,
                        "pids": sorted({int(p.pid) for p in procs}),
                        "used_mib": round(used),
                    }
                )


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _family(pid: int) -> list[int]:
    """``pid`` and its descendants (an engine may run its model in a child process)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return sorted(out)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)


class SweepRecorder:
    """The campaign's sweep (``loadgen.sweep.run_sweep``), recording which engine ran it, on which lease,
    with which processes, and when."""

    def __init__(self, label: str):
        self.label, self.calls, self.lock = label, [], threading.Lock()

    def __call__(self, engine, pool_, spec):
        from loadgen.sweep import run_sweep

        env = _environ(engine.pid)
        started = time.time()
        result = run_sweep(engine, pool_, spec)
        with self.lock:
            self.calls.append(
                {
                    "phase": self.label,
                    "engine_args": list(engine.spec.engine.args),
                    "pid": engine.pid,
                    "pids": _family(engine.pid),
                    "lease": env.get("CUDA_VISIBLE_DEVICES"),
                    "device_order": env.get("CUDA_DEVICE_ORDER"),
                    "start": round(started, 2),
                    "end": round(time.time(), 2),
                    "capacity_rps": result.capacity_rps,
                    "capacity_fit_rps": result.capacity_fit_rps,
                    "validity": result.validity,
                }
            )
        return result


# ------------------------------------------------------------------------------------ the round
def _specs(args):
    from specs.config import HardwareSpec

    models = WORK / "models"
    if not (models / MODEL_NAME / "config.json").exists():
        build_model(models / MODEL_NAME, WORK / "tokenizer", args.model_size)
    campaign, spec = definitions(models, args.engine_python)
    spec = spec.model_copy(
        update={
            "hardware": HardwareSpec(gpu_type="H200", gpu_count=1),
            "soak": spec.soak.model_copy(update={"hold_s": 0}),
            "sweep": spec.sweep.model_copy(update={"rates": RATES, "refine_steps": 0}),
            "budget": spec.budget.model_copy(update={"wall_clock_minutes": 120, "gpu_hours": 10}),
        }
    )
    campaign = campaign.model_copy(
        update={
            "max_rounds": 1,
            "subagents": 2,
            "repeats": 1,
            "extra_repeats": 0,
            "production_check_s": 0,
            "profile_seconds": 0,
            "deadline_minutes": 120,
            "gpu_hours": 10,
        }
    )
    return campaign, spec


def _propose(endpoint, diagnosis, state, n, skip):
    from research.state import ProposalRecord

    return [
        ProposalRecord(
            proposal_id=f"parallel-{i}",
            title=f"{flag} {value}",
            technique="gpu_parallel_probe",
            engine_arg_diff={flag: value},
        )
        for i, (flag, value) in enumerate(CANDIDATES.items())
    ][:n]


def _round_wall(state) -> dict:
    rnd = state.rounds[0]
    exps = [state.experiments[e] for e in rnd.experiment_ids if e in state.experiments]
    return {
        "experiments": [
            {
                "title": e.title,
                "verdict": e.verdict,
                "invalid_reason": e.invalid_reason,
                "capacity_mean": e.capacity_mean,
                "started_at": round(e.started_at, 2),
                "finished_at": round(e.finished_at, 2),
                "wall_s": round(e.finished_at - e.started_at, 1),
            }
            for e in exps
        ],
        "round_wall_s": round(max(e.finished_at for e in exps) - min(e.started_at for e in exps), 1) if exps else None,
    }


def run_round(args, out: Path, record: dict) -> None:
    from research.campaign import run_campaign
    from research.state import CampaignState, StateStore

    campaign, spec = _specs(args)
    data = pool()
    record["shortened"] = (
        "two baseline sweeps (the least a floor takes), rates 2-6 req/s without a bisection step, no soak, no profile, two fixed "
        "candidates (this measures the cap and the leases, not the candidates)"
    )
    record["candidates"] = CANDIDATES
    state_root = WORK / "parallel_state"
    with GpuWatch() as watch:
        record["gpus"] = watch.gpus
        phases = {}
        for label, cap in [(p, {"parallel": 2, "serial": 1}[p]) for p in args.phases.split(",")]:
            folder = state_root / label
            if label == "serial":  # the parallel run's baseline, its round not yet run
                done = StateStore(state_root / "parallel", "par").load()
                fresh = CampaignState(
                    campaign="par",
                    campaign_id=done.campaign_id + "-serial",
                    endpoint=done.endpoint,
                    reference=done.reference,
                    working=done.reference,
                    baselines=[done.reference],
                    reference_outputs=done.reference_outputs,
                    startup_s=done.startup_s,
                    sweep_s=done.sweep_s,
                )
                StateStore(folder, "par").save(fresh)
            recorder = SweepRecorder(label)
            began = time.time()
            outcome = run_campaign(
                campaign.model_copy(update={"name": "par", "max_concurrent_gpus": cap}),
                spec,
                state_dir=folder,
                memory=None,
                pool=data,
                sweep_fn=recorder,
                diagnose_fn=lambda *a: {"bottlenecks": []},
                propose_fn=_propose,
                progress=log,
            )
            state = StateStore(folder, "par").load()
            phases[label] = {
                "max_concurrent_gpus": cap,
                "wall_s": round(time.time() - began, 1),
                "end_reason": outcome.end_reason,
                "sweeps": recorder.calls,
                **_round_wall(state),
            }
            log(f"{label}: round of {len(state.rounds[0].experiment_ids)} in {phases[label]['round_wall_s']} s")
            record["phases"] = phases
        record["nvml_samples"] = watch.samples


# ------------------------------------------------------------------------------------ interference
def run_interference(args, out: Path, record: dict) -> None:
    from benchmarks.gpu_power import round_steps
    from engines import start_engine
    from loadgen.steady import warm_until_steady
    from loadgen.sweep import run_sweep
    from loadgen.noise_prior import PRIOR_DF, PRIOR_SD
    from loadgen.sequential import sequential_verdict

    began = time.monotonic()
    _campaign, spec = _specs(args)
    data = pool()

    def pinned(gpu: str):
        env = {**spec.engine.env, "CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        sweep = spec.sweep.model_copy(update={"refine_steps": 0, "warmup_requests": 0})
        return spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env}), "sweep": sweep})

    specs = {"measured": pinned("0"), "neighbour": pinned("1")}
    record["design"] = (
        "one engine on GPU 0 judged against itself: A with the engine on GPU 1 idle, B while it serves "
        f"open-loop load at {args.guess:g} req/s (the capacity guess); rounds A B / B A on the same rates"
    )
    engines = {}
    neighbour_steps: list[dict] = []
    with GpuWatch() as watch:
        record["gpus"] = watch.gpus
        try:
            for name in ("measured", "neighbour"):
                engines[name] = start_engine(specs[name], workdir=out / f"engine_{name}")
                record[f"startup_s_{name}"] = engines[name].startup_s
                log(f"engine {name} healthy in {engines[name].startup_s:.0f} s")
            for name in ("measured", "neighbour"):
                warm = warm_until_steady(engines[name], data, specs[name], args.guess * 0.8, burst_s=6, max_bursts=4)
                record[f"warmup_{name}"] = warm.model_dump()
                log(f"engine {name}: {warm.describe()}")

            def load_neighbour(stop: threading.Event) -> None:
                while not stop.is_set():
                    sweep = run_sweep(
                        engines["neighbour"],
                        data,
                        specs["neighbour"],
                        rates=[args.guess],
                        step_duration_s=10,
                        check_client=False,
                    )
                    for s in sweep.steps:
                        neighbour_steps.append(
                            {
                                "rate": s.target_rate,
                                "achieved": s.achieved_rate,
                                "requests": s.requests,
                                "throughput_rps": s.throughput_rps,
                                "within_sla": s.within_sla,
                                "end": round(time.time(), 2),
                            }
                        )

            sweeps = record["sweeps"] = []

            def measure(side: str, i: int, rates: list[float]):
                stop = threading.Event()
                loader = threading.Thread(target=load_neighbour, args=(stop,), daemon=True) if side == "B" else None
                if loader:
                    loader.start()
                    time.sleep(3)  # the neighbour's queue is under way before the measured steps begin
                t0 = time.time()
                try:
                    sweep = run_sweep(engines["measured"], data, specs["measured"], rates=rates,
                                      repeats_label=f"{side}{i}", check_client=False)  # fmt: skip
                finally:
                    stop.set()
                    if loader:
                        loader.join(timeout=60)
                sweeps.append(
                    {"side": side, "round": i, "start": round(t0, 2), "end": round(time.time(), 2),
                     "steps": [s.model_dump(exclude={"metrics_samples"}) for s in sweep.steps],
                     "validity": sweep.validity, "invalid_reason": sweep.invalid_reason}
                )  # fmt: skip
                log(
                    f"{side} round {i + 1} ({'neighbour loaded' if side == 'B' else 'neighbour idle'}): "
                    + ", ".join(f"{s.target_rate:g}:{'ok' if s.within_sla else 'x'}" for s in sweep.steps)
                )
                return round_steps(sweep)

            stats, _ = sequential_verdict(
                measure,
                args.guess,
                max_rounds=args.max_rounds,
                min_rounds=2,
                prior_var=PRIOR_SD**2,
                prior_df=PRIOR_DF,
                progress=log,
                time_left=lambda: args.window_s - (time.monotonic() - began),
            )
            record["verdict"] = stats.model_dump()
            record["verdict_sentence"] = stats.sentence()
            log(f"interference (B: neighbour loaded, against A: neighbour idle): {stats.sentence()}")
        finally:
            for e in engines.values():
                e.stop()
            record["neighbour_steps"] = neighbour_steps
            record["nvml_samples"] = watch.samples


def run(args) -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwind: stop engines, write
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "part": args.part,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "host_cpus": os.cpu_count(),
        "self_pid": os.getpid(),
    }
    began = time.monotonic()
    try:
        (run_round if args.part == "round" else run_interference)(args, out, record)
    finally:
        record["wall_s"] = round(time.monotonic() - began, 1)
        path = out / f"parallel_{args.part}{args.tag}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
        log(f"wrote {path.name}")


# ------------------------------------------------------------------------------------ report
def placement(record: dict) -> dict:
    """Each engine's lease against the GPU(s) NVML saw its processes on, and how many engines any GPU held.

    NVML lists host PIDs; in a container they can differ from the engine's own, so where no engine PID is
    ever seen the check falls back to counts: while an engine swept, its leased GPU held a process and the
    others held none that was not another running engine's."""
    samples = [s for s in record.get("nvml_samples", []) if "pids" in s]
    engines = []
    for phase in record.get("phases", {}).values():
        for call in phase["sweeps"]:
            during = [s for s in samples if call["start"] <= s["t"] <= call["end"]]
            seen = sorted({s["gpu"] for s in during if set(s["pids"]) & set(call["pids"])})
            engines.append(
                {
                    "phase": call["phase"],
                    "engine_args": " ".join(call["engine_args"]),
                    "lease": call["lease"],
                    "device_order": call["device_order"],
                    "nvml_gpus": seen,
                    "matches_lease": seen == [int(d) for d in (call["lease"] or "").split(",") if d.isdigit()],
                    "start": call["start"],
                    "end": call["end"],
                }
            )
    by_pid = any(e["nvml_gpus"] for e in engines)
    ours = {pid for phase in record.get("phases", {}).values() for call in phase["sweeps"] for pid in call["pids"]}
    # engines only: the benchmark's own process holds a CUDA context too (the model build), on GPU 0
    most = max((len(set(s["pids"]) & ours) for s in samples), default=0) if by_pid else None
    others = sorted({pid for s in samples for pid in s["pids"]} - ours)
    parallel = [e for e in engines if e["phase"] == "parallel"]
    overlapping = [
        (a, b)
        for i, a in enumerate(parallel)
        for b in parallel[i + 1 :]
        if a["start"] < b["end"] and b["start"] < a["end"]
    ]
    return {
        "engines": engines,
        "matched_by": "pid" if by_pid else "none (NVML pids are not the engines': a PID namespace)",
        "every_engine_on_its_lease": by_pid and all(e["matches_lease"] for e in engines),
        "most_engines_on_one_gpu": most,
        "no_gpu_held_two_engines": most is not None and most <= 1,
        "other_gpu_processes": [
            {
                "pid": pid,
                "self": pid == record.get("self_pid"),
                "gpus": sorted({s["gpu"] for s in samples if pid in s["pids"]}),
            }
            for pid in others
        ],
        "engines_measured_at_once": len(overlapping) > 0,
        "leases_of_overlapping_engines_distinct": all(a["lease"] != b["lease"] for a, b in overlapping),
        "samples": len(samples),
    }


def report(args) -> None:
    folder = Path(args.dir)
    doc: dict = {
        "commands": {
            "round": "python benchmarks/gpu_parallel.py run --part round --out $OUT (nvidia-h200-x2, one call)",
            "interference": "python benchmarks/gpu_parallel.py run --part interference --out $OUT (one call)",
            "report": ".venv/bin/python benchmarks/gpu_parallel.py report (the calls' records are in benchmarks/results/gpu_parallel/)",
        }
    }
    doc["rounds"] = {}
    for rnd in sorted(folder.glob("parallel_round*.json")):
        r = json.loads(rnd.read_text())
        phases = r.get("phases", {})
        summary = doc["rounds"][rnd.name] = {
            "gpus": r.get("gpus"),
            "shortened": r.get("shortened"),
            "candidates": r.get("candidates"),
            "placement": placement(r),
            "parallel_round_wall_s": phases.get("parallel", {}).get("round_wall_s"),
            "serial_round_wall_s": phases.get("serial", {}).get("round_wall_s"),
            "experiments": {k: v.get("experiments") for k, v in phases.items()},
            "gpu_minutes": round(r["wall_s"] / 60, 2),
        }
        par, ser = summary["parallel_round_wall_s"], summary["serial_round_wall_s"]
        summary["speedup"] = round(ser / par, 2) if par and ser else None
    inter = folder / "parallel_interference.json"
    if inter.exists():
        from benchmarks.gpu_power import _judge_cut  # the rounds a call cut short, judged as the final look

        r = json.loads(inter.read_text())
        v = r.get("verdict") or _judge_cut(r)
        doc["interference"] = {
            "design": r.get("design"),
            "verdict": v.get("verdict"),
            "sentence": r.get("verdict_sentence") or v.get("sentence"),
            "cut": v.get("cut"),
            "sweeps": [(sw["side"], sw["round"] + 1, sw["validity"]) for sw in r.get("sweeps", [])],
            "effect": v.get("effect"),
            "low": v.get("low"),
            "high": v.get("high"),
            "mde": v.get("mde"),
            "rounds": v.get("rounds"),
            "neighbour_steps": len(r.get("neighbour_steps", [])),
            "neighbour_within_sla": sum(bool(s["within_sla"]) for s in r.get("neighbour_steps", [])),
            "neighbour_throughput_rps": [s["throughput_rps"] for s in r.get("neighbour_steps", [])],
            "gpu_minutes": round(r["wall_s"] / 60, 2),
        }
    (RESULTS / "gpu_parallel.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / "gpu_parallel.md").write_text(markdown(doc))
    print(markdown(doc))


def markdown(doc: dict) -> str:
    md = ["# Two candidates at once on two H200s (`benchmarks/gpu_parallel.py`)", ""]
    md += [f"- `{k}`: `{v}`" for k, v in doc["commands"].items()] + [""]
    for name, r in doc.get("rounds", {}).items():
        pl = r["placement"]
        md += [
            f"## The round: cap 2 against cap 1, from one baseline (`{name}`, {len(r['gpus'] or [])} GPU(s))",
            "",
            f"Shortened: {r['shortened']}.",
            "",
            f"- parallel round: {r['parallel_round_wall_s']} s; serial round: {r['serial_round_wall_s']} s "
            f"(x{r['speedup']})",
            f"- engines matched to GPUs by {pl['matched_by']}; every engine on its lease: "
            f"{pl['every_engine_on_its_lease']}; most engines on one GPU in any sample: "
            f"{pl['most_engines_on_one_gpu']} ({pl['samples']} samples; other GPU processes: {pl['other_gpu_processes']}); two engines measured at once: "
            f"{pl['engines_measured_at_once']}, on distinct leases: {pl['leases_of_overlapping_engines_distinct']}",
            "",
            "| phase | engine args | lease | NVML saw it on | matches |",
            "|---|---|---|---|---|",
        ]
        md += [
            f"| {e['phase']} | `{e['engine_args']}` | {e['lease']} | {e['nvml_gpus']} | {e['matches_lease']} |"
            for e in pl["engines"]
        ]
        md += ["", "| phase | experiment | verdict | capacity | wall s |", "|---|---|---|---|---|"]
        for phase, exps in r["experiments"].items():
            md += [
                f"| {phase} | {e['title']} | {e['verdict']} | {e['capacity_mean']} | {e['wall_s']} |"
                for e in exps or []
            ]
        md.append("")
    i = doc.get("interference")
    if i:
        md += [
            "## Interference",
            "",
            i["design"] + ".",
            "",
            f"- verdict: **{i['sentence']}**" + (f" ({i['cut']})" if i.get("cut") else ""),
            f"- sweeps measured (side, round, validity): {i['sweeps']}",
            f"- the neighbour's load: {i['neighbour_steps']} steps, {i['neighbour_within_sla']} within its SLA",
            f"- GPU minutes: {i['gpu_minutes']}",
            "",
        ]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--part", choices=["round", "interference"], required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--guess", type=float, default=5.0, help="capacity guess, req/s")
    r.add_argument("--max-rounds", type=int, default=4)
    r.add_argument("--window-s", type=float, default=540)
    r.add_argument("--tag", default="")
    r.add_argument("--phases", default="parallel,serial", help="round part: which runs of the round, in order")
    r.add_argument("--engine-python", default=sys.executable)
    r.add_argument("--model-size", default="442m")
    q = sub.add_parser("report")
    q.add_argument("--dir", default=str(RESULTS / "gpu_parallel"))
    args = ap.parse_args(argv)
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
