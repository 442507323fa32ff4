"""Baseline: the redactor of an earlier commit on the held-out corpus (recall, in memory; and
the fidelity of a pool built with it under the SmolLM2 tokenizer).

    git show 3a134a2:replay/redact.py > /tmp/redact_old.py
    .venv/bin/python benchmarks/pii_heldout_previous.py /tmp/redact_old.py > benchmarks/results/pii_heldout_previous_redactor.txt
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import pii_heldout_corpus as H  # noqa: E402


def main() -> None:
    spec_ = importlib.util.spec_from_file_location("redact_old", sys.argv[1])
    old = importlib.util.module_from_spec(spec_)
    sys.modules["redact_old"] = old
    spec_.loader.exec_module(old)
    from specs.config import TrafficSpec
    from dagster_project.lib import load_definitions
    from specs.models import ensure_model
    from replay.build import build_from_request_log
    from replay.tokenize import ChatTokenizer

    lines, planted = H.generate(2000, seed=7)
    r = old.Redactor()
    red = [json.dumps(r.redact_request(json.loads(line)["request"]), ensure_ascii=False) for line in lines]
    total, leaked = Counter(), Counter()
    for p in planted:
        total[p.kind] += 1
        leaked[p.kind] += H.leaked(p, red[p.line - 1])
    print(f"redactor {sys.argv[1]} on the held-out corpus (2000 lines, seed 7), in memory:")
    for k in sorted(total):
        print(f"  {k:15} {total[k]:5} leaked {leaked[k]:5} recall {1 - leaked[k] / total[k]:.4f}")
    n = sum(total.values())
    print(f"  overall {n} recall {1 - sum(leaked.values()) / n:.4f}")
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "heldout.jsonl"
    log.write_text("\n".join(lines) + "\n")
    spec = load_definitions(REPO / "definitions").endpoint("support_smollm")
    spec = spec.model_copy(update={"traffic": TrafficSpec(kind="request_log", path=str(log))})
    tok_dir = ensure_model(spec.model.path)
    redactor = old.Redactor()
    redactor.token_mismatches = 0  # the builder reads it; the old redactor does not count
    b = build_from_request_log(
        spec, log, ChatTokenizer.from_dir(tok_dir), tok_dir, tmp / "old.parquet", redactor=redactor
    )
    row = next(x for x in b.fidelity.rows if x.name == "prompt_tokens_ks")
    diff = b.pool_profile.prompt_tokens - b.production_profile.prompt_tokens
    print(
        f"  pool build: prompt_tokens_ks {row.distance:.4f}, fidelity {'PASS' if b.fidelity.passed else 'FAIL'}, "
        f"rows with the original token count {np.mean(diff == 0):.4f}, mean difference {diff.mean():+.2f} tokens"
    )


if __name__ == "__main__":
    main()
