"""Controlled probe of vLLM's CPU speculative path: one server, one request at a time, temperature 0,
per-request deltas of the vllm:spec_decode_* counters, and the greedy text for a lossless check.

    nice -n 19 python3 benchmarks/spec_decode/cpu_path_probe.py NAME [SPECCONFIG_JSON|''] [extra vllm args...]

Env: PORT (default 8711), MAXTOK (default 48), NPROMPTS (default 3), LOGDIR (default /tmp/specprobe),
MSGS (a JSON file holding a list of chat message lists, e.g. the pool's system+user messages without
tools/response_format; default: four short one-line user prompts), TEMP (default 0), TOP_P (default 1),
SEED (optional per-request seed). PYTHONPATH=engines/patches/vllm_issue_55005 loads the runtime
expand_kernel fix into the server and its engine-core process.
Prints one JSON line per request and a summary line; the server log goes to LOGDIR/NAME.log.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

ROOT = "/work/main"
MODEL = ROOT + "/.autoresearch/models/smollm2-135m-instruct"
PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Explain what a hash table is.",
    "Write a haiku about the sea.",
    "List three prime numbers and explain why they are prime.",
]

name = sys.argv[1]
spec = sys.argv[2] if len(sys.argv) > 2 else ""
extra = sys.argv[3:]
port = int(os.environ.get("PORT", "8711"))
maxtok = int(os.environ.get("MAXTOK", "48"))
nprompts = int(os.environ.get("NPROMPTS", "3"))
logdir = os.environ.get("LOGDIR", "/tmp/specprobe")
os.makedirs(logdir, exist_ok=True)
base = f"http://127.0.0.1:{port}"

env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="0", OMP_NUM_THREADS="1")
cmd = [
    "nice",
    "-n",
    "19",
    ROOT + "/.venv-engine/bin/python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    MODEL,
    "--served-model-name",
    "m",
    "--port",
    str(port),
    "--host",
    "127.0.0.1",
    "--max-model-len",
    "2048",
    *extra,
]
if spec:
    cmd += ["--speculative-config", spec]
log = open(f"{logdir}/{name}.log", "w")
print("CMD:", " ".join(cmd if not spec else cmd[:-1] + [repr(spec)]), flush=True)
proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def get(path, timeout=5):
    return urllib.request.urlopen(base + path, timeout=timeout).read().decode()


def metrics():
    out = {}
    for line in get("/metrics").splitlines():
        if line.startswith("vllm:spec_decode") and "_created" not in line:
            m = re.match(r"(vllm:spec_decode_\w+)(\{[^}]*\})?\s+([0-9.eE+-]+)", line)
            if not m:
                continue
            key = m.group(1)
            pos = re.search(r'position="(\d+)"', m.group(2) or "")
            if pos:
                key += f"[{pos.group(1)}]"
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


try:
    t0 = time.time()
    up = False
    while time.time() - t0 < 420:
        if proc.poll() is not None:
            break
        try:
            get("/health", 2)
            up = True
            break
        except Exception:
            time.sleep(2)
    if not up:
        print(f"{name}: DID NOT START (rc={proc.poll()})")
        txt = open(f"{logdir}/{name}.log").read().splitlines()
        for ln in [x for x in txt if re.search(r"error|Error|not supported|NotImplemented|raise", x)][-12:]:
            print("  ", ln[:300])
        sys.exit(1)
    print(f"{name}: up after {time.time() - t0:.0f}s", flush=True)
    tot = {}
    convs = (
        [[{"role": "user", "content": p}] for p in PROMPTS]
        if not os.environ.get("MSGS")
        else json.load(open(os.environ["MSGS"]))
    )
    for msgs in convs[:nprompts]:
        p = msgs[-1]["content"]
        before = metrics()
        body = {
            "model": "m",
            "messages": msgs,
            "max_tokens": maxtok,
            "temperature": float(os.environ.get("TEMP", "0")),
            "top_p": float(os.environ.get("TOP_P", "1")),
        }
        if os.environ.get("SEED"):
            body["seed"] = int(os.environ["SEED"])
        req = urllib.request.Request(
            base + "/v1/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        t = time.time()
        d = json.loads(urllib.request.urlopen(req, timeout=600).read())
        dt = time.time() - t
        after = metrics()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        for k, v in delta.items():
            tot[k] = tot.get(k, 0) + v
        print(
            json.dumps(
                {
                    "prompt": p[:30],
                    "s": round(dt, 1),
                    "ptok": d["usage"]["prompt_tokens"],
                    "ntok": d["usage"]["completion_tokens"],
                    "text": d["choices"][0]["message"]["content"],
                    "drafts": delta.get("vllm:spec_decode_num_drafts_total", 0),
                    "accepted_per_pos": [delta[k] for k in sorted(delta) if "per_pos" in k],
                }
            ),
            flush=True,
        )
    nd = tot.get("vllm:spec_decode_num_drafts_total", 0)
    per = [tot[k] for k in sorted(tot) if "per_pos" in k]
    print(
        f"SUMMARY {name}: drafts {nd:.0f}, draft tokens {tot.get('vllm:spec_decode_num_draft_tokens_total', 0):.0f}, "
        f"accepted {tot.get('vllm:spec_decode_num_accepted_tokens_total', 0):.0f}, per position "
        f"{[int(x) for x in per]} -> rates {[round(x / nd, 2) for x in per] if nd else []}, "
        f"acceptance length {1 + sum(per) / nd if nd else float('nan'):.2f}",
        flush=True,
    )
finally:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
