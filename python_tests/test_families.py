"""Every open_clip family as a reward model, on tiny members built offline with random weights
(family_models.py): the preprocessing against open_clip's own transform for the model (C++ twin and
the CUDA kernel run on the host, bit for bit), the rewards against open_clip's own encoders and the
plain formula, hub tokenizers from a folder, and the one-line errors for what is missing.

A family whose package is missing skips naming the extra (pip install '.[siglip]', '.[timm]');
.ci/run installs the extras, so nothing skips in CI.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import open_clip
import pytest
import torch
from family_models import BY_NAME, FAMILIES, WORDS, make_tokenizer_folder, register, require
from kernel_references import (
    assert_same_bits,
    normalized,
    plain_binary_probability,
    plain_goal_baseline,
    random_frames,
)
from PIL import Image

from vlmrm_fast import _cuda_emulation
from vlmrm_fast.frames.preprocess import FramePreprocessor
from vlmrm_fast.frames.views import FrameLayout
from vlmrm_fast.models import MissingDependencyError, RandomWeightsWarning
from vlmrm_fast.models.clip import TokenizerUnavailableError, family_of, load_clip
from vlmrm_fast.models.clip import families as families_module
from vlmrm_fast.models.clip.clip_models import architecture_preprocess_cfg
from vlmrm_fast.reward import BinaryCriterion, load_reward_model
from vlmrm_fast.runtime import kernels

H100 = (132, 227 * 1024)  # the emulated device: multiprocessors, shared memory per block
TARGET = ("a humanoid robot kneeling",)
BASELINE = ("a humanoid robot",)
# Frames against the tiny models' 56-64 px inputs: wide and tall, larger and smaller.
FRAME_SIZES = [(48, 80), (120, 90), (40, 40)]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    pytest.importorskip("transformers", reason="transformers is not installed: pip install '.[siglip]'")
    return make_tokenizer_folder(tmp_path_factory.mktemp("tokenizer"))


def _load(family, tokenizer_dir, **kwargs):
    name = register(family)
    extra = {"tokenizer": str(tokenizer_dir)} if family.key == "siglip" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RandomWeightsWarning)
        return load_clip(name, **extra, **kwargs)


def _family_tokenizer_dir(family, request):
    return request.getfixturevalue("tokenizer_dir") if family.key == "siglip" else None


def _open_clip_transform(clip):
    """open_clip's own eval transform for the model, from the model's preprocess_cfg."""
    cfg = open_clip.transform.PreprocessCfg(**open_clip.get_model_preprocess_cfg(clip.model))
    return open_clip.transform.image_transform_v2(cfg, is_train=False)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_preprocessing_is_open_clips_bit_for_bit(family, request):
    clip = _load(family, _family_tokenizer_dir(family, request))
    assert clip.family == family.key == family_of(family.name).key
    tagged = open_clip.get_pretrained_cfg(family.real, family.tag)
    spec = clip.preprocess
    assert (spec.size, spec.mean, spec.std, spec.interpolation, spec.resize_mode) == (
        family.image_size,
        tuple(tagged["mean"]),
        tuple(tagged["std"]),
        tagged["interpolation"],
        tagged["resize_mode"],
    )
    transform = _open_clip_transform(clip)
    preprocessor = FramePreprocessor(spec, "cpu")
    for h, w in FRAME_SIZES:
        frames = random_frames(2, h, w, seed=h * w)
        reference = torch.stack([transform(Image.fromarray(f)) for f in frames])
        twin = preprocessor(frames)
        assert_same_bits(twin, reference)
        # The CUDA kernel's device code, run on the host, on the same plan.
        buffer = torch.from_numpy(frames)
        layout = FrameLayout.stacked(buffer)
        emulated = torch.full_like(twin, float("nan"))
        _cuda_emulation.preprocess(
            preprocessor.plan(h, w),
            *FramePreprocessor._layout_args(buffer.data_ptr(), layout),
            buffer.data_ptr(),
            buffer.numel(),
            emulated.data_ptr(),
            kernels.kernel_dtype(torch.float32),
            *H100,
        )
        assert_same_bits(emulated, reference)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_family_rewards_match_open_clip_and_the_plain_formula(family, request):
    tokenizer_dir = _family_tokenizer_dir(family, request)
    reference = _load(family, tokenizer_dir)  # the same seed: the same random weights
    frames = random_frames(3, 48, 80, seed=11)
    transform = _open_clip_transform(reference)
    with torch.inference_mode():
        pixels = torch.stack([transform(Image.fromarray(f)) for f in frames])
        image = reference.model.encode_image(pixels).float()
        text = normalized(reference.model.encode_text(reference.tokenizer(list(TARGET + BASELINE))).float())
    expected = plain_goal_baseline(image, text[:1], text[1:], 0.5).float()

    extra = {"tokenizer": str(tokenizer_dir)} if tokenizer_dir else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RandomWeightsWarning)
        model = load_reward_model(
            family.name,
            target_prompts=TARGET,
            baseline_prompts=BASELINE,
            alpha=0.5,
            device="cpu",
            backend="torch",
            **extra,
        )
    got = model(frames)
    # The same fp32 arithmetic but for MobileCLIP's folded branches (reparameterization) and the
    # fused reward head's summation order.
    tolerance = 2e-5 if family.key == "mobileclip" else 1e-6
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=tolerance, atol=tolerance)
    embeddings = model.embed_images(frames)
    np.testing.assert_allclose(embeddings.numpy(), normalized(image).numpy(), rtol=0, atol=20 * tolerance)


def test_mobileclip_is_reparameterized_for_inference():
    family = BY_NAME["tiny-MobileCLIP2-S4"]
    register(family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RandomWeightsWarning)
        model = load_reward_model(family.name, target_prompts=TARGET, device="cpu", backend="torch")
    from timm.models.fastvit import MobileOneBlock, RepMixer

    blocks = [m for m in model.encoder.visual.modules() if isinstance(m, (MobileOneBlock, RepMixer))]
    assert blocks
    unfolded = [m for m in blocks if hasattr(m, "conv_kxk") or getattr(m, "reparam_conv", None) is None]
    assert not unfolded, f"{len(unfolded)} of {len(blocks)} blocks keep their training-time branches"


def test_siglip_logit_bias_and_the_binary_reward(tokenizer_dir):
    """A SigLIP's logits are scale * cos + bias. The binary reward's softmax over the goal and the
    negatives adds the same bias to every logit, so the bias cancels (docs/models.md)."""
    family = BY_NAME["tiny-ViT-B-16-SigLIP2-256"]
    clip = _load(family, tokenizer_dir)
    assert clip.logit_bias == pytest.approx(float(clip.model.logit_bias))
    assert _load(BY_NAME["tiny-EVA02-L-14-336"], None).logit_bias is None
    task = BinaryCriterion("a humanoid robot kneeling", ("a humanoid robot standing", "a red car"), probability=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RandomWeightsWarning)
        model = load_reward_model(family.name, criteria=[task], device="cpu", tokenizer=str(tokenizer_dir))
    frames = random_frames(4, 64, 64, seed=3)
    got = model(frames)[:, 0].double()
    x = model.embed_images(frames).double()
    prompts = model.embed_text([task.goal_prompt, *task.negative_prompts]).double()
    scale = clip.logit_scale
    assert torch.allclose(got, plain_binary_probability(x, prompts[0], prompts[1:], scale), atol=1e-6)
    with_bias = torch.softmax(scale * x @ prompts.T + clip.logit_bias, dim=-1)[:, 0]
    assert torch.allclose(got, with_bias, atol=1e-6)


def test_tokenizer_from_a_folder_the_test_made(tokenizer_dir):
    family = BY_NAME["tiny-ViT-B-16-SigLIP2-256"]
    clip = _load(family, tokenizer_dir)
    tokens = clip.tokenizer(["a humanoid robot kneeling", "a red car"])
    context = open_clip.get_model_config(family.name)["text_cfg"]["context_length"]
    assert tokens.shape == (2, context) and tokens.dtype == torch.long
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"]
    ids = [vocab[w] for w in "a humanoid robot kneeling".split()]
    assert tokens[0, : len(ids)].tolist() == ids  # the folder's vocabulary, not the hub's
    assert all(w in vocab for w in WORDS)


def test_a_folder_without_a_tokenizer_is_refused_in_one_line(tmp_path):
    pytest.importorskip("transformers", reason="transformers is not installed: pip install '.[siglip]'")
    family = BY_NAME["tiny-ViT-B-16-SigLIP"]
    register(family)
    with pytest.raises(TokenizerUnavailableError, match="holds no tokenizer") as missing:
        load_clip(family.name, tokenizer=str(tmp_path))
    assert "\n" not in str(missing.value)
    with pytest.raises(TokenizerUnavailableError, match="does not exist"):
        load_clip(family.name, tokenizer=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="open_clip's own tokenizer"):
        load_clip("vlmrm-tiny", tokenizer=str(tmp_path))


def test_a_hub_tokenizer_missing_offline_names_vlmrm_fast_download(tmp_path, monkeypatch):
    """The real SigLIP2 config: its tokenizer lives on the hub; offline and uncached it is one line
    that names `vlmrm-fast download` (before any weights are built)."""
    pytest.importorskip("transformers", reason="transformers is not installed: pip install '.[siglip]'")
    pytest.importorskip("timm", reason="timm is not installed: pip install '.[timm]'")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(TokenizerUnavailableError) as missing:
        load_clip("ViT-B-16-SigLIP2-256", cache_dir=str(tmp_path))
    message = str(missing.value)
    assert "vlmrm-fast download ViT-B-16-SigLIP2-256/webli" in message and "tokenizer=" in message
    assert "timm/ViT-B-16-SigLIP2-256" in message and "\n" not in message

    from vlmrm_fast import cli

    assert cli.main(["download", "ViT-B-16-SigLIP2-256/webli", "--cache-dir", str(tmp_path)]) == 2


@pytest.mark.parametrize(
    "model,package,extra", [("ViT-B-16-SigLIP", "transformers", "siglip"), ("EVA02-B-16", "timm", "timm")]
)
def test_a_missing_package_is_named_with_its_extra(monkeypatch, model, package, extra):
    real = families_module.installed
    monkeypatch.setattr(families_module, "installed", lambda name: name != package and real(name))
    with pytest.raises(MissingDependencyError) as missing:
        load_clip(model)
    message = str(missing.value)
    assert f"needs {package}" in message and f"pip install 'vlmrm-fast[{extra}]'" in message
    assert f"pip install '.[{extra}]'" in message and "\n" not in message


def test_a_real_architecture_without_a_tag_takes_its_familys_preprocessing():
    siglip = architecture_preprocess_cfg("ViT-B-16-SigLIP2-256")
    assert (siglip["mean"], siglip["resize_mode"]) == ((0.5, 0.5, 0.5), "squash")
    assert architecture_preprocess_cfg("PE-Core-B-16")["interpolation"] == "bilinear"
    assert architecture_preprocess_cfg("MobileCLIP-S1")["std"] == (1.0, 1.0, 1.0)
    # ViT-H-14's tags disagree (DFN squashes, LAION crops): open_clip's default stays.
    assert architecture_preprocess_cfg("ViT-H-14") == {}


@pytest.mark.parametrize(
    "model,family",
    [
        ("ViT-B-16-SigLIP2-256", "siglip"),
        ("ViT-gopt-16-SigLIP2-384", "siglip"),
        ("PE-Core-bigG-14-448", "pe"),
        ("EVA02-E-14-plus", "eva"),
        ("EVA01-g-14", "eva"),
        ("MobileCLIP2-S4", "mobileclip"),
        ("MobileCLIP2-L-14", "mobileclip"),
        ("ViTamin-L", "vitamin"),
        ("convnext_large_d_320", "convnext"),
        ("coca_ViT-B-32", "coca"),
        ("ViT-L-14", "clip"),
        ("RN50", "resnet"),
        ("xlm-roberta-base-ViT-B-32", "hf-text"),
    ],
)
def test_families_of_the_issues_examples(model, family):
    assert family_of(model).key == family


def test_models_table_lists_families_with_flops_and_sizes(capsys):
    from vlmrm_fast import cli
    from vlmrm_fast.models.clip.families import describe, model_table

    table = model_table()
    for example in ("ViT-B-16-SigLIP2-256", "PE-Core-L-14-336", "EVA02-L-14-336", "MobileCLIP2-S4", "ViTamin-L"):
        assert table[example]["image_gflops"] > 0 and table[example]["image_size"] >= 224
    assert table["ViT-gopt-16-SigLIP2-384"]["image_size"] == 384
    # The shipped numbers are what the meta-device count gives now.
    live = describe("ViT-B-32")
    measured = ("family", "image_size", "embed_dim", "image_params_m", "image_gflops", "context_length")
    assert {k: live[k] for k in measured} == {k: table["ViT-B-32"][k] for k in measured}
    assert live["image_gflops"] == pytest.approx(8.8, abs=0.1)  # 4.4 GMACs: ViT-B/32 at 224 px

    assert cli.main(["models", "--family", "siglip"]) == 0
    out = capsys.readouterr().out
    assert "SigLIP / SigLIP2" in out and "ViT-B-16-SigLIP2-256" in out and "GFLOPs" in out
    assert "EVA02" not in out
    require(BY_NAME["tiny-ViTamin-L"])
    register(BY_NAME["tiny-ViTamin-L"])
    assert cli.main(["models", "tiny-ViTamin-L", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["tiny-ViTamin-L"]["family"] == "vitamin" and listed["tiny-ViTamin-L"]["image_size"] == 64
