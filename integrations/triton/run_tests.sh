#!/usr/bin/env bash
# Test aiperf-sdk-triton against a real PyTriton 0.7.0 (bundled tritonserver 2.51.0) on
# 127.0.0.1. PyTriton pins numpy 1.26, so it gets its own cached environment (build/ is
# git-ignored). Its Python-backend stub links the system libpython; point it at the
# interpreter's own lib/ so both sides agree (else: "'_thread.RLock' object has no attribute
# '_recursion_count'").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python3}
VENV=build/venv-triton
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  "nvidia-pytriton==0.7.0" "pytest>=8" -e . -e integrations/triton 2>&1 \
  | grep -v "^WARNING: Location" || true
LIBDIR=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider integrations/triton/tests "$@"
