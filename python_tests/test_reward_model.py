"""The CLIP reward model: formulas written plainly, open_clip's preprocessing, loading paths, bad input."""

from __future__ import annotations

import json
import time

import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from tolerances import REWARD_ATOL, assert_criterion_rewards_close, assert_rewards_close, binary_probability_atol

import vlmrm_fast
from vlmrm_fast import BinaryCriterion, GoalBaselineCriterion, WeightsUnavailableError, load_reward_model
from vlmrm_fast.models.clip import MODEL_CONFIG_DIR, load_clip

TINY = "vlmrm-tiny"

# A missing download fails after one network probe (3 s at most), where open_clip alone would retry for
# about a minute: the bound tells the two apart with room for a busy machine.
FAIL_FAST_S = 30


def frames(n: int, h: int = 64, w: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny():
    return load_reward_model(TINY, target_prompts="a humanoid robot kneeling", device="cpu")


def plain_goal_baseline(x, targets, baselines, alpha):
    """design.md section 2, with the D x D projection written out."""
    x = x.double() / x.double().norm(dim=-1, keepdim=True)
    g = targets.double().mean(0)
    dim = x.shape[1]
    if baselines is None:
        projection = torch.eye(dim, dtype=torch.float64)
    else:
        d = g - baselines.double().mean(0)
        u = d / d.norm()
        projection = alpha * torch.outer(u, u) + (1 - alpha) * torch.eye(dim, dtype=torch.float64)
    return 1 - 0.5 * ((x - g) @ projection.T).norm(dim=-1) ** 2


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("n", [1, 7, 33])
def test_goal_baseline_reward_matches_plain_formula(alpha, n):
    targets = ["a humanoid robot kneeling", "a robot on its knees"]
    baselines = ["a humanoid robot", "a robot"]
    rm = load_reward_model(TINY, target_prompts=targets, baseline_prompts=baselines, alpha=alpha, device="cpu")
    batch = frames(n, 80, 96, seed=n)
    rewards = rm(batch)
    assert rewards.shape == (n,) and rewards.dtype == torch.float32
    x = rm.embed_images(batch)
    expected = plain_goal_baseline(x, rm.embed_text(targets), rm.embed_text(baselines), alpha)
    torch.testing.assert_close(rewards.double(), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(rm.reward_from_embeddings(x), rewards, rtol=0, atol=1e-6)


def test_reward_without_baseline_is_plain_clip_reward(tiny):
    batch = frames(5)
    x = tiny.embed_images(batch)
    g = tiny.embed_text(["a humanoid robot kneeling"])[0]
    expected = 1 - 0.5 * ((x.double() - g.double()) ** 2).sum(-1)
    torch.testing.assert_close(tiny(batch).double(), expected, rtol=0, atol=1e-5)


def test_reward_from_unnormalized_embeddings_normalizes_first(tiny):
    x = tiny.embed_images(frames(4))
    torch.testing.assert_close(tiny.reward_from_embeddings(3.5 * x), tiny.reward_from_embeddings(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("probability", [False, True])
@pytest.mark.parametrize("temperature", [None, 0.05])
def test_binary_reward_matches_plain_softmax(probability, temperature):
    goal, negatives = "a humanoid robot kneeling", ["a humanoid robot standing", "a humanoid robot lying down"]
    task = BinaryCriterion(goal, negatives, threshold=0.4, temperature=temperature, probability=probability)
    rm = load_reward_model(TINY, criteria=[task], device="cpu")
    batch = frames(9, seed=3)
    rewards = rm(batch)
    assert rewards.shape == (9, 1)
    x = rm.embed_images(batch).double()
    text = rm.embed_text([goal] + negatives).double()
    scale = rm.logit_scale if temperature is None else 1 / temperature
    p = torch.softmax(scale * x @ text.T, dim=-1)[:, 0]
    expected = p if probability else (p > 0.4).double()
    torch.testing.assert_close(rewards[:, 0].double(), expected, rtol=0, atol=1e-5)


@pytest.mark.usefixtures("one_torch_thread", "rows_rounded_by_batch_size")
def test_several_tasks_from_one_embedding_pass():
    """Three tasks from one pass against each alone, with one torch thread (as the suite runs it after a test that
    sets one: MKL on an AMD EPYC then rounds a text batch of 2 prompts otherwise than one of 5, and the binary
    task's probability moved by 1.013e-6) and under a CPU that rounds by batch size."""
    tasks = [
        GoalBaselineCriterion("a humanoid robot kneeling", "a humanoid robot", alpha=0.5),
        GoalBaselineCriterion(["a humanoid robot doing the splits"]),
        {
            "kind": "binary",
            "goal_prompt": "a robot sitting",
            "negative_prompts": ["a robot standing"],
            "probability": True,
        },
    ]
    rm = load_reward_model(TINY, criteria=tasks, device="cpu")
    batch = frames(6, 70, 70)
    rewards = rm(batch)
    assert rewards.shape == (6, 3)
    # Each task alone embeds its own prompts, in a text batch of another size: each column agrees to its
    # formula's tolerance (the binary probability's is its softmax's slope times the logit scale).
    alone = torch.cat([load_reward_model(TINY, criteria=[task], device="cpu")(batch) for task in tasks], dim=1)
    assert_criterion_rewards_close(rewards, alone, rm.criteria, rm.logit_scale)


def test_a_binary_probability_moves_as_far_as_its_logit_scale_lets_it():
    """The tolerance of a binary task's probability, from the arithmetic: text embeddings moved by the cosines'
    tolerance in the worst direction (the goal's toward the frame, the negative's away, as another CPU's
    rounding of a text batch of another size may) move the probability by more than the rewards' tolerance
    (the 1.013e-6 an AMD EPYC gave against 1e-6) and by no more than binary_probability_atol."""
    task = BinaryCriterion("a robot sitting", ["a robot standing"], probability=True)
    rm = load_reward_model(TINY, criteria=[task], device="cpu")
    moved = load_reward_model(TINY, criteria=[task], device="cpu")
    batch = frames(1, 70, 70)
    x = rm.embed_images(batch)[0]
    step = 0.99 * REWARD_ATOL * x / x.norm()  # each cosine with this frame moves by 0.99 REWARD_ATOL
    moved._text_cache[task.goal_prompt] = moved._text_cache[task.goal_prompt] + step
    moved._text_cache[task.negative_prompts[0]] = moved._text_cache[task.negative_prompts[0]] - step
    moved.set_criteria([task])
    difference = float((moved(batch) - rm(batch)).abs().max())
    assert REWARD_ATOL < difference <= binary_probability_atol(rm.logit_scale), difference


@pytest.mark.parametrize("size", [(64, 64), (65, 64), (120, 90), (48, 200), (480, 480)])
def test_preprocessing_equals_open_clip_transform(tiny, size):
    batch = frames(3, *size, seed=sum(size))
    transform = tiny.preprocess_spec.open_clip_transform()
    expected = torch.stack([transform(Image.fromarray(f)) for f in batch])
    assert torch.equal(tiny.preprocessor(batch), expected)


def test_image_embeddings_equal_open_clip_pipeline(tiny):
    batch = frames(4, 100, 130)
    transform = tiny.preprocess_spec.open_clip_transform()
    pixels = torch.stack([transform(Image.fromarray(f)) for f in batch])
    reference = torch.nn.functional.normalize(tiny.clip.model.encode_image(pixels).float(), dim=-1)
    torch.testing.assert_close(tiny.embed_images(batch), reference, rtol=0, atol=1e-6)


def test_numpy_and_torch_frames_agree_and_non_contiguous_views_work(tiny):
    batch = frames(3, 90, 90)
    torch.testing.assert_close(tiny(batch), tiny(torch.from_numpy(batch)))
    flipped = batch[:, ::-1, :, :]  # negative strides
    torch.testing.assert_close(tiny(flipped), tiny(np.ascontiguousarray(flipped)))
    cropped = batch[:, 5:80, 10:85, :]  # strided view
    torch.testing.assert_close(tiny(cropped), tiny(np.ascontiguousarray(cropped)))


def test_embed_text_is_normalized(tiny):
    text = tiny.embed_text(["a", "a humanoid robot"])
    assert text.shape == (2, tiny.embed_dim)
    torch.testing.assert_close(text.norm(dim=-1), torch.ones(2), atol=1e-6, rtol=0)


def test_chunked_batches_match_one_pass():
    small = load_reward_model(TINY, target_prompts="a robot", device="cpu", batch_size=4)
    big = load_reward_model(TINY, target_prompts="a robot", device="cpu")
    batch = frames(11)
    assert_rewards_close(small(batch), big(batch))


# --------------------------------------------------------------------------- loading paths


def test_checkpoint_round_trip(tmp_path):
    source = load_clip(TINY, seed=123)
    path = tmp_path / "tiny.pt"
    torch.save(source.model.state_dict(), path)
    a = load_reward_model(TINY, target_prompts="a robot", device="cpu", seed=123)
    b = load_reward_model(TINY, target_prompts="a robot", device="cpu", checkpoint=str(path), seed=7)
    c = load_reward_model(TINY, target_prompts="a robot", device="cpu", seed=7)
    batch = frames(3)
    assert torch.equal(a.embed_images(batch), b.embed_images(batch))
    assert not torch.equal(c.embed_images(batch), b.embed_images(batch))
    assert b.clip.weights == str(path)


def test_safetensors_checkpoint(tmp_path):
    from safetensors.torch import save_file

    source = load_clip(TINY, seed=5)
    path = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in source.model.state_dict().items()}, str(path))
    rm = load_reward_model(TINY, target_prompts="a robot", device="cpu", checkpoint=str(path))
    ref = load_reward_model(TINY, target_prompts="a robot", device="cpu", seed=5)
    assert torch.equal(rm.embed_images(frames(2)), ref.embed_images(frames(2)))


def _write_hf_cache(cache, repo_id, files: dict[str, bytes | str]):
    """A Hugging Face hub cache entry as huggingface_hub lays it out."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    for name, data in files.items():
        (snapshot / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return snapshot


def test_hf_hub_model_loads_from_cache_offline(tmp_path, monkeypatch):
    source = load_clip(TINY, seed=11)
    weights = tmp_path / "w.bin"
    torch.save(source.model.state_dict(), weights)
    with open(MODEL_CONFIG_DIR / f"{TINY}.json") as f:
        model_cfg = json.load(f)
    config = {"model_cfg": model_cfg, "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}
    cache = tmp_path / "hub"
    _write_hf_cache(
        cache,
        "vlmrm/tiny-test",
        {"open_clip_config.json": json.dumps(config), "open_clip_pytorch_model.bin": weights.read_bytes()},
    )
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: proves no network is used
    rm = load_reward_model("hf-hub:vlmrm/tiny-test", target_prompts="a robot", device="cpu", cache_dir=str(cache))
    assert rm.preprocess_spec.mean == (0.5, 0.5, 0.5)
    reference = torch.nn.functional.normalize(source.model.encode_image(rm.preprocessor(frames(2))).float(), dim=-1)
    torch.testing.assert_close(rm.embed_images(frames(2)), reference, rtol=0, atol=1e-6)


def test_pretrained_tag_loads_from_cache(tmp_path, monkeypatch):
    source = load_clip(TINY, seed=21)
    cache = tmp_path / "hub"
    weights = tmp_path / "w.bin"
    torch.save(source.model.state_dict(), weights)
    _write_hf_cache(cache, "vlmrm/tiny-tagged", {"open_clip_pytorch_model.bin": weights.read_bytes()})
    tags = dict(open_clip.pretrained._PRETRAINED.get(TINY, {}))
    tags["testtag"] = {"hf_hub": "vlmrm/tiny-tagged/", "mean": (0.1, 0.2, 0.3), "std": (0.9, 0.8, 0.7)}
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, TINY, tags)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    rm = load_reward_model(f"{TINY}/testtag", target_prompts="a robot", device="cpu", cache_dir=str(cache))
    assert rm.preprocess_spec.mean == pytest.approx((0.1, 0.2, 0.3))
    pixels = rm.preprocessor(frames(2))
    reference = torch.nn.functional.normalize(source.model.encode_image(pixels).float(), dim=-1)
    torch.testing.assert_close(rm.embed_images(frames(2)), reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("offline_env", [True, False])
def test_missing_download_fails_fast_offline(tmp_path, monkeypatch, offline_env):
    if offline_env:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.monotonic()
    with pytest.raises(WeightsUnavailableError, match="checkpoint=") as info:
        load_reward_model("ViT-B-32/laion2b_s34b_b79k", target_prompts="a robot", device="cpu", cache_dir=str(tmp_path))
    assert time.monotonic() - start < FAIL_FAST_S
    assert "vlmrm-fast download" in str(info.value)


def test_download_command_finds_cached_weights_and_fails_fast_offline(tmp_path, monkeypatch, capsys):
    from vlmrm_fast.cli import main

    cache = tmp_path / "hub"
    _write_hf_cache(cache, "vlmrm/tiny-tagged", {"open_clip_pytorch_model.bin": b"weights"})
    tags = dict(open_clip.pretrained._PRETRAINED.get(TINY, {}))
    tags["testtag"] = {"hf_hub": "vlmrm/tiny-tagged/"}
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, TINY, tags)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert main(["download", f"{TINY}/testtag", "--cache-dir", str(cache)]) == 0
    assert "open_clip_pytorch_model.bin" in capsys.readouterr().out
    start = time.monotonic()
    assert main(["download", "ViT-B-32/laion2b_s34b_b79k", "--cache-dir", str(tmp_path / "empty")]) == 2
    assert time.monotonic() - start < FAIL_FAST_S
    assert "unreachable" in capsys.readouterr().err
    assert main(["download", "ViT-B-32", "--cache-dir", str(tmp_path)]) == 2
    assert "needs a pretrained tag" in capsys.readouterr().err


def test_random_weights_of_a_real_architecture_warn():
    with pytest.warns(vlmrm_fast.RandomWeightsWarning, match="random initialization"):
        load_clip("RN50")


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan"), float("inf")])
def test_alpha_outside_unit_interval(alpha):
    with pytest.raises(ValueError, match="alpha"):
        load_reward_model(TINY, target_prompts="a", baseline_prompts="b", alpha=alpha, device="cpu")


def test_alpha_without_baseline():
    with pytest.raises(ValueError, match="baseline_prompts"):
        load_reward_model(TINY, target_prompts="a robot kneeling", alpha=0.5, device="cpu")


@pytest.mark.parametrize("prompts", [None, "", "   ", [], ["ok", ""]])
def test_missing_or_empty_target_prompts(prompts):
    with pytest.raises(ValueError, match="target_prompts|empty"):
        load_reward_model(TINY, target_prompts=prompts, device="cpu")


def test_non_string_prompts():
    with pytest.raises(TypeError, match="strings"):
        load_reward_model(TINY, target_prompts=["a robot", 3], device="cpu")


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((2, 64, 64, 3), np.float32), TypeError, "uint8"),
        (torch.zeros((2, 64, 64, 3), dtype=torch.int32), TypeError, "uint8"),
        (np.zeros((2, 64, 64, 4), np.uint8), ValueError, r"\(N, H, W, 3\)"),
        (np.zeros((2, 64, 64), np.uint8), ValueError, "frames"),
        (np.zeros((64, 64, 3), np.uint8), ValueError, r"frames\[None\]"),
        (np.zeros((0, 64, 64, 3), np.uint8), ValueError, "non-empty"),
        ([[1, 2, 3]], TypeError, "numpy array or torch tensor"),
    ],
)
def test_bad_frames(tiny, bad, error, match):
    with pytest.raises(error, match=match):
        tiny(bad)


def test_unknown_model_name_suggests():
    with pytest.raises(ValueError, match="ViT-B-32"):
        load_reward_model("ViT-B-23", target_prompts="a", device="cpu")


def test_unknown_pretrained_tag_lists_known_tags():
    with pytest.raises(ValueError, match="known tags"):
        load_reward_model("ViT-B-32/no_such_tag", target_prompts="a", device="cpu")


def test_corrupt_checkpoint(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x80\x04not a checkpoint" * 10)
    with pytest.raises(ValueError, match="could not be loaded"):
        load_reward_model(TINY, target_prompts="a", device="cpu", checkpoint=str(garbage))
    source = load_clip(TINY)
    full = tmp_path / "full.pt"
    torch.save(source.model.state_dict(), full)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ValueError, match="could not be loaded"):
        load_reward_model(TINY, target_prompts="a", device="cpu", checkpoint=str(truncated))
    wrong = tmp_path / "wrong_arch.pt"
    torch.save({k: v for k, v in list(source.model.state_dict().items())[:-3]}, wrong)
    with pytest.raises(ValueError, match="could not be loaded"):
        load_reward_model(TINY, target_prompts="a", device="cpu", checkpoint=str(wrong))


def test_missing_checkpoint_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_reward_model(TINY, target_prompts="a", device="cpu", checkpoint=str(tmp_path / "nope.pt"))


def test_bad_task_leaves_model_unchanged(tiny):
    batch = frames(3)
    before = tiny(batch).clone()
    with pytest.raises(ValueError, match="alpha"):
        tiny.set_criteria([GoalBaselineCriterion("a", "b", alpha=0.5), {"target_prompts": "c", "alpha": 2.0}])
    assert torch.equal(tiny(batch), before)
    assert tiny.multi_criteria is False


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"goal_prompt": "a", "negative_prompts": []}, "empty"),
        ({"goal_prompt": "a", "negative_prompts": ["b"], "threshold": 1.5}, "threshold"),
        ({"goal_prompt": "a", "negative_prompts": ["b"], "temperature": 0.0}, "temperature"),
        ({"goal_prompt": "a", "negative_prompts": ["a"]}, "goal prompt"),
    ],
)
def test_bad_binary_task(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BinaryCriterion(**kwargs)


def test_tasks_and_target_prompts_are_exclusive():
    with pytest.raises(ValueError, match="not both"):
        load_reward_model(TINY, target_prompts="a", criteria=[GoalBaselineCriterion("b")], device="cpu")


def test_build_info_reports_capabilities():
    info = vlmrm_fast.build_info()
    assert info["mujoco_version"] == "4.0.0"
    for key in ("cuda_compiled", "cuda_version", "cuda_available", "egl_available", "egl_devices"):
        assert key in info
    assert isinstance(info["cuda_compiled"], bool)


@pytest.mark.parametrize(
    ("fields", "family", "refused"),
    [
        ({"model": "viclip-tiny", "window": {"frames": 8}, "pretrained": "laion2b"}, "video", "pretrained"),
        ({"model": "vlmrm-tiny-qwen2-vl", "window": {"frames": 2}, "prefix": {}}, "window_judge", "prefix"),
        ({"model": "vlmrm-tiny-qwen2-vl", "encoder_options": {"compile_mode": "default"}}, "judge", "encoder_options"),
        ({"model": TINY, "prompt_order": "question_first"}, "clip", "prompt_order"),
        (
            {"model": TINY, "window": {"frames": 2, "embedding": "mean_of_frames"}, "image_size": 64},
            "mean_of_frames",
            "image_size",
        ),
    ],
)
def test_a_field_its_family_does_not_take_is_refused_naming_the_family(fields, family, refused):
    """Each family takes the fields of its row; one place refuses any other field set, naming what it sets, the
    families that take it, and the spec's family."""
    from vlmrm_fast.checks import FieldError
    from vlmrm_fast.reward.families import REWARD_FAMILIES
    from vlmrm_fast.reward.spec import RewardModelSpec

    allowed = {name: value for name, value in fields.items() if name != refused}
    assert RewardModelSpec(**allowed).family is REWARD_FAMILIES[family]
    takers = [name for name, row in REWARD_FAMILIES.items() if refused in row.fields]
    with pytest.raises(FieldError) as info:
        RewardModelSpec(**fields)
    message = str(info.value)
    assert message.startswith(f"{refused}: sets {REWARD_FAMILIES[takers[0]].fields[refused]}, a field of the "), message
    assert all(name in message.split(";")[0] for name in takers), message
    assert message.endswith(f"(the {family} family), which does not take it: leave it out"), message
