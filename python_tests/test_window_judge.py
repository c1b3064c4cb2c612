"""The window judge: a question asked of the last K frames of each env's episode, against the model's own processor
and chat template on the same K frames and a plain uncached transformers forward (fp32), for every family (Qwen's
video input, several images for SmolVLM and Idefics3); each frame through the vision tower once; the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from judge_references import episode_streams, reference_scores
from tolerances import assert_rewards_close

from vlmrm_fast.checks import FieldError
from vlmrm_fast.models.judge import TINY_JUDGES
from vlmrm_fast.models.judge.judge_models import load_judge
from vlmrm_fast.reward import QuestionCriterion
from vlmrm_fast.reward.window import streamed_window
from vlmrm_fast.reward.window_judge import WindowJudge

CPU = torch.device("cpu")
TASKS = (
    QuestionCriterion("Is the robot done?"),
    QuestionCriterion("Does the pole stand upright?", score="log_p_yes", yes="True", no="False"),
    QuestionCriterion("Is the robot kneeling?", score="log_odds"),
)


def window_judge(name: str, window: int, reads: int | None = None, num_envs: int = 2, criteria=TASKS, **options):
    judge = load_judge(name, device=CPU)
    return WindowJudge(
        judge, list(criteria), num_envs=num_envs, window=window, reads=reads, device=CPU, multi_criteria=True, **options
    )


def streamed(model: WindowJudge, frames: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.stack([model.step(frames[t], starts=starts[t]).numpy() for t in range(len(frames))])


@pytest.mark.parametrize(
    ("name", "window", "reads"),
    [(name, 4, None) for name in TINY_JUDGES] + [("vlmrm-tiny-qwen2-vl", 8, 4), ("vlmrm-tiny-idefics3", 5, 3)],
)
def test_windows_equal_the_models_own_template_on_the_same_frames(name, window, reads):
    """Two envs whose episodes end at different steps (auto-reset): every step's window (the episode's first frame
    standing in before it, never the episode before) asked as the model's own processor and template ask it, three
    questions of the three scores; the offline scoring of an episode gives the same."""
    model = window_judge(name, window, reads)
    frames, starts, so_far = episode_streams([5, 3], steps=7)
    ours = streamed(model, frames, starts)
    assert ours.shape == (7, 2, len(TASKS))
    for t in range(7):
        for env in range(2):
            episode = so_far[t][env]
            seen = [episode[i] for i in streamed_window(len(episode) - 1, window)[model.reads]]
            expected = reference_scores(name, TASKS, seen, video=model.video)
            np.testing.assert_allclose(ours[t, env], expected, atol=1e-4, rtol=0, err_msg=f"step {t} env {env}")
    assert np.ptp(ours[:, :, 0]) > 1e-6, "the frames must move the rewards"
    offline = model.score_episode(frames[:5, 0]).numpy()
    assert_rewards_close(offline, ours[:5, 0])


def test_the_frames_go_to_qwen_as_a_video_and_to_idefics_as_images():
    assert window_judge("vlmrm-tiny-qwen2.5-vl", 4).video
    assert not window_judge("vlmrm-tiny-smolvlm", 4).video


@pytest.mark.parametrize(("name", "per_frame"), [("vlmrm-tiny-qwen2-vl", 1), ("vlmrm-tiny-smolvlm", 1)])
def test_each_frame_goes_through_the_vision_tower_once(name, per_frame, monkeypatch):
    """A step encodes its envs' new frames (a Qwen video: the pair each new frame closes), not the window's K."""
    model = window_judge(name, 8, num_envs=3)
    adapter = model.frame_judge.adapter
    counted = []
    method = "encode_frame_groups" if model.video else "encode"
    original = getattr(adapter, method)
    monkeypatch.setattr(adapter, method, lambda x: counted.append(x.shape[0]) or original(x))
    frames, starts, _ = episode_streams([4, 6, 5], steps=6, size=(32, 32))
    streamed(model, frames, starts)
    assert counted == [3 * per_frame] * 6


def test_a_subset_of_envs_in_any_order_steps_only_those():
    """Envs given in any order, some left out of a step: each env's window holds its own frames only."""
    model = window_judge("vlmrm-tiny-qwen3-vl", 4, num_envs=3, criteria=TASKS[:1])
    whole = window_judge("vlmrm-tiny-qwen3-vl", 4, num_envs=1, criteria=TASKS[:1])
    frames, starts, _ = episode_streams([9, 9, 9], steps=4, size=(32, 32), seed=2)
    expected = [whole.step(frames[t, 1:2], starts=starts[t, 1:2]).numpy() for t in range(4)]
    got = []
    for t in range(4):
        got.append(model.step(frames[t, [2, 1]], envs=[2, 1], starts=starts[t, [2, 1]]).numpy()[1:2])
        if t % 2:
            model.step(frames[t, :1], envs=[0], starts=starts[t, :1])
    assert_rewards_close(np.stack(got), np.stack(expected))


def test_a_family_without_window_input_is_refused():
    judge = load_judge("vlmrm-tiny-qwen2-vl", device=CPU)
    judge = dataclasses.replace(judge, family=dataclasses.replace(judge.family, window_input=None))
    with pytest.raises(FieldError) as info:
        WindowJudge(judge, list(TASKS), num_envs=1, window=4, device=CPU)
    message = str(info.value)
    assert message.startswith("window: vlmrm-tiny-qwen2-vl is a Qwen2-VL, whose template takes one image per prompt")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("window", "reads", "fragment"),
    [
        (4, 3, "a Qwen video groups its frames 2 at a time (its temporal patch), and the judge reads 3"),
        (7, 4, "reading 4 of 7 frames ([1, 3, 5, 6]) pairs frames at unequal distances"),
    ],
)
def test_qwen_windows_whose_pairs_are_uneven_are_refused(window, reads, fragment):
    with pytest.raises(FieldError) as info:
        window_judge("vlmrm-tiny-qwen2-vl", window, reads)
    assert str(info.value).startswith(f"window.reads: {fragment}")


def test_an_answer_word_of_several_tokens_is_refused_naming_the_split():
    with pytest.raises(
        FieldError, match=r"^criteria\[0\]\.yes: 'Yep' is 3 tokens for this model's tokenizer \('Y' \+ 'e' \+ 'p'\)"
    ):
        window_judge("vlmrm-tiny-qwen2-vl", 4, criteria=[QuestionCriterion("Up?", yes="Yep")])


@pytest.mark.gpu
def test_on_a_gpu_the_window_judge_equals_the_cpus():
    cuda = torch.device("cuda")
    cpu_judge = window_judge("vlmrm-tiny-qwen2-vl", 8, 4, num_envs=2)
    gpu_judge = WindowJudge(
        load_judge("vlmrm-tiny-qwen2-vl", device=cuda),
        list(TASKS),
        num_envs=2,
        window=8,
        reads=4,
        device=cuda,
        multi_criteria=True,
    )
    frames, starts, _ = episode_streams([5, 3], steps=6, size=(64, 64), seed=3)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # fp32 convolutions (matmuls are by default)
        for t in range(6):
            expected = cpu_judge.step(frames[t], starts=starts[t]).numpy()
            got = gpu_judge.step(torch.from_numpy(frames[t]).to(cuda), starts=starts[t]).cpu().numpy()
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0, err_msg=f"step {t}")


def test_a_steps_arguments_are_checked():
    model = window_judge("vlmrm-tiny-smolvlm", 4, num_envs=3, criteria=TASKS[:1])
    frames = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"^frames of 2 envs without their indices \(envs=\); this scorer has 3 envs$"):
        model.step(frames)
    with pytest.raises(ValueError, match=r"^envs names an env twice; a step gives each env one frame$"):
        model.step(frames, envs=[1, 1])
    with pytest.raises(ValueError, match=r"^envs must be indices 0\.\.2, got 0\.\.3$"):
        model.step(frames, envs=[0, 3])
    with pytest.raises(ValueError, match=r"^starts holds 3 values for 2 frames$"):
        model.step(frames, envs=[0, 1], starts=[True, False, True])
