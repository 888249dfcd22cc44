#!/usr/bin/env bash
# Test aiperf-sdk-vllm against REAL vLLM 0.33.0 code (its plugin loader, stats classes and
# logger adapter), in its own cached environment (build/ is git-ignored). The engine needs a
# GPU, so it is not run; vLLM's own modules are imported and driven.
#
# vLLM 0.33.0 pins torch==2.14.0 (CUDA); only torch==2.13.0 (CPU) is available here, so vLLM
# is installed with --no-deps and then only the pure-Python modules its metrics/plugin
# imports need. torch is pinned by a constraints file for every pip call: nothing here can
# pull another torch. Idempotent: the dependency set is installed once (stamp file), later
# runs only reinstall the two editable packages (no network with pip's cache warm).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python3}
VENV=build/venv-vllm
STAMP="$VENV/.aiperf-vllm-deps-v1"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
CONSTRAINTS="$VENV/aiperf-constraints.txt"
printf 'torch==2.13.0\n' >"$CONSTRAINTS"
export PIP_CONSTRAINT="$CONSTRAINTS"
# vLLM's declared dependencies are deliberately not installed: drop pip's resolver report
quiet() { grep -v -e "^WARNING: Location" -e "^vllm 0.33.0 requires" \
  -e "^ERROR: pip's dependency resolver does not" || true; }
if [ ! -f "$STAMP" ]; then
  "${PIP[@]}" "torch==2.13.0" 2>&1 | quiet
  "${PIP[@]}" --no-deps "vllm==0.33.0" 2>&1 | quiet
  "${PIP[@]}" packaging prometheus_client pydantic regex numpy cbor2 psutil pyzmq urllib3 \
    "transformers>=5.20,<5.21" aiohttp requests openai-harmony openai pillow pybase64 \
    cachetools msgspec cloudpickle uvloop py-cpuinfo fastapi partial-json-parser llguidance \
    pytest 2>&1 | quiet
  "${PIP[@]}" --no-deps "xgrammar==0.2.8" "apache-tvm-ffi==0.1.11" 2>&1 | quiet
  "$VENV/bin/python" -c "import torch, vllm; assert torch.__version__.startswith('2.13.0'), torch.__version__; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$STAMP"
fi
"${PIP[@]}" -e . -e integrations/vllm 2>&1 | quiet
# the stand-in tests (test_vllm_stat_logger.py) run in the project venv, without vLLM
exec "$VENV/bin/python" -m pytest -p no:cacheprovider integrations/vllm/tests/test_vllm_real.py "$@"
