"""Image-encoder backends against plain open_clip: torch eager, torch.compile (CPU here, CUDA graph
on GPUs), the ONNX export through onnxruntime, TensorRT engines and their on-disk cache.

Tolerances (embeddings of the tiny model are O(1)):
- fp32 paths (eager, compiled on the CPU, ONNX fp32 in onnxruntime): |d| <= 1e-5 + 1e-4 |ref|.
- fp16 ONNX in onnxruntime, bf16/fp16 on GPUs, against the fp32 reference: max |d| <= 4e-3 (fp16)
  or 3e-2 (bf16) times max |ref|, and cosine similarity >= 0.9999 (fp16) / 0.999 (bf16) per row.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import types

import numpy as np
import pytest
import torch

from vlmrm_fast.encoders import BACKEND_OPTIONS, choose_backend, make_image_encoder, tensorrt_engine
from vlmrm_fast.encoders.base import ImageEncoder
from vlmrm_fast.encoders.compiled import CompiledImageEncoder
from vlmrm_fast.encoders.engine_cache import CACHE_ENV, EngineCache, EngineKey, StaleEngineError, default_cache_dir
from vlmrm_fast.encoders.onnx_export import INPUT_NAME, OUTPUT_NAME, export_image_tower, export_module
from vlmrm_fast.models.clip import load_clip

CPU = torch.device("cpu")
TINY = "vlmrm-tiny"
TINY_SIZE = 64


def tiny_clip(device=CPU):
    """A fresh tiny CLIP, the same at every call; encoders cast its tower in place.

    open_clip initializes LayerNorms to the identity and attention biases to zero, so
    an export that mixed up those weights would still match; here they are perturbed.
    """
    clip = load_clip(TINY)
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in clip.model.visual.named_parameters():
            scale = 0.2 if ".ln_" in f".{name}" or "norm" in name else 0.05 if name.endswith("bias") else 0.0
            p.add_(scale * torch.randn(p.shape, generator=g))
    clip.model.to(device)
    return clip


def pixels(n: int, seed: int = 0, size: int = TINY_SIZE) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n, 3, size, size), generator=g)


@torch.inference_mode()
def reference_embeddings(x: torch.Tensor, model: str = TINY) -> torch.Tensor:
    """open_clip's own encode_image in fp32 on the CPU: what every backend must reproduce."""
    clip = tiny_clip() if model == TINY else _random_clip(model)
    return clip.model.encode_image(x.cpu().float()).float()


def _random_clip(model: str, device=CPU):
    with pytest.warns(Warning):
        return load_clip(model, device=device)


def assert_fp32_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(out.float().cpu(), ref, rtol=1e-4, atol=1e-5)


def assert_low_precision_close(out: torch.Tensor, ref: torch.Tensor, *, max_rel: float, min_cos: float) -> None:
    out = out.float().cpu()
    assert out.shape == ref.shape
    assert torch.isfinite(out).all()
    err = (out - ref).abs().max().item()
    assert err <= max_rel * ref.abs().max().item(), f"max |d| = {err}"
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=1)
    assert cos.min().item() >= min_cos, f"min cosine {cos.min().item()}"


# --------------------------------------------------------------------------- torch eager


def test_torch_encoder_matches_open_clip_encode_image():
    x = pixels(5)
    encoder = make_image_encoder(tiny_clip(), "torch", device=CPU)
    assert (encoder.backend, encoder.input_dtype, encoder.batch_size, encoder.embed_dim) == (
        "torch",
        torch.float32,
        None,
        32,
    )
    assert encoder.input_buffer() is None
    assert_fp32_close(encoder(x), reference_embeddings(x))


def test_encoder_call_checks_pixels():
    encoder = make_image_encoder(tiny_clip(), "torch", device=CPU)
    with pytest.raises(ValueError, match="pixels must be"):
        encoder(torch.zeros(2, 3, 32, 32))
    with pytest.raises(TypeError, match="float32"):
        encoder(torch.zeros(2, 3, TINY_SIZE, TINY_SIZE, dtype=torch.float64))


# --------------------------------------------------------------------------- backend choice and options


def test_backend_and_option_errors():
    clip = tiny_clip()
    with pytest.raises(ValueError, match="unknown"):
        make_image_encoder(clip, "onnxruntime", device=CPU)
    with pytest.raises(ValueError, match="batch_size=N"):
        make_image_encoder(clip, "compile", device=CPU)
    with pytest.raises(ValueError, match="positive integer"):
        make_image_encoder(clip, "compile", device=CPU, batch_size=0)
    with pytest.raises(ValueError, match="positive integer"):
        make_image_encoder(clip, "compile", device=CPU, batch_size=True)
    with pytest.raises(ValueError, match="CUDA devices only"):
        make_image_encoder(clip, "tensorrt", device=CPU, batch_size=4)
    with pytest.raises(TypeError, match="'engine_cache_dir' belongs to backend 'tensorrt'"):
        make_image_encoder(clip, "torch", device=CPU, engine_cache_dir="/tmp/x")
    with pytest.raises(TypeError, match="'compile_mode' belongs to backend 'compile'"):
        make_image_encoder(clip, "tensorrt", device=CPU, batch_size=4, compile_mode="default")
    with pytest.raises(TypeError, match="'warp_speed' is no encoder option"):
        make_image_encoder(clip, "auto", device=CPU, warp_speed=9)
    with pytest.raises(ValueError, match="compile_mode='reduce-overhead' is not supported"):
        make_image_encoder(clip, "compile", device=CPU, batch_size=2, compile_mode="reduce-overhead")
    with pytest.raises(ValueError, match="on the CPU is not supported"):
        make_image_encoder(clip, "torch", device=CPU, precision="bf16")


def test_auto_backend_choice(monkeypatch):
    cuda = torch.device("cuda", 0)
    assert choose_backend(CPU, None) == "torch"
    assert choose_backend(CPU, 8) == "torch"
    assert choose_backend(cuda, None) == "torch"
    monkeypatch.setattr(tensorrt_engine, "tensorrt_available", lambda: False)
    assert choose_backend(cuda, 8) == "compile"
    monkeypatch.setattr(tensorrt_engine, "tensorrt_available", lambda: True)
    assert choose_backend(cuda, 8) == "tensorrt"
    assert choose_backend(cuda, 8, "fp8") == "compile"  # TensorRT builds no FP8 engines here
    # auto on the CPU is eager torch, and takes (then drops) the other backends' options.
    encoder = make_image_encoder(
        tiny_clip(), "auto", device=CPU, batch_size=4, engine_cache_dir="/nonexistent", compile_mode="default"
    )
    assert encoder.backend == "torch"
    assert set(BACKEND_OPTIONS) == {"torch", "compile", "tensorrt"}


def test_each_backend_describes_itself_in_one_row():
    """BACKENDS and BACKEND_OPTIONS come from the rows; a row says what its backend needs and runs."""
    import vlmrm_fast.encoders as encoders

    names = [row.name for row in encoders.BACKEND_TABLE]
    assert names == ["torch", "compile", "tensorrt"] and encoders.BACKENDS == ("auto", *names)
    assert encoders.BACKEND_OPTIONS == {row.name: row.options for row in encoders.BACKEND_TABLE}
    compiled_row = encoders.backend_named("compile")
    assert compiled_row.fixed_batch and compiled_row.compiles and compiled_row.runs("fp8")
    trt = encoders.backend_named("tensorrt")
    assert trt.fixed_batch and not trt.runs("fp8") and "pip install .[tensorrt]" in trt.needs
    assert "CUDA devices only" in trt.unavailable(CPU)
    torch_row = encoders.backend_named("torch")
    assert not torch_row.fixed_batch and not torch_row.compiles and torch_row.unavailable(CPU) is None
    with pytest.raises(ValueError, match="backend 'onnxruntime' is unknown"):
        encoders.backend_named("onnxruntime")


def test_a_new_backend_is_one_row(monkeypatch):
    """A backend added to BACKEND_TABLE is made by name, its options checked, and picked by "auto"
    by its rank where it runs: nothing else changes."""
    import dataclasses

    import vlmrm_fast.encoders as encoders
    from vlmrm_fast.encoders.torch_eager import make_torch_encoder

    made = []

    def make_echo(clip, *, device, precision, batch_size=None, loud=False):
        made.append((precision.name, batch_size, loud))
        return make_torch_encoder(clip, device=device, precision=precision)

    echo = encoders.Backend(
        name="echo", summary="eager torch, counted", make=make_echo, options=("loud",), auto_rank=-1, auto_devices=None
    )
    monkeypatch.setattr(encoders, "BACKEND_TABLE", (*encoders.BACKEND_TABLE, echo))
    x = pixels(2)
    encoder = make_image_encoder(tiny_clip(), "echo", device=CPU, loud=True)
    assert made == [("fp32", None, True)]
    assert_fp32_close(encoder(x), reference_embeddings(x))
    with pytest.raises(TypeError, match="'compile_mode' belongs to backend 'compile'"):
        make_image_encoder(tiny_clip(), "echo", device=CPU, compile_mode="default")
    assert choose_backend(CPU, None) == "echo"
    make_image_encoder(tiny_clip(), "auto", device=CPU, loud=False, attention="fused")  # auto passes each its own
    assert made[-1] == ("fp32", None, False)
    monkeypatch.setattr(
        encoders, "BACKEND_TABLE", (*encoders.BACKEND_TABLE[:-1], dataclasses.replace(echo, precisions=("bf16",)))
    )
    assert choose_backend(CPU, None, "fp32") == "torch", "auto skips a backend that does not run the precision"


# --------------------------------------------------------------------------- compile (CPU)


def test_compiled_encoder_on_cpu_matches_eager():
    x = pixels(3, seed=1)
    ref = reference_embeddings(x)
    encoder = make_image_encoder(tiny_clip(), "compile", device=CPU, batch_size=3, progress=False)
    assert isinstance(encoder, CompiledImageEncoder)
    assert (encoder.batch_size, encoder.compile_mode, encoder.input_dtype) == (3, "default", torch.float32)
    assert_fp32_close(encoder(x), ref)
    buffer = encoder.input_buffer()
    assert buffer.shape == (3, 3, TINY_SIZE, TINY_SIZE) and buffer.dtype == torch.float32
    buffer.copy_(x)
    assert_fp32_close(encoder(buffer), ref)
    with pytest.raises(ValueError, match="batches of 3"):
        encoder(x[:2])
    encoder.close()


def test_compiled_encoders_are_not_capped_by_dynamos_recompile_limit():
    """Every encoder compiles the same forward code: dynamo's per-code limit (8) must not end the ninth."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    # torch's own patch, not monkeypatch: pytest >= 9.2 undoes a module attribute it found through
    # __getattr__ by deleting it, which removes the key from dynamo's config for the rest of the run.
    with config.patch(**{name: 1}):
        clip, x = tiny_clip(), pixels(2, seed=3)
        first = make_image_encoder(clip, "compile", device=CPU, batch_size=1, progress=False)
        second = make_image_encoder(clip, "compile", device=CPU, batch_size=2, progress=False)
        assert getattr(config, name) == 1, "the limit is lifted only while an encoder compiles"
        assert_fp32_close(second(x), reference_embeddings(x))
        assert_fp32_close(first(x[:1]), reference_embeddings(x[:1]))


def test_reward_model_with_compiled_backend_matches_torch_backend():
    from vlmrm_fast import load_reward_model

    frames = np.random.default_rng(0).integers(0, 256, size=(7, 48, 80, 3), dtype=np.uint8)
    kwargs = dict(target_prompts="a red square", baseline_prompts="a square", alpha=0.5, device="cpu")
    eager = load_reward_model(TINY, backend="torch", **kwargs)
    compiled = load_reward_model(TINY, backend="compile", batch_size=3, progress=False, **kwargs)
    assert compiled.encoder.backend == "compile" and compiled.chunk_size == 3
    # 7 frames = chunks of 3, 3, 1: the last fills only part of the static input buffer.
    assert_fp32_close(compiled.embed_images(frames), eager.embed_images(frames))
    torch.testing.assert_close(compiled(frames), eager(frames), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- ONNX export


def _onnxruntime_embeddings(path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run([OUTPUT_NAME], {INPUT_NAME: x})
    return out


@pytest.mark.slow  # an ONNX export run in onnxruntime (the optional TensorRT path)
def test_onnx_export_fp32_dynamic_batch_matches_torch(tmp_path):
    import onnx

    path = export_image_tower(tiny_clip().model.visual, tmp_path / "tiny.onnx", image_size=TINY_SIZE)
    model = onnx.load(str(path))
    assert model.opset_import[0].version >= 17
    assert [i.name for i in model.graph.input] == [INPUT_NAME]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # dynamic batch axis
    assert any(n.op_type == "LayerNormalization" for n in model.graph.node)
    for n in (1, 5):
        x = pixels(n, seed=n)
        out = _onnxruntime_embeddings(path, x.numpy())
        assert_fp32_close(torch.from_numpy(out), reference_embeddings(x))


@pytest.mark.slow  # an ONNX export run in onnxruntime (the optional TensorRT path)
def test_onnx_export_fixed_batch(tmp_path):
    import onnx

    path = export_image_tower(tiny_clip().model.visual, tmp_path / "tiny_b3.onnx", image_size=TINY_SIZE, batch_size=3)
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 3, TINY_SIZE, TINY_SIZE]
    x = pixels(3, seed=3)
    assert_fp32_close(torch.from_numpy(_onnxruntime_embeddings(path, x.numpy())), reference_embeddings(x))


def _initializer_types(model) -> dict[str, int]:
    return {init.name: init.data_type for init in model.graph.initializer}


@pytest.mark.slow  # an ONNX export run in onnxruntime (the optional TensorRT path)
def test_onnx_export_fp16_keeps_layernorm_in_fp32_and_matches(tmp_path):
    import onnx

    path = export_image_tower(
        tiny_clip().model.visual, tmp_path / "tiny16.onnx", image_size=TINY_SIZE, precision="fp16"
    )
    model = onnx.load(str(path))
    fp16, fp32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    assert model.graph.input[0].type.tensor_type.elem_type == fp16
    assert model.graph.output[0].type.tensor_type.elem_type == fp16
    types_ = _initializer_types(model)
    norms = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    assert len(norms) == 6  # ln_pre, 2 x (ln_1, ln_2), ln_post
    assert all(types_[n.input[1]] == fp32 for n in norms)  # scale, hence X and the compute, in fp32
    assert sum(t == fp16 for t in types_.values()) >= 8  # projections, MLPs, patch embedding
    x = pixels(4, seed=4)
    out = _onnxruntime_embeddings(path, x.half().numpy())
    assert_low_precision_close(torch.from_numpy(out), reference_embeddings(x), max_rel=4e-3, min_cos=0.9999)


@pytest.mark.slow  # an ONNX export run in onnxruntime (the optional TensorRT path)
def test_onnx_export_bf16_graph(tmp_path):
    import onnx

    visual = tiny_clip().model.visual
    path = export_image_tower(
        visual, tmp_path / "tiny_bf16.onnx", image_size=TINY_SIZE, precision="bf16"
    )  # checker inside
    model = onnx.load(str(path))
    bf16, fp32 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT
    assert model.graph.input[0].type.tensor_type.elem_type == bf16
    types_ = _initializer_types(model)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert convs and all(types_[n.input[1]] == fp32 for n in convs)  # ONNX < 22 has no bf16 Conv
    assert sum(t == bf16 for t in types_.values()) >= 8
    assert all(p.dtype == torch.float32 for p in visual.parameters())  # the model itself is untouched


def test_export_module_precision_layout():
    visual = tiny_clip().model.visual
    module = export_module(visual, torch.bfloat16)
    x = pixels(2, seed=5)
    with torch.inference_mode():
        out = module(x.bfloat16())
    assert out.dtype == torch.bfloat16
    assert_low_precision_close(out, reference_embeddings(x), max_rel=3e-2, min_cos=0.999)


@pytest.mark.slow  # an ONNX export run in onnxruntime (the optional TensorRT path)
def test_cli_export_onnx_only(tmp_path, capsys):
    from vlmrm_fast.cli import main

    out = tmp_path / "cli" / "tiny.onnx"
    assert main(["export", TINY, "--onnx-only", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    x = pixels(2, seed=6)
    with torch.inference_mode():
        ref = load_clip(TINY).model.encode_image(x)  # the CLI loads the model as it is, unperturbed
    assert_fp32_close(torch.from_numpy(_onnxruntime_embeddings(out, x.numpy())), ref)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without a GPU")
def test_cli_export_engine_without_gpu_says_what_to_do(capsys):
    from vlmrm_fast.cli import main

    assert main(["export", TINY, "--batch-size", "4"]) == 2
    assert "--onnx-only" in capsys.readouterr().err


# --------------------------------------------------------------------------- TensorRT import and cache


def test_missing_tensorrt_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(ImportError, match=r"pip install \.\[tensorrt\]"):
        tensorrt_engine.require_tensorrt()
    assert not tensorrt_engine.tensorrt_available()
    monkeypatch.setitem(sys.modules, "tensorrt", types.SimpleNamespace(__version__="8.6.1"))
    with pytest.raises(ImportError, match="too old"):
        tensorrt_engine.require_tensorrt()


def _key(**changes) -> EngineKey:
    fields = dict(
        architecture="ViT-L-14",
        weights="/w/open_clip_model.safetensors:123:456",
        image_size=224,
        batch_size=256,
        precision="bf16",
        gpu="NVIDIA H100 80GB HBM3",
        compute_capability="9.0",
        tensorrt="10.13.0",
    )
    fields.update(changes)
    return EngineKey(**fields)


def test_engine_key_covers_every_field():
    base = _key()
    assert base.digest() == _key().digest()
    assert base.file_stem().startswith("ViT-L-14-b256-bf16-")
    changes = dict(
        architecture="ViT-bigG-14",
        weights="random-0",
        image_size=336,
        batch_size=128,
        precision="fp16",
        gpu="NVIDIA A100-SXM4-80GB",
        compute_capability="8.0",
        tensorrt="11.4.0",
        format_version=999,
    )
    digests = {base.digest()} | {_key(**{k: v}).digest() for k, v in changes.items()}
    assert len(digests) == len(changes) + 1
    assert "/" not in _key(architecture="hf-hub:org/repo").file_stem()


def test_engine_key_from_loaded_clip(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    clip = tiny_clip()
    cuda = torch.device("cuda", 0)
    key = tensorrt_engine.engine_key(clip, batch_size=8, dtype=torch.bfloat16, device=cuda, tensorrt_version="10.13.0")
    assert (key.architecture, key.image_size, key.batch_size, key.precision) == (TINY, TINY_SIZE, 8, "bf16")
    assert (key.gpu, key.compute_capability, key.tensorrt) == ("NVIDIA H100 80GB HBM3", "9.0", "10.13.0")
    assert key.weights == f"random-0@torch-{torch.__version__}"  # random weights depend on torch's generator


class FakeTensorRT:
    """build() returns fresh bytes each time (as real builds do); deserialize() accepts only what was built."""

    def __init__(self):
        self.builds = 0
        self.loads = 0

    def build(self) -> bytes:
        self.builds += 1
        return f"engine #{self.builds} ".encode() * 100

    def deserialize(self, data: bytes):
        self.loads += 1
        if not data.startswith(b"engine #"):
            raise RuntimeError("not an engine")
        return ("engine", data)


def test_cache_miss_builds_then_hit_loads(tmp_path):
    cache, fake, key = EngineCache(tmp_path / "engines"), FakeTensorRT(), _key()
    first = cache.get_or_build(key, fake.build, fake.deserialize)
    assert first.built and fake.builds == 1
    engine_path, sidecar_path = cache.paths(key)
    assert first.path == engine_path and engine_path.exists() and sidecar_path.exists()
    sidecar = json.loads(sidecar_path.read_text())
    assert sidecar["key"] == key.digest() and sidecar["fields"] == key.fields()
    assert sidecar["engine_sha256"] == hashlib.sha256(engine_path.read_bytes()).hexdigest()
    assert not list((tmp_path / "engines").glob("*.tmp-*"))
    second = cache.get_or_build(key, fake.build, fake.deserialize)
    assert not second.built and fake.builds == 1 and second.engine == first.engine
    other = cache.get_or_build(_key(batch_size=64), fake.build, fake.deserialize)
    assert other.built and other.path != first.path


def _flip_a_byte(engine, sidecar):
    data = bytearray(engine.read_bytes())
    data[len(data) // 2] ^= 0xFF
    engine.write_bytes(bytes(data))


def _truncate(engine, sidecar):
    engine.write_bytes(engine.read_bytes()[:100])


def _garbage_sidecar(engine, sidecar):
    sidecar.write_text('{"key": "abc", "fields": ')


def _sidecar_of_another_gpu(engine, sidecar):
    content = json.loads(sidecar.read_text())
    content["fields"]["gpu"] = "NVIDIA A100-SXM4-80GB"
    sidecar.write_text(json.dumps(content))


def _sidecar_missing(engine, sidecar):
    sidecar.unlink()


def _engine_missing(engine, sidecar):
    engine.unlink()


def _valid_hash_but_not_an_engine(engine, sidecar):
    # Right size and hash, but TensorRT refuses it (another TensorRT build, say): deserialize fails.
    data = b"garbage!" * 10
    engine.write_bytes(data)
    content = json.loads(sidecar.read_text())
    content.update(engine_sha256=hashlib.sha256(data).hexdigest(), engine_bytes=len(data))
    sidecar.write_text(json.dumps(content))


@pytest.mark.parametrize(
    "damage",
    [
        _flip_a_byte,
        _truncate,
        _garbage_sidecar,
        _sidecar_of_another_gpu,
        _sidecar_missing,
        _engine_missing,
        _valid_hash_but_not_an_engine,
    ],
)
def test_damaged_cache_entry_is_rebuilt_never_trusted(tmp_path, caplog, damage):
    cache, fake, key = EngineCache(tmp_path), FakeTensorRT(), _key()
    cache.get_or_build(key, fake.build, fake.deserialize)
    damage(*cache.paths(key))
    with caplog.at_level(logging.WARNING, logger="vlmrm_fast.encoders.engine_cache"):
        result = cache.get_or_build(key, fake.build, fake.deserialize)
    assert result.built and fake.builds == 2
    assert result.engine == ("engine", b"engine #2 " * 100)
    assert "unusable" in caplog.text and "building a new one" in caplog.text
    # The rebuilt entry verifies again.
    assert not cache.get_or_build(key, fake.build, fake.deserialize).built and fake.builds == 2


def test_deserialize_returning_none_counts_as_stale(tmp_path):
    cache, fake, key = EngineCache(tmp_path), FakeTensorRT(), _key()
    cache.get_or_build(key, fake.build, fake.deserialize)
    with pytest.raises(StaleEngineError, match="could not deserialize"):
        cache._load(key, lambda data: None)
    assert cache.get_or_build(key, fake.build, lambda data: None if fake.builds < 2 else ("ok", data)).built


def test_rebuild_forces_a_build(tmp_path):
    cache, fake, key = EngineCache(tmp_path), FakeTensorRT(), _key()
    cache.get_or_build(key, fake.build, fake.deserialize)
    assert cache.get_or_build(key, fake.build, fake.deserialize, rebuild=True).built and fake.builds == 2


def test_failed_build_or_load_leaves_no_entry(tmp_path):
    cache, key = EngineCache(tmp_path), _key()
    with pytest.raises(RuntimeError, match="no engine"):
        cache.get_or_build(key, lambda: b"", lambda data: data)

    def refuse(data):
        raise RuntimeError("wrong GPU")

    with pytest.raises(RuntimeError, match="could not be loaded: wrong GPU"):
        cache.get_or_build(key, lambda: b"engine", refuse)
    assert not any(path.exists() for path in cache.paths(key))


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == tmp_path.home() / ".cache" / "vlmrm_fast" / "engines"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "vlmrm_fast" / "engines"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert EngineCache().directory == tmp_path / "mine"


# --------------------------------------------------------------------------- GPU


CUDA = torch.device("cuda", 0)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "precision, compile_mode", [("bf16", None), ("fp16", "max-autotune-no-cudagraphs")]
)  # None: default
def test_compiled_cuda_graph_matches_reference(precision, compile_mode):
    x = pixels(6, seed=7)
    ref = reference_embeddings(x)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    mode = {"compile_mode": compile_mode} if compile_mode else {}
    encoder = make_image_encoder(
        tiny_clip(CUDA), "compile", device=CUDA, precision=precision, batch_size=6, progress=False, **mode
    )
    assert encoder.input_dtype == dtype and encoder._graph is not None
    tol = dict(max_rel=3e-2, min_cos=0.999) if precision == "bf16" else dict(max_rel=4e-3, min_cos=0.9999)
    out = encoder(x.to(CUDA, dtype))
    assert_low_precision_close(out, ref, **tol)
    eager = make_image_encoder(tiny_clip(CUDA), "torch", device=CUDA, precision=precision)
    assert_low_precision_close(out, eager(x.to(CUDA, dtype)).float().cpu(), **tol)
    # Replays through the static buffer see new pixels, and earlier outputs stay as they were.
    y = pixels(6, seed=8)
    encoder.input_buffer().copy_(y.to(CUDA, dtype))
    out_y = encoder(encoder.input_buffer())
    assert_low_precision_close(out_y, reference_embeddings(y), **tol)
    assert_low_precision_close(out, ref, **tol)
    encoder.close()


@pytest.mark.gpu
def test_reward_model_compiled_on_cuda_matches_cpu():
    from vlmrm_fast import load_reward_model

    frames = np.random.default_rng(1).integers(0, 256, size=(10, 60, 90, 3), dtype=np.uint8)
    kwargs = dict(target_prompts="a red square", baseline_prompts="a square", alpha=0.5)
    cpu = load_reward_model(TINY, device="cpu", backend="torch", **kwargs)
    gpu = load_reward_model(
        TINY, device="cuda", backend="compile", batch_size=4, compile_mode="default", progress=False, **kwargs
    )
    assert_low_precision_close(gpu.embed_images(frames), cpu.embed_images(frames), max_rel=3e-2, min_cos=0.999)


@pytest.mark.tensorrt
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_tensorrt_engine_matches_reference_and_is_cached(tmp_path, precision):
    x = pixels(4, seed=9)
    ref = reference_embeddings(x)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    tol = dict(max_rel=3e-2, min_cos=0.999) if precision == "bf16" else dict(max_rel=4e-3, min_cos=0.9999)
    opts = dict(device=CUDA, precision=precision, batch_size=4, engine_cache_dir=tmp_path, progress=False)
    encoder = make_image_encoder(tiny_clip(CUDA), "tensorrt", **opts)
    assert encoder.built and encoder.input_dtype == dtype and encoder.engine_path.parent == tmp_path
    out = encoder(x.to(CUDA, dtype))
    assert_low_precision_close(out, ref, **tol)
    again = make_image_encoder(tiny_clip(CUDA), "tensorrt", **opts)
    assert not again.built and again.engine_path == encoder.engine_path
    torch.testing.assert_close(again(x.to(CUDA, dtype)), out, rtol=0, atol=0)
    # A corrupted file on disk is rebuilt, not loaded.
    data = bytearray(encoder.engine_path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    encoder.engine_path.write_bytes(bytes(data))
    rebuilt = make_image_encoder(tiny_clip(CUDA), "tensorrt", **opts)
    assert rebuilt.built
    assert_low_precision_close(rebuilt(x.to(CUDA, dtype)), ref, **tol)


@pytest.mark.tensorrt
@pytest.mark.slow
def test_tensorrt_vit_b32_matches_torch(tmp_path):
    """A real architecture (random weights): TensorRT's fused attention and GEMMs against eager bf16."""
    x = pixels(8, seed=10, size=224)
    ref = reference_embeddings(x, "ViT-B-32")
    engine = make_image_encoder(
        _random_clip("ViT-B-32", CUDA),
        "tensorrt",
        device=CUDA,
        precision="bf16",
        batch_size=8,
        engine_cache_dir=tmp_path,
        progress=False,
    )
    assert_low_precision_close(engine(x.to(CUDA, torch.bfloat16)), ref, max_rel=3e-2, min_cos=0.999)


@pytest.mark.tensorrt
def test_reward_model_auto_backend_uses_tensorrt(tmp_path):
    from vlmrm_fast import load_reward_model

    frames = np.random.default_rng(2).integers(0, 256, size=(5, 64, 64, 3), dtype=np.uint8)
    kwargs = dict(target_prompts="a red square", baseline_prompts="a square", alpha=0.5)
    cpu = load_reward_model(TINY, device="cpu", backend="torch", **kwargs)
    gpu = load_reward_model(
        TINY, device="cuda", backend="auto", batch_size=4, engine_cache_dir=tmp_path, progress=False, **kwargs
    )
    assert gpu.encoder.backend == "tensorrt"
    assert_low_precision_close(gpu.embed_images(frames), cpu.embed_images(frames), max_rel=3e-2, min_cos=0.999)


# ------------------------------------------------------------- short chunks of fixed-batch encoders


class _FixedBatchEncoder(ImageEncoder):
    """A fixed-batch encoder with a static input buffer that records what it is given."""

    backend = "fixed-batch stand-in"
    input_dtype = torch.float32
    image_size = 2
    embed_dim = 1

    def __init__(self, batch_size: int, device: torch.device = CPU):
        self.device, self.batch_size = device, batch_size
        self._input = torch.full((batch_size, 3, 2, 2), 7.0, device=device)
        self.given: list[torch.Tensor] = []

    def input_buffer(self) -> torch.Tensor:
        return self._input

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        self.given.append(pixels)
        return pixels.flatten(1).sum(dim=1, keepdim=True)


def test_a_short_chunk_is_copied_once_into_the_encoders_input_buffer():
    """No padded tensor of its own; the rows go straight into the buffer the
    encoder reads, and the rows past them are left as they were."""
    encoder = _FixedBatchEncoder(4)
    pixels = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    out = encoder.encode_rows(pixels)
    (given,) = encoder.given
    assert given is encoder.input_buffer()
    torch.testing.assert_close(given[:2], pixels)
    assert (given[2:] == 7.0).all()
    torch.testing.assert_close(out, pixels.flatten(1).sum(dim=1, keepdim=True))
    full = torch.ones((4, 3, 2, 2))
    encoder.encode_rows(full)
    assert encoder.given[-1] is full, "a full chunk goes to the encoder as it is"


@pytest.mark.gpu
def test_compiled_reward_model_on_cuda_encodes_a_short_chunk_in_its_input_buffer():
    """On the GPU: a short chunk is written into the CUDA graph's input buffer
    (one copy) and its embeddings equal those of the same rows in a full batch."""
    from vlmrm_fast import load_reward_model

    model = load_reward_model(TINY, device="cuda", backend="compile", batch_size=4, progress=False, target_prompts="a")
    encoder = model.encoder
    buffer = encoder.input_buffer()
    given: list[int] = []
    encode = encoder.encode

    def spy(pixels: torch.Tensor) -> torch.Tensor:
        given.append(pixels.data_ptr())
        return encode(pixels)

    encoder.encode = spy
    pixels = torch.randn((4, 3, TINY_SIZE, TINY_SIZE), device=CUDA).clamp_(-2, 2).to(encoder.input_dtype)
    short = encoder.encode_rows(pixels[:3])
    assert given[-1] == buffer.data_ptr()
    torch.testing.assert_close(short, encoder.encode_rows(pixels.clone())[:3])
    model.close()
