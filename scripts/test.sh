#!/usr/bin/env bash
# The whole test suite: lint, type check, unit + real-server tests (slow ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
bash scripts/install_prometheus.sh   # real Prometheus server for tests/test_prometheus.py
.venv/bin/ruff check src tests benchmarks examples
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
