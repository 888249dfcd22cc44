"""Exercise every CUDA branch of the device helpers; print one PASS/FAIL/SKIP line per check.

    .venv/bin/python benchmarks/gpu_check.py [--quick]

Runs anywhere: on a host without CUDA the CPU checks run and every CUDA check prints SKIP
with the reason. Exit status 1 when any check FAILs. Covers: ``device_stage`` CUDA events
(``.gpu`` recorded, no synchronize on the hot path), ``DevicePreprocessor`` on CUDA (pinned
pooled staging, copy-stream ordering, overlap with queued compute, staging reuse under
back-to-back batches, images vs PIL within 0.02, GPU JPEG decode when torchvision imports,
text), ``warmup`` with CUDA synchronize, ``DeviceTelemetry`` NVML readings, and the
preprocessing throughput ratio vs the PIL loop on the GPU.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image

import aiperf_sdk as perf
from aiperf_sdk._preprocess import _torchvision_decode_jpeg, torchvision_status

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
CUDA = torch.cuda.is_available()
_sleep: Callable[[int], None] = torch.cuda._sleep  # spin kernel: GPU time without host time
RESULTS: list[str] = []


def check(name: str, needs_cuda: bool = True) -> Callable[[Callable[[], str | None]], None]:
    def run(fn: Callable[[], str | None]) -> None:
        if needs_cuda and not CUDA:
            line = f"SKIP  {name}: no CUDA (torch {torch.__version__}, cuda available=False)"
        else:
            try:
                detail = fn()
                line = f"PASS  {name}" + (f": {detail}" if detail else "")
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                line = f"FAIL  {name}: {type(exc).__name__}: {exc}"
        RESULTS.append(line)
        print(line, flush=True)

    return run


def pil_ref(img: np.ndarray, size: tuple[int, int], letterbox: bool = False) -> np.ndarray:
    out_h, out_w = size
    im = Image.fromarray(img)
    if letterbox:
        h, w = img.shape[:2]
        s = min(out_h / h, out_w / w)
        nh, nw = max(1, min(out_h, round(h * s))), max(1, min(out_w, round(w * s)))
        canvas = Image.new("RGB", (out_w, out_h), (114, 114, 114))
        small = im.resize((nw, nh), Image.Resampling.BILINEAR)
        canvas.paste(small, ((out_w - nw) // 2, (out_h - nh) // 2))
        im = canvas
    else:
        im = im.resize((out_w, out_h), Image.Resampling.BILINEAR)
    x = np.asarray(im, dtype=np.float32) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def images(n: int, h: int, w: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / max(w - 1, 1), yy * 255 / max(h - 1, 1),
                     np.full((h, w), 128.0)], axis=-1)
    return [np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)
            for _ in range(n)]


def maxdiff(out: Any, refs: list[np.ndarray]) -> float:
    return float(np.abs(out.float().cpu().numpy() - np.stack(refs)).max())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the throughput and warmup checks")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cuda available={CUDA}"
          + (f", {torch.cuda.get_device_name()}" if CUDA else "")
          + f", torchvision {torchvision_status()}", flush=True)

    # -- CPU checks (run everywhere) ------------------------------------------------------

    @check("cpu: device_stage degrades to wall time (no .gpu series)", needs_cuda=False)
    def _() -> str:
        led = perf.Ledger()
        with perf.device_stage("x", device="cuda" if not CUDA else "cpu", ledger=led):
            torch.ones(10).sum()
        perf.flush_device_timings()
        assert led.count("x") == 1 and "x.gpu" not in led.stages(), led.stages()
        return "wall only"

    @check("cpu: DevicePreprocessor images vs PIL", needs_cuda=False)
    def _() -> str:
        imgs = images(4, 120, 160, 0)
        out = perf.DevicePreprocessor("cpu", size=(64, 64)).images(imgs)
        d = maxdiff(out, [pil_ref(a, (64, 64)) for a in imgs])
        assert d <= 0.02, d
        return f"max abs diff {d:.4f}"

    # -- CUDA: device_stage ---------------------------------------------------------------

    @check("cuda: device_stage records .gpu from events without synchronizing")
    def _() -> str:
        led = perf.Ledger()
        torch.cuda.synchronize()
        cycles = 50_000_000  # ~25-50 ms of GPU time
        t0 = time.perf_counter()
        with perf.device_stage("sleep", device="cuda", ledger=led):
            _sleep(cycles)
        host_ms = (time.perf_counter() - t0) * 1e3
        still_busy = not torch.cuda.current_stream().query()
        n = perf.flush_device_timings(wait=True)
        gpu_ms = led.percentile("sleep.gpu", 50.0)
        wall_ms = led.percentile("sleep", 50.0)
        assert n >= 1 and led.count("sleep.gpu") == 1, (n, led.stages())
        assert still_busy, "the stream was idle right after exit: something synchronized"
        assert gpu_ms > 5 * max(wall_ms, 0.01), (gpu_ms, wall_ms, host_ms)
        return f"gpu {gpu_ms:.2f} ms vs wall {wall_ms:.3f} ms (launch only)"

    @check("cuda: device_stage resolves finished pairs on later exits (no flush)")
    def _() -> str:
        led = perf.Ledger()
        x = torch.randn(512, 512, device="cuda")
        for _ in range(5):
            with perf.device_stage("mm", ledger=led):
                x @ x
        torch.cuda.synchronize()
        with perf.device_stage("mm", ledger=led):  # this exit polls the finished ones
            x @ x
        got = led.count("mm.gpu")
        perf.flush_device_timings()
        assert got >= 5 and led.count("mm.gpu") == 6, (got, led.count("mm.gpu"))
        return f"{got} resolved by polling, 6 after flush"

    # -- CUDA: DevicePreprocessor ---------------------------------------------------------

    @check("cuda: images (mixed sizes, stretch + letterbox, f32/f16) vs PIL <= 0.02")
    def _() -> str:
        src = [*images(3, 240, 320, 1), *images(2, 100, 50, 2), *images(1, 224, 224, 3)]
        worst = 0.0
        for resize in ("stretch", "letterbox"):
            refs = [pil_ref(a, (224, 224), resize == "letterbox") for a in src]
            for dtype in ("float32", "float16"):
                pre = perf.DevicePreprocessor("cuda", resize=resize, dtype=dtype)  # type: ignore[arg-type,unused-ignore]
                out = pre.images(src)
                assert out.device.type == "cuda" and out.dtype == getattr(torch, dtype)
                worst = max(worst, maxdiff(out, refs))
        assert worst <= 0.02, worst
        return f"max abs diff {worst:.4f}"

    @check("cuda: staging buffers are pinned and pooled (no per-call allocation)")
    def _() -> str:
        pre = perf.DevicePreprocessor("cuda", size=(64, 64))
        imgs = images(8, 120, 160, 4)
        pre.images(imgs)
        allocated = pre.staging_allocations
        for _ in range(10):
            pre.images(imgs)
        slot = pre._pool._free[-1]
        assert slot.buf is not None and slot.buf.is_pinned()
        assert pre.staging_allocations == allocated <= 2, pre.staging_allocations
        return f"{pre.staging_allocations} allocations for 11 calls"

    @check("cuda: back-to-back batches never read a reused staging buffer early")
    def _() -> str:
        pre = perf.DevicePreprocessor("cuda", size=(32, 32), pool_size=2)
        batches = [images(4, 64, 64, 100 + i) for i in range(12)]
        _sleep(20_000_000)  # keep the compute stream busy while copies queue up
        outs = [pre.images(b) for b in batches]  # no synchronize in between
        worst = max(
            maxdiff(o, [pil_ref(a, (32, 32)) for a in b])
            for o, b in zip(outs, batches, strict=True)
        )
        assert worst <= 0.02, worst
        return f"12 batches, max abs diff {worst:.4f}"

    @check("cuda: H2D copy overlaps queued compute; consumer ordered after the copy")
    def _() -> str:
        pre = perf.DevicePreprocessor("cuda", buckets=None)
        rows = [list(range(1, 1 + 4096)) for _ in range(64)]
        pre.text(rows)  # warm the pool
        torch.cuda.synchronize()
        _sleep(200_000_000)  # long kernel queued on the current stream
        b = pre.text(rows)
        slot = pre._pool._free[-1]
        slot.event.synchronize()  # the copy has finished ...
        busy = not torch.cuda.current_stream().query()  # ... while compute still runs
        ids = b.input_ids.sum().item()  # on the current stream: after the sleep and the copy
        expect = 64 * sum(range(1, 4097))
        assert busy, "the copy waited for the compute stream (no overlap)"
        assert ids == expect and b.attention_mask.sum().item() == 64 * 4096
        return "copy done while the compute stream was still busy"

    @check("cuda: text padding on the device")
    def _() -> str | None:
        b = perf.DevicePreprocessor("cuda").text([[5, 6, 7], [8]])
        assert b.input_ids.device.type == "cuda"
        assert b.input_ids.tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
        assert b.attention_mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
        return None

    @check("cuda: JPEG/PNG bytes (GPU decode_jpeg when torchvision imports)")
    def _() -> str:
        src = images(3, 90, 120, 7)
        blobs = []
        for i, a in enumerate(src):
            buf = io.BytesIO()
            Image.fromarray(a).save(buf, "PNG" if i == 0 else "JPEG", quality=95)
            blobs.append(buf.getvalue())
        decoded = [np.asarray(Image.open(io.BytesIO(x)).convert("RGB")) for x in blobs]
        pre = perf.DevicePreprocessor("cuda", size=(64, 64))
        out = pre.images(blobs)
        # nvjpeg and libjpeg may differ by a level or two on decode; allow that
        d = maxdiff(out, [pil_ref(a, (64, 64)) for a in decoded])
        assert d <= 0.05, d
        how = "GPU decode_jpeg" if pre.decode_on_device else (
            f"PIL decode (torchvision {torchvision_status()})"
        )
        assert pre.decode_on_device == (_torchvision_decode_jpeg() is not None)
        return f"{how}, max abs diff {d:.4f}"

    @check("cuda: preprocess stages carry .gpu device time")
    def _() -> str:
        led = perf.Ledger()
        perf.DevicePreprocessor("cuda", size=(64, 64), ledger=led).images(images(2, 80, 80, 9))
        perf.flush_device_timings()
        have = sorted(s for s in led.stages() if s.endswith(".gpu"))
        assert {"h2d.gpu", "preprocess.resize.gpu", "preprocess.normalize.gpu"} <= set(have)
        return ", ".join(have)

    if not args.quick:

        @check("cuda: throughput vs PIL loop (32 x 480x640 -> 224x224)")
        def _() -> str:
            imgs = images(32, 480, 640, 11)
            pre = perf.DevicePreprocessor("cuda", ledger=perf.Ledger())

            def helper() -> None:
                pre.images(imgs)
                torch.cuda.synchronize()

            def pil() -> None:
                np.stack([pil_ref(a, (224, 224)) for a in imgs])

            rates = {}
            for name, fn in (("helper", helper), ("pil", pil)):
                fn()
                ts = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                rates[name] = 32 / sorted(ts)[2]
            ratio = rates["helper"] / rates["pil"]
            assert ratio >= 2.5, rates
            return (f"helper {rates['helper']:.0f} img/s vs PIL {rates['pil']:.0f} img/s: "
                    f"{ratio:.1f}x")

        @check("cuda: warmup synchronizes CUDA and stabilises")
        def _() -> str:
            model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                        torch.nn.Linear(4096, 1024)).cuda().eval()
            inputs = {(b, 1024): torch.randn(b, 1024, device="cuda") for b in (1, 8, 64)}

            def run(x: Any) -> None:
                with torch.no_grad():
                    model(x)

            report = perf.warmup(run, inputs, rounds=30, tolerance=0.3)
            assert all(s.steady_p50_ms > 0 for s in report.shapes)
            return f"stable={report.stable}, " + ", ".join(
                f"{s.shape}: first {s.first_call_ms:.2f} / p50 {s.steady_p50_ms:.3f} ms"
                for s in report.shapes
            )

    @check("cuda: DeviceTelemetry reads NVML")
    def _() -> str:
        x = torch.randn(4096, 4096, device="cuda")
        with perf.DeviceTelemetry(interval_s=0.05) as tel:
            t_end = time.monotonic() + 0.5
            while time.monotonic() < t_end:
                x @ x
            torch.cuda.synchronize()
            s = tel.sample()
        r = tel.report()
        assert r.gpu_available, r.gpu_status
        g = s.gpus[0]
        assert g.memory_total_mb and g.memory_used_mb is not None
        assert s.torch_allocated_mb is not None and s.torch_allocated_mb > 0
        return (f"{r.gpu_status}; util mean {r.gpu_util_mean_pct}%, max {r.gpu_util_max_pct}%, "
                f"power {r.gpu_power_mean_w} W, {g.name}")

    check_vllm()

    failed = sum(line.startswith("FAIL") for line in RESULTS)
    skipped = sum(line.startswith("SKIP") for line in RESULTS)
    print(f"{len(RESULTS) - failed - skipped} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


TINY_LLAMA = {  # random weights (load_format="dummy"): nothing is downloaded
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2,
}


def check_vllm() -> None:
    """A tiny random-weight model under vLLM's AsyncLLM with our stat logger (issue 6).

    Needs CUDA, `vllm` and `aiperf-sdk-vllm` in this interpreter; SKIP otherwise. Written
    against vLLM 0.33.0's AsyncLLM/AsyncEngineArgs; never run on a GPU yet (none was lent
    when it was written), so a FAIL here may be this check's own mistake: read the traceback.
    """
    name = "vllm: tiny model under AsyncLLM; the stat-logger plugin feeds the ledger"
    try:
        import vllm  # noqa: F401
        from aiperf_sdk_vllm.plugin import AiperfStatLogger
    except ImportError as exc:
        line = f"SKIP  {name}: {exc}"
        RESULTS.append(line)
        print(line, flush=True)
        return

    @check(name)
    def _() -> str:
        import asyncio
        import json
        import tempfile

        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        ledger = perf.Ledger()
        previous = perf.set_default_ledger(ledger)
        try:
            with tempfile.TemporaryDirectory() as model_dir:
                with open(f"{model_dir}/config.json", "w") as f:
                    json.dump(TINY_LLAMA, f)
                args = AsyncEngineArgs(
                    model=model_dir, load_format="dummy", skip_tokenizer_init=True,
                    enforce_eager=True, max_model_len=128, gpu_memory_utilization=0.2,
                    disable_log_stats=False,
                )
                engine = AsyncLLM.from_engine_args(args, stat_loggers=[AiperfStatLogger])

                async def one(i: int) -> int:
                    params = SamplingParams(max_tokens=16, ignore_eos=True, detokenize=False)
                    n = 0
                    async for out in engine.generate(
                        {"prompt_token_ids": [3 + i, 4, 5, 6]}, params, request_id=f"gpu-{i}"
                    ):
                        n = len(out.outputs[0].token_ids)
                    return n

                async def run_all() -> list[int]:
                    return list(await asyncio.gather(*(one(i) for i in range(8))))

                try:
                    counts = asyncio.run(run_all())
                finally:
                    engine.shutdown()
        finally:
            perf.set_default_ledger(previous)
        assert counts == [16] * 8, counts
        assert ledger.count("e2e") == 8, ledger.summary()
        ids = {t.id for t in ledger.slowest("e2e", k=8)}
        assert ids == {f"gpu-{i}" for i in range(8)}, ids
        return (f"e2e p50 {ledger.percentile('e2e', 50):.1f} ms, "
                f"ttft p50 {ledger.percentile('ttft', 50):.1f} ms, "
                f"itl p50 {ledger.percentile('itl', 50):.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
