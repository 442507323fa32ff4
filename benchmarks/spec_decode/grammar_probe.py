"""Why served acceptance is below offline: the same held-out requests with and without their
response_format (xgrammar) on the drafter engine, vLLM's per-position counters for each. With the
target's own folder as DRAFT_DIR (an absolute path) it is the control: an identical draft.

    nice -n 19 .venv/bin/python benchmarks/spec_decode/grammar_probe.py DRAFT_DIR [N]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import httpx  # noqa: E402

from specs import paths  # noqa: E402
from autoresearch.workflows import load_pool  # noqa: E402
from dagster_project.lib import load_definitions  # noqa: E402
from engines import start_engine  # noqa: E402
from research import drafter  # noqa: E402

draft, n = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8
spec = load_definitions(paths.definitions_dir()).endpoint("support_smollm")
pool = load_pool(spec)
rows = pool.slice(100, n)  # the benchmark's held-out requests (pool rows 100..119)
engine = start_engine(
    spec,
    args_override=drafter.candidate_args(spec.engine.args, draft, 3, spec.engine.kind),
    workdir=paths.home() / "drafters" / "support_smollm" / "grammar_probe",
)
try:
    for label, strip in (("as logged (response_format json_schema, tools)", False), ("response_format removed", True)):
        before = drafter.read_metrics(engine.base_url, spec.engine.kind)
        for row in rows.iter_rows(named=True):
            body = drafter._body_for(row["body"], engine.served_model, 32)
            body.pop("return_token_ids", None)
            if strip:
                body.pop("response_format", None)
            httpx.post(engine.base_url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
        served = drafter.ServedAcceptance()
        served.add(before, drafter.read_metrics(engine.base_url, spec.engine.kind))
        print(
            f"{label}: {n} requests, {served.drafts:.0f} drafts, acceptance length {served.acceptance_length:.2f}, "
            f"per position {', '.join(f'{p:.2f}' for p in served.accepted_per_position)}",
            flush=True,
        )
finally:
    engine.stop()
