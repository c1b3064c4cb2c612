"""Shared by the benchmarks: the machine description, FLOP counts, the bf16 ceiling."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any

import torch


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def machine() -> dict[str, Any]:
    import mujoco
    import open_clip

    import vlmrm_fast

    info = vlmrm_fast.build_info()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "open_clip": open_clip.__version__,
        "mujoco": mujoco.__version__,
        "vlmrm_fast": vlmrm_fast.__version__,
    }
    try:
        import tensorrt

        versions["tensorrt"] = tensorrt.__version__
    except ImportError:
        pass
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "gpu": gpu,
        "driver": gpu_driver() if gpu else None,
        "egl": f"{info['egl_vendor']} {info['egl_version']}" if info["egl_available"] else None,
        "cuda_compiled": info["cuda_compiled"],
        "versions": versions,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }


def image_tower_flops(visual: torch.nn.Module, image_size: int, device: torch.device, dtype: torch.dtype) -> float:
    """FLOPs of one image through the image tower (a multiply-add counts 2), counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros((1, 3, image_size, image_size), device=device, dtype=dtype)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        visual(x)
    return float(counter.get_total_flops())


def model_gflops(model: str) -> tuple[float, int]:
    """GFLOPs of one image through ``model``'s image tower (the one count every bench reports), and its input size.

    Counted on the meta device in fp32 (no memory, no compute), so the count does not depend
    on the device, dtype or attention kernel a run uses (on a GPU in bf16, torch's fused
    attention path escapes the counter and a count there comes out a third low). Agrees with
    open_clip's published profile (ViT-B-32 8.8, ViT-L-14 162, ViT-bigG-14 968).
    """
    import logging

    import open_clip

    from vlmrm_fast.models.clip import register_builtin_configs

    register_builtin_configs()
    name = model.split("/")[0]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # open_clip logs that no pretrained weights were loaded: none are wanted
    try:
        with torch.device("meta"):
            clip = open_clip.create_model(name, pretrained=None, device="meta")
    finally:
        root.setLevel(level)
    visual = clip.visual.eval()
    size = visual.image_size[0] if isinstance(visual.image_size, (tuple, list)) else int(visual.image_size)
    return image_tower_flops(visual, size, torch.device("meta"), torch.float32) / 1e9, size


def matmul_ceiling_tflops(
    device: torch.device, dtype: torch.dtype = torch.bfloat16, n: int = 8192, repeats: int = 10
) -> float | None:
    """Measured dense matrix-product rate on ``device`` (None on the CPU)."""
    if device.type != "cuda":
        return None
    a = torch.randn((n, n), device=device, dtype=dtype)
    b = torch.randn((n, n), device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / repeats
    return 2 * n**3 / seconds / 1e12


def fp8_matmul_ceiling_tflops(device: torch.device, n: int = 8192, repeats: int = 10) -> float | None:
    """Measured dense FP8 (e4m3, per-tensor scales, bf16 out) matrix-product rate; None where FP8 cannot run."""
    from vlmrm_fast.encoders.fp8 import fp8_unsupported_reason

    if device.type != "cuda" or fp8_unsupported_reason(device):
        return None
    a = torch.randn((n, n), device=device).to(torch.float8_e4m3fn)
    b = torch.randn((n, n), device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)

    def product():
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)

    for _ in range(3):
        product()
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        product()
    torch.cuda.synchronize(device)
    return 2 * n**3 / ((time.perf_counter() - start) / repeats) / 1e12


def write_json(path: str | os.PathLike, data: Any) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))
