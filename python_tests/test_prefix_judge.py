"""The streamed episode-prefix judge (TOPReward's progress): at every step of several episodes with resets, envs of
different episode lengths under auto-reset, its rewards against a plain uncached transformers forward of the same
prefix's prompt built by the model's own chat template (fp32); the positions the model's own get_rope_index gives;
no cache ever holding two episodes' frames; a step's cost whatever the episode's length; the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from judge_references import episode_streams, reference_scores, transformers_model
from tolerances import assert_rewards_close

from vlmrm_fast.checks import FieldError
from vlmrm_fast.models.judge.judge_models import load_judge
from vlmrm_fast.models.judge.prompt import blank_inputs, frame_sequence
from vlmrm_fast.reward import QuestionCriterion
from vlmrm_fast.reward import prefix_judge as prefix_module
from vlmrm_fast.reward.prefix_judge import PrefixJudge, prefix_frames
from vlmrm_fast.runtime.memory import JudgeFramesDoNotFitError

CPU = torch.device("cpu")
#: TOPReward's question (its log P("True") after the video), and a yes/no one.
TOPREWARD = QuestionCriterion(
    "The above video shows a robot manipulation trajectory that completes the following task: stand up. Decide "
    "whether the above statement is True or not. The answer is:",
    score="log_p_yes",
    yes="True",
    no="False",
)
TASKS = (TOPREWARD, QuestionCriterion("Is the robot done?", score="log_odds"))


def prefix_judge(name: str, max_frames: int, num_envs: int, criteria=TASKS, **options) -> PrefixJudge:
    judge = load_judge(name, device=CPU)
    return PrefixJudge(
        judge, list(criteria), num_envs=num_envs, max_frames=max_frames, device=CPU, multi_criteria=True, **options
    )


def check_against_the_template(name, model, lengths, steps, criteria=TASKS, order="image_first"):
    frames, starts, so_far = episode_streams(lengths, steps)
    for t in range(steps):
        ours = model.step(frames[t], starts=starts[t]).numpy()
        for env in range(len(lengths)):
            episode = so_far[t][env]
            newest = len(episode) - 1
            seen = [episode[i] for i in prefix_frames(newest, model.max_frames)]
            expected = reference_scores(name, criteria, seen, order=order)
            np.testing.assert_allclose(ours[env], expected, atol=1e-4, rtol=0, err_msg=f"step {t} env {env}")
            held = model.cache_frames(env)  # no cache holds another episode's frames, nor any the prompt does not
            assert set(held) <= set(prefix_frames(newest, model.max_frames)) and (held <= newest).all()
    return frames, starts


def test_streamed_prefix_rewards_equal_an_uncached_forward_of_the_template_at_every_step():
    """Three envs whose episodes last 7, 4 and 9 steps, 12 steps: resets at different steps, the cap of 4 frames
    passed (the stride doubles at frames 4 and 7 of an episode, the cache rebuilt from the kept frames' tokens),
    TOPReward's question and a second one; the offline scoring of an episode gives the same."""
    name = "vlmrm-tiny-qwen2-vl"
    model = prefix_judge(name, 4, 3)
    frames, starts = check_against_the_template(name, model, [7, 4, 9], 12)
    assert np.ptp([model.score_episode(frames[:9, 2]).numpy()]) > 1e-6
    streamed = [prefix_judge(name, 4, 1).step(frames[0, 2:3], starts=[True]).numpy()]
    assert_rewards_close(model.score_episode(frames[:1, 2]).numpy(), streamed[0])


@pytest.mark.parametrize(
    "name", ["vlmrm-tiny-qwen2.5-vl", "vlmrm-tiny-qwen3-vl", "vlmrm-tiny-smolvlm", "vlmrm-tiny-idefics3"]
)
def test_every_family_streams_its_prefix(name):
    check_against_the_template(name, prefix_judge(name, 3, 2), [5, 3], 6)


def test_question_first_asks_one_question_before_the_frames():
    name = "vlmrm-tiny-qwen2-vl"
    model = prefix_judge(name, 3, 1, criteria=TASKS[1:], prompt_order="question_first")
    check_against_the_template(name, model, [4], 5, criteria=TASKS[1:], order="question_first")
    with pytest.raises(FieldError, match=r"^prompt_order: question_first puts each question before the episode's"):
        prefix_judge(name, 3, 1, prompt_order="question_first")


@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2-vl", "vlmrm-tiny-qwen2.5-vl", "vlmrm-tiny-qwen3-vl"])
def test_the_positions_are_the_models_own_get_rope_index(name):
    """Multimodal RoPE: the positions of the head, of each frame's block and of the question after n frames, as
    the prefix judge lays them, are those the model's own get_rope_index gives the template's prompt of n frames."""
    loaded = transformers_model(name)
    judge = prefix_judge(name, 8, 1)
    sequence = frame_sequence(
        loaded.processor, judge.frame_judge.adapter, loaded.model.config.image_token_id, TOPREWARD.question
    )
    for n in (1, 4, 6):
        inputs = blank_inputs(loaded.processor, judge.frame_judge.adapter, TOPREWARD.question, "image_first", n)
        expected, _ = loaded.model.model.get_rope_index(
            inputs["input_ids"], inputs["mm_token_type_ids"], image_grid_thw=inputs["image_grid_thw"]
        )
        assert torch.equal(sequence.ids(n), inputs["input_ids"])
        assert torch.equal(sequence.positions(n), expected)


def test_the_prefix_frames_rule():
    """All frames up to max_frames; then every s-th from the first (s a power of two) and the newest, never more
    than max_frames; the stride never falls within an episode (a streamed cache only drops frames)."""
    assert prefix_frames(3, 4).tolist() == [0, 1, 2, 3]
    assert prefix_frames(4, 4).tolist() == [0, 2, 4]
    assert prefix_frames(7, 4).tolist() == [0, 4, 7]
    assert prefix_frames(63, 64).tolist() == list(range(64))
    strides = []
    for t in range(300):
        frames = prefix_frames(t, 8)
        assert frames[0] == 0 and frames[-1] == t and len(frames) <= 8
        steps = np.diff(frames[:-1]) if len(frames) > 2 else np.array([1])
        assert len(set(steps.tolist())) <= 1
        strides.append(int(steps[0]))
    assert strides == sorted(strides)


def test_a_step_runs_one_frame_and_the_question_whatever_the_episodes_length(monkeypatch):
    """The language model's tokens per step: the new frame's block and the question's, at the episode's first step
    as at its 20th (the cap of 32 not reached), and the vision tower one frame per env and step."""
    model = prefix_judge("vlmrm-tiny-qwen2-vl", 32, 2, criteria=TASKS[:1])
    lm, tower = [], []
    forward, encode = model.frame_judge.model.forward, model.frame_judge.adapter.encode
    monkeypatch.setattr(
        model.frame_judge.model, "forward", lambda *a, **k: lm.append(k["input_ids"].shape) or forward(*a, **k)
    )
    monkeypatch.setattr(model.frame_judge.adapter, "encode", lambda x: tower.append(x.shape[0]) or encode(x))
    frames, starts, _ = episode_streams([20, 20], steps=20, size=(32, 32))
    for t in range(20):
        model.step(frames[t], starts=starts[t])
    per_step = len(model.sequence.block) + len(model.tails[0])
    assert lm == [torch.Size([2, per_step])] * 20 and tower == [2] * 20
    assert model.episodes.cache.length.tolist() == [len(model.sequence.head) + 20 * len(model.sequence.block)] * 2


def test_a_reset_env_scores_as_a_fresh_one():
    """An env reset after a long episode gives its new episode the rewards a judge that never saw the old one gives:
    the old episode's keys and values, still in the slots, are never attended to."""
    frames, _, _ = episode_streams([100], steps=9, size=(32, 32), seed=4)
    old = np.random.default_rng(5).integers(0, 256, (7, 32, 32, 3), dtype=np.uint8)
    used, fresh = prefix_judge("vlmrm-tiny-smolvlm", 4, 1), prefix_judge("vlmrm-tiny-smolvlm", 4, 1)
    for t in range(7):
        used.step(old[t : t + 1], starts=[t == 0])
    for t in range(9):
        a = used.step(frames[t, :1], starts=[t == 0]).numpy()
        b = fresh.step(frames[t, :1], starts=[t == 0]).numpy()
        assert_rewards_close(a, b, err_msg=f"step {t}")
        assert used.cache_frames(0).tolist() == fresh.cache_frames(0).tolist()


def test_a_step_attends_to_the_cached_keys_where_they_lie(monkeypatch):
    """Envs at different prefix lengths (two reset), and a step of some envs only (a schedule's due envs): each
    group of envs of one length whose rows of the cache are one run attends to the cache's keys and values in
    place, nothing of them copied (the step's cost is its attention, not a copy of every env's cache)."""
    import types

    from vlmrm_fast.reward import episode_memory

    model = prefix_judge("vlmrm-tiny-qwen2-vl", 8, 4, criteria=TASKS[:1])
    cache = {layer.untyped_storage().data_ptr() for pair in model.episodes.cache.layers for layer in pair}
    in_place = []

    def spy(query, key, value, **options):
        in_place.append({key.untyped_storage().data_ptr(), value.untyped_storage().data_ptr()} <= cache)
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, **options)

    monkeypatch.setattr(episode_memory, "F", types.SimpleNamespace(scaled_dot_product_attention=spy))
    frames = np.random.default_rng(0).integers(0, 256, (4, 4, 32, 32, 3), dtype=np.uint8)
    model.step(frames[0], starts=[True] * 4)
    model.step(frames[1])
    model.step(frames[2], starts=[False, False, True, True])  # two groups: envs 0-1 and 2-3
    model.step(frames[3][[0, 2]], envs=[0, 2])  # two envs of four, each its own length
    assert len(in_place) >= 2 * (1 + 1 + 2 + 2) and all(in_place)


def test_max_frames_whose_cache_does_not_fit_is_refused_with_the_most_that_fit(monkeypatch):
    """The memory an env's cache needs at max_frames is refused before any cache is allocated, with the memory and
    the most max_frames that fit."""
    fits = prefix_judge("vlmrm-tiny-qwen2-vl", 40, 1, criteria=TASKS[:1])
    per_frame = fits.kv_per_token * len(fits.sequence.block) + fits.vision_per_frame
    fixed = fits.kv_per_token * (len(fits.sequence.head) + len(fits.tails[0]))
    available = 8 * (fixed + 37 * per_frame + per_frame // 2)  # 8 envs at 37 frames fit, at 38 do not
    monkeypatch.setattr(prefix_module, "device_available_bytes", lambda device: available)
    monkeypatch.setattr("vlmrm_fast.runtime.memory.device_available_bytes", lambda device: available)
    monkeypatch.setattr(prefix_module, "PrefixCache", lambda *a, **k: pytest.fail("a cache was allocated"))
    with pytest.raises(JudgeFramesDoNotFitError) as info:
        prefix_judge("vlmrm-tiny-qwen2-vl", 40, 8, criteria=TASKS[:1])
    message = str(info.value)
    assert message.startswith("prefix.max_frames: the streamed prefix caches of 8 envs at 40 frames (")
    assert f"the keys and values of {fits.capacity:,} tokens in 2 layers, and 40 frames' vision tokens)" in message
    assert message.endswith("the most max_frames that fit is 37: give at most that, or fewer envs")
    assert "\n" not in message


def test_max_frames_over_the_models_context_is_refused():
    fits = prefix_judge("vlmrm-tiny-qwen2-vl", 2, 1, criteria=TASKS[:1])
    fixed = len(fits.sequence.head) + len(fits.tails[0])
    most = (32768 - fixed) // 66
    with pytest.raises(FieldError) as info:
        prefix_judge("vlmrm-tiny-qwen2-vl", 600, 1, criteria=TASKS[:1])
    message = str(info.value)
    assert message == (
        f"prefix.max_frames: a prompt of 600 frames is {fixed + 600 * 66:,} tokens (66 per frame at 224x224), over the "
        f"model's context of 32,768: give at most {most} (or smaller frames: image_size)"
    )
    assert fits.sequence.length(most) <= 32768 < fits.sequence.length(most + 1)


def test_an_answer_word_of_several_tokens_is_refused_naming_the_split():
    with pytest.raises(FieldError, match=r"^criteria\[0\]\.yes: 'Yep' is 3 tokens for this model's tokenizer"):
        prefix_judge("vlmrm-tiny-qwen2-vl", 4, 1, criteria=[QuestionCriterion("Done?", yes="Yep")])


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2-vl", "vlmrm-tiny-idefics3"])
def test_on_a_gpu_the_streamed_prefix_equals_the_cpus(name):
    """The CUDA path (the cache's indexing on the device, SDPA's lower-right causal bias there) in fp32 against the
    CPU's streamed rewards, which the tests above hold to the template's forward: envs of different episode lengths,
    the cap passed."""
    cuda = torch.device("cuda")
    cpu_judge = prefix_judge(name, 3, 3)
    gpu_judge = PrefixJudge(
        load_judge(name, device=cuda), list(TASKS), num_envs=3, max_frames=3, device=cuda, multi_criteria=True
    )
    frames, starts, _ = episode_streams([5, 3, 7], steps=8, size=(64, 64), seed=3)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # fp32 convolutions (matmuls are by default)
        for t in range(8):
            expected = cpu_judge.step(frames[t], starts=starts[t]).numpy()
            got = gpu_judge.step(torch.from_numpy(frames[t]).to(cuda), starts=starts[t]).cpu().numpy()
            np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0, err_msg=f"step {t}")
