"""Image preprocessing throughput: a PIL per-image loop, torchvision per image, and the helper.

    .venv/bin/python benchmarks/bench_preprocess.py [--n 32] [--reps 9] [--threads 1]

32 photo-like RGB images 480x640 (uint8 HWC) → 224x224, normalized with ImageNet mean/std,
NCHW float32, in one run (interleaved repetitions, medians):

* ``PIL loop``: per image ``Image.resize(BILINEAR)`` → float32 /255 → (x - mean) / std → CHW,
  then ``np.stack`` (the usual ``ToTensor + Normalize`` pipeline);
* ``torchvision``: ``transforms.v2`` per image (Resize(antialias) → ToDtype → Normalize), only
  when torchvision imports beside this torch (it does not beside torch 2.13.0 CPU from PyPI;
  the script says why it was skipped);
* ``DevicePreprocessor``: ``perf.DevicePreprocessor(device).images(batch)`` (CPU here; pass
  ``--device cuda`` on a GPU host, where it includes the host→device copy and synchronizes).

Prints images/s, the helper's ratio to each peer and the max abs difference to the PIL loop
(target: ≥ 2.5x the PIL loop on the CPU, max abs diff ≤ 0.02).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image

import aiperf_sdk as perf
from aiperf_sdk._preprocess import torchvision_status

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def make_images(n: int, h: int, w: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for i in range(n):
        base = np.stack([xx * 255 / (w - 1), yy * 255 / (h - 1),
                         (np.sin((xx + i * 7) / 23.0) + 1) * 127], axis=-1)
        out.append(np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8))
    return out


def pil_loop(images: list[np.ndarray], size: tuple[int, int]) -> np.ndarray:
    out = []
    for a in images:
        r = np.asarray(Image.fromarray(a).resize((size[1], size[0]), Image.Resampling.BILINEAR),
                       dtype=np.float32) / 255.0
        out.append(((r - MEAN) / STD).transpose(2, 0, 1))
    return np.stack(out)


def torchvision_loop_factory(size: tuple[int, int]) -> Callable[[list[np.ndarray]], Any] | None:
    try:
        from torchvision.transforms import v2  # type: ignore[import-not-found,unused-ignore]
    except Exception:
        return None
    tf = v2.Compose([
        v2.Resize(size, antialias=True),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN.tolist(), STD.tolist()),
    ])

    def run(images: list[np.ndarray]) -> Any:
        return torch.stack([tf(torch.from_numpy(a).permute(2, 0, 1)) for a in images])

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (PIL uses 1)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    size = (224, 224)
    images = make_images(args.n, 480, 640)
    pre = perf.DevicePreprocessor(args.device, size=size, ledger=perf.Ledger())
    cuda = pre.device.type == "cuda"

    def helper() -> Any:
        out = pre.images(images)
        if cuda:
            torch.cuda.synchronize()
        return out

    candidates: dict[str, Callable[[], Any]] = {
        "PIL loop": lambda: pil_loop(images, size),
        "DevicePreprocessor": helper,
    }
    tv = torchvision_loop_factory(size)
    if tv is not None:
        candidates["torchvision v2 per image"] = lambda: tv(images)

    for fn in candidates.values():  # warm-up (allocator, pools, kernels)
        fn()
    times: dict[str, list[float]] = {k: [] for k in candidates}
    for _ in range(args.reps):
        for name, fn in candidates.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    ref = pil_loop(images, size)
    got = helper().float().cpu().numpy()
    diff = float(np.abs(got - ref).max())
    rate = {k: args.n / statistics.median(v) for k, v in times.items()}

    print(f"preprocess {args.n} images 480x640 -> 224x224 normalized, float32 NCHW; "
          f"device={pre.device}, torch threads={args.threads}, torch {torch.__version__}, "
          f"median of {args.reps}")
    print(f"{'pipeline':28s} {'img/s':>9s} {'ms/batch':>9s}")
    for k, r in rate.items():
        print(f"{k:28s} {r:9.1f} {1e3 * args.n / r:9.2f}")
    if tv is None:
        why = torchvision_status()
        print(f"{'torchvision v2 per image':28s} {'skipped':>9s}  (torchvision {why})")
    ours = rate["DevicePreprocessor"]
    print(f"ratio DevicePreprocessor / PIL loop: {ours / rate['PIL loop']:.2f}x (target >= 2.5x)")
    if tv is not None:
        tv_rate = rate["torchvision v2 per image"]
        print(f"ratio DevicePreprocessor / torchvision: {ours / tv_rate:.2f}x")
    print(f"max abs diff vs PIL after normalization: {diff:.4f} (target <= 0.02)")
    print(f"staging buffer allocations: {pre.staging_allocations}")
    ok = diff <= 0.02 and ours >= 2.5 * rate["PIL loop"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
