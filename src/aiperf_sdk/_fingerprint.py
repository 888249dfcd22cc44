"""Environment fingerprint: what a number was measured on, so baselines compare like with like."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

#: fields that make two runs comparable (``hostname`` is informative only)
COMPARED_FIELDS = (
    "python", "implementation", "os", "machine", "cpu_model", "cpu_count", "aiperf_sdk",
    "numpy", "torch", "gpu",
)

#: distributions whose versions are recorded when installed
PACKAGES = (
    "aiperf-sdk", "numpy", "torch", "torchvision", "hdrhistogram", "pydantic", "anyio",
    "opentelemetry-sdk", "prometheus-client", "vllm", "transformers", "nvidia-pytriton",
    "tritonclient", "fastapi", "uvicorn",
)


class Fingerprint(BaseModel):
    """Machine and software a measurement was taken on; ``id`` is a stable short hash.

    ``id`` covers the compared fields (not the hostname) and the dataset hash, so two runs
    with the same ``id`` are comparable; use it in result and profile file names.
    """

    model_config = ConfigDict(frozen=True)

    python: str
    implementation: str
    os: str
    machine: str
    cpu_model: str
    cpu_count: str
    aiperf_sdk: str
    numpy: str
    torch: str
    gpu: str  #: first GPU's model, ``"-"`` when none is visible
    gpus: list[str] = Field(default_factory=list)  #: every visible GPU's model
    driver: str = "-"  #: NVIDIA driver version (NVML), ``"-"`` when unknown
    cuda: str = "-"  #: CUDA version torch was built with, when torch is loaded
    packages: dict[str, str] = Field(default_factory=dict)  #: installed versions of PACKAGES
    dataset_hash: str | None = None  #: sha256 (16 hex) of the dataset, when given
    hostname: str = ""
    id: str = ""

    def as_dict(self) -> dict[str, str]:
        """Flat string form (the compared fields, hostname and id), as results store it."""
        flat = {k: str(getattr(self, k)) for k in COMPARED_FIELDS}
        flat["hostname"] = self.hostname
        flat["id"] = self.id
        if self.dataset_hash:
            flat["dataset_hash"] = self.dataset_hash
        return flat


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


def _nvml() -> tuple[list[str], str]:
    """(GPU models, driver) from NVML; ([], "-") without a driver or nvidia-ml-py."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return [], "-"
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: this machine simply has none
        return [], "-"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        names = [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
        as_str = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        return as_str, driver.decode() if isinstance(driver, bytes) else str(driver)
    except Exception:
        return [], "-"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _torch_gpus() -> tuple[list[str], str]:
    # Only ask torch when the process already imported it: describing the machine must not
    # import torch (seconds, and a CUDA context).
    torch = sys.modules.get("torch")
    if torch is None:
        return [], "-"
    cuda = str(getattr(torch.version, "cuda", None) or "-")
    try:
        if torch.cuda.is_available():
            return [str(torch.cuda.get_device_name(i))
                    for i in range(torch.cuda.device_count())], cuda
    except Exception:  # a broken CUDA install: describe it rather than fail the run
        return ["unavailable"], cuda
    return [], cuda


def dataset_hash(dataset: str | os.PathLike[str] | bytes) -> str:
    """sha256 (first 16 hex digits) of a dataset file's bytes, or of ``bytes`` given directly.

    Raises:
        FileNotFoundError: the path does not exist.
    """
    h = hashlib.sha256()
    if isinstance(dataset, bytes):
        h.update(dataset)
    else:
        with Path(dataset).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def fingerprint(dataset: str | os.PathLike[str] | bytes | None = None) -> Fingerprint:
    """Describe this machine and its software.

    Example::

        fp = perf.fingerprint(dataset="prompts.jsonl")
        out = f"result-{fp.id}.json"

    Args:
        dataset: a dataset file (or its bytes) whose hash joins the fingerprint.

    Raises:
        FileNotFoundError: ``dataset`` names a missing file.
    """
    torch_gpus, cuda = _torch_gpus()
    nvml_gpus, driver = _nvml()
    gpus = torch_gpus or nvml_gpus
    packages = {d: v for d in PACKAGES if (v := _version(d)) != "-"}
    fields = {
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
        "gpu": gpus[0] if gpus else "-",
    }
    dh = dataset_hash(dataset) if dataset is not None else None
    # without a dataset the hash covers exactly the compared fields (ids in older results match)
    stable = json.dumps(fields if dh is None else {**fields, "dataset_hash": dh}, sort_keys=True)
    return Fingerprint(
        **fields, gpus=gpus, driver=driver, cuda=cuda, packages=packages, dataset_hash=dh,
        hostname=socket.gethostname(), id=hashlib.sha256(stable.encode()).hexdigest()[:16],
    )
