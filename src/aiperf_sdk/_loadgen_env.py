"""Environment fingerprint: what a result was measured on, so baselines compare like with like."""

from __future__ import annotations

from ._fingerprint import COMPARED_FIELDS, fingerprint


def environment_fingerprint() -> dict[str, str]:
    """Flat form of :func:`aiperf_sdk.fingerprint` that load results store; ``id`` hashes the
    compared fields.

    Example::

        fp = environment_fingerprint()
        fp["cpu_model"], fp["id"]
    """
    return fingerprint().as_dict()


def fingerprint_differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Human-readable differences of the compared fields (``"cpu_count: 2 != 8"``)."""
    return [
        f"{k}: {a.get(k, '-')!s} != {b.get(k, '-')!s}"
        for k in COMPARED_FIELDS
        if a.get(k, "-") != b.get(k, "-")
    ]
