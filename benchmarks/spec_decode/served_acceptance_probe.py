"""Served acceptance of a draft on the support_smollm endpoint's own engine args, the pool's held-out
requests as logged (tools, response_format, each row's temperature/top_p), one at a time, max_tokens
32, on a fixed port. Same measurement as grammar_probe.py's first line, plus a greedy (temperature 0)
pass of the same rows. Run it with and without the throwaway CPU expand_kernel fix:

    nice -n 19 .venv/bin/python benchmarks/spec_decode/served_acceptance_probe.py DRAFT_DIR [N] [PORT]
    PYTHONPATH=engines/patches/vllm_issue_55005 nice -n 19 .venv/bin/python \
        benchmarks/spec_decode/served_acceptance_probe.py DRAFT_DIR [N] [PORT]
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import httpx  # noqa: E402

from specs import paths  # noqa: E402
from autoresearch.workflows import load_pool  # noqa: E402
from dagster_project.lib import load_definitions  # noqa: E402
from engines import start_engine  # noqa: E402
from research import drafter  # noqa: E402

draft = Path(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
port = int(sys.argv[3]) if len(sys.argv) > 3 else 8733
fixed = "vllm_issue_55005" in os.environ.get("PYTHONPATH", "")
spec = load_definitions(paths.definitions_dir()).endpoint("support_smollm")
rows = load_pool(spec).slice(100, n)
engine = start_engine(
    spec,
    port=port,
    args_override=drafter.candidate_args(spec.engine.args, draft, 3, spec.engine.kind),
    workdir=Path("/tmp/specprobe") / f"served_{'fix' if fixed else 'bug'}_{draft.name}",
)
print(f"draft {draft}, expand fix {'ON' if fixed else 'off'}, rows 100..{100 + n - 1}", flush=True)
try:
    for label, greedy in (
        ("as logged (row temperature/top_p, response_format, tools)", False),
        ("same rows at temperature 0", True),
    ):
        before = drafter.read_metrics(engine.base_url, spec.engine.kind)
        temps = []
        for row in rows.iter_rows(named=True):
            body = drafter._body_for(row["body"], engine.served_model, 32)
            body.pop("return_token_ids", None)
            if greedy:
                body["temperature"] = 0.0
            temps.append(body.get("temperature"))
            httpx.post(engine.base_url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
        served = drafter.ServedAcceptance()
        served.add(before, drafter.read_metrics(engine.base_url, spec.engine.kind))
        print(
            f"{label}: temperatures {temps}: {n} requests, {served.drafts:.0f} drafts, acceptance length "
            f"{served.acceptance_length:.2f}, per position "
            f"{', '.join(f'{p:.2f}' for p in served.accepted_per_position)}",
            flush=True,
        )
finally:
    engine.stop()
