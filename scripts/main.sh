#!/usr/bin/env bash
# The main job on a fresh machine: set everything up (idempotent), then run a research campaign on
# the embedded default endpoint (SmolLM2-135M on vLLM's CPU build, bundled support traffic,
# rule-based proposer, DuckDB memory under .autoresearch/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/autoresearch campaign run "${1:-support_smollm_default}"
