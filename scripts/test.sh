#!/usr/bin/env bash
# Set up everything (idempotent, see scripts/setup.sh), lint, then run the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k engines). Exit status: pytest's,
# except that "no tests collected" (pytest's 5) counts as a failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh || { echo "TEST RUN FAILED: setup failed"; exit 1; }
# Lint and format first (pyproject.toml [tool.ruff]): seconds, and a failure says what to run.
.venv/bin/ruff check --quiet . && .venv/bin/ruff format --check --quiet . \
  || { echo "TESTS FAILED: lint (fix what ruff check says; .venv/bin/ruff format . formats)"; exit 1; }
start=$(date +%s)
.venv/bin/pytest -q --durations=25 tests "$@"
code=$?
elapsed=$(( $(date +%s) - start ))
case $code in
  0) echo "TESTS PASSED in ${elapsed}s" ;;
  5) echo "TESTS FAILED: pytest collected no tests (exit 5)"; code=1 ;;
  *) echo "TESTS FAILED in ${elapsed}s (pytest exit ${code})" ;;
esac
exit $code
