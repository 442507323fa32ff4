"""Is the greedy divergence under speculation (temperature 0, target as its own draft) a near-tie?
Runs the same prompts on a plain server and on a speculative one (one at a time), with top-3
logprobs, and prints the first position where the greedy tokens differ and both servers' top-3 there.

    nice -n 19 python3 benchmarks/spec_decode/greedy_divergence_probe.py [SPECCONFIG_JSON] [extra vllm args...]
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

ROOT = "/work/main"
MODEL = ROOT + "/.autoresearch/models/smollm2-135m-instruct"
SPEC = (
    sys.argv[1]
    if len(sys.argv) > 1
    else json.dumps({"method": "draft_model", "model": MODEL, "num_speculative_tokens": 3})
)
EXTRA = sys.argv[2:] or ["--enforce-eager"]
PROMPTS = ["Explain what a hash table is.", "Write a haiku about the sea."]
PORT = int(os.environ.get("PORT", "8712"))
base = f"http://127.0.0.1:{PORT}"


def serve(spec, log):
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
        str(PORT),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "2048",
        "--max-logprobs",
        "5",
        *EXTRA,
    ] + (["--speculative-config", spec] if spec else [])
    p = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    t0 = time.time()
    while time.time() - t0 < 420 and p.poll() is None:
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            return p
        except Exception:
            time.sleep(2)
    p.terminate()
    raise SystemExit(f"server did not start, see {log}")


def run(spec, tag):
    p = serve(spec, f"/tmp/specprobe/divergence_{tag}.log")
    out = []
    try:
        for prompt in PROMPTS:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 64,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": 3,
            }
            req = urllib.request.Request(
                base + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"content-type": "application/json"},
            )
            d = json.loads(urllib.request.urlopen(req, timeout=600).read())
            out.append(
                [
                    (c["token"], [(t["token"], round(t["logprob"], 4)) for t in c["top_logprobs"]])
                    for c in d["choices"][0]["logprobs"]["content"]
                ]
            )
    finally:
        p.terminate()
        p.wait(60)
    return out


plain = run("", "plain")
spec = run(SPEC, "spec")
for prompt, a, b in zip(PROMPTS, plain, spec):
    i = next((j for j in range(min(len(a), len(b))) if a[j][0] != b[j][0]), None)
    if i is None:
        print(f"{prompt!r}: identical for {min(len(a), len(b))} tokens")
        continue
    print(f"{prompt!r}: first difference at token {i} after {''.join(t for t, _ in a[:i])[-60:]!r}")
    print(f"   plain server top-3: {a[i][1]}")
    print(f"   spec  server top-3: {b[i][1]}")
