"""Lazy access to torch for the device-side helpers, and their shared errors.

Nothing here imports torch at module import time: ``import aiperf_sdk`` works without torch
installed, and the device helpers import it on first use through :func:`require_torch`.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._errors import PerfError

if TYPE_CHECKING:
    import torch


class TorchNotInstalledError(PerfError, ImportError):
    """A device helper was used but torch is not importable (``pip install aiperf-sdk[torch]``)."""


class DeviceUnavailableError(PerfError, RuntimeError):
    """The requested device (e.g. ``"cuda"``) is not available in this process."""


def require_torch() -> ModuleType:
    """Import and return torch, or raise :class:`TorchNotInstalledError` with the fix."""
    mod = sys.modules.get("torch")
    if mod is not None:
        return mod
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
        raise TorchNotInstalledError(
            "this helper needs torch; install it with `pip install aiperf-sdk[torch]` "
            f"(or your platform's torch build first): {exc}"
        ) from exc
    return torch


def torch_if_imported() -> Any | None:
    """torch if something already imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def cuda_available() -> bool:
    """True when torch is importable and reports a usable CUDA device."""
    try:
        torch = require_torch()
    except TorchNotInstalledError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` → the current CUDA device when available, else CPU; validates the rest.

    Raises:
        DeviceUnavailableError: a CUDA device was asked for and CUDA is not available.
        ValueError: the device string is not understood by torch.
    """
    require_torch()
    import torch

    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"not a torch device: {device!r} ({exc})") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"device {device!r} was requested but torch.cuda.is_available() is False "
                "(CPU-only torch build, no GPU, or CUDA_VISIBLE_DEVICES hides it); "
                "pass device='cpu' or device=None to run on the CPU"
            )
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"device {device!r} does not exist: {torch.cuda.device_count()} CUDA device(s)"
            )
    elif dev.type != "cpu":
        raise DeviceUnavailableError(
            f"device type {dev.type!r} is not supported by aiperf_sdk's device helpers "
            "(use 'cuda' or 'cpu')"
        )
    return dev
