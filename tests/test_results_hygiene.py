"""Recorded results hold no machine's absolute paths (benchmarks/scrub_paths.py removes them)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from specs import paths

SPEC = importlib.util.spec_from_file_location("scrub_paths", paths.REPO_ROOT / "benchmarks" / "scrub_paths.py")
scrub_paths = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(scrub_paths)


def test_no_recorded_result_holds_a_machine_path():
    results = paths.REPO_ROOT / "benchmarks" / "results"
    dirty = [
        str(p.relative_to(results))
        for p in scrub_paths.files_under([results])
        if scrub_paths.MACHINE_PATH.search(scrub_paths._read(p))
    ]
    assert not dirty, f"run `python benchmarks/scrub_paths.py` before committing: {dirty}"


@pytest.mark.parametrize(
    "raw, kept",
    [
        # the forms other machines write: a CI checkout, a GPU host's temp home, a macOS temp folder, a Windows
        # profile in a JSON string (backslashes escaped), a user's home; the rest of each path is kept
        ("loaded /check/work/main/engines/vllm.py:12", "<repo>/engines/vllm.py:12"),
        ('"records_path": "/tmp/gpubench-home/records/a.parquet"', '"records_path": "<tmp>/records/a.parquet"'),
        ("wrote /private/var/folders/x7/k2_8n3qd1w/T/pytest-3/out.json", "wrote <tmp>/pytest-3/out.json"),
        ('"model": "C:\\\\Users\\\\amara.okafor\\\\models\\\\qwen"', '"model": "~\\\\models\\\\qwen"'),
        ("cache at /home/jörg/.cache/hf and /Users/li.wei/w", "cache at ~/.cache/hf and ~/w"),
        ('  File "/root/.pyenv/versions/3.11.7/lib/python3.11/ssl.py"', "<python>/lib/python3.11/ssl.py"),
    ],
)
def test_scrubbing_keeps_the_path_after_the_machine_specific_root(raw, kept):
    clean = scrub_paths.scrub(raw)
    assert kept in clean
    assert not scrub_paths.MACHINE_PATH.search(clean), clean


def test_relative_paths_and_urls_are_left_alone(tmp_path):
    text = json.dumps({"doc": "docs/work/notes.md", "url": "http://127.0.0.1:8000/v1/tmp/x", "rel": "a/home/b"})
    assert scrub_paths.scrub(text) == text
    (tmp_path / "r.log").write_text("bar\r50%\rbar\r100%\n/tmp/run-7/engine.log\n")
    assert scrub_paths.main([str(tmp_path)]) == 0
    assert (tmp_path / "r.log").read_bytes() == b"bar\r50%\rbar\r100%\n<tmp>/engine.log\n"  # \r kept
