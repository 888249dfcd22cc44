from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import pytest

import aiperf_sdk as perf
from aiperf_sdk._loadgen_env import environment_fingerprint


def test_fingerprint_describes_this_machine() -> None:
    fp = perf.fingerprint()
    assert fp.python == platform.python_version()
    assert fp.machine == platform.machine()
    assert fp.cpu_model and fp.cpu_count.isdigit()
    assert fp.packages["numpy"] == fp.numpy and fp.packages["aiperf-sdk"] == fp.aiperf_sdk
    assert len(fp.id) == 16 and fp.id == perf.fingerprint().id  # stable
    json.loads(fp.model_dump_json())  # serialisable


def test_no_gpu_is_reported_as_such() -> None:
    # this machine (and CI) has no GPU and no NVIDIA driver
    fp = perf.fingerprint()
    if fp.gpus:
        pytest.skip("a GPU is visible here")
    assert fp.gpu == "-" and fp.driver == "-"


def test_dataset_hash_changes_the_id(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"prompt": "x"}\n')
    b.write_text('{"prompt": "y"}\n')
    fa, fb = perf.fingerprint(dataset=a), perf.fingerprint(dataset=b)
    assert fa.dataset_hash and fa.dataset_hash != fb.dataset_hash
    assert len({fa.id, fb.id, perf.fingerprint().id}) == 3
    assert perf.fingerprint(dataset=a.read_bytes()).dataset_hash == fa.dataset_hash
    with pytest.raises(FileNotFoundError):
        perf.fingerprint(dataset=tmp_path / "missing.jsonl")


def test_flat_form_used_by_results_matches() -> None:
    flat = environment_fingerprint()
    assert flat["id"] == perf.fingerprint().id
    assert flat["python"] == platform.python_version()


def test_fingerprint_does_not_import_torch() -> None:
    import subprocess

    code = "import sys, aiperf_sdk as p; p.fingerprint(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip()
    assert out == "False"
