"""FP8 precision: refusal where it cannot run, the FP8 linear layers of each scaling against a
plain matmul of FP8-rounded operands (torch's CPU kernel for _scaled_mm, emulate=True), static
scales' calibration, the whole tower against bf16, and how precision="auto" decides.

Reference for one linear layer (torchao's float8 inference): the weight and the input are scaled
by s = amax / 448 (computed in bf16, kept as fp32) per row r of each ("dynamic-rowwise") or per
tensor ("dynamic-tensorwise"); "static-tensorwise" takes the input's s from calibration instead
and saturates beyond 448 s. Each is cast to float8_e4m3fn, and y = (q(x) s_x) (q(W) s_W)^T + b.
The layer's bf16 output must sit within bf16 rounding of that (|d| <= 1e-2 max|y|), ten times
closer than the plain bf16 product is. Whole towers agree with bf16 to cosine >= 0.99.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlmrm_fast.encoders import fp8_speed, make_image_encoder
from vlmrm_fast.encoders import precision as precision_mod
from vlmrm_fast.encoders.attention import fuse_attention
from vlmrm_fast.encoders.fp8 import (
    FP8_SCALINGS,
    FP8UnavailableError,
    convert_linears_to_fp8,
    count_fp8_linears,
    fp8_unsupported_reason,
    require_fp8,
    transformer_linears,
)
from vlmrm_fast.encoders.fp8_calibration import (
    STATIC_SCALE_MARGIN,
    InputRange,
    calibration_pixels,
    measure_input_ranges,
    static_input_scales,
)
from vlmrm_fast.encoders.precision import AUTO_FP8_MIN_SPEEDUP, resolve
from vlmrm_fast.encoders.tower import prepare_clip_tower, prepare_image_tower
from vlmrm_fast.models.clip import load_clip

pytest.importorskip("torchao", reason="FP8 runs through torchao (pip install .[fp8]; part of .[dev])")

CPU = torch.device("cpu")
E4M3_MAX = 448.0


def tiny_tower(dtype=torch.bfloat16):
    clip = load_clip("vlmrm-tiny")
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():  # open_clip initializes norms to identity and biases to zero: perturb them
        for p in clip.model.visual.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return clip, clip.model.visual.eval().requires_grad_(False).to(dtype)


def fp8_round_rows(t: torch.Tensor) -> torch.Tensor:
    """Plain reference of torchao's per-row e4m3 quantization, dequantized to fp32."""
    scale = (t.bfloat16().abs().amax(dim=-1, keepdim=True) / E4M3_MAX).float()
    return (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * scale


# ----------------------------------------------------------------------------- refusal


def test_fp8_refused_on_the_cpu_with_the_way_out():
    reason = fp8_unsupported_reason(CPU)
    assert "compute capability 8.9" in reason and "CPU" in reason
    with pytest.raises(FP8UnavailableError, match=r"sm_89\+.*precision='bf16'"):
        require_fp8(CPU)
    clip, _ = tiny_tower()
    with pytest.raises(FP8UnavailableError, match="compute capability 8.9"):
        make_image_encoder(clip, "torch", device=CPU, precision="fp8")
    with pytest.raises(FP8UnavailableError, match="compute capability 8.9"):
        convert_linears_to_fp8(clip.model.visual)  # no emulate: the CPU is refused


def test_fp8_refused_before_sm89(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    reason = fp8_unsupported_reason(torch.device("cuda", 0))
    assert "NVIDIA A100-SXM4-80GB is sm_80" in reason and "8.9" in reason
    with pytest.raises(FP8UnavailableError, match="sm_80"):
        require_fp8(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert fp8_unsupported_reason(torch.device("cuda", 0)) is None


def test_fp8_refused_by_tensorrt_and_unknown_precisions():
    clip, _ = tiny_tower()
    with pytest.raises(ValueError, match="backend='torch' or 'compile'"):
        make_image_encoder(clip, "tensorrt", device=CPU, precision="fp8", batch_size=2)
    with pytest.raises(ValueError, match="'fp8'"):
        make_image_encoder(clip, "torch", device=CPU, precision="int4")


# ----------------------------------------------------------------------------- the FP8 linear layer


def test_fp8_linear_matches_a_matmul_of_fp8_rounded_operands():
    _, visual = tiny_tower()
    fuse_attention(visual)
    layers = dict(transformer_linears(visual))
    originals = {
        name: (m.weight.detach().float().clone(), m.bias.detach().float().clone()) for name, m in layers.items()
    }
    assert convert_linears_to_fp8(visual, emulate=True) == len(layers) == 8  # qkv, out_proj, c_fc, c_proj x 2 blocks
    assert count_fp8_linears(visual) == 8
    g = torch.Generator().manual_seed(0)
    for name, layer in layers.items():
        weight, bias = originals[name]
        assert layer.weight.qdata.dtype == torch.float8_e4m3fn
        x = torch.randn(3, 17, weight.shape[1], generator=g).bfloat16()
        reference = fp8_round_rows(x) @ fp8_round_rows(weight).T + bias
        plain = x.float() @ weight.T + bias
        with torch.inference_mode():
            out = layer(x)
        assert out.dtype == torch.bfloat16 and out.shape == reference.shape
        err = (out.float() - reference).abs().max().item()
        assert err <= 1e-2 * reference.abs().max().item(), name
        assert err * 10 <= (plain - reference).abs().max().item(), f"{name}: the output is not FP8's"


def test_fp8_needs_a_bf16_tower():
    _, visual = tiny_tower(torch.float32)
    with pytest.raises(TypeError, match="bf16 tower"):
        convert_linears_to_fp8(visual, emulate=True)


def test_fp8_tower_is_close_to_bf16_and_keeps_norms_and_attention_bf16():
    clip, bf16_visual = tiny_tower()
    x = torch.randn(6, 3, 64, 64, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.inference_mode():
        ref = bf16_visual(x).float()
    fp8_clip, _ = tiny_tower()
    visual = prepare_image_tower(fp8_clip.model.visual, device=CPU, precision=resolve_fp8(), emulate_fp8=True)
    assert visual.transformer.resblocks[0].ln_1.weight.dtype == torch.bfloat16
    assert type(visual.transformer.resblocks[0].attn).__name__ == "FusedSelfAttention"
    with torch.inference_mode():
        out = visual(x).float()
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
    assert cos.min().item() >= 0.99, cos
    # A converted tower cannot be cast back: a second encoder in another precision is refused.
    with pytest.raises(ValueError, match="converted to FP8"):
        prepare_image_tower(visual, device=CPU, precision=precision_mod.Precision("bf16", torch.bfloat16))


def resolve_fp8():
    return precision_mod.Precision("fp8", torch.bfloat16)


@pytest.mark.filterwarnings("ignore:.*_stable_hash_for_caching")  # torchao's tensors and AOTAutograd's cache
def test_fp8_tower_compiles_on_the_cpu():
    """Inductor lowers torchao's FP8 tensors (here to the CPU _scaled_mm): the compiled tower agrees with eager FP8."""
    clip, _ = tiny_tower()
    visual = prepare_image_tower(clip.model.visual, device=CPU, precision=resolve_fp8(), emulate_fp8=True)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2)).bfloat16()
    with torch.inference_mode():
        eager = visual(x).float()
        compiled = torch.compile(visual, fullgraph=True, dynamic=False)(x).float()
    cos = torch.nn.functional.cosine_similarity(compiled, eager, dim=1)
    assert cos.min().item() >= 0.999


# ----------------------------------------------------------------------------- FP8 scalings and calibration


def fp8_round(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """t quantized to e4m3 with ``scale`` (saturating at +-448 scale), dequantized to fp32."""
    return (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float() * scale


def tensor_scale(t: torch.Tensor) -> torch.Tensor:
    """torchao's per-tensor scale: amax / 448 computed in bf16, kept as fp32."""
    return (t.bfloat16().abs().amax() / E4M3_MAX).float()


@pytest.mark.parametrize("scaling", ["dynamic-tensorwise", "static-tensorwise"])
def test_fp8_linear_of_each_scaling_matches_a_matmul_of_fp8_rounded_operands(scaling):
    """Per-tensor weight scales either way; the input's scale from the input itself at every call
    (dynamic) or fixed ahead (static: here 2 x amax / 448 of the very input)."""
    _, visual = tiny_tower()
    fuse_attention(visual)
    layers = dict(transformer_linears(visual))
    originals = {
        name: (m.weight.detach().float().clone(), m.bias.detach().float().clone()) for name, m in layers.items()
    }
    g = torch.Generator().manual_seed(0)
    inputs = {name: torch.randn(3, 17, m.in_features, generator=g).bfloat16() for name, m in layers.items()}
    static = scaling == "static-tensorwise"
    scales = (
        {name: torch.full((1, 1, 1), 2 * x.float().abs().max().item() / E4M3_MAX) for name, x in inputs.items()}
        if static
        else None
    )
    assert convert_linears_to_fp8(visual, scaling=scaling, input_scales=scales, emulate=True) == 8
    for name, layer in layers.items():
        weight, bias = originals[name]
        x = inputs[name]
        x_scale = scales[name] if static else tensor_scale(x)
        reference = fp8_round(x, x_scale) @ fp8_round(weight, tensor_scale(weight)).T + bias
        plain = x.float() @ weight.T + bias
        with torch.inference_mode():
            out = layer(x)
        assert out.dtype == torch.bfloat16 and out.shape == reference.shape
        err = (out.float() - reference).abs().max().item()
        assert err <= 1e-2 * reference.abs().max().item(), name
        assert err * 10 <= (plain - reference).abs().max().item(), f"{name}: the output is not FP8's"
        if static:  # beyond the calibrated range (4x the largest input, 2x past the margin) inputs saturate
            big = 4 * x
            saturated = fp8_round(big, x_scale) @ fp8_round(weight, tensor_scale(weight)).T + bias
            with torch.inference_mode():
                out = layer(big)
            err = (out.float() - saturated).abs().max().item()
            assert err <= 1e-2 * saturated.abs().max().item(), name
            assert err * 10 <= (4 * plain - 3 * bias - saturated).abs().max().item(), f"{name}: did not saturate"


def test_calibration_measures_each_layer_input_and_scales_it_with_the_margin():
    _, visual = tiny_tower()
    fuse_attention(visual)
    layers = dict(transformer_linears(visual))
    g = torch.Generator().manual_seed(3)
    batches = [torch.randn(n, 3, 64, 64, generator=g).bfloat16() for n in (2, 3)]
    seen: dict[str, float] = {}
    hooks = [
        m.register_forward_pre_hook(
            lambda m, args, name=name: seen.__setitem__(
                name, max(seen.get(name, 0.0), args[0].float().abs().max().item())
            )
        )
        for name, m in layers.items()
    ]
    with torch.inference_mode():
        for b in batches:
            visual(b)
    for h in hooks:
        h.remove()
    ranges = measure_input_ranges(visual, batches)
    assert ranges == {name: InputRange(seen[name], 3) for name in layers}
    assert all(not m._forward_pre_hooks for m in layers.values()), "calibration leaves no hooks behind"
    scales = static_input_scales(ranges, device=CPU)
    for name, scale in scales.items():
        assert scale.shape == (1, 1, 1) and scale.dtype == torch.float32
        assert scale.item() == pytest.approx(STATIC_SCALE_MARGIN * seen[name] / E4M3_MAX, rel=1e-6)
    with pytest.raises(ValueError, match="margin must be at least 1"):
        static_input_scales(ranges, device=CPU, margin=0.5)


def test_calibration_frames_are_preprocessed_as_the_reward_model_does(tmp_path):
    from vlmrm_fast.frames.preprocess import FramePreprocessor

    clip, _ = tiny_tower()
    frames = np.random.default_rng(0).integers(0, 256, size=(5, 48, 80, 3), dtype=np.uint8)
    expected = FramePreprocessor(clip.preprocess, CPU, torch.bfloat16)(frames)
    np.savez(tmp_path / "frames.npz", frames=frames)
    for source in (frames, torch.from_numpy(frames), tmp_path / "frames.npz", str(tmp_path / "frames.npz")):
        batches = calibration_pixels(source, clip.preprocess, CPU, batch_size=2)
        assert [len(b) for b in batches] == [2, 2, 1] and batches[0].dtype == torch.bfloat16
        assert torch.equal(torch.cat(batches), expected)
    # The tower of a LoadedClip is calibrated on those pixels.
    visual = prepare_clip_tower(
        clip,
        device=CPU,
        precision=resolve_fp8(),
        attention="fused",
        fp8_scaling="static-tensorwise",
        fp8_calibration=frames,
        emulate_fp8=True,
    )
    _, reference = tiny_tower()
    fuse_attention(reference)
    ranges = measure_input_ranges(reference, calibration_pixels(frames, clip.preprocess, CPU))
    for name, layer in transformer_linears(visual):
        assert layer.weight.act_quant_scale.item() == pytest.approx(2 * ranges[name].amax / E4M3_MAX, rel=1e-6)


@pytest.mark.parametrize("scaling", FP8_SCALINGS)
def test_fp8_tower_of_each_scaling_is_close_to_bf16(scaling):
    """Static scales calibrated on other images than those compared."""
    _, bf16_visual = tiny_tower()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, 64, 64, generator=g).bfloat16()
    calibration = [torch.randn(8, 3, 64, 64, generator=g).bfloat16()]
    with torch.inference_mode():
        ref = bf16_visual(x).float()
    _, visual = tiny_tower()
    visual = prepare_image_tower(
        visual, device=CPU, precision=resolve_fp8(), emulate_fp8=True, fp8_scaling=scaling, calibration=calibration
    )
    assert count_fp8_linears(visual) == 8
    with torch.inference_mode():
        out = visual(x).float()
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
    assert cos.min().item() >= 0.99, cos


@pytest.mark.filterwarnings("ignore:.*_stable_hash_for_caching")
def test_static_fp8_blocks_compile_to_one_graph_on_the_cpu():
    """Each block has scales of its own, held by its weights (graph inputs, not constants): the blocks
    still share one compiled graph, as the compile backend's blocks scope needs, and agree with eager."""
    from torch._dynamo.utils import counters

    from vlmrm_fast.encoders.compiled import compile_tower

    _, visual = tiny_tower()
    g = torch.Generator().manual_seed(4)
    calibration = [torch.randn(4, 3, 64, 64, generator=g).bfloat16()]
    visual = prepare_image_tower(
        visual,
        device=CPU,
        precision=resolve_fp8(),
        emulate_fp8=True,
        fp8_scaling="static-tensorwise",
        calibration=calibration,
    )
    scales = [m.weight.act_quant_scale.item() for _, m in transformer_linears(visual)]
    assert len(set(scales)) == len(scales)
    x = torch.randn(2, 3, 64, 64, generator=g).bfloat16()
    with torch.inference_mode():
        eager = visual(x).float()
        torch._dynamo.reset()
        counters.clear()
        compiled = compile_tower(visual, "default", "blocks")(x).float()
    assert counters["stats"]["unique_graphs"] == 1
    cos = torch.nn.functional.cosine_similarity(compiled, eager, dim=1)
    assert cos.min().item() >= 0.999


def test_fp8_options_are_checked_against_the_precision_and_the_backend():
    clip, _ = tiny_tower()
    with pytest.raises(ValueError, match="fp8_scaling='per-block' is unknown"):
        make_image_encoder(clip, "torch", device=CPU, precision="fp8", fp8_scaling="per-block")
    with pytest.raises(ValueError, match="pass fp8_calibration=FRAMES"):
        make_image_encoder(clip, "torch", device=CPU, precision="fp8", fp8_scaling="static-tensorwise")
    with pytest.raises(ValueError, match="fp8_calibration is for fp8_scaling='static-tensorwise'"):
        make_image_encoder(clip, "torch", device=CPU, precision="fp8", fp8_calibration="frames.npz")
    with pytest.raises(ValueError, match="apply to precision='fp8'"):
        make_image_encoder(clip, "torch", device=CPU, precision="fp32", fp8_scaling="dynamic-tensorwise")
    with pytest.raises(TypeError, match="'fp8_scaling' belongs to backend 'torch' / 'compile'"):
        make_image_encoder(clip, "tensorrt", device=CPU, batch_size=2, fp8_scaling="dynamic-rowwise")
    # "auto" may pick FP8, so it takes them; on the CPU it is fp32 and they do not apply.
    encoder = make_image_encoder(clip, "auto", device=CPU, fp8_scaling="dynamic-tensorwise")
    assert encoder.precision == "fp32" and encoder.fp8_scaling is None


# ----------------------------------------------------------------------------- precision="auto"


def test_auto_precision_on_the_cpu_is_fp32():
    _, visual = tiny_tower(torch.float32)
    assert resolve("auto", CPU, fp8_pays=lambda: True).name == "fp32"
    assert resolve("fp32", CPU).dtype == torch.float32
    with pytest.raises(ValueError, match="on the CPU is not supported"):
        resolve("bf16", CPU)


def _pretend_h100(monkeypatch, speedup: float) -> list:
    """FP8 runs on "cuda:0" (an H100 by name), and the compiled block's measurement returns ``speedup``
    and records what it was asked for."""
    calls = []
    import vlmrm_fast.encoders.fp8 as fp8

    monkeypatch.setattr(fp8, "fp8_unsupported_reason", lambda device: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(fp8_speed, "_MEASURED", {})

    def measured(visual, device, batch_size, **kwargs):
        calls.append(dict(batch_size=batch_size, **kwargs))
        return speedup

    monkeypatch.setattr(fp8_speed, "compiled_block_speedup", measured)
    return calls


@pytest.mark.parametrize("speedup, chosen", [(1.6, True), (AUTO_FP8_MIN_SPEEDUP, True), (1.0, False), (0.82, False)])
def test_auto_takes_fp8_only_where_the_compiled_block_is_faster(monkeypatch, speedup, chosen):
    _, visual = tiny_tower()
    calls = _pretend_h100(monkeypatch, speedup)
    cuda = torch.device("cuda", 0)
    compiled = {"compile_mode": "default", "compile_cache": False, "attention": "fused"}
    pays = lambda: fp8_speed.auto_prefers_fp8(visual, cuda, 32, compile_options=compiled)  # as the factory asks
    assert resolve("auto", cuda, fp8_pays=pays).name == ("fp8" if chosen else "bf16")
    # Measured as the backend will compile and scale: its compile mode and cache, FP8's scaling, the batch.
    assert calls == [dict(batch_size=32, fp8_scaling="dynamic-rowwise", compile_mode="default", compile_cache=False)]
    fp8_speed.auto_prefers_fp8(visual, cuda, 32, compile_options=compiled)
    assert len(calls) == 1, "measured once per GPU, tower shape, batch, scaling and compile mode in a process"
    fp8_speed.auto_prefers_fp8(visual, cuda, 32, compile_options=compiled, fp8_scaling="static-tensorwise")
    fp8_speed.auto_prefers_fp8(visual, cuda, 64, compile_options=compiled)
    assert [(c["batch_size"], c["fp8_scaling"]) for c in calls[1:]] == [
        (32, "static-tensorwise"),
        (64, "dynamic-rowwise"),
    ]


def test_auto_never_takes_fp8_eagerly_without_a_fixed_batch_or_where_it_cannot_run(monkeypatch):
    _, visual = tiny_tower()
    calls = _pretend_h100(monkeypatch, 2.0)
    cuda = torch.device("cuda", 0)
    # Eager FP8 runs its input quantization as separate kernels (0.45x bf16 for ViT-L-14 on an H100): for an
    # eager backend, or without a fixed batch, the encoder factory passes no probe, and "auto" is bf16.
    assert resolve("auto", cuda).name == "bf16"
    assert resolve("auto", cuda, fp8_pays=None).name == "bf16"
    assert not calls
    import vlmrm_fast.encoders.fp8 as fp8

    monkeypatch.setattr(fp8, "fp8_unsupported_reason", lambda device: "no FP8 here")
    assert not fp8_speed.auto_prefers_fp8(visual, cuda, 32, compile_options={})
    assert resolve("auto", cuda, fp8_pays=lambda: fp8_speed.auto_prefers_fp8(visual, cuda, 32)).name == "bf16"
    assert not calls


@pytest.mark.parametrize(
    "backend, tensorrt, weighs_fp8",
    [("torch", False, False), ("compile", False, True), ("auto", False, True), ("auto", True, False)],
)
def test_the_encoder_factory_weighs_fp8_only_for_a_compiling_backend(monkeypatch, backend, tensorrt, weighs_fp8):
    """make_image_encoder hands "auto" an FP8 probe only where the tower is compiled ("auto" on CUDA with a
    fixed batch compiles unless TensorRT, which builds no FP8 engines, is there)."""
    import vlmrm_fast.encoders as encoders
    from vlmrm_fast.encoders import tensorrt_engine

    monkeypatch.setattr(tensorrt_engine, "tensorrt_available", lambda: tensorrt)
    asked = []

    class Stop(Exception):
        pass

    def resolve_spy(precision, device, **kwargs):
        asked.append(kwargs)
        raise Stop

    monkeypatch.setattr(encoders, "resolve", resolve_spy)
    clip, _ = tiny_tower()
    with pytest.raises(Stop):
        make_image_encoder(
            clip,
            backend,
            device=torch.device("cuda", 0),
            batch_size=8,
            compile_mode="default",
            fp8_scaling="dynamic-tensorwise",
        ) if backend != "torch" else make_image_encoder(
            clip, "torch", device=torch.device("cuda", 0), fp8_scaling="dynamic-tensorwise"
        )
    (kwargs,) = asked
    assert (kwargs["fp8_pays"] is not None) is weighs_fp8
    if weighs_fp8:  # the probe measures the tower as the backend compiles and scales it
        probed = []
        monkeypatch.setattr(fp8_speed, "auto_prefers_fp8", lambda *args, **kw: probed.append((args, kw)) or True)
        assert kwargs["fp8_pays"]() is True
        ((args, kw),) = probed
        assert args[0] is clip.model.visual and args[2] == 8
        assert kw["compile_options"]["compile_mode"] == "default" and kw["fp8_scaling"] == "dynamic-tensorwise"


@pytest.mark.parametrize("scaling", FP8_SCALINGS)
def test_the_block_probe_times_a_bf16_and_an_fp8_copy_of_the_first_block(monkeypatch, scaling):
    """compiled_block_speedup: bf16 then FP8 (in the asked scaling), each a copy of block 0 run on a
    (batch, tokens, width) input; the tower itself is left as it was. (Compilation is replaced by the
    eager block here; the GPU test below compiles.)"""
    from vlmrm_fast.encoders import compiled

    monkeypatch.setattr(compiled, "compile_tower", lambda tower, mode, scope: tower)
    _, visual = tiny_tower()
    before = {k: v.clone() for k, v in visual.state_dict().items()}
    seen = []

    def timer(run):
        out = run()
        tower = run.func
        seen.append((count_fp8_linears(tower), tuple(out.shape)))
        return {0: 3.0, 4: 2.0}[count_fp8_linears(tower)]

    speedup = fp8_speed.compiled_block_speedup(visual, CPU, 2, fp8_scaling=scaling, timer=timer)
    assert speedup == pytest.approx(1.5)
    assert seen == [(0, (2, 17, 64)), (4, (2, 17, 64))]  # qkv, out_proj, c_fc, c_proj of one block
    assert (
        count_fp8_linears(visual) == 0 and type(visual.transformer.resblocks[0].attn).__name__ == "MultiheadAttention"
    )
    assert all(torch.equal(before[k], v) for k, v in visual.state_dict().items())


@pytest.mark.gpu
def test_fp8_encoder_on_gpu_matches_bf16():
    cuda = torch.device("cuda", 0)
    if fp8_unsupported_reason(cuda):
        pytest.skip(fp8_unsupported_reason(cuda))
    x = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    bf16 = make_image_encoder(tiny_tower()[0], "torch", device=cuda, precision="bf16")
    ref = bf16(x.to(cuda, torch.bfloat16)).float()
    for backend in ("torch", "compile"):
        opts = dict(batch_size=8, progress=False) if backend == "compile" else {}
        enc = make_image_encoder(tiny_tower()[0], backend, device=cuda, precision="fp8", **opts)
        assert enc.precision == "fp8" and enc.input_dtype == torch.bfloat16
        out = enc(x.to(cuda, torch.bfloat16)).float()
        cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
        assert cos.min().item() >= 0.99, (backend, cos)


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", FP8_SCALINGS)
def test_fp8_scalings_on_gpu_match_bf16(scaling):
    """Every scaling through both FP8 backends (static calibrated on frames) against the bf16 tower."""
    cuda = torch.device("cuda", 0)
    if fp8_unsupported_reason(cuda):
        pytest.skip(fp8_unsupported_reason(cuda))
    x = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(5)).to(cuda, torch.bfloat16)
    ref = make_image_encoder(tiny_tower()[0], "torch", device=cuda, precision="bf16")(x).float()
    options = {"fp8_scaling": scaling}
    if scaling == "static-tensorwise":
        frames = np.random.default_rng(5).integers(0, 256, size=(16, 64, 64, 3), dtype=np.uint8)
        options["fp8_calibration"] = frames
    for backend in ("torch", "compile"):
        extra = dict(batch_size=8, progress=False) if backend == "compile" else {}
        enc = make_image_encoder(tiny_tower()[0], backend, device=cuda, precision="fp8", **options, **extra)
        assert (enc.precision, enc.fp8_scaling) == ("fp8", scaling) and scaling in enc.describe()
        cos = torch.nn.functional.cosine_similarity(enc(x).float(), ref, dim=1)
        assert cos.min().item() >= 0.99, (backend, cos)
        enc.close()


@pytest.mark.gpu
def test_block_probe_and_auto_on_gpu():
    """The compiled block is timed in bf16 and in each FP8 scaling (a finite figure), and "auto" takes
    FP8 exactly when that figure reaches the threshold."""
    cuda = torch.device("cuda", 0)
    if fp8_unsupported_reason(cuda):
        pytest.skip(fp8_unsupported_reason(cuda))
    clip, _ = tiny_tower(torch.float32)
    for scaling in FP8_SCALINGS:
        speedup = fp8_speed.compiled_block_speedup(clip.model.visual, cuda, 16, fp8_scaling=scaling)
        assert 0 < speedup < 100, (scaling, speedup)
    fp8_speed._MEASURED.clear()
    encoder = make_image_encoder(clip, "compile", device=cuda, batch_size=16, progress=False)
    (measured,) = fp8_speed._MEASURED.values()
    assert encoder.precision == ("fp8" if measured >= AUTO_FP8_MIN_SPEEDUP else "bf16"), measured
