"""examples/vllm_plugin.md matches the plugin: its budget loads, the environment variables and
the entry point it names are the ones the package uses. (Its Python block runs against real
vLLM in test_vllm_real.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import aiperf_sdk as perf

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "examples" / "vllm_plugin.md").read_text()
PLUGIN = (ROOT / "integrations" / "vllm" / "src" / "aiperf_sdk_vllm" / "plugin.py").read_text()


def test_budget_in_the_example_is_a_valid_budget(tmp_path: Path) -> None:
    [yaml_text] = re.findall(r"<<'EOF'\n(.*?)\nEOF", DOC, re.S)
    path = tmp_path / "vllm_budget.yaml"
    path.write_text(yaml_text)
    budget = perf.Budget.from_yaml(path)
    ledger = perf.Ledger()
    ledger.record("queue", 600_000_000, model="m")  # 600 ms > the 500 ms queue limit
    assert not ledger.check(budget).ok


def test_environment_variables_and_entry_point_are_the_real_ones() -> None:
    named = set(re.findall(r"`(AIPERF_VLLM_[A-Z_]+)`", DOC))
    assert named == {"AIPERF_VLLM_BUDGET"}
    assert all(f'"{v}"' in PLUGIN for v in named)
    pyproject = (ROOT / "integrations" / "vllm" / "pyproject.toml").read_text()
    [target] = re.findall(
        r'\[project\.entry-points\."vllm\.stat_logger_plugins"\]\naiperf = "([^"]+)"', pyproject)
    assert f"`aiperf = {target}`" in DOC
    assert "group `vllm.stat_logger_plugins`" in DOC
