#!/usr/bin/env bash
# The whole test suite: lint, type check, unit + real-server tests (slow ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
bash scripts/install_prometheus.sh   # real Prometheus server for tests/test_prometheus.py
.venv/bin/ruff check src tests benchmarks examples integrations
.venv/bin/mypy                                   # strict, src/ (pyproject [tool.mypy])
.venv/bin/mypy --strict integrations/fastapi/src integrations/triton/src
# vLLM itself is not installable here (it pulls a CUDA torch): type-check without its stubs
.venv/bin/mypy --strict --ignore-missing-imports integrations/vllm/src
.venv/bin/python -m pytest "$@"
# the same core behaviour through the pure-Python fallback of the optional C hot path
AIPERF_PURE_PYTHON=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_stage.py \
  tests/test_request.py tests/test_stream.py tests/test_ledger.py tests/test_budget.py \
  tests/test_speedups.py tests/test_otel.py tests/test_batcher.py
# PyTriton pins numpy 1.26: its real-server tests run in their own cached venv (build/)
bash integrations/triton/run_tests.sh
# real vLLM 0.33.0 code (no engine: no GPU), cached build/venv-vllm with torch 2.13.0 pinned
bash integrations/vllm/run_tests.sh
