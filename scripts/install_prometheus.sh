#!/usr/bin/env bash
# Install the Prometheus server that tests/test_prometheus.py starts on 127.0.0.1.
# Idempotent: does nothing when `prometheus` is already on PATH (or at /usr/bin/prometheus).
# Debian/Ubuntu only (package `prometheus`); needs root or sudo for apt-get.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# the package's postinst may try to start a service; on hosts without systemd that is a no-op
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# the Debian service is not needed: the tests start their own server with a temp config
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]
