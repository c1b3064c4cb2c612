"""bench/profile_encoders.py's trace summary: kernel categories and the GPU's busy fraction."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
import profile_encoders  # noqa: E402


@pytest.mark.parametrize(
    "name, category",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", "attention"),
        ("triton_per_fused_add_native_layer_norm_3", "layer norm"),
        ("triton_poi_fused_addmm_gelu_4", "gelu"),
        ("triton_red_fused_abs_amax_clamp_to_copy_5", "fp8 quantize"),
        ("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>", "copy"),
        ("triton_poi_fused_add_7", "other elementwise"),
    ],
)
def test_kernel_categories(name, category):
    assert profile_encoders.categorize(name) == category


def test_summary_counts_overlapping_kernels_once():
    trace = {
        "traceEvents": [
            {"cat": "kernel", "name": "sm90_gemm", "ts": 0, "dur": 600},
            {"cat": "kernel", "name": "triton_per_fused_native_layer_norm_0", "ts": 500, "dur": 200},  # overlaps 100 us
            {"cat": "kernel", "name": "flash_fwd_kernel", "ts": 900, "dur": 100},
            {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},
        ]
    }
    summary = profile_encoders.summarize_trace(trace, wall_s=2e-3)
    assert summary["kernels"] == 3
    assert summary["gpu_busy"] == pytest.approx((700 + 100) / 2000)
    assert summary["share"] == {
        "matmul": pytest.approx(600 / 900, abs=1e-4),
        "layer norm": pytest.approx(200 / 900, abs=1e-4),
        "attention": pytest.approx(100 / 900, abs=1e-4),
    }
