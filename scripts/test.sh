#!/usr/bin/env bash
# The whole test suite: lint, type check, unit + real-server tests (slow ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
