"""Preference labels and the reward learned from them (RL-VLM-F): the labels against a manual forward of both orders
of the two frames through the model's own template; the Bradley-Terry training learning a known preference;
training reproducible under a seed; its state (network, optimizer, label buffer, replay) saved and restored bit for
bit; the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from judge_references import answer_logits, transformers_model

from vlmrm_fast.checks import FieldError
from vlmrm_fast.models.judge.judge_models import load_judge
from vlmrm_fast.reward.preference import PreferenceLabeler, PreferenceReward, PreferenceSchedule

CPU = torch.device("cpu")
GOAL = "the pole stands upright"


def labeler(name: str, **options) -> PreferenceLabeler:
    return PreferenceLabeler(load_judge(name, device=CPU), GOAL, device=CPU, **options)


@pytest.mark.parametrize("name", ["vlmrm-tiny-qwen2-vl", "vlmrm-tiny-qwen3-vl", "vlmrm-tiny-idefics3"])
def test_labels_equal_a_manual_forward_of_both_orders(name):
    """P(a) = (sigmoid(l_yes - l_no | a, b) + sigmoid(l_no - l_yes | b, a)) / 2, each order the template's prompt of the
    two images and the question, a full forward of transformers' own model, the answer words' logits."""
    model = labeler(name)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 256, (3, 224, 224, 3), dtype=np.uint8) for _ in range(2))
    ab, ba = (x.numpy() for x in model.orders(a, b))
    labels = model(a, b).numpy()
    tokenizer = transformers_model(name).processor.tokenizer
    lead = transformers_model(name).family.answer_lead
    one, two = (tokenizer(lead + w, add_special_tokens=False)["input_ids"][0] for w in ("Yes", "No"))
    for i in range(3):
        forward = answer_logits(name, model.question, [a[i], b[i]])
        backward = answer_logits(name, model.question, [b[i], a[i]])
        first = torch.sigmoid(forward[one] - forward[two]).item()
        second = torch.sigmoid(backward[one] - backward[two]).item()
        np.testing.assert_allclose([ab[i], ba[i]], [first, second], atol=1e-5, rtol=0)
        np.testing.assert_allclose(labels[i], (first + 1 - second) / 2, atol=1e-5, rtol=0)
    assert abs(ab - ba).max() > 1e-4, "the two orders differ (the position bias the average cancels)"


class Brightness:
    """A labeler that prefers the brighter frame, sure of it in proportion to the difference."""

    device, image_size, question = CPU, (32, 32), "brighter?"

    def __call__(self, a, b):
        diff = a.float().mean(dim=(1, 2, 3)) - b.float().mean(dim=(1, 2, 3))
        return torch.sigmoid(diff / 8)


SMALL = PreferenceSchedule(label_every=2, pairs=32, updates=30, batch_size=32, replay=256, labels=512, net_size=16)
#: For the tests of reproducibility and resumption: a few updates per round are as good as many.
QUICK = PreferenceSchedule(label_every=2, pairs=16, updates=4, batch_size=16, replay=64, labels=128, net_size=16)


def frames_of(rng, n, size=32):
    """Frames of n levels of brightness, noisy."""
    level = rng.integers(0, 200, (n, 1, 1, 1))
    return np.clip(level + rng.integers(0, 56, (n, size, size, 3)), 0, 255).astype(np.uint8)


def test_the_bradley_terry_training_learns_the_labellers_preference():
    learner = PreferenceReward(Brightness(), num_envs=8, schedule=SMALL, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(16):
        learner.step(frames_of(rng, 8))
    held = frames_of(np.random.default_rng(9), 64)
    rewards = learner.rewards_of(held).numpy()
    brightness = held.reshape(64, -1).mean(axis=1)
    i, j = np.triu_indices(64, 1)
    agree = np.mean(np.sign(rewards[i] - rewards[j]) == np.sign(brightness[i] - brightness[j]))
    assert agree > 0.9, agree
    assert learner.labelled == 8 * 32 and learner.steps == 16


def run(learner, steps, seed=1):
    rng = np.random.default_rng(seed)
    return [learner.step(frames_of(rng, 8)).numpy() for _ in range(steps)]


def test_training_is_reproducible_under_a_seed():
    one, two = (PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=3) for _ in range(2))
    np.testing.assert_array_equal(run(one, 6), run(two, 6))
    for p, q in zip(one.net.parameters(), two.net.parameters()):
        assert torch.equal(p, q)
    other = PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=4)
    assert not np.array_equal(
        run(other, 6)[-1], run(PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=3), 6)[-1]
    )


def test_a_restored_state_continues_bit_for_bit():
    """Saved after 5 steps (two rounds of labels and training, the replay filling), restored into a learner of another
    seed: the next 5 steps' rewards, the network, the optimizer and the buffers equal the uninterrupted run's."""
    whole = PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=0)
    rng = np.random.default_rng(1)
    steps = [frames_of(rng, 8) for _ in range(10)]
    expected = [whole.step(f).numpy() for f in steps]
    first = PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=0)
    for f in steps[:5]:
        first.step(f)
    saved = first.save()
    resumed = PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=7)
    resumed.load(saved)
    got = [resumed.step(f).numpy() for f in steps[5:]]
    np.testing.assert_array_equal(got, expected[5:])
    for p, q in zip(whole.net.parameters(), resumed.net.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(whole.labels, resumed.labels) and torch.equal(whole.pairs, resumed.pairs)
    assert torch.equal(whole.replay, resumed.replay)
    assert torch.equal(whole.generator.get_state(), resumed.generator.get_state())


def test_a_state_of_other_settings_is_refused():
    saved = PreferenceReward(Brightness(), num_envs=8, schedule=QUICK, seed=0).save()
    other = PreferenceReward(Brightness(), num_envs=8, schedule=PreferenceSchedule(pairs=16), seed=0)
    with pytest.raises(ValueError, match=r"^this learned reward's state was saved with another schedule"):
        other.load(saved)


def test_the_judge_labels_the_replay_in_the_loop():
    """With a tiny judge: a round labels pairs of replay frames, trains, and the rewards are the network's."""
    learner = PreferenceReward(
        labeler("vlmrm-tiny-smolvlm", image_size=(32, 32)),
        num_envs=2,
        schedule=PreferenceSchedule(label_every=2, pairs=4, updates=2, batch_size=4, replay=8, labels=8, net_size=16),
        seed=0,
    )
    rng = np.random.default_rng(0)
    for _ in range(4):
        rewards = learner.step(frames_of(rng, 2, 32))
    assert rewards.shape == (2,) and learner.labelled == 8
    assert ((learner.labels > 0) & (learner.labels < 1)).all()


def test_bad_settings_are_refused():
    with pytest.raises(FieldError, match=r"^yes: '11' is 2 tokens for this model's tokenizer \('1' \+ '1'\)"):
        labeler("vlmrm-tiny-qwen2-vl", yes="11")
    with pytest.raises(FieldError, match=r"^goal: is empty"):
        PreferenceLabeler(load_judge("vlmrm-tiny-qwen2-vl", device=CPU), " ", device=CPU)
    with pytest.raises(FieldError, match=r"^replay: must hold at least 2 frames"):
        PreferenceSchedule(replay=1)
