#!/usr/bin/env bash
# Create (idempotently) build/venv-ray: Ray Serve for the @serve.batch peer in
# benchmarks/bench_batcher.py. Kept out of .venv and out of the SDK's dependencies; ray[serve]
# does not depend on torch (checked with a dry run below before anything is installed).
# The SDK itself is put on the venv's path with a .pth file (no build, no copy).
#   Usage: benchmarks/ray_peer.sh [python3]   then: .venv/bin/python benchmarks/bench_batcher.py
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/build/venv-ray"
py="${1:-python3}"
ray_spec="ray[serve]==2.60.0"
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import ray.serve, hdrhistogram" 2>/dev/null; then
    if "$venv/bin/pip" install --dry-run "$ray_spec" hdrhistogram pyyaml 2>/dev/null \
            | grep -i "would install" | grep -qiE "(^| )torch-"; then
        echo "ray_peer.sh: $ray_spec would pull torch; refusing" >&2
        exit 1
    fi
    "$venv/bin/pip" install -q "$ray_spec" hdrhistogram pyyaml
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$root/src" > "$site/aiperf_sdk_src.pth"
"$venv/bin/python" -c "import ray, aiperf_sdk; print('build/venv-ray: ray', ray.__version__)"
