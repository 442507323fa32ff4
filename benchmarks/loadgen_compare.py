"""Load generators side by side against one nginx null endpoint: ours, vLLM's client, guidellm, aiperf.

For each tool: the highest constant rate it sustains for ``--duration`` seconds with the
achieved send rate within 2% of target, p99 send lag under 1 ms and no errors. Setup (the fair
one from ENVIRONMENT.md): nginx, one worker pinned to core 0, fixed SSE bodies (16 one-word
chunks, a usage chunk, [DONE]); every client pinned to core 1 with ``taskset -c 1`` (their
helper processes inherit it); streaming chat, 32 prompt tokens, 16 output tokens.

Send lag per tool (the nearest equivalent each offers):
* ours: measured against the true schedule (actual - scheduled send time, monotonic clock).
* guidellm: its own ``request_start - targeted_start`` per request.
* vLLM's client and aiperf record send times but not scheduled times: the schedule is
  reconstructed as ``c + i/rate`` with ``c`` chosen so the least-late request has lag 0
  (favourable to the tool: a constant offset is never counted). Shown for ours too ("est").
Achieved rate = requests sent / max(duration, span of send times + one gap).

Tools that are not installed are skipped, saying so. Run:
    .venv/bin/python benchmarks/loadgen_compare.py [--duration 15] [--tools ours,vllm,aiperf,guidellm]
Results go to benchmarks/results/loadgen_compare.txt (and .json).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from loadgen import nullserver  # noqa: E402

TOKENIZER = REPO / ".autoresearch" / "models" / "tiny-random"
ENGINE_PY = REPO / ".venv-engine" / "bin" / "python"
AIPERF = Path(os.environ.get("AIPERF_BIN", "/tmp/venv-aiperf/bin/aiperf"))
GUIDELLM = Path(os.environ.get("GUIDELLM_BIN", "/tmp/venv-guidellm/bin/guidellm"))
LAG_P99_MS = 1.0
RATE_TOL = 0.02
START = {"ours": 2000.0, "vllm": 800.0, "aiperf": 200.0, "guidellm": 100.0}

VLLM_WRAPPER = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from argparse import ArgumentParser as FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def estimated_lags_ms(send_times: list[float], rate: float) -> np.ndarray:
    """Lag against the reconstructed constant schedule c + i/rate (c: least-late request has lag 0)."""
    s = np.asarray(send_times, dtype=np.float64)
    raw = s - np.arange(len(s)) / rate
    return (raw - raw.min()) * 1000.0


def verdict(
    rate: float,
    duration: float,
    sends: list[float],
    errors: int,
    expected: int,
    native_lags_ms: np.ndarray | None = None,
) -> dict:
    est = estimated_lags_ms(sends, rate) if sends else np.zeros(0)
    span = (max(sends) - min(sends) + 1.0 / rate) if sends else 0.0
    achieved = len(sends) / max(duration, span) if sends else 0.0
    lags = native_lags_ms if native_lags_ms is not None else est
    p99 = float(np.percentile(lags, 99)) if len(lags) else math.inf
    short = len(sends) < expected * (1 - RATE_TOL)
    ok = achieved >= rate * (1 - RATE_TOL) and p99 < LAG_P99_MS and errors == 0 and not short
    return {
        "rate": rate,
        "achieved": round(achieved, 1),
        "sent": len(sends),
        "expected": expected,
        "errors": errors,
        "lag_p99_ms": round(p99, 3),
        "lag_p99_est_ms": round(float(np.percentile(est, 99)), 3) if len(est) else None,
        "lag_basis": "native" if native_lags_ms is not None else "estimated",
        "sustained": bool(ok),
    }


def pinned(cpu: int | None, argv: list[str]) -> list[str]:
    return (["taskset", "-c", str(cpu)] + argv) if cpu is not None else argv


def trial_ours(url: str, rate: float, duration: float, cpu: int | None, workdir: Path) -> dict:
    out = subprocess.run(
        pinned(cpu, [sys.executable, __file__, "--ours-trial", url, str(rate), str(duration)]),
        capture_output=True,
        text=True,
        timeout=duration * 4 + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return verdict(
        rate, duration, data["sends"], data["errors"], int(round(rate * duration)), np.asarray(data["lags_ms"])
    )


def ours_trial_main(url: str, rate: float, duration: float) -> None:
    from loadgen import arrivals
    from loadgen.calibrate import BODY
    from loadgen.runner import LagBounds, run_open_loop

    out = run_open_loop(
        url,
        nullserver.NULL_MODEL,
        [BODY],
        arrivals.constant(rate, duration),
        duration_s=duration,
        lag_bounds=LagBounds(LAG_P99_MS, 1 - RATE_TOL),
    )
    recs = sorted(out.records, key=lambda r: r.scheduled_s)
    sends = [r.sent_s for r in recs if r.sent_s is not None]
    lags = [(r.sent_s - r.scheduled_s) * 1000 for r in recs if r.sent_s is not None]
    print(
        json.dumps(
            {
                "sends": sends,
                "lags_ms": lags,
                "errors": sum(1 for r in recs if not r.ok),
                "validity": out.validity,
                "reason": out.reason,
                "cpu": out.client_cpu_util,
            }
        )
    )


def trial_vllm(url: str, rate: float, duration: float, cpu: int | None, workdir: Path) -> dict:
    n = int(round(rate * duration))
    result_dir = workdir / f"vllm-{rate:g}"
    result_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(ENGINE_PY),
        "-c",
        VLLM_WRAPPER,
        "--backend",
        "openai-chat",
        "--base-url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        nullserver.NULL_MODEL,
        "--tokenizer",
        str(TOKENIZER),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "16",
        "--ignore-eos",
        "--num-prompts",
        str(n),
        "--request-rate",
        str(rate),
        "--burstiness",
        "inf",
        "--seed",
        "0",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        "r.json",
        "--disable-tqdm",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(pinned(cpu, argv), capture_output=True, text=True, env=env, timeout=duration * 6 + 180)
    path = result_dir / "r.json"
    if not path.exists():
        raise RuntimeError(f"vLLM client wrote no result (rc {out.returncode}): {out.stderr[-1500:]}")
    data = json.loads(path.read_text())
    sends = [s for s in data["start_times"]]
    errors = sum(1 for e in data.get("errors", []) if e)
    return verdict(rate, duration, sends, errors, n)


def trial_aiperf(url: str, rate: float, duration: float, cpu: int | None, workdir: Path) -> dict:
    n = int(round(rate * duration))
    art = workdir / f"aiperf-{rate:g}"
    argv = [
        str(AIPERF),
        "profile",
        "--model",
        nullserver.NULL_MODEL,
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--request-rate",
        str(rate),
        "--arrival-pattern",
        "constant",
        "--request-count",
        str(n),
        "--tokenizer",
        str(TOKENIZER),
        "--synthetic-input-tokens-mean",
        "32",
        "--output-tokens-mean",
        "16",
        "--use-server-token-count",
        "--artifact-dir",
        str(art),
        "--ui-type",
        "none",
    ]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    out = subprocess.run(pinned(cpu, argv), capture_output=True, text=True, env=env, timeout=duration * 8 + 240)
    path = art / "profile_export.jsonl"
    if not path.exists():
        raise RuntimeError(f"aiperf wrote no records (rc {out.returncode}): {out.stdout[-1500:]}{out.stderr[-1500:]}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["metadata"].get("benchmark_phase", "profiling") == "profiling"]
    rows.sort(key=lambda r: r["metadata"]["request_start_ns"])
    sends = [r["metadata"]["request_start_ns"] / 1e9 for r in rows]
    errors = sum(1 for r in rows if r.get("error"))
    return verdict(rate, duration, sends, errors, n)


def trial_guidellm(url: str, rate: float, duration: float, cpu: int | None, workdir: Path) -> dict:
    path = workdir / f"guidellm-{rate:g}.json"
    argv = [
        str(GUIDELLM),
        "run",
        "--backend",
        f"kind=openai_http,target={url}",
        "--profile",
        f"kind=constant,rate={rate:g}",
        "--constraint",
        f"kind=max_duration,seconds={duration:g}",
        "--tokenizer",
        f"kind=huggingface_auto,model={TOKENIZER}",
        "--data",
        "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
        "--output",
        f"kind=json,path={path}",
        "--disable-console-interactive",
    ]
    out = subprocess.run(pinned(cpu, argv), capture_output=True, text=True, timeout=duration * 8 + 300)
    if not path.exists():
        raise RuntimeError(f"guidellm wrote no result (rc {out.returncode}): {out.stdout[-1500:]}{out.stderr[-800:]}")
    bench = json.loads(path.read_text())["benchmarks"][0]
    reqs = bench["requests"]
    done = reqs.get("successful", []) + reqs.get("errored", []) + reqs.get("incomplete", [])
    timings = [r["info"]["timings"] for r in done if r["info"]["timings"].get("request_start")]
    timings.sort(key=lambda t: t["targeted_start"])
    sends = [t["request_start"] for t in timings]
    native = np.array([(t["request_start"] - t["targeted_start"]) * 1000 for t in timings])
    expected = int(round(rate * duration))
    return verdict(rate, duration, sends, len(reqs.get("errored", [])), expected, native)


TOOLS = {"ours": trial_ours, "vllm": trial_vllm, "aiperf": trial_aiperf, "guidellm": trial_guidellm}


def available(tool: str) -> str | None:
    """None when the tool can run, else why not."""
    if tool == "vllm" and not ENGINE_PY.exists():
        return f"vLLM not installed ({ENGINE_PY} missing)"
    if tool == "aiperf" and not AIPERF.exists():
        return f"aiperf not installed ({AIPERF}; pip install aiperf==0.13.0 in a throwaway venv, set AIPERF_BIN)"
    if tool == "guidellm" and not GUIDELLM.exists():
        return f"guidellm not installed ({GUIDELLM}; pip install guidellm==0.8.1 in a throwaway venv, set GUIDELLM_BIN)"
    if tool != "ours" and not TOKENIZER.exists():
        return f"no local tokenizer at {TOKENIZER} (python -m specs.models builds it)"
    return None


def wait_quiet(max_load: float | None, max_wait_s: float, log) -> None:
    """Wait until the 1-minute load average is below ``max_load`` (others' work distorts send lag)."""
    if max_load is None:
        return
    deadline = time.time() + max_wait_s
    while os.getloadavg()[0] > max_load and time.time() < deadline:
        time.sleep(5)
    if os.getloadavg()[0] > max_load:
        log(f"  (machine still busy: load average {os.getloadavg()[0]:.2f} > {max_load:g})")


def search(
    tool: str,
    url: str,
    duration: float,
    cpu: int | None,
    workdir: Path,
    bisect: int,
    log,
    max_load: float | None = None,
    max_wait_s: float = 0.0,
) -> dict:
    """Double from the tool's start rate until a rate is not sustained, then bisect."""
    trials: list[dict] = []

    def run(rate: float) -> bool:
        wait_quiet(max_load, max_wait_s, log)
        load = os.getloadavg()[0]
        try:
            result = TOOLS[tool](url, rate, duration, cpu, workdir)
        except Exception as exc:  # noqa: BLE001 - a failing tool run is a finding, not a crash of the benchmark
            result = {"rate": rate, "sustained": False, "error": str(exc)[-500:]}
        result["load_before"] = round(load, 2)
        trials.append(result)
        log(f"  {tool} @ {rate:g}/s: {json.dumps(result)}")
        return result["sustained"]

    lo, hi, rate = 0.0, math.inf, START[tool]
    while rate < 200000:
        if run(rate):
            lo, rate = rate, rate * 2
        else:
            hi = rate
            break
    if lo == 0.0:
        rate = hi / 2
        while rate >= 10 and lo == 0.0:
            if run(rate):
                lo = rate
            else:
                hi, rate = rate, rate / 2
    for _ in range(bisect):
        mid = float(round(math.sqrt(lo * hi), -1)) if lo > 0 and hi < math.inf else None
        if mid is None or not lo < mid < hi:
            break
        if run(mid):
            lo = mid
        else:
            hi = mid
    return {"tool": tool, "max_sustained": lo, "first_failed": None if hi == math.inf else hi, "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--tools", default="ours,vllm,aiperf,guidellm")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--bisect", type=int, default=2)
    parser.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each trial wait until the 1-minute load average is below this",
    )
    parser.add_argument("--max-wait", type=float, default=600.0, help="longest wait for --max-load (s)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "loadgen_compare.txt"))
    parser.add_argument("--ours-trial", nargs=3, metavar=("URL", "RATE", "DURATION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ours_trial:
        ours_trial_main(args.ours_trial[0], float(args.ours_trial[1]), float(args.ours_trial[2]))
        return
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        lines.append(msg)

    results, skipped = [], {}
    workdir = Path(tempfile.mkdtemp(prefix="loadgen-compare-"))
    load = os.getloadavg()
    with nullserver.start(cpu=args.server_cpu) as server:
        log(
            f"null endpoint {server.url} (nginx pid {server.pid}, core {args.server_cpu}); clients on core "
            f"{args.client_cpu}; {args.duration:g}s per rate; load average before: {load[0]:.2f}"
        )
        for tool in [t.strip() for t in args.tools.split(",") if t.strip()]:
            why = available(tool)
            if why:
                skipped[tool] = why
                log(f"SKIP {tool}: {why}")
                continue
            started = time.time()
            res = search(
                tool,
                server.url,
                args.duration,
                args.client_cpu,
                workdir,
                args.bisect,
                log,
                args.max_load,
                args.max_wait,
            )
            res["wall_s"] = round(time.time() - started, 1)
            results.append(res)
            log(f"{tool}: highest sustained {res['max_sustained']:g} req/s (first failed {res['first_failed']})")
    shutil.rmtree(workdir, ignore_errors=True)
    best_other = max((r["max_sustained"] for r in results if r["tool"] != "ours"), default=None)
    ours = next((r["max_sustained"] for r in results if r["tool"] == "ours"), None)
    table = [
        "",
        "| tool | highest rate sustained (req/s) | first rate not sustained | lag basis |",
        "|---|---|---|---|",
    ]
    for r in results:
        basis = r["trials"][0].get("lag_basis", "-") if r["trials"] else "-"
        table.append(
            f"| {r['tool']} | {r['max_sustained']:g} | {r['first_failed'] if r['first_failed'] else '-'} | {basis} |"
        )
    for tool, why in skipped.items():
        table.append(f"| {tool} | skipped | {why} | |")
    if ours is not None and best_other:
        table.append(f"\nours / best other = {ours / best_other:.2f}x")
    table.append(f"load average after: {os.getloadavg()[0]:.2f} (other work on this machine disturbs the numbers)")
    for line in table:
        log(line)
    out_path.write_text(__doc__ + "\n" + "\n".join(lines) + "\n")
    out_path.with_suffix(".json").write_text(
        json.dumps({"results": results, "skipped": skipped, "duration_s": args.duration}, indent=2)
    )


if __name__ == "__main__":
    main()
