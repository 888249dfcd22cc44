"""``DevicePreprocessor``: batch images and token ids on the device, with few copies.

Images: decode (PIL on the CPU; ``torchvision.io.decode_jpeg`` on the GPU where torchvision
imports and the target is CUDA) → pack every image's uint8 pixels into one pooled host staging
buffer (page-locked when CUDA is available) → one host→device copy on a dedicated stream →
resize (one ``interpolate`` per distinct source size, antialiased bilinear) or letterbox →
normalize (``x * 1/(255·std) - mean/std``) → NCHW float on the device.

Text: token-id lists → one ``(2, batch, bucket_length)`` int64 staging buffer holding ids and
attention mask → one copy.

CUDA stream ordering: the copy runs on a side stream (it does not wait for the compute queued
on the current stream, so it overlaps it); the current stream then ``wait_stream``s the copy
stream before anything reads the result, and the result is ``record_stream``-ed on the current
stream so the caching allocator never hands its memory to another tensor while the consumer
still uses it. A staging buffer is reused only after the copy out of it has completed (a CUDA
event recorded after the copy); the pool keeps ``pool_size`` buffers, so the host waits only
when that many batches are in flight at once.
"""

from __future__ import annotations

import bisect
import io
import itertools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

import numpy as np

from ._device_timing import device_stage
from ._device_torch import require_torch, resolve_device
from ._errors import PerfError
from ._ledger import Ledger

if TYPE_CHECKING:
    import torch

#: ImageNet mean / std (RGB), the default normalization
IMAGENET_MEAN: Final = (0.485, 0.456, 0.406)
IMAGENET_STD: Final = (0.229, 0.224, 0.225)

ImageInput = Any  # np.ndarray (H, W, 3) uint8 | bytes | bytearray | memoryview
Buckets = Sequence[int] | Literal["pow2"] | None
_JPEG_MAGIC: Final = b"\xff\xd8\xff"


class PreprocessInputError(PerfError, ValueError):
    """A batch handed to :class:`DevicePreprocessor` is malformed; nothing was processed."""


class SequenceTooLongError(PreprocessInputError):
    """A token sequence is longer than the preprocessor's ``max_length``."""


class TextBatch(NamedTuple):
    """Padded token ids and attention mask on the device (rows are the input order)."""

    #: ``(batch, length)`` int64 token ids, padded with ``pad_id``
    input_ids: torch.Tensor
    #: ``(batch, length)`` int64, 1 for real tokens and 0 for padding
    attention_mask: torch.Tensor
    #: real (unpadded) length of each row
    lengths: list[int]


def bucket_length(length: int, buckets: Buckets) -> int:
    """Padded length of a batch whose longest item has ``length`` tokens.

    Same boundaries as ``DynamicBatcher(buckets=...)``: ``"pow2"``: the next power of two (at
    least 1); a sequence of increasing upper bounds: the smallest bound ≥ ``length``, and
    ``length`` itself above the largest bound (the batcher's ``"inf"`` overflow bucket);
    ``None`` (one bucket): ``length`` itself (at least 1).

    Raises:
        ValueError: ``length`` is negative or ``buckets`` is a string other than ``"pow2"``.
    """
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if buckets is None:
        return max(1, length)
    if isinstance(buckets, str):
        if buckets != "pow2":
            raise ValueError(f"buckets must be 'pow2', None or a list of bounds, got {buckets!r}")
        return 1 << (max(length, 1) - 1).bit_length()
    i = bisect.bisect_left(buckets, length)
    return int(buckets[i]) if i < len(buckets) else max(1, length)


def _check_buckets(buckets: Buckets) -> Buckets:
    if buckets is None or buckets == "pow2":
        return buckets
    if isinstance(buckets, str):
        raise ValueError(f"buckets must be 'pow2', None or a list of bounds, got {buckets!r}")
    bounds = list(buckets)
    if not bounds or any(
        isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in bounds
    ) or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"buckets must be strictly increasing positive integers, got {buckets!r}")
    return tuple(bounds)


class _Slot:
    """One reusable host staging buffer (uint8, pinned when CUDA is used)."""

    __slots__ = ("buf", "event")

    def __init__(self) -> None:
        self.buf: torch.Tensor | None = None
        #: CUDA event recorded after the last copy out of ``buf``
        self.event: Any = None


class _StagingPool:
    """``size`` reusable host buffers; grows a buffer (to a power of two) when too small."""

    def __init__(self, pin: bool, size: int) -> None:
        self._pin = pin
        self._size = size
        self._lock = threading.Lock()
        self._free: list[_Slot] = [_Slot() for _ in range(size)]
        #: buffers (re)allocated so far; stays flat once the pool has warmed up
        self.allocations = 0

    def acquire(self, nbytes: int) -> _Slot:
        import torch

        with self._lock:
            slot = self._free.pop() if self._free else _Slot()
        if slot.event is not None:
            slot.event.synchronize()  # the previous copy out of this buffer has finished
            slot.event = None
        if slot.buf is None or slot.buf.numel() < nbytes:
            cap = 1 << max(12, (nbytes - 1).bit_length())
            slot.buf = torch.empty(cap, dtype=torch.uint8, pin_memory=self._pin)
            self.allocations += 1
        return slot

    def release(self, slot: _Slot) -> None:
        with self._lock:
            if len(self._free) < self._size:
                self._free.append(slot)


class DevicePreprocessor:
    """Preprocess image and token batches into device tensors with one host→device copy.

    Images (``images()``): a batch of RGB ``uint8`` arrays ``(H, W, 3)`` and/or encoded
    JPEG/PNG bytes of any sizes → ``(N, 3, size[0], size[1])`` tensor of ``dtype`` on
    ``device``, normalized with ``mean``/``std`` (per channel, on the 0..1 scale).
    ``resize="stretch"`` scales each image to ``size``; ``"letterbox"`` keeps the aspect
    ratio, scales to fit and centers it on a canvas filled with ``pad_value`` (a uint8 pixel
    value, normalized like the pixels). Resizing is antialiased bilinear, as PIL's
    ``Image.resize(..., BILINEAR)``: on the CPU it runs on uint8 (torch's PIL-compatible
    kernel); on CUDA in float32. Against a per-image PIL pipeline the result is within 0.02
    (max abs, after normalization with ImageNet std: one uint8 level is 0.0175).

    Text (``text()``): token-id lists → :class:`TextBatch` padded to the bucket of the longest
    row (``buckets`` as the batcher's), with the attention mask, from one staging buffer.

    Each step records a stage in the ledger: ``preprocess.decode`` (only when bytes were
    given), ``h2d`` (packing into the staging buffer and the copy), ``preprocess.resize``,
    ``preprocess.normalize``, ``preprocess.pad``. On CUDA these are
    :class:`device_stage`\\ s, so ``h2d.gpu`` etc. hold the device time.

    On CUDA, host buffers are pinned and pooled, the copy is ``non_blocking`` on a dedicated
    stream and the result is ordered before the current stream's later work; on the CPU the
    staging buffer is the input of the resize (no copy beyond packing).

    Example::

        pre = perf.DevicePreprocessor(size=(224, 224), dtype="float16")   # device: cuda if any
        pixels = pre.images([jpeg_bytes, np_image])      # (2, 3, 224, 224) float16
        toks = pre.text([[101, 7592, 102], [101, 102]])  # TextBatch, length 4 (pow2)
        logits = model(toks.input_ids, attention_mask=toks.attention_mask)

    Args:
        device: ``"cuda"``, ``"cuda:N"``, ``"cpu"``, a ``torch.device``; ``None``: CUDA if
            available, else CPU.
        size: output ``(height, width)`` of images.
        resize: ``"stretch"`` or ``"letterbox"``.
        mean, std: per-channel normalization on the 0..1 scale (RGB order).
        dtype: output float dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or a
            ``torch.dtype``.
        pad_value: uint8 value of the letterbox border.
        buckets: text padding: ``"pow2"``, increasing bounds, or ``None`` (pad to longest).
        pad_id: token id used for padding.
        max_length: reject token rows longer than this (``SequenceTooLongError``).
        decode_on_device: decode JPEGs with ``torchvision.io.decode_jpeg(device=...)``;
            ``None``: when the device is CUDA and torchvision imports.
        pool_size: staging buffers kept for reuse (batches in flight without host waits).
        ledger: ledger for the stages; default: the request's, else the default ledger.

    Raises:
        TorchNotInstalledError: torch is not installed.
        DeviceUnavailableError: a CUDA device was asked for and is not available.
        ValueError: invalid size, mean/std, dtype, buckets or pool_size.
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        *,
        size: tuple[int, int] = (224, 224),
        resize: Literal["stretch", "letterbox"] = "stretch",
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        dtype: str | torch.dtype = "float32",
        pad_value: int = 114,
        buckets: Buckets = "pow2",
        pad_id: int = 0,
        max_length: int | None = None,
        decode_on_device: bool | None = None,
        pool_size: int = 2,
        ledger: Ledger | None = None,
    ) -> None:
        require_torch()
        import torch

        self.device = resolve_device(device)
        if (
            len(size) != 2
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in size)
        ):
            raise ValueError(f"size must be (height, width) positive ints, got {size!r}")
        if resize not in ("stretch", "letterbox"):
            raise ValueError(f"resize must be 'stretch' or 'letterbox', got {resize!r}")
        if len(mean) != 3 or len(std) != 3 or any(not s > 0 for s in std):
            raise ValueError("mean and std need 3 values (RGB) and std must be > 0")
        if isinstance(dtype, str):
            names = {"float32": torch.float32, "float16": torch.float16,
                     "bfloat16": torch.bfloat16}
            if dtype not in names:
                raise ValueError(f"dtype must be one of {sorted(names)}, got {dtype!r}")
            dtype = names[dtype]
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
        if isinstance(pad_value, bool) or not isinstance(pad_value, int) or not (
            0 <= pad_value <= 255
        ):
            raise ValueError(f"pad_value must be an int in 0..255, got {pad_value!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.size = (int(size[0]), int(size[1]))
        self.resize = resize
        self.dtype: torch.dtype = dtype
        self.pad_value = pad_value
        self.buckets = _check_buckets(buckets)
        self.pad_id = int(pad_id)
        self.max_length = max_length
        self.ledger = ledger
        self._cuda = self.device.type == "cuda"
        std_t = torch.tensor([float(s) for s in std], dtype=torch.float32)
        mean_t = torch.tensor([float(m) for m in mean], dtype=torch.float32)
        self._scale = (1.0 / (255.0 * std_t)).view(1, 3, 1, 1).to(self.device)
        self._bias = (-mean_t / std_t).view(1, 3, 1, 1).to(self.device)
        self._pool = _StagingPool(pin=self._cuda, size=pool_size)
        self._copy_stream: Any = (
            torch.cuda.Stream(self.device) if self._cuda else None  # type: ignore[no-untyped-call]
        )
        if decode_on_device is None:
            decode_on_device = self._cuda and _torchvision_decode_jpeg() is not None
        elif decode_on_device and (not self._cuda or _torchvision_decode_jpeg() is None):
            raise ValueError(
                "decode_on_device=True needs a CUDA device and an importable torchvision"
            )
        self.decode_on_device = bool(decode_on_device)

    # -- public API ------------------------------------------------------------------------

    @property
    def staging_allocations(self) -> int:
        """Host staging buffers allocated so far (flat once warmed up: no per-call alloc)."""
        return self._pool.allocations

    def images(self, batch: Sequence[ImageInput]) -> torch.Tensor:
        """Decode, resize/letterbox and normalize a batch into ``(N, 3, H, W)`` on the device.

        Example::

            x = pre.images([np.zeros((480, 640, 3), np.uint8), open("a.jpg", "rb").read()])

        Raises:
            PreprocessInputError: the batch is empty or not a sequence, an array is not
                ``uint8`` ``(H, W, 3)``, or bytes cannot be decoded (message names the index).
        """

        items = _as_batch(batch, "images")
        for i, item in enumerate(items):
            _check_image(i, item)
        host: list[np.ndarray[Any, Any] | None] = [
            item if isinstance(item, np.ndarray) else None for item in items
        ]
        on_device: dict[int, torch.Tensor] = {}
        encoded = [i for i, item in enumerate(items) if host[i] is None]
        if encoded:
            with device_stage("preprocess.decode", device=self._stage_device,
                              ledger=self.ledger):
                self._decode(items, encoded, host, on_device)

        # group by source size: one interpolate call per distinct size
        groups: dict[tuple[int, int], list[int]] = {}
        for i in range(len(items)):
            shape = _hw(host[i], on_device.get(i))
            groups.setdefault(shape, []).append(i)
        host_groups = [(hw, idx) for hw, idx in groups.items() if host[idx[0]] is not None]
        dev_groups = [(hw, idx) for hw, idx in groups.items() if host[idx[0]] is None]

        with device_stage("h2d", device=self._stage_device, ledger=self.ledger):
            packed, cpu_slot = self._pack_images(host, host_groups)
        try:
            return self._resize_normalize(len(items), packed, host_groups, dev_groups,
                                          on_device)
        finally:
            if cpu_slot is not None:  # on the CPU the staging buffer was read until here
                self._pool.release(cpu_slot)

    def _resize_normalize(
        self,
        n: int,
        packed: dict[tuple[int, int], torch.Tensor],
        host_groups: list[tuple[tuple[int, int], list[int]]],
        dev_groups: list[tuple[tuple[int, int], list[int]]],
        on_device: dict[int, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        out_h, out_w = self.size
        canvas_dtype = torch.float32 if self._cuda else torch.uint8
        with device_stage("preprocess.resize", device=self._stage_device, ledger=self.ledger):
            resized: list[tuple[list[int], torch.Tensor]] = []
            for (h, w), idx in host_groups:
                resized.append((idx, self._resize(packed[(h, w)].permute(0, 3, 1, 2), h, w)))
            for (h, w), idx in dev_groups:
                x = torch.stack([on_device[i] for i in idx])  # (n, 3, h, w) on the device
                resized.append((idx, self._resize(x, h, w)))
            canvas = self._assemble(resized, n, canvas_dtype)
        with device_stage("preprocess.normalize", device=self._stage_device,
                          ledger=self.ledger):
            out = torch.empty((n, 3, out_h, out_w), dtype=torch.float32, device=self.device)
            out.copy_(canvas)
            out.mul_(self._scale).add_(self._bias)
            if self.dtype != torch.float32:
                out = out.to(self.dtype)
        return out

    def text(self, batch: Sequence[Sequence[int] | np.ndarray[Any, Any]]) -> TextBatch:
        """Pad token-id rows to the batch's bucket length, with the attention mask.

        Example::

            b = pre.text([[5, 6, 7], [8]])   # buckets="pow2": length 4
            b.input_ids.shape, b.attention_mask[1].tolist()   # (2, 4), [1, 0, 0, 0]

        Raises:
            PreprocessInputError: the batch is empty or a row is not a sequence of integers.
            SequenceTooLongError: a row is longer than ``max_length``.
        """
        import torch

        rows_in = _as_batch(batch, "text")
        rows: list[np.ndarray[Any, Any]] = []
        for i, row in enumerate(rows_in):
            rows.append(_token_row(i, row))
        longest = max(r.shape[0] for r in rows)
        if self.max_length is not None and longest > self.max_length:
            raise SequenceTooLongError(
                f"a row has {longest} tokens, more than max_length={self.max_length}"
            )
        length = bucket_length(longest, self.buckets)
        n = len(rows)
        with device_stage("preprocess.pad", device=self._stage_device, ledger=self.ledger):
            nbytes = 2 * n * length * 8
            slot = self._pool.acquire(nbytes) if self._cuda else None
            if slot is not None:
                assert slot.buf is not None
                host = slot.buf[:nbytes].view(torch.int64).view(2, n, length)
            else:
                host = torch.empty((2, n, length), dtype=torch.int64)
            arr = host.numpy()
            arr[0].fill(self.pad_id)
            arr[1].fill(0)
            for i, r in enumerate(rows):
                k = r.shape[0]
                arr[0, i, :k] = r
                arr[1, i, :k] = 1
        if slot is None:
            dev = host
        else:
            with device_stage("h2d", device=self._stage_device, ledger=self.ledger):
                dev = self._copy_to_device(host, slot)
        return TextBatch(dev[0], dev[1], [int(r.shape[0]) for r in rows])

    def __repr__(self) -> str:
        return (
            f"DevicePreprocessor(device={str(self.device)!r}, size={self.size}, "
            f"resize={self.resize!r}, dtype={self.dtype}, buckets={self.buckets!r})"
        )

    # -- steps -------------------------------------------------------------------------------

    @property
    def _stage_device(self) -> str:
        return str(self.device)

    def _decode(
        self,
        items: Sequence[ImageInput],
        encoded: list[int],
        host: list[np.ndarray[Any, Any] | None],
        on_device: dict[int, torch.Tensor],
    ) -> None:
        gpu_jpeg: list[int] = []
        if self.decode_on_device:
            gpu_jpeg = [i for i in encoded if bytes(items[i][:3]) == _JPEG_MAGIC]
        decoded: dict[int, np.ndarray[Any, Any]] = {}
        for i in encoded:
            if i not in gpu_jpeg:
                decoded[i] = _pil_decode(i, items[i])
        if gpu_jpeg:
            decoded_dev = self._gpu_decode(items, gpu_jpeg)
            for i in gpu_jpeg:
                if i in decoded_dev:
                    on_device[i] = decoded_dev[i]
                else:  # the GPU decoder refused it (e.g. CMYK): PIL on the CPU
                    decoded[i] = _pil_decode(i, items[i])
        # all decoded without error: only now publish them
        for i, arr in decoded.items():
            host[i] = arr

    def _gpu_decode(self, items: Sequence[ImageInput], idx: list[int]) -> dict[int, torch.Tensor]:
        import torch

        decode_jpeg = _torchvision_decode_jpeg()
        assert decode_jpeg is not None
        from torchvision.io import ImageReadMode  # type: ignore[import-not-found,unused-ignore]

        result: dict[int, torch.Tensor] = {}
        datas = [torch.frombuffer(bytearray(items[i]), dtype=torch.uint8) for i in idx]
        try:
            outs = decode_jpeg(datas, mode=ImageReadMode.RGB, device=self.device)
        except RuntimeError:
            return result
        for i, t in zip(idx, outs, strict=True):
            result[i] = t
        return result

    def _pack_images(
        self,
        host: list[np.ndarray[Any, Any] | None],
        host_groups: list[tuple[tuple[int, int], list[int]]],
    ) -> tuple[dict[tuple[int, int], torch.Tensor], _Slot | None]:
        """Pack host images into one staging buffer → per-size (n, h, w, 3) device views.

        Also returns the slot when it is still in use (CPU: the views are the buffer); on
        CUDA the slot is back in the pool, guarded by the copy's event.
        """
        if not host_groups:
            return {}, None
        total = sum(h * w * 3 * len(idx) for (h, w), idx in host_groups)
        slot = self._pool.acquire(total)
        assert slot.buf is not None
        flat = slot.buf.numpy()
        offsets: list[tuple[tuple[int, int], int, int]] = []
        off = 0
        for (h, w), idx in host_groups:
            size = h * w * 3
            block = flat[off: off + size * len(idx)].reshape(len(idx), h, w, 3)
            for j, i in enumerate(idx):
                arr = host[i]
                assert arr is not None
                np.copyto(block[j], arr, casting="no")
            offsets.append(((h, w), off, len(idx)))
            off += size * len(idx)
        staged = slot.buf[:total]
        kept: _Slot | None = None
        if self._cuda:
            dev = self._copy_to_device(staged, slot)
        else:
            dev, kept = staged, slot
        views = {
            hw: dev[o: o + hw[0] * hw[1] * 3 * k].view(k, hw[0], hw[1], 3)
            for hw, o, k in offsets
        }
        return views, kept

    def _copy_to_device(self, staged: torch.Tensor, slot: _Slot) -> torch.Tensor:
        """One non_blocking copy of a pinned buffer on the copy stream, ordered for the consumer."""
        import torch

        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            dev = staged.to(self.device, non_blocking=True)
            ev = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ev.record(self._copy_stream)
        slot.event = ev  # the host buffer is reused only after this copy has finished
        self._pool.release(slot)
        current.wait_stream(self._copy_stream)  # consumers on `current` see the whole copy
        dev.record_stream(current)  # allocated on the copy stream, used on `current`
        return dev

    def _resize(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """(n, 3, h, w) uint8 (NHWC memory for packed host images) → (n, 3, th, tw)."""
        import torch
        import torch.nn.functional as F

        th, tw = self._target_hw(h, w)
        if (th, tw) == (h, w):
            return x
        if self._cuda:
            # CUDA has no uint8 antialiased kernel; float is cheap there
            x = x.to(torch.float32)
        return F.interpolate(x, size=(th, tw), mode="bilinear", antialias=True,
                             align_corners=False)

    def _target_hw(self, h: int, w: int) -> tuple[int, int]:
        out_h, out_w = self.size
        if self.resize == "stretch":
            return out_h, out_w
        s = min(out_h / h, out_w / w)
        return (max(1, min(out_h, round(h * s))), max(1, min(out_w, round(w * s))))

    def _assemble(
        self, resized: list[tuple[list[int], torch.Tensor]], n: int, dtype: torch.dtype
    ) -> torch.Tensor:
        import torch

        out_h, out_w = self.size
        if (
            len(resized) == 1
            and resized[0][0] == list(range(n))
            and tuple(resized[0][1].shape[-2:]) == (out_h, out_w)
        ):
            return resized[0][1].to(dtype)  # one group, already in order: no scatter
        canvas = torch.full((n, 3, out_h, out_w), float(self.pad_value), dtype=dtype,
                            device=self.device)
        for idx, y in resized:
            th, tw = y.shape[-2], y.shape[-1]
            top, left = (out_h - th) // 2, (out_w - tw) // 2
            rows = torch.tensor(idx, dtype=torch.long, device=self.device)
            canvas[rows, :, top: top + th, left: left + tw] = y.to(dtype)
        return canvas


def _as_batch(batch: object, what: str) -> Sequence[Any]:
    if isinstance(batch, (str, bytes, bytearray, memoryview, np.ndarray)) or not isinstance(
        batch, Sequence
    ):
        raise PreprocessInputError(
            f"{what}() takes a list (a batch), got {type(batch).__name__}; wrap one item in []"
        )
    if len(batch) == 0:
        raise PreprocessInputError(f"{what}() got an empty batch")
    return batch


def _check_image(i: int, item: object) -> None:
    if isinstance(item, np.ndarray):
        if item.dtype != np.uint8 or item.ndim != 3 or item.shape[2] != 3:
            raise PreprocessInputError(
                f"image {i}: expected a uint8 array of shape (H, W, 3) (RGB), got "
                f"{item.dtype} {item.shape}"
            )
        if item.shape[0] < 1 or item.shape[1] < 1:
            raise PreprocessInputError(f"image {i}: empty image {item.shape}")
    elif isinstance(item, (bytes, bytearray, memoryview)):
        if len(item) == 0:
            raise PreprocessInputError(f"image {i}: empty bytes")
    else:
        raise PreprocessInputError(
            f"image {i}: expected a uint8 (H, W, 3) numpy array or encoded JPEG/PNG bytes, got "
            f"{type(item).__name__}"
        )


def _hw(arr: np.ndarray[Any, Any] | None, dev: torch.Tensor | None) -> tuple[int, int]:
    if arr is not None:
        return int(arr.shape[0]), int(arr.shape[1])
    assert dev is not None
    return int(dev.shape[-2]), int(dev.shape[-1])


def _pil_decode(i: int, data: bytes | bytearray | memoryview) -> np.ndarray[Any, Any]:
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - pillow ships with the torch extra
        raise PreprocessInputError(
            f"image {i}: decoding bytes needs pillow (`pip install aiperf-sdk[torch]`)"
        ) from exc
    try:
        with Image.open(io.BytesIO(bytes(data))) as img:
            return np.asarray(img.convert("RGB"))
    except Exception as exc:  # PIL raises several types for bad data
        raise PreprocessInputError(
            f"image {i}: cannot decode the bytes as an image: {exc}"
        ) from exc


def _token_row(i: int, row: object) -> np.ndarray[Any, Any]:
    if isinstance(row, (str, bytes)) or not (isinstance(row, (Sequence, np.ndarray))):
        raise PreprocessInputError(
            f"row {i}: expected a sequence of token ids, got {type(row).__name__}"
        )
    if len(row) == 0:
        return np.zeros(0, dtype=np.int64)
    arr = np.asarray(row)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise PreprocessInputError(
            f"row {i}: token ids must be a flat sequence of integers, got dtype {arr.dtype} "
            f"shape {arr.shape}"
        )
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise PreprocessInputError(f"row {i}: token id does not fit in int64")
    return arr.astype(np.int64, copy=False)


_TV_DECODE: list[Any] = []


def _torchvision_decode_jpeg() -> Any | None:
    """``torchvision.io.decode_jpeg`` when torchvision imports beside this torch, else None."""
    if not _TV_DECODE:
        fn: Any = None
        try:
            from torchvision.io import decode_jpeg  # type: ignore[import-not-found,unused-ignore]

            fn = decode_jpeg
        except Exception:  # not installed, or built against another torch (operator errors)
            fn = None
        _TV_DECODE.append(fn)
    return _TV_DECODE[0]


def torchvision_status() -> str:
    """Why torchvision is or is not used (for benchmarks and reports)."""
    try:
        import torchvision  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except Exception as exc:
        return f"unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return "available"

