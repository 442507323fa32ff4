"""Markdown pages per endpoint: complete, and reproducible from the database file alone."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from helpers_memory import T0, experiment
from memory_db import (
    CampaignRecord,
    ConfirmationRecord,
    EndpointRecord,
    FindingRecord,
    MemoryStore,
    OpenQuestion,
)
from memory_db.export import export_endpoint_markdown, export_markdown


def fill(store: MemoryStore) -> None:
    store.record(
        EndpointRecord(
            endpoint="chat",
            description="Support chat | EU",
            model="smollm2-135m",
            engine="vllm",
            engine_version="0.32.0",
        )
    )
    store.record(
        CampaignRecord(
            campaign_id="chat-c1",
            campaign="tune_chat",
            endpoint="chat",
            status="finished",
            started_at=T0,
            finished_at=T0 + timedelta(hours=1),
            baseline_capacity=2.0,
            best_capacity=2.6,
            total_gain_ratio=1.3,
            stop_reason="no supported experiment left | budget",
        )
    )
    good = experiment(
        bottleneck="prefix_reuse",
        technique="prefix_caching",
        change={"--enable-prefix-caching": None},
        capacity_ratio=1.3,
        dagster_run_ids=["dg-7"],
        created_at=T0 + timedelta(minutes=10),
    )
    bad = experiment(
        change={"--max-num-seqs": "256"}, verdict="worse", capacity_ratio=0.7, created_at=T0 + timedelta(minutes=20)
    )
    store.record(good)
    store.record(bad)
    store.record(
        ConfirmationRecord(
            experiment_id=good.experiment_id,
            endpoint="chat",
            campaign_id="chat-c1",
            engine_args=["--enable-prefix-caching"],
            confirmed_at=T0 + timedelta(minutes=30),
        )
    )
    store.record(
        FindingRecord(
            endpoint="chat",
            campaign_id="chat-c1",
            bottleneck="prefix_reuse",
            technique="prefix_caching",
            text="Shared system prompts make prefix caching pay",
            confidence="high",
            created_at=T0,
        )
    )
    store.record(
        OpenQuestion(
            endpoint="chat",
            campaign_id="chat-c1",
            question="Does fp8 KV cache help?",
            bottleneck="kv_capacity",
            created_at=T0,
        )
    )
    store.record(OpenQuestion(endpoint="chat", question="Answered one", status="answered", answer="yes", created_at=T0))
    store.record(
        experiment(
            endpoint="rag",
            campaign_id="rag-c1",
            bottleneck="decode",
            technique="ngram_speculation",
            change={"--speculative-config": "{}"},
            verdict="same",
            capacity_ratio=None,
            noise_threshold=None,
            created_at=T0,
        )
    )


def test_endpoint_page_has_every_section(store: MemoryStore, tmp_path: Path):
    fill(store)
    pages = export_markdown(store, tmp_path / "pages")
    assert [p.name for p in pages] == ["chat.md", "rag.md"]
    text = pages[0].read_text()
    for heading in (
        "# Research memory: endpoint `chat`",
        "## Summary",
        "## Confirmed changes",
        "## Campaigns",
        "## Experiments",
        "## Skipped candidates",
        "## Findings and lessons",
        "## Open questions",
    ):
        assert heading in text
    assert "Support chat | EU" in text
    assert "no supported experiment left \\| budget |" in text  # table-breaking characters are escaped
    confirmed = text.split("## Confirmed changes")[1].split("## Campaigns")[0]
    assert "prefix_caching" in confirmed and "max_num_seqs" not in confirmed
    experiments = text.split("## Experiments")[1].split("## Skipped")[0]
    assert experiments.index("prefix_caching") < experiments.index("max_num_seqs")  # in time order
    assert "| worse | 0.700 |" in experiments and "dg-7" in experiments
    questions = text.split("## Open questions")[1]
    assert "Does fp8 KV cache help? (kv_capacity)" in questions and "Answered one" not in questions
    assert "ngram_speculation" not in text  # the other endpoint's work is on its own page


def test_export_is_reproducible_from_the_database_file(store: MemoryStore, tmp_path: Path):
    fill(store)
    first = [p.read_text() for p in export_markdown(store, tmp_path / "a")]
    copy = tmp_path / "copy" / store.path.name
    copy.parent.mkdir()
    shutil.copy(store.path, copy)  # only the database travels: no spool, no process state
    second = [p.read_text() for p in export_markdown(MemoryStore(copy), tmp_path / "b")]
    assert first == second
    assert [p.read_text() for p in export_markdown(store, tmp_path / "c", only=["rag"])] == [second[1]]
    assert export_endpoint_markdown(store, "chat") == first[0]
