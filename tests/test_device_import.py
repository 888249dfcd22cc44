"""`import aiperf_sdk` must work without torch; the device helpers then fail with a typed error.

torch is installed here, so the test blocks it with a meta-path finder in a fresh interpreter
(the same thing a user without the `[torch]` extra sees).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class _NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith(("torch.", "torchvision")):
                raise ImportError(f"blocked for the test: {name}")
            return None

    sys.meta_path.insert(0, _NoTorch())
    """
)


def _run(body: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + textwrap.dedent(body)],
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_import_without_torch_and_typed_errors() -> None:
    proc = _run(
        """
        import aiperf_sdk as perf
        assert "torch" not in sys.modules
        # CPU-side helpers that need no torch keep working
        with perf.device_stage("prefill", device="cuda"):
            pass
        assert perf.flush_device_timings() == 0
        assert perf.default_ledger().count("prefill") == 1
        assert "prefill.gpu" not in perf.default_ledger().stages()
        r = perf.warmup(lambda x: x + 1, [1, 2], rounds=4)
        assert len(r.shapes) == 2 and r.graphs_compiled is None
        with perf.DeviceTelemetry(interval_s=0.01) as tel:
            tel.sample()
        assert tel.report().gpu_available is False
        try:
            perf.DevicePreprocessor("cpu")
        except perf.TorchNotInstalledError as exc:
            assert isinstance(exc, perf.PerfError) and isinstance(exc, ImportError)
            assert "aiperf-sdk[torch]" in str(exc)
        else:
            raise SystemExit("DevicePreprocessor worked without torch?")
        assert "torch" not in sys.modules
        print("OK")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")


def test_blocker_really_blocks_torch() -> None:
    # guards the test above: if the finder stopped working it would pass vacuously
    proc = _run("import torch\n")
    assert proc.returncode != 0
    assert "blocked for the test: torch" in proc.stderr
