"""What the drafter tests build again and again (tests/test_drafter*.py): SmolLM2-135M's config.json (all
the draft-cost model reads), a decode-bound diagnosis the drafter rule answers, and a trained drafter's record."""

from __future__ import annotations

import json
from pathlib import Path

from memory_db import DrafterRecord
from research.proposals import Bottleneck, Diagnosis

SMOLLM2_135M_CONFIG = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "tie_word_embeddings": True,
}


def write_config(folder: Path, **changes) -> Path:
    """``folder`` (made if missing) with SmolLM2-135M's config.json, ``changes`` applied (e.g. a draft's
    ``num_hidden_layers``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(SMOLLM2_135M_CONFIG | changes))
    return folder


def decode_bound(endpoint: str = "ep", *, severity: float = 0.7, **engine_stats) -> Diagnosis:
    """Decode-bound with structured (predictable) replies; ``engine_stats`` as the diagnosis measured them."""
    decode = Bottleneck(name="decode_bound", severity=severity, evidence=["decode is 90% of end-to-end latency"])
    return Diagnosis(
        endpoint=endpoint,
        engine_kind="vllm",
        bottlenecks=[decode],
        engine_stats=engine_stats,
        request_stats={"structured_output_fraction": 1.0},
    )


def drafter_record(**fields) -> DrafterRecord:
    """A fresh 4-layer drafter for k=3, trained for 300 steps on 100 examples; ``fields`` replace any of it."""
    return DrafterRecord(
        **{
            "endpoint": "ep",
            "model_signature": "m1",
            "data_signature": "d1",
            "path": "/drafts/a",
            "num_speculative_tokens": 3,
            "layers": 4,
            "steps": 300,
            "train_examples": 100,
            "train_tokens": 3200,
            "heldout_examples": 20,
            "train_s": 120.0,
            "acceptance_offline": {"acceptance_length": 1.8, "accepted_per_position": [0.5, 0.2, 0.1]},
            **fields,
        }
    )
