"""Secrets never reach the research memory: the guard refuses them and names the field, not the value."""

from __future__ import annotations

import pytest

from memory_db import Conditions, ExperimentRecord, FindingRecord, MemoryStore, SecretInRecordError, check_no_secrets
from memory_db.guard import find_secret

CONDITIONS = Conditions(model="m", engine="vllm", engine_version="0.32.0", workload_signature="w")


@pytest.mark.parametrize(
    "text",
    [
        "called the judge with sk-proj-AbCdEf0123456789abcdef0123",
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF12",
        "token ghp_0123456789abcdefghijABCDEFGHIJ012345",
        "AKIAIOSFODNN7EXAMPLE",
        "Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
        "-----BEGIN RSA PRIVATE KEY-----",
        "api_key=0123456789abcdefXYZ",
    ],
)
def test_known_key_shapes_are_found(text: str):
    assert find_secret(text, env_values=[]) is not None


@pytest.mark.parametrize(
    "text",
    [
        '{"--max-num-seqs":"64"}',
        "--enable-prefix-caching --kv-cache-dtype fp8 --disk-cache-dir /tmp/x",
        "task-0123456789abcdefghij finished; mask-abcdefghijklmnopqrstu",
        "capacity ratio 1.23 within noise threshold 5%",
        "exp_120a5318748851d826da",
    ],
)
def test_ordinary_research_text_passes(text: str):
    assert find_secret(text, env_values=[]) is None


def test_values_of_secret_named_env_vars_are_refused(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-looking-value-42")
    monkeypatch.setenv("SHORT_KEY", "1")  # too short to be a secret: must not match every "1"
    with pytest.raises(SecretInRecordError, match=r"record\.notes.*MY_SERVICE_TOKEN"):
        check_no_secrets({"notes": "we used plain-looking-value-42 to call it"})
    check_no_secrets({"notes": "ratio 1.1"})


def test_store_refuses_the_record_and_writes_nothing(store: MemoryStore):
    secret = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"
    bad = ExperimentRecord(
        endpoint="e",
        campaign_id="c",
        conditions=CONDITIONS,
        bottleneck="b",
        technique="t",
        change={"--api-key": secret},
        verdict="same",
    )
    with pytest.raises(SecretInRecordError) as info:
        store.record(bad)
    assert "change" in str(info.value) and secret not in str(info.value)
    with pytest.raises(SecretInRecordError, match="text"):
        store.record(FindingRecord(endpoint="e", bottleneck="b", text=f"the key was {secret}"))
    assert store.pending() == 0
    assert store.query("SELECT count(*) AS n FROM experiments")["n"][0] == 0
    assert secret.encode() not in store.path.read_bytes()
