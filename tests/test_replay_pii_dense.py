"""A PII-dense request log (several values in every request) builds a pool that passes its
blocking fidelity check: stand-ins keep prompt token counts under the endpoint's tokenizer.

The log is the held-out corpus of ``benchmarks/pii_heldout_corpus.py`` (2-4 values per request
plus form blocks and tool calls: names and addresses of many countries, phones, cards, IBANs)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from specs.config import TrafficSpec
from specs.models import ensure_model
from replay.build import build_from_request_log, build_pool
from replay.redact import Redactor
from replay.tokenize import ChatTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import pii_heldout_corpus  # noqa: E402


@pytest.fixture(scope="module")
def dense_log(tmp_path_factory) -> tuple[Path, list]:
    lines, planted = pii_heldout_corpus.generate(1500, seed=41, clean_share=0.0)
    path = tmp_path_factory.mktemp("dense") / "support_dense.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, planted


def test_pii_dense_log_passes_the_blocking_fidelity_check(definitions, dense_log, tmp_path) -> None:
    path, planted = dense_log
    assert len(planted) / 1500 >= 3  # several values in every request
    spec = definitions.endpoint("support_smollm")
    spec = spec.model_copy(update={"traffic": TrafficSpec(kind="request_log", path=str(path))})
    build = build_pool(spec, ensure_model(spec.model.path), tmp_path / "pool")
    assert sum(build.redaction_counts.values()) >= len(planted)
    report = build.fidelity
    assert report.passed, report.table()
    row = next(r for r in report.rows if r.name == "prompt_tokens_ks")
    assert row.distance <= 0.01, report.table()
    # request by request: the redacted prompt has the original's token count (or within one per value)
    diff = np.abs(build.pool_profile.prompt_tokens - build.production_profile.prompt_tokens)
    assert (diff == 0).mean() >= 0.99 and diff.max() <= 4, np.bincount(diff)
    assert build.stats["redaction_token_mismatches"] <= sum(build.redaction_counts.values()) // 100


def test_stand_ins_without_the_tokenizer_shift_prompt_lengths(definitions, dense_log, tmp_path) -> None:
    """The control: the same log redacted by length-alike stand-ins (no tokenizer) moves prompt
    lengths, which is what made PII-dense pools fail before (issue 12: KS 0.115 > 0.1)."""
    path, _ = dense_log
    spec = definitions.endpoint("support_smollm")
    spec = spec.model_copy(update={"traffic": TrafficSpec(kind="request_log", path=str(path))})
    tok_dir = ensure_model(spec.model.path)
    tok = ChatTokenizer.from_dir(tok_dir)
    build = build_from_request_log(spec, path, tok, tok_dir, tmp_path / "pool.parquet", redactor=Redactor())
    diff = np.abs(build.pool_profile.prompt_tokens - build.production_profile.prompt_tokens)
    assert (diff > 0).mean() > 0.5
