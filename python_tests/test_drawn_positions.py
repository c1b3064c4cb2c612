"""``drawn_positions``: the simulator env's frames show the positions each step reached (the default), or, with
``"gymnasium"``, each simulation's data as its step left it, which is what gymnasium's ``render()`` draws after
``mj_step`` (the poses of the step's last forward pass). Compared with gymnasium's own ``render()`` over
steps and episode ends, alone and with the paper's other switch (``score_terminal_on: reset_frame``), which
together give the frames the paper's code scored; the plan's choice of renderer and its refusals.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.reward.spec import RewardModelSpec
from vlmrm_fast.stack.plan import plan_stack
from vlmrm_fast.stack.simulator_env import SimulatorVecEnv
from vlmrm_fast.training.config import load_config

N, EPISODE, SIZE, SEED = 2, 4, 48, 7
CPU_TINY = RewardModelSpec(model="vlmrm-tiny", device="cpu")


def simulator_env(task: str, **kwargs) -> SimulatorVecEnv:
    return SimulatorVecEnv(
        get_task(task).vector_task,
        N,
        render_size=(SIZE, SIZE),
        episode_length=EPISODE,
        renderer="egl",
        physics="batch",
        **kwargs,
    )


def differing_pixels(a: np.ndarray, b: np.ndarray) -> int:
    return int((a != b).any(-1).sum())


@pytest.mark.parametrize("task", ["humanoid-kneeling", "Ant-v5", "HalfCheetah-v5"])
def test_gymnasium_drawing_equals_renders_after_each_step(task):
    """0 pixels apart from gymnasium's render() after every step, episode ends included (the humanoid's and
    the Ant's RK4 leaves the poses of its last stage, the HalfCheetah's Euler those of the last substep's
    start); the default draws the positions reached, which render() does not show on some steps."""
    spec = get_task(task)
    differing = {}
    for drawn in ("gymnasium", "reached"):
        venv = simulator_env(task, drawn_positions=drawn)
        envs = [spec.make(render_size=(SIZE, SIZE), episode_length=EPISODE) for _ in range(N)]
        venv.seed(SEED)
        venv.reset()
        for i, env in enumerate(envs):
            env.reset(seed=SEED + i)
        rng = np.random.default_rng(1)
        space = venv.action_space
        differing[drawn] = []
        for _ in range(2 * EPISODE + 1):
            actions = rng.uniform(space.low, space.high, (N, *space.shape)).astype(np.float32)
            venv.step(actions)
            frames = venv.last_frames()
            for i, env in enumerate(envs):
                _, _, terminated, truncated, _ = env.step(actions[i])
                differing[drawn].append(differing_pixels(env.render(), frames[i]))
                if terminated or truncated:
                    env.reset()
        venv.close()
        for env in envs:
            env.close()
    assert differing["gymnasium"] == [0] * len(differing["gymnasium"])
    assert max(differing["reached"]) > 0


def test_with_reset_frames_the_simulator_env_draws_the_papers_frames():
    """drawn_positions='gymnasium' with score_terminal_on='reset_frame' (configs/paper/): the frames SB3's vector
    env of gymnasium envs gives after each step (get_images() after its auto-reset, as the paper's code took
    them), 0 pixels apart at every step, an episode's last included; the simulator env's defaults differ from them."""
    task = "humanoid-kneeling"
    spec = get_task(task)
    make = lambda: spec.make(render_size=(SIZE, SIZE), episode_length=EPISODE, time_limit="terminal")  # noqa: E731
    differing = {}
    for switches in ("paper", "default"):
        kwargs = {"drawn_positions": "gymnasium", "score_terminal_on": "reset_frame"} if switches == "paper" else {}
        venv = simulator_env(task, time_limit="terminal", **kwargs)
        paper = DummyVecEnv([make] * N)
        for env in (venv, paper):
            env.seed(SEED)
            env.reset()
        rng = np.random.default_rng(2)
        space = venv.action_space
        differing[switches] = []
        for _ in range(2 * EPISODE + 1):
            actions = rng.uniform(space.low, space.high, (N, *space.shape)).astype(np.float32)
            venv.step(actions)
            paper.step(actions)
            frames = venv.last_frames()
            for i, env in enumerate(paper.envs):
                differing[switches].append(differing_pixels(env.render(), frames[i]))
        venv.close()
        paper.close()
    assert differing["paper"] == [0] * len(differing["paper"])
    assert max(differing["default"]) > 0


def test_the_plan_draws_gymnasiums_way_with_a_renderer_that_can():
    """renderer='auto' picks EGL on a CPU for it (Warp draws the CPU simulator from its positions only, whose
    kinematics it recomputes); renderer='warp' with physics='batch' is refused in one line naming the ways out."""
    plan = plan_stack(EnvSpec("Ant-v5", 2, drawn_positions="gymnasium"), CPU_TINY)
    assert (plan.physics, plan.renderer) == ("batch", "egl")
    assert "drawn as gymnasium draws" in plan.describe()
    with pytest.raises(ValueError) as error:
        plan_stack(EnvSpec("Ant-v5", 2, physics="batch", renderer="warp", drawn_positions="gymnasium"), CPU_TINY)
    message = str(error.value)
    assert "\n" not in message and "drawn_positions='reached'" in message and "renderer='egl'" in message
    with pytest.raises(ValueError, match="drawn_positions: 'lagging' is not one of"):
        EnvSpec("Ant-v5", drawn_positions="lagging")


@pytest.mark.warp
def test_warp_physics_is_drawn_as_it_lies_by_the_warp_renderer():
    """physics='warp' with the Warp renderer draws its worlds without the kinematics pass: the frames of a
    reset (whose forward pass is current) are the reached ones, a step's are not."""
    import warnings

    from vlmrm_fast.physics.warp import CPUBackendWarning

    frames = {}
    for drawn in ("gymnasium", "reached"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CPUBackendWarning)
            venv = SimulatorVecEnv(
                get_task("HalfCheetah-v5").vector_task,
                N,
                render_size=(32, 32),
                episode_length=EPISODE,
                renderer="warp",
                physics="warp",
                solver="newton",
                drawn_positions=drawn,
            )
        venv.seed(SEED)
        venv.reset()
        reset_frames = np.stack(venv.get_images())
        venv.step(np.ones((N, 6), np.float32))
        frames[drawn] = (reset_frames, venv.last_frames())
        venv.close()
    np.testing.assert_array_equal(frames["gymnasium"][0], frames["reached"][0])
    assert differing_pixels(frames["gymnasium"][1], frames["reached"][1]) > 0


def test_the_papers_configs_draw_as_gymnasium_drew():
    """Every configs/paper/ config of a MuJoCo task sets drawn_positions: gymnasium (its frames were render()'s)."""
    root = pathlib.Path(__file__).resolve().parents[1] / "configs" / "paper"
    mujoco_configs = [path for path in sorted(root.rglob("*.yaml")) if get_task(load_config(path).env.task).vector_task]
    assert len(mujoco_configs) >= 20
    for path in mujoco_configs:
        assert load_config(path).env.drawn_positions == "gymnasium", path
