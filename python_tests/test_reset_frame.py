"""``score_terminal_on: reset_frame``: an episode's last step scored on the next episode's first frame, as the
paper's code scored it (SB3's SubprocVecEnv resets a finished env before ``get_images()``), against a plain
reference: gymnasium envs stepped one by one, each finished env reset before its frame is rendered, the reward
model scoring those frames. The simulator env, gymnasium envs under SB3, and both gymnasium vector paths; with
the scoring schedule and episode batches; refused with windows and next-step autoreset."""

from __future__ import annotations

import gymnasium
import mujoco
import numpy as np
import pytest
import torch
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv, RewardModelSpec, load_reward_model
from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.stack.plan import plan_stack

HUMANOID = "humanoid-kneeling"
N, LENGTH, SIZE, SEED = 2, 3, 32, 7
STEPS = 2 * LENGTH + 1  # two episode ends


@pytest.fixture(scope="module")
def rm():
    torch.set_num_threads(1)
    task = get_task(HUMANOID)
    return load_reward_model(
        "vlmrm-tiny",
        target_prompts=task.target_prompts,
        baseline_prompts=task.baseline_prompts,
        alpha=0.5,
        device="cpu",
    )


def _actions(action_space: gymnasium.Space) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    low, high = action_space.low, action_space.high
    return [rng.uniform(low, high, (N, *action_space.shape)).astype(np.float32) for _ in range(STEPS)]


def reference(
    rm, task: str, actions: list[np.ndarray], *, reset_frame: bool, size: int | None = SIZE, simulator_env=None
) -> np.ndarray:
    """(STEPS, N) rewards of plain gymnasium envs: each step's frame rendered after the step, a finished env's
    after its reset when ``reset_frame`` (the paper's order), the reward model scoring each step's frames. With
    ``simulator_env`` (a simulator env) each state is drawn by ``mujoco.Renderer`` from the simulator env's model and camera,
    the picture the simulator env's EGL renderer draws (the physics is the same bit for bit)."""
    spec = get_task(task)
    envs = [spec.make(render_size=(size, size) if size else None, episode_length=LENGTH) for _ in range(N)]
    for i, env in enumerate(envs):
        env.reset(seed=SEED + i)
    drawer = mujoco.Renderer(simulator_env.model, SIZE, SIZE) if simulator_env is not None else None

    def frame(env: gymnasium.Env) -> np.ndarray:
        if drawer is None:
            return env.render()
        data = mujoco.MjData(simulator_env.model)
        data.qpos[:] = env.unwrapped.data.qpos
        mujoco.mj_forward(simulator_env.model, data)
        drawer.update_scene(data, simulator_env.vector_task.camera)
        return drawer.render()

    rewards = []
    for step in actions:
        frames = []
        for env, action in zip(envs, step):
            _, _, terminated, truncated, _ = env.step(action)
            if (terminated or truncated) and reset_frame:
                env.reset()
            frames.append(frame(env))
            if (terminated or truncated) and not reset_frame:
                env.reset()
        rewards.append(rm(np.stack(frames)).numpy())
    for env in envs:
        env.close()
    if drawer is not None:
        drawer.close()
    return np.stack(rewards)


def _run(env, actions: list[np.ndarray]):
    env.reset()  # from the seeded states (the seeds armed for it), every later reset unseeded as the reference's
    out = [env.step(a) for a in actions]
    env.close()
    return out


@pytest.mark.egl
@pytest.mark.parametrize("physics", ["batch", pytest.param("gym", marks=pytest.mark.slow)])
def test_the_last_step_is_scored_on_the_reset_frame_as_the_paper_did(rm, physics):
    """The simulator env (EGL: mujoco.Renderer's pixels) and gymnasium envs under SB3 give the reference's rewards;
    everything else of the step (observations, dones, the terminal observation, the env's own reward) is the
    terminal state's, as without the setting."""
    settings = dict(physics=physics, renderer="egl" if physics == "batch" else "auto", render_size=SIZE)
    paper = FastVLMRewardVecEnv(
        HUMANOID, N, reward_model=rm, episode_length=LENGTH, seed=SEED, score_terminal_on="reset_frame", **settings
    )
    ours = FastVLMRewardVecEnv(HUMANOID, N, reward_model=rm, episode_length=LENGTH, seed=SEED, **settings)
    assert paper.plan.env.score_terminal_on == "reset_frame" and "scored on the reset frame" in paper.plan.describe()
    actions = _actions(paper.action_space)
    simulator_env = paper.venv if physics == "batch" else None
    expected = reference(rm, HUMANOID, actions, reset_frame=True, simulator_env=simulator_env)
    assert not np.allclose(
        expected, reference(rm, HUMANOID, actions, reset_frame=False, simulator_env=simulator_env)
    ), "the frames differ"
    for step, ((obs, rewards, dones, infos), (obs_o, rewards_o, dones_o, infos_o)) in enumerate(
        zip(_run(paper, actions), _run(ours, actions))
    ):
        assert_rewards_close(rewards, expected[step], f"step {step + 1}")
        np.testing.assert_array_equal(obs, obs_o)
        np.testing.assert_array_equal(dones, dones_o)
        assert [i["gt_reward"] for i in infos] == [i["gt_reward"] for i in infos_o]
        for i in np.flatnonzero(dones):
            np.testing.assert_array_equal(infos[i]["terminal_observation"], infos_o[i]["terminal_observation"])
        if not dones.any():
            np.testing.assert_array_equal(rewards, rewards_o)


@pytest.mark.egl
def test_with_a_schedule_the_last_step_is_still_scored_on_the_reset_frame(rm):
    """score_every=2 over 3-step episodes: step 2 scored on its frame, step 3 (the last, always scored) on the
    reset frame, step 1 zero."""
    scheduled = load_reward_model(
        "vlmrm-tiny",
        target_prompts=rm.criteria[0].target_prompts,
        baseline_prompts=rm.criteria[0].baseline_prompts,
        alpha=0.5,
        device="cpu",
        score_every=2,
    )
    env = FastVLMRewardVecEnv(
        HUMANOID, N, reward_model=scheduled, episode_length=LENGTH, seed=SEED, renderer="egl", render_size=SIZE,
        physics="batch", score_terminal_on="reset_frame",
    )  # fmt: skip
    actions = _actions(env.action_space)
    expected = reference(scheduled, HUMANOID, actions, reset_frame=True, simulator_env=env.venv)
    expected[[0, 3, 6]] = 0.0  # steps 1 of each episode: not due
    for step, (_, rewards, _, _) in enumerate(_run(env, actions)):
        assert_rewards_close(rewards, expected[step], f"step {step + 1}")


@pytest.mark.egl
def test_episode_batches_read_the_reset_frames(rm):
    """Deferred rewards (episode batches, as the paper's configs train) read the frames the simulator env drew: the
    reset frame at an episode's end."""
    env = FastVLMRewardVecEnv(
        HUMANOID, N, reward_model=rm, episode_length=LENGTH, seed=SEED, renderer="egl", render_size=SIZE,
        physics="batch", score_terminal_on="reset_frame", defer_rewards=True,
    )  # fmt: skip
    actions = _actions(env.action_space)
    expected = reference(rm, HUMANOID, actions, reset_frame=True, simulator_env=env.venv)
    env.reset()
    for step, action in enumerate(actions):
        env.step(action)
        assert_rewards_close(rm(env.last_frames()).numpy(), expected[step], f"step {step + 1}")
    env.close()


def test_the_gymnasium_vector_paths_score_the_reset_frame_under_same_step_autoreset(rm):
    """make_vec: the simulator env's VLMRewardVectorEnv (humanoid) and SyncVectorEnv under VLMRewardVectorWrapper
    (cartpole), SAME_STEP autoreset, against the reference."""
    for task, size in ((HUMANOID, SIZE), ("cartpole", None)):
        env = gymnasium.make_vec(
            f"vlmrm_fast/{task}",
            num_envs=N,
            vectorization_mode="vector_entry_point",
            autoreset_mode="SameStep",
            reward_model=rm,
            max_episode_steps=LENGTH,
            score_terminal_on="reset_frame",
            **({"render_size": SIZE, "renderer": "egl", "physics": "batch"} if size else {}),
        )
        env.reset(seed=SEED)
        actions = _actions(env.single_action_space) if size else [np.ones(N, np.int64)] * STEPS
        simulator_env = env.unwrapped.simulator_env if size else None  # (the humanoid's VLMRewardVectorEnv)
        expected = reference(rm, task, actions, reset_frame=True, size=size, simulator_env=simulator_env)
        ends = 0
        for step, action in enumerate(actions):
            _, rewards, terminated, truncated, _ = env.step(action)
            assert_rewards_close(rewards, expected[step], f"{task} step {step + 1}")
            ends += int((terminated | truncated).sum())
        assert ends == 2 * N  # two episode ends of each env, scored on their reset frames
        env.close()


def test_combinations_that_make_no_sense_are_refused_in_one_line(rm):
    window = RewardModelSpec(model="vlmrm-tiny", device="cpu", window={"frames": 2, "embedding": "mean_of_frames"})
    with pytest.raises(ValueError, match=r"^score_terminal_on: reset_frame reproduces the paper's one-frame rewards, "):
        plan_stack(EnvSpec(HUMANOID, 1, score_terminal_on="reset_frame"), window)
    with pytest.raises(
        ValueError, match=r"^score_terminal_on='reset_frame' scores an episode's last step on the frame"
    ):
        gymnasium.make_vec(f"vlmrm_fast/{HUMANOID}", num_envs=1, reward_model=rm, score_terminal_on="reset_frame")
    with pytest.raises(ValueError, match=r"^score_terminal_on: 'paper' is not one of"):
        EnvSpec(HUMANOID, 1, score_terminal_on="paper")
