"""Issue 15: a drafter trained on support_smollm's own traffic, judged offline and as vLLM serves it.

    nice -n 19 .venv/bin/python benchmarks/spec_decode.py [--examples 120 --heldout 20 --steps 200 ...]

Steps (each recorded in benchmarks/results/spec_decode.json, summary in spec_decode.txt):
1. on-policy data: SmolLM2-135M-Instruct's replies to the first ``--examples`` pool requests, from the
   endpoint's own vLLM engine at the pool's sampling settings (greedy), ``--max-tokens`` long
   (research.drafter.collect; an existing --data file is reused and said so);
2. training: the target's first ``--layers`` layers + embeddings/head, next-token loss on the replies;
3. offline acceptance per position on the last ``--heldout`` replies, trained and untrained draft;
4. served, untimed: the declared engine with and without the drafter; the harness's lossless
   correctness check (research.correctness, reference from the engine without the drafter) and
   vLLM's spec_decode counters over the held-out requests sent one at a time;
5. timed (only when the 1-minute load average is below 0.5, since ITL and capacity measured on a
   busy host are meaningless): research.harness baseline sweeps -> noise floor, then the drafter
   through research.drafter.run_drafter_candidate; ITL p50 at the lowest rate, capacity, verdict.
The drafter is recorded in the research memory (memory_db drafters).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from specs import paths  # noqa: E402
from specs.models import ensure_model  # noqa: E402
from autoresearch.workflows import load_pool  # noqa: E402
from dagster_project.lib import load_definitions  # noqa: E402
from research import drafter  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def served_untimed(spec, draft_dir: Path, k: int, held_rows, max_tokens: int | None, workdir: Path) -> dict:
    """Correctness (the harness's lossless check) and vLLM's acceptance counters; no timing."""
    from engines import start_engine
    from research.correctness import capture_reference, check_candidate

    out: dict = {}
    base = start_engine(spec, workdir=workdir / "baseline")
    try:
        reference = capture_reference(base.base_url, base.served_model, spec.engine.args, adapter=base.adapter)
        out["reference_evidence"] = reference.evidence
    finally:
        base.stop()
    args = drafter.candidate_args(spec.engine.args, draft_dir, k, spec.engine.kind)
    cand = start_engine(spec, args_override=args, workdir=workdir / "drafter")
    try:
        report = check_candidate(cand.base_url, cand.served_model, reference, args, lossy=False, adapter=cand.adapter)
        out["correctness"] = {
            "passed": report.passed,
            "label": report.label,
            "summary": report.summary(),
            "greedy_identical": report.greedy_identical,
            "greedy_total": report.greedy_total,
        }
        served = drafter.ServedAcceptance()
        before = drafter.read_metrics(cand.base_url, spec.engine.kind)
        started = time.monotonic()
        for row in held_rows.iter_rows(named=True):
            body = drafter._body_for(row["body"], cand.served_model, max_tokens)
            body.pop("return_token_ids", None)
            r = httpx.post(cand.base_url + "/v1/chat/completions", json=body, timeout=600)
            r.raise_for_status()
        served.add(before, drafter.read_metrics(cand.base_url, spec.engine.kind))
        out["acceptance_served"] = served.model_dump() | {
            "acceptance_length": served.acceptance_length,
            "requests": held_rows.height,
            "wall_s_host_busy": round(time.monotonic() - started, 1),
        }
    finally:
        cand.stop()
    return out


def timed(spec, pool, draft_dir: Path, k: int, repeats: int, workdir: Path) -> dict:
    """Baseline noise floor and the drafter candidate through the one harness (quiet host only)."""
    from loadgen.noise import noise_floor
    from research.harness import run_candidate

    def figures(result) -> dict:
        lows = [min(s.steps, key=lambda st: st.target_rate) for s in result.sweeps if s.steps]
        return {
            "capacity_rps": result.capacities,
            "itl_p50_ms_low_load": [st.itl_ms.p50 for st in lows],
            "low_rate": [st.target_rate for st in lows],
            "verdict": result.verdict,
            "invalid_reason": result.invalid_reason,
        }

    base = run_candidate(spec, spec.engine.args, pool, None, repeats, capture=True, workdir=workdir / "timed_base")
    if base.verdict == "invalid":
        return {"baseline": figures(base), "note": "baseline invalid: no verdict"}
    noise = noise_floor(base.sweeps)
    cand, served = drafter.run_drafter_candidate(
        spec,
        spec.engine.args,
        draft_dir,
        k,
        pool,
        noise,
        repeats,
        reference=base.reference,
        workdir=workdir / "timed_drafter",
    )
    return {
        "baseline": figures(base),
        "drafter": figures(cand),
        "verdict": cand.verdict,
        "confirmed": cand.confirmed,
        "correctness_label": cand.correctness.label if cand.correctness else None,
        "evidence": cand.comparison.evidence if cand.comparison else None,
        "acceptance_served_under_load": served.model_dump() | {"acceptance_length": served.acceptance_length},
    }


#: From benchmarks/results/spec_decode_feasibility.txt (same host, same engine flags, 4 greedy chat requests):
#: an untrained 4-layer draft (acceptance ~1%, so one token per round) took 40.2 s for 200 tokens, no
#: speculation 13.5 s for 175 tokens. One round = k=3 draft steps + one verification: 3c + v = ratio of
#: the times per token. With v = 1 (verification as cheap as a plain step) this gives c, the cost of a
#: draft step in target steps on this CPU (launch and scheduling overhead, not bytes, dominate it).
FEASIBILITY = {"spec_s": 40.2, "spec_tokens": 200, "plain_s": 13.5, "plain_tokens": 175, "k": 3}


def payoff(per_position: list[float], draft_cost: float, verify_cost: float = 1.0) -> list[dict]:
    """Expected speed-up per k (tokens per round / cost of a round in target steps), from cumulative
    acceptance per position: round yield = 1 + sum of the first k positions."""
    out = []
    for k in range(1, len(per_position) + 1):
        tokens = 1.0 + sum(per_position[:k])
        cost = k * draft_cost + verify_cost
        out.append(
            {
                "k": k,
                "acceptance_length": round(tokens, 3),
                "round_cost_steps": round(cost, 3),
                "speedup": round(tokens / cost, 3),
            }
        )
    return out


def derived(record: dict) -> dict:
    """Arithmetic on measured figures (labelled derived in the record): where the drafter would pay."""
    f = FEASIBILITY
    ratio = (f["spec_s"] / f["spec_tokens"]) / (f["plain_s"] / f["plain_tokens"])
    c_cpu = (ratio - 1.0) / f["k"]
    per_pos = record["offline"]["trained"]["accepted_per_position"]
    bytes_c = record["break_even"]["draft_cost_ratio_bytes"]
    return {
        "note": "derived from measured figures, not measured timing: speed-up = acceptance length / "
        "(k * draft step cost + verification cost), verification cost 1 (memory-bound decode)",
        "cpu_draft_step_cost_from_feasibility": round(c_cpu, 3),
        "cpu_break_even_acceptance_length_k3": round(3 * c_cpu + 1.0, 3),
        "offline_payoff_on_this_cpu": payoff(per_pos, c_cpu),
        "offline_payoff_if_draft_cost_were_its_bytes": payoff(per_pos, bytes_c),
    }


def summary(record: dict) -> str:
    """The readable summary (spec_decode.txt) of a record: every figure in it comes from the record."""
    d, t, off = record["data"], record["training"], record["offline"]
    pos = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = [
        f"# Issue 15: a drafter trained on {record['endpoint']}'s own traffic ({record['started_at']})",
        "# command: nice -n 19 .venv/bin/python benchmarks/spec_decode.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in record["settings"].items()
            if k in ("examples", "heldout", "max_tokens", "layers", "steps", "lr", "k")
        ),
        f"# host: {record['host']['cpus']} CPUs, shared; 1-minute load average {record['load1_at_start']:.1f} at "
        f"start, {record['load1_before_timing']:.1f} before the timing part",
    ]
    if record.get("engine_env"):
        lines += [f"# engine environment (every engine of this run): {record['engine_env']}"]
    lines += [
        "",
        f"on-policy data: {d['examples']} replies of the target to pool requests ({d['train_examples']} train, "
        f"{d['heldout_examples']} held out), {d['train_reply_tokens']} supervised reply tokens, prompts "
        f"{d['prompt_tokens_mean']:.0f} tokens on average; generation "
        + (f"{d['generation_s']:.0f} s" if d.get("generation_s") else f"time: {d.get('note')}"),
        f"training: first {t['layers']} layers of the target + embeddings/head ({t['params_m']} M parameters), "
        f"{t['steps']} steps, loss {t['loss_first']:.2f} -> {t['loss_last']:.2f}, {t['train_s']:.0f} s on one "
        "thread of a busy host",
        "",
        f"offline acceptance, k={off['trained']['k']}, {off['trained']['examples']} held-out replies "
        f"({off['trained']['drafts']} drafting rounds):",
        f"  trained   : acceptance length {off['trained']['acceptance_length']:.2f}, per position "
        f"{pos(off['trained']['accepted_per_position'])}, top-1 agreement {off['trained']['top1_agreement']:.2f}",
        f"  untrained : acceptance length {off['untrained']['acceptance_length']:.2f}, per position "
        f"{pos(off['untrained']['accepted_per_position'])}, top-1 agreement {off['untrained']['top1_agreement']:.2f}",
        f"break-even acceptance length if decode were memory-bound: {record['break_even']['acceptance_length_if_memory_bound']:.2f} "
        f"(draft reads {record['break_even']['draft_cost_ratio_bytes']:.0%} of the target's bytes per step)",
    ]
    served = record.get("served")
    if served:
        a, c = served.get("acceptance_served") or {}, served.get("correctness") or {}
        lines += [
            "",
            "served by vLLM 0.32 CPU (declared engine arguments + the drafter), untimed:",
            f"  acceptance from /metrics over {a.get('requests')} held-out requests: length "
            + (f"{a['acceptance_length']:.2f}" if a.get("acceptance_length") else "n/a")
            + f", per position {pos(a.get('accepted_per_position') or [])} ({a.get('drafts', 0):.0f} drafts)",
            f"  correctness ({c.get('label')}): {'passed' if c.get('passed') else 'FAILED'}: {c.get('summary')}",
        ]
    der = record.get("derived")
    if der:
        fmt = lambda rows: "; ".join(
            f"k={r['k']}: {r['acceptance_length']:.2f} tokens / {r['round_cost_steps']:.2f} "  # noqa: E731
            f"steps = {r['speedup']:.2f}x"
            for r in rows
        )
        lines += [
            "",
            "where it would pay (derived: arithmetic on the measured figures above, not a timing):",
            f"  a draft step on this CPU costs ~{der['cpu_draft_step_cost_from_feasibility']:.2f} target steps "
            "(from spec_decode_feasibility.txt: 40.2 s / 200 tokens with an untrained draft vs 13.5 s / 175 "
            f"without), so k=3 breaks even at acceptance length {der['cpu_break_even_acceptance_length_k3']:.2f}",
            "  offline acceptance -> expected speed-up on this CPU: " + fmt(der["offline_payoff_on_this_cpu"]),
            "  ... where a draft step cost only its share of the bytes (memory-bound decode, e.g. a GPU at low "
            "batch): " + fmt(der["offline_payoff_if_draft_cost_were_its_bytes"]),
        ]
    for note in record.get("notes", []):
        lines += ["", "note: " + note]
    timed_rec = record.get("timed")
    if timed_rec:
        lines += ["", "timed (harness):", json.dumps(timed_rec, indent=1)]
    else:
        lines += [
            "",
            "NOT MEASURED: ITL p50 at low load, capacity within the SLA (with and without the drafter) "
            "and the harness verdict.",
            "  " + record.get("timing_not_measured", ""),
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", default="support_smollm")
    p.add_argument("--examples", type=int, default=120)
    p.add_argument("--heldout", type=int, default=20)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--data", help="reuse on-policy examples from this JSONL (research.drafter.OnPolicyExample)")
    p.add_argument("--data-note", default="", help="how --data was produced (kept in the record)")
    p.add_argument("--skip-served", action="store_true")
    p.add_argument(
        "--engine-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="added to the endpoint's engine.env for every engine this run starts (kept in the record), "
        "e.g. PYTHONPATH=engines/patches/vllm_issue_55005 for vLLM issue 55005's runtime fix",
    )
    p.add_argument("--out", default=str(RESULTS / "spec_decode.json"))
    p.add_argument("--summarize", action="store_true", help="only rewrite --out's derived figures and summary")
    p.add_argument("--note", action="append", default=[], help="with --summarize: add a note (a later finding)")
    a = p.parse_args()
    if a.summarize:
        record = json.loads(Path(a.out).read_text())
        record["derived"] = derived(record)
        record["notes"] = record.get("notes", []) + [n for n in a.note if n not in record.get("notes", [])]
        Path(a.out).write_text(json.dumps(record, indent=1) + "\n")
        Path(a.out).with_suffix(".txt").write_text(summary(record))
        print(summary(record))
        return 0
    torch_threads = os.environ.get("OMP_NUM_THREADS", "1")
    spec = load_definitions(paths.definitions_dir()).endpoint(a.endpoint)
    if a.engine_env:
        extra = dict(kv.split("=", 1) for kv in a.engine_env)
        extra = {k: str(Path(v).resolve()) if k == "PYTHONPATH" else v for k, v in extra.items()}
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"env": {**spec.engine.env, **extra}})})
    pool = load_pool(spec)
    target = ensure_model(spec.model.path)
    workdir = paths.home() / "drafters" / spec.name
    workdir.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "issue": 15,
        "endpoint": spec.name,
        "model": str(target),
        "engine_args": spec.engine.args,
        "engine_env": spec.engine.env,
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch_threads": torch_threads},
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load1_at_start": load1(),
        "settings": vars(a),
    }

    data_path = workdir / "onpolicy.jsonl"
    if a.data:
        if Path(a.data).resolve() != data_path.resolve():
            shutil.copy(a.data, data_path)
        examples = drafter.read_examples(data_path)[: a.examples]
        record["data"] = {"source": a.data, "generation_s": None, "note": a.data_note or "reused file"}
    else:
        examples, data_s = drafter.collect(spec, pool, data_path, examples=a.examples, max_tokens=a.max_tokens)
        record["data"] = {"source": "generated", "generation_s": round(data_s, 1)}
    train_set, held = drafter.split(examples, a.heldout)
    record["data"] |= {
        "examples": len(examples),
        "train_examples": len(train_set),
        "heldout_examples": len(held),
        "train_reply_tokens": sum(len(e.output_ids) for e in train_set),
        "heldout_reply_tokens": sum(len(e.output_ids) for e in held),
        "prompt_tokens_mean": round(sum(len(e.prompt_ids) for e in examples) / len(examples), 1),
        "signature": drafter.data_signature(examples),
    }
    print(json.dumps(record["data"]), flush=True)

    draft = workdir / f"draft-{record['data']['signature']}-L{a.layers}-s{a.steps}"
    trained = drafter.train(target, train_set, draft, layers=a.layers, steps=a.steps, lr=a.lr)
    record["training"] = trained.model_dump() | {"load1_after": load1()}
    offline = drafter.evaluate(draft, held, workdir, k=a.k)
    control = drafter.truncated_copy(target, workdir / f"untrained-L{a.layers}", a.layers)
    untrained = drafter.evaluate(control, held, workdir, k=a.k)
    record["offline"] = {"trained": offline.model_dump(), "untrained": untrained.model_dump()}
    cost = drafter.draft_cost_ratio(target, draft)
    record["break_even"] = {
        "draft_cost_ratio_bytes": round(cost, 3),
        "acceptance_length_if_memory_bound": round(drafter.break_even_acceptance(a.k, cost), 3),
    }
    print(json.dumps(record["offline"]), flush=True)

    held_rows = pool.slice(len(examples) - len(held), len(held))
    if not a.skip_served:
        record["served"] = served_untimed(spec, draft, a.k, held_rows, a.max_tokens, workdir / "served")
        print(json.dumps(record["served"]), flush=True)

    deadline = time.monotonic() + 600  # this run's own engines just stopped: let the load average settle
    while load1() >= 0.5 and time.monotonic() < deadline:
        time.sleep(15)
    record["load1_before_timing"] = load1()
    if record["load1_before_timing"] < 0.5:
        record["timed"] = timed(spec, pool, draft, a.k, a.repeats, workdir / "timed")
    else:
        record["timed"] = None
        record["timing_not_measured"] = (
            f"the host's 1-minute load average was {record['load1_before_timing']:.2f} "
            "(other test suites and campaigns running): ITL and capacity measured now "
            "would be meaningless, so neither was measured, with or without the drafter"
        )

    from memory_db import DrafterRecord, MemoryStore
    from research.drift import model_fingerprint

    served = record.get("served") or {}
    timed_rec = record["timed"] or {}
    rec = DrafterRecord(
        endpoint=spec.name,
        model_signature=model_fingerprint(spec),
        data_signature=record["data"]["signature"],
        path=str(draft),
        num_speculative_tokens=a.k,
        layers=a.layers,
        steps=a.steps,
        train_examples=trained.train_examples,
        train_tokens=trained.train_tokens,
        heldout_examples=len(held),
        train_s=trained.train_s,
        train={
            "lr": a.lr,
            "loss_first": trained.loss_first,
            "loss_last": trained.loss_last,
            "max_tokens": a.max_tokens,
            "data": record["data"],
        },
        acceptance_offline=offline.model_dump(),
        acceptance_served=served.get("acceptance_served") or {},
        verdict=timed_rec.get("verdict"),
        correctness=(served.get("correctness") or {}).get("label"),
    )
    MemoryStore(paths.memory_db_path()).record_drafter(rec)
    record["drafter_id"] = rec.drafter_id
    record["derived"] = derived(record)
    record["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    Path(a.out).write_text(json.dumps(record, indent=1) + "\n")
    Path(a.out).with_suffix(".txt").write_text(summary(record))
    print(summary(record))
    print(f"wrote {a.out} and its summary {Path(a.out).with_suffix('.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
