# Sourced by the README's commands: create or refresh .venv and install the project with
# everything the demo and the tests need. Idempotent; pip skips what is already there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
# torch: exactly the CPU build that lies on this machine's disk (any other spec pulls CUDA).
.venv/bin/python -m pip install -q --disable-pip-version-check \
  "torch==2.13.0" -e ".[dev,otel,prometheus]" 2>&1 | grep -v "^WARNING: Location" || true
# the integrations (integrations/<name>, one package each) and their test dependencies
.venv/bin/python -m pip install -q --disable-pip-version-check \
  -e "integrations/fastapi[test]" -e integrations/triton -e "integrations/vllm[test]" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import aiperf_sdk, aiperf_sdk_fastapi, aiperf_sdk_triton, aiperf_sdk_vllm"
