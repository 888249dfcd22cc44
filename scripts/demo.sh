#!/usr/bin/env bash
# The main job: time a toy pipeline under load and print the budget report.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
.venv/bin/python examples/toy_pipeline.py "$@"
