#!/usr/bin/env bash
# The main job: `aiperf-sdk demo` — a simulated LLM service (stages, streaming, dynamic
# batcher) under open-loop load with a spike; prints the budget table, the slowest requests,
# goodput and the regression-gate verdict, and writes plots.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
.venv/bin/python -m aiperf_sdk demo "$@"
