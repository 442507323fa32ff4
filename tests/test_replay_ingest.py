"""Ingest of request logs and token-count traces: valid rows kept, malformed lines reported with
their line numbers and reasons, and never fatal for the rest of the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay import ingest, sample_logs

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


def _lines(n: int = 6) -> list[str]:
    return list(sample_logs.generate(n, seed=4))


def test_request_log_reports_malformed_lines_and_keeps_the_rest(tmp_path: Path) -> None:
    good = _lines(6)
    rec = json.loads(good[0])
    bad_role = dict(rec, request=dict(rec["request"], messages=[{"role": "wizard", "content": "x"}]))
    bad_usage = dict(rec, usage={"completion_tokens": -3})
    no_ts = {k: v for k, v in rec.items() if k != "timestamp"}
    lines = [
        good[0],
        '{"timestamp": 1, "request": ',
        good[1],
        json.dumps(bad_role),
        "",
        json.dumps(no_ts),
        good[2],
        json.dumps(bad_usage),
        "[1, 2]",
        json.dumps(dict(rec, timestamp="yesterday")),
        good[3],
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = ingest.read_request_log(path)
    assert result.frame["line"].to_list() == [1, 3, 7, 11]
    reasons = dict(result.malformed)
    assert sorted(reasons) == [2, 4, 6, 8, 9, 10]
    assert "invalid JSON" in reasons[2]
    assert "messages[0].role" in reasons[4]
    assert "timestamp" in reasons[6] and "missing" in reasons[6]
    assert "completion_tokens" in reasons[8]
    assert "not a JSON object" in reasons[9]
    assert "yesterday" in reasons[10]
    assert "6 of 11 lines malformed" in result.malformed_summary()
    assert result.frame["completion_tokens"].null_count() == 0


def test_request_log_reads_logged_usage_and_epoch_timestamps(tmp_path: Path) -> None:
    rec = json.loads(_lines(1)[0])
    rec["timestamp"] = 1_700_000_000.5
    rec["usage"] = {"prompt_tokens": 700, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 512}}
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    row = ingest.read_request_log(path).frame.row(0, named=True)
    assert row["timestamp_s"] == 1_700_000_000.5
    assert (row["logged_prompt_tokens"], row["completion_tokens"], row["logged_cached_tokens"]) == (700, 40, 512)


def test_azure_trace_reads_all_rows() -> None:
    result = ingest.read_azure(TRACES / "azure2023_conv.csv")
    assert result.malformed == []
    assert result.frame.height == 19366
    assert result.frame["timestamp_s"].is_sorted()
    assert result.frame["prompt_tokens"].min() >= 1


def test_azure_bad_rows_are_reported_with_line_numbers(tmp_path: Path) -> None:
    src = (TRACES / "azure2023_conv.csv").read_text().splitlines()[:6]
    src.insert(3, "2023-11-16 18:15:50.99,lots,3")
    src.insert(5, "not a time,12,3")
    src.append("2023-11-16 18:16:00.10,500")  # GeneratedTokens missing
    path = tmp_path / "azure.csv"
    path.write_text("\n".join(src) + "\n")
    result = ingest.read_azure(path)
    assert result.frame.height == 5
    reasons = dict(result.malformed)
    assert sorted(reasons) == [4, 6, 9]
    assert "ContextTokens" in reasons[4] and "lots" in reasons[4]
    assert "TIMESTAMP" in reasons[6]
    assert "GeneratedTokens" in reasons[9]


def test_azure_wrong_header_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(ValueError, match=r"x\.csv:1.*ContextTokens"):
        ingest.read_azure(path)


def test_mooncake_trace_and_its_malformed_lines(tmp_path: Path) -> None:
    result = ingest.read_mooncake(TRACES / "mooncake_synthetic.jsonl")
    assert result.malformed == [] and result.frame.height == 3993
    src = (TRACES / "mooncake_synthetic.jsonl").read_text().splitlines()[:5]
    src.insert(1, '{"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [1]}')
    src.insert(3, '{"timestamp": 5, "input_length": 10')
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(src) + "\n")
    result = ingest.read_mooncake(path)
    assert result.frame.height == 5
    reasons = dict(result.malformed)
    assert "needs 2" in reasons[2]
    assert "invalid JSON" in reasons[4]
    assert result.frame["hash_ids"].list.len().to_list()[0] == 79
