"""Environment fingerprint: what a result was measured on, so baselines compare like with like."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
from importlib import metadata

#: fields that make two runs comparable; ``hostname`` is informative only
COMPARED_FIELDS = (
    "python", "implementation", "os", "machine", "cpu_model", "cpu_count", "aiperf_sdk",
    "numpy", "torch", "gpu",
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "-"


def _gpu() -> str:
    # Only ask torch when the process already imported it: the fingerprint must not import
    # torch (seconds, and a CUDA context) just to describe the machine.
    torch = sys.modules.get("torch")
    if torch is None:
        return "-"
    try:
        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception:  # a broken CUDA install: describe it rather than fail the run
        return "unavailable"
    return "-"


def environment_fingerprint() -> dict[str, str]:
    """Describe this machine and software; ``id`` hashes the compared fields.

    Example::

        fp = environment_fingerprint()
        fp["cpu_model"], fp["id"]
    """
    fp = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                         else os.cpu_count()),
        "aiperf_sdk": _version("aiperf-sdk"),
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "gpu": _gpu(),
        "hostname": socket.gethostname(),
    }
    stable = json.dumps({k: fp[k] for k in COMPARED_FIELDS}, sort_keys=True)
    fp["id"] = hashlib.sha256(stable.encode()).hexdigest()[:16]
    return fp


def fingerprint_differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Human-readable differences of the compared fields (``"cpu_count: 2 != 8"``)."""
    return [
        f"{k}: {a.get(k, '-')!s} != {b.get(k, '-')!s}"
        for k in COMPARED_FIELDS
        if a.get(k, "-") != b.get(k, "-")
    ]
