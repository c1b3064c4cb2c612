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
        # FP8: the input's quantization alone, fused into a layer norm or GELU, and the FP8 products
        ("triton_per_fused__to_copy_add_native_layer_norm_3", "layer norm"),
        ("triton_per_fused__to_copy_abs_add_amax_clamp_div_native_layer_norm_3", "fused quantize"),
        ("triton_poi_fused__to_copy_clamp_div_gelu_4", "fused quantize"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::abs_kernel_cuda>", "fp8 quantize"),
        ("void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda, c10::Float8_e4m3fn>", "fp8 quantize"),
        ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x64", "fp8 matmul"),
        ("void cutlass::device_kernel<f8f8bf16_rowwise>", "fp8 matmul"),
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


def test_kernels_are_attributed_to_the_op_that_launched_them_and_fp8_rows_to_bf16_rows():
    """A kernel launched by aten::_scaled_mm is an FP8 product whatever its library names it; each
    category's ms per call; and an FP8 row set against the bf16 row of its model and variant."""
    trace = {
        "traceEvents": [
            {"cat": "cpu_op", "name": "aten::_scaled_mm", "ts": 0, "dur": 900, "args": {"External id": 7}},
            {"cat": "cpu_op", "name": "aten::mm", "ts": 1000, "dur": 900, "args": {"External id": 8}},
            {"cat": "kernel", "name": "nvjet_tst_128x256_64x4", "ts": 0, "dur": 400, "args": {"External id": 7}},
            {"cat": "kernel", "name": "nvjet_tst_128x256_64x4", "ts": 1000, "dur": 600, "args": {"External id": 8}},
            {"cat": "kernel", "name": "triton_poi_fused__to_copy_clamp_div_gelu_4", "ts": 2000, "dur": 100},
        ]
    }
    summary = profile_encoders.summarize_trace(trace, wall_s=4e-3, calls=2)
    assert summary["ms"] == {"matmul": 0.3, "fp8 matmul": 0.2, "fused quantize": 0.05}
    bf16 = {"model": "m", "variant": "compiled", "precision": "bf16", "fp8_scaling": None, "batch_size": 8}
    rows = [
        {**bf16, "ms": {"matmul": 1.0, "gelu": 0.2}, "ms_per_batch": 2.0, "graph_ms_per_batch": 1.5},
        {
            **bf16,
            "precision": "fp8",
            "fp8_scaling": "static-tensorwise",
            "ms": {"fp8 matmul": 0.6, "fused quantize": 0.25},
            "ms_per_batch": 1.6,
            "graph_ms_per_batch": 1.0,
        },
    ]
    (compared,) = profile_encoders.fp8_against_bf16(rows)
    assert compared["fp8_scaling"] == "static-tensorwise" and compared["graph_speedup"] == 1.5
    assert compared["speedup"] == 1.25
    delta = compared["delta_ms"]
    assert (delta["matmul"], delta["fp8 matmul"], delta["gelu"], delta["fused quantize"]) == (-1.0, 0.6, -0.2, 0.25)
