"""DevicePreprocessor on the CPU, against an independent per-image PIL pipeline.

The CUDA branches (pinned pool, copy stream, GPU decode) run in benchmarks/gpu_check.py; here
the device is the CPU, which takes the same code up to the copy.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import aiperf_sdk as perf
from aiperf_sdk._preprocess import bucket_length

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
TOL = 0.02  # max abs difference after normalization (one uint8 level is 1/255/0.225 = 0.0174)


def pil_reference(
    img: np.ndarray, size: tuple[int, int] = (224, 224), letterbox: bool = False, pad: int = 114
) -> np.ndarray:
    """The usual per-image CPU pipeline: PIL bilinear resize, /255, (x - mean) / std, CHW."""
    out_h, out_w = size
    im = Image.fromarray(img)
    if letterbox:
        h, w = img.shape[:2]
        s = min(out_h / h, out_w / w)
        nh, nw = max(1, min(out_h, round(h * s))), max(1, min(out_w, round(w * s)))
        canvas = Image.new("RGB", (out_w, out_h), (pad, pad, pad))
        small = im.resize((nw, nh), Image.Resampling.BILINEAR)
        canvas.paste(small, ((out_w - nw) // 2, (out_h - nh) // 2))
        im = canvas
    else:
        im = im.resize((out_w, out_h), Image.Resampling.BILINEAR)
    x = np.asarray(im, dtype=np.float32) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def smooth_image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A photo-like image (gradients + noise), not only white noise."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 / max(w - 1, 1)), (yy * 255 / max(h - 1, 1)),
                     ((xx + yy) * 127 / max(h + w - 2, 1))], axis=-1)
    noise = rng.normal(0, 20, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(img: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, quality=95) if fmt == "JPEG" else Image.fromarray(
        img
    ).save(buf, fmt)
    return buf.getvalue()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def test_same_size_batch_matches_pil(rng: np.random.Generator, perf_ledger: perf.Ledger) -> None:
    imgs = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(4)]
    imgs.append(smooth_image(rng, 96, 128))
    pre = perf.DevicePreprocessor("cpu", size=(48, 64))
    out = pre.images(imgs)
    assert out.shape == (5, 3, 48, 64) and out.dtype == torch.float32
    assert out.is_contiguous()
    ref = np.stack([pil_reference(a, (48, 64)) for a in imgs])
    diff = np.abs(out.numpy() - ref).max()
    assert diff <= TOL
    for name in ("h2d", "preprocess.resize", "preprocess.normalize"):
        assert perf_ledger.count(name) == 1
    assert "preprocess.decode" not in perf_ledger.stages()  # no bytes, no decode step


@pytest.mark.parametrize("resize", ["stretch", "letterbox"])
def test_mixed_sizes_and_encoded_bytes(
    rng: np.random.Generator, perf_ledger: perf.Ledger, resize: str
) -> None:
    arrays = [smooth_image(rng, h, w) for h, w in [(60, 80), (90, 45), (60, 80), (32, 32),
                                                  (17, 200)]]
    png_src, jpg_src = smooth_image(rng, 70, 50), smooth_image(rng, 40, 90)
    batch: list[object] = [*arrays, encode(png_src, "PNG"), encode(jpg_src, "JPEG")]
    jpg = batch[-1]
    assert isinstance(jpg, bytes)
    decoded = [*arrays, png_src, np.asarray(Image.open(io.BytesIO(jpg)).convert("RGB"))]
    pre = perf.DevicePreprocessor("cpu", size=(32, 32), resize=resize)  # type: ignore[arg-type]
    out = pre.images(batch)
    ref = np.stack([pil_reference(a, (32, 32), letterbox=resize == "letterbox") for a in decoded])
    assert out.shape == (7, 3, 32, 32)
    assert np.abs(out.numpy() - ref).max() <= TOL
    assert perf_ledger.count("preprocess.decode") == 1
    if resize == "letterbox":  # the border is the normalized pad value
        pad = (114 / 255 - MEAN) / STD
        np.testing.assert_allclose(out[4, :, 0, 0].numpy(), pad, atol=1e-5)  # 17x200: wide


@pytest.mark.parametrize(("dtype", "tol"), [("float16", TOL), ("bfloat16", 0.03)])
def test_half_dtypes(rng: np.random.Generator, dtype: str, tol: float) -> None:
    imgs = [smooth_image(rng, 64, 64) for _ in range(3)]
    out = perf.DevicePreprocessor("cpu", size=(32, 32), dtype=dtype).images(imgs)
    assert out.dtype == getattr(torch, dtype)
    ref = np.stack([pil_reference(a, (32, 32)) for a in imgs])
    assert np.abs(out.float().numpy() - ref).max() <= tol


def test_custom_mean_std_and_identity_size(rng: np.random.Generator) -> None:
    img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    out = perf.DevicePreprocessor("cpu", size=(8, 8), mean=(0, 0, 0), std=(1, 1, 1)).images([img])
    np.testing.assert_allclose(out[0].numpy(), img.transpose(2, 0, 1) / 255.0, atol=1e-6)


def test_result_is_not_a_view_of_the_staging_buffer(rng: np.random.Generator) -> None:
    pre = perf.DevicePreprocessor("cpu", size=(8, 8), mean=(0, 0, 0), std=(1, 1, 1))
    a, b = (rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(2))
    first = pre.images([a])
    kept = first.clone()
    pre.images([b])  # reuses the pooled staging buffer
    assert torch.equal(first, kept)


def test_staging_buffers_are_pooled(rng: np.random.Generator) -> None:
    pre = perf.DevicePreprocessor("cpu", size=(16, 16))
    imgs = [rng.integers(0, 256, (40, 30, 3), dtype=np.uint8) for _ in range(4)]
    pre.images(imgs)
    allocated = pre.staging_allocations
    for _ in range(5):
        pre.images(imgs)
        pre.images(imgs[:2])
    assert pre.staging_allocations == allocated == 1


def test_bad_image_input_is_typed_and_changes_nothing(
    rng: np.random.Generator, perf_ledger: perf.Ledger
) -> None:
    pre = perf.DevicePreprocessor("cpu", size=(16, 16))
    good = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
    bad_inputs: list[object] = [
        [],
        good,
        [good, np.zeros((20, 20), np.uint8)],
        [good, np.zeros((20, 20, 3), np.float32)],
        [good, np.zeros((0, 5, 3), np.uint8)],
        [good, b"not an image"],
        [good, b""],
        [good, "path.jpg"],
    ]
    for bad in bad_inputs:
        with pytest.raises(perf.PreprocessInputError) as info:
            pre.images(bad)  # type: ignore[arg-type]
        assert isinstance(info.value, perf.PerfError) and isinstance(info.value, ValueError)
    assert pre.staging_allocations == 0
    assert "h2d" not in perf_ledger.stages()  # failed before staging anything


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="size"):
        perf.DevicePreprocessor("cpu", size=(0, 10))
    with pytest.raises(ValueError, match="resize"):
        perf.DevicePreprocessor("cpu", resize="crop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype"):
        perf.DevicePreprocessor("cpu", dtype="int8")
    with pytest.raises(ValueError, match="std"):
        perf.DevicePreprocessor("cpu", std=(1, 0, 1))
    with pytest.raises(ValueError, match="buckets"):
        perf.DevicePreprocessor("cpu", buckets=[64, 32])
    with pytest.raises(ValueError, match="decode_on_device"):
        perf.DevicePreprocessor("cpu", decode_on_device=True)
    if not torch.cuda.is_available():
        with pytest.raises(perf.DeviceUnavailableError):
            perf.DevicePreprocessor("cuda")
    pre = perf.DevicePreprocessor()  # auto: CPU here
    assert pre.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


# -- text -----------------------------------------------------------------------------------


def test_text_pow2_padding_and_mask(perf_ledger: perf.Ledger) -> None:
    pre = perf.DevicePreprocessor("cpu", pad_id=-1)
    b = pre.text([[5, 6, 7], [8], [], np.array([1, 2, 3, 4, 5], dtype=np.int32)])
    assert b.input_ids.shape == (4, 8) and b.input_ids.dtype == torch.int64
    assert b.lengths == [3, 1, 0, 5]
    assert b.input_ids[0].tolist() == [5, 6, 7, -1, -1, -1, -1, -1]
    assert b.attention_mask[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert b.attention_mask[2].sum().item() == 0
    assert b.input_ids[3, :5].tolist() == [1, 2, 3, 4, 5]
    assert perf_ledger.count("preprocess.pad") == 1


def test_text_bucket_list_overflow_and_max_length() -> None:
    pre = perf.DevicePreprocessor("cpu", buckets=[4, 16])
    assert pre.text([[1] * 3]).input_ids.shape == (1, 4)
    assert pre.text([[1] * 5, [2]]).input_ids.shape == (2, 16)
    assert pre.text([[1] * 20]).input_ids.shape == (1, 20)  # the batcher's "inf" bucket
    assert perf.DevicePreprocessor("cpu", buckets=None).text([[1] * 5]).input_ids.shape == (1, 5)
    capped = perf.DevicePreprocessor("cpu", max_length=8)
    with pytest.raises(perf.SequenceTooLongError, match="max_length"):
        capped.text([[1] * 9])


def test_text_bad_input_is_typed() -> None:
    pre = perf.DevicePreprocessor("cpu")
    for bad in ([], [[1.5, 2.0]], [[1, 2], "abc"], [[[1, 2]]], [None], "12", [[True]]):
        with pytest.raises(perf.PreprocessInputError):
            pre.text(bad)  # type: ignore[arg-type]


@given(st.integers(0, 5000))
def test_bucket_length_pow2_is_the_batchers_rule(n: int) -> None:
    got = bucket_length(n, "pow2")
    assert got >= max(n, 1) and got & (got - 1) == 0
    assert got == 1 or got // 2 < max(n, 1)


@given(st.lists(st.integers(1, 4096), min_size=1, max_size=8, unique=True), st.integers(0, 5000))
def test_bucket_length_bounds(bounds: list[int], n: int) -> None:
    bounds.sort()
    got = bucket_length(n, bounds)
    fitting = [b for b in bounds if b >= n]
    assert got == (fitting[0] if fitting else max(n, 1))
