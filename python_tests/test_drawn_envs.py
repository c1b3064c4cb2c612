"""The batched drawing: gymnasium MuJoCo envs stepping themselves, their frames drawn all at once.

Each family's frames are compared with that env's own ``render()`` over steps that cross an episode's
end; the bound is 0 on every family: the scene is built by ``mjv_updateScene`` from the same model,
data, camera and options, drawn by ``mjr_render`` at the origin of a frame-sized buffer with the
model's multisampling (gymnasium's and dm_control's buffers are larger, the picture at their origin
the same). Observations and rewards are the envs' own, so they equal the generic path's to the bit.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from vlmrm_fast.envs import get_task
from vlmrm_fast.envs.mujoco_drawing import (
    DRAWN_FIELDS,
    UNCARRIED_FLAGS,
    DrawLayout,
    NotDrawable,
    RecordDrawState,
    view_of,
)
from vlmrm_fast.stack.drawn_env import DrawnVecEnv
from vlmrm_fast.stack.wrappers import RecordFrame, pop_frames

# One task of each family: gymnasium's MuJoCo suite (HalfCheetah-v5, its gymnasium env given the camera config
# envs.mujoco_suite fixes; HalfCheetah-v4, a plain gymnasium id: a free camera aimed at the first frame's geoms),
# Franka Kitchen (its robot env holds the renderer), Fetch and a Shadow hand (a callback moves the goal's
# site before drawing), an Adroit hand (MujocoEnv), dm_control through shimmy (a fixed model camera).
FAMILY_TASKS = [
    "HalfCheetah-v5",
    "HalfCheetah-v4",
    "kitchen-microwave",
    "FetchPush-v4",
    "HandManipulateBlock-v1",
    "AdroitHandDoor-v1",
    "dm_control/walker-walk-v0",
]
SIZE = 48


def _make(task: str, size: int = SIZE, episode_length: int | None = 3):
    spec = get_task(task)
    return lambda: spec.make(render_size=(size, size), episode_length=episode_length)


def _own_context(env) -> None:
    """Makes ``env``'s GL context current, once it has one: gymnasium's viewer draws in whatever context is
    current, and several envs in one thread each made theirs current when they first drew."""
    holder = env.unwrapped
    holder = getattr(holder, "robot_env", holder)
    viewer = getattr(getattr(holder, "mujoco_renderer", None), "_viewers", {}).get("rgb_array")
    if viewer is not None:
        viewer.make_context_current()


def _own_render(env) -> np.ndarray:
    _own_context(env)
    return env.render()


def _reference_step(reference: DummyVecEnv, actions: np.ndarray):
    for env in reference.envs:  # RecordFrame renders inside step: each env's context current first
        _own_context(env)
    return reference.step(actions)


@pytest.mark.egl
@pytest.mark.parametrize("task", FAMILY_TASKS)
def test_frames_equal_each_envs_render_over_steps_and_resets(task):
    # Franka Kitchen's own render() clears a 2560x1920 offscreen buffer (half a second a frame on Mesa): one env
    make, n = _make(task), 1 if task.startswith("kitchen") else 2
    drawn = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="egl")
    reference = DummyVecEnv([lambda: RecordFrame(make())] * n)
    drawn.seed(3)
    reference.seed(3)
    np.testing.assert_array_equal(drawn.reset(), reference.reset())
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(6):  # episodes of 3 steps: the third and the sixth end one
        actions = rng.uniform(drawn.action_space.low, drawn.action_space.high, (n, *drawn.action_space.shape))
        obs, rewards, dones, infos = drawn.step(actions.astype(drawn.action_space.dtype))
        ref_obs, ref_rewards, ref_dones, ref_infos = _reference_step(
            reference, actions.astype(drawn.action_space.dtype)
        )
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(rewards, ref_rewards)
        np.testing.assert_array_equal(dones, ref_dones)
        np.testing.assert_array_equal(drawn.last_frames(), np.stack(pop_frames(ref_infos)))
        assert all("vlmrm_draw_state" not in info for info in infos)
        ended += int(dones.sum())
    assert ended == 2 * n
    drawn.close()
    reference.close()


@pytest.mark.egl
def test_reset_frame_draws_the_state_a_finished_env_was_reset_to():
    make, n = _make("HalfCheetah-v5", episode_length=2), 2
    drawn = DrawnVecEnv(
        DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="egl", score_terminal_on="reset_frame"
    )
    reference = DummyVecEnv([lambda: RecordFrame(make())] * n)
    drawn.seed(1)
    reference.seed(1)
    drawn.reset()
    reference.reset()
    actions = np.zeros((n, *drawn.action_space.shape), dtype=np.float32)
    for step in range(3):
        _, _, dones, _ = drawn.step(actions)
        _, _, ref_dones, ref_infos = _reference_step(reference, actions)
        expected = np.stack(pop_frames(ref_infos))
        if ref_dones.any():  # what the paper's code scored: the env's render() after the VecEnv reset it
            expected = np.stack([_own_render(env) for env in reference.envs])
            assert step == 1
        np.testing.assert_array_equal(drawn.last_frames(), expected)


@pytest.mark.egl
def test_envs_in_worker_processes_draw_the_same_frames():
    make, n = _make("FetchPush-v4"), 2
    in_process = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="egl")
    workers = DrawnVecEnv(SubprocVecEnv([lambda: RecordDrawState(make())] * n), renderer="egl")
    try:
        for venv in (in_process, workers):
            venv.seed(5)
            venv.reset()
        actions = np.full((n, *in_process.action_space.shape), 0.3, dtype=np.float32)
        for _ in range(4):
            obs, rewards, dones, _ = in_process.step(actions)
            w_obs, w_rewards, w_dones, _ = workers.step(actions)
            np.testing.assert_array_equal(obs, w_obs)
            np.testing.assert_array_equal(rewards, w_rewards)
            np.testing.assert_array_equal(in_process.last_frames(), workers.last_frames())
    finally:
        in_process.close()
        workers.close()


@pytest.mark.parametrize("task", FAMILY_TASKS + ["dm_control/manipulator-bring_ball-v0", "Humanoid-v5"])
def test_a_scene_of_the_drawn_fields_equals_the_scene_of_the_whole_data(task):
    """The draw state carries all ``mjv_updateScene`` reads: every visual flag on (but those needing
    contacts or constraint rows), every group, body frames and labels, a tracking camera."""
    env = RecordDrawState(_make(task, episode_length=None)())
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    view = view_of(env)
    model, data = view.setup.model, view.data
    layout = DrawLayout(model)
    copy = mujoco.MjData(model)
    layout.unpack(layout.pack(data), copy)
    option = mujoco.MjvOption()
    for flag in mujoco.mjtVisFlag.__members__.values():
        if flag != mujoco.mjtVisFlag.mjNVISFLAG and flag not in UNCARRIED_FLAGS:
            option.flags[flag] = 1
    for group in ("geomgroup", "sitegroup", "jointgroup", "tendongroup", "actuatorgroup", "flexgroup", "skingroup"):
        getattr(option, group)[:] = 1
    option.frame, option.label = mujoco.mjtFrame.mjFRAME_BODY, mujoco.mjtLabel.mjLABEL_BODY

    def scene(d):
        camera = mujoco.MjvCamera()
        camera.type, camera.trackbodyid, camera.distance = mujoco.mjtCamera.mjCAMERA_TRACKING, 1, 3.0
        scn = mujoco.MjvScene(model, 10000)
        mujoco.mjv_updateScene(model, d, option, None, camera, mujoco.mjtCatBit.mjCAT_ALL, scn)
        geoms = [
            (g.type, g.objtype, g.objid, g.category, tuple(g.size), tuple(g.pos), tuple(g.mat.ravel()), tuple(g.rgba))
            for g in scn.geoms[: scn.ngeom]
        ]
        lights = [(tuple(light.pos), tuple(light.dir)) for light in scn.lights[: scn.nlight]]
        return geoms, lights, [(tuple(c.pos), tuple(c.forward)) for c in scn.camera]

    assert scene(copy) == scene(data)
    assert set(name for name, _, _ in layout.floats + layout.ints) <= set(DRAWN_FIELDS)
    env.close()


def test_visual_flags_that_need_contacts_are_refused_in_one_line():
    spec = get_task("HalfCheetah-v5")
    env = spec.make(render_size=(SIZE, SIZE), visual_options={int(mujoco.mjtVisFlag.mjVIS_CONTACTPOINT): True})
    with pytest.raises(NotDrawable, match=r"mjVIS_CONTACTPOINT.*renderer=None") as caught:
        view_of(env)
    assert "\n" not in str(caught.value)


def test_an_env_that_is_not_mujoco_is_refused_in_one_line():
    env = get_task("CartPole-v1").make()
    with pytest.raises(NotDrawable, match=r"CartPoleEnv is not a MuJoCo env.*leave renderer unset") as caught:
        RecordDrawState(env)
    assert "\n" not in str(caught.value)


# MuJoCo Warp's picture of the same poses and view: a ray tracer's, not the rasterizer's render() uses: no
# floor reflections (gymnasium's checker floor, Franka Kitchen's tiles), no multisampling, its own light
# falloff and shadows. Mean absolute difference per pixel and channel, grey levels, measured at 64 px and
# rounded up by a quarter: the geometry and the view are the same (a wrong pose or camera moves the mean by
# far more).
WARP_BOUNDS = {
    "HalfCheetah-v5": 24.0,
    "kitchen-microwave": 28.0,
    "FetchPush-v4": 6.0,
    "AdroitHandDoor-v1": 8.0,
    "dm_control/walker-walk-v0": 8.0,
}


@pytest.mark.egl
@pytest.mark.warp
@pytest.mark.parametrize("task", list(WARP_BOUNDS))
def test_warp_draws_the_envs_own_poses_within_a_ray_tracers_bound(task):
    make, n = _make(task, size=64, episode_length=None), 2
    egl = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="egl")
    warp = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="warp")
    for venv in (egl, warp):
        venv.seed(2)
        venv.reset()
    actions = np.stack([np.full(egl.action_space.shape, 0.2, egl.action_space.dtype)] * n)
    for _ in range(2):
        egl.step(actions)
        warp.step(actions)
        difference = np.abs(egl.last_frames().astype(np.int64) - warp.last_frames())
        assert difference.mean() <= WARP_BOUNDS[task]
    egl.close()
    warp.close()


@pytest.mark.warp
def test_warp_refuses_a_model_without_a_camera_to_put_the_view_in():
    spec = get_task("HandManipulateBlock-v1")
    with pytest.raises(
        TypeError, match=r"^MuJoCo Warp draws model cameras, and this env's model has none.*renderer='egl'$"
    ):
        DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(spec.make(render_size=(SIZE, SIZE)))]), renderer="warp")


@pytest.mark.egl
def test_an_envs_own_render_still_draws_after_the_batch_renderer_drew():
    """gymnasium's viewer draws in the GL context current on its thread, which it made current once: the
    batch renderer puts back the context it found (it left none current, and render() drew black)."""
    env = _make("HalfCheetah-v5", episode_length=None)()
    env.reset(seed=0)
    first = env.render()
    assert first.max() > 0
    drawn = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(_make("HalfCheetah-v5")())]), renderer="egl")
    drawn.reset()
    drawn.step(np.zeros((1, *drawn.action_space.shape), np.float32))
    np.testing.assert_array_equal(env.render(), first)
    drawn.close()
    np.testing.assert_array_equal(env.render(), first)  # and after it is closed
    env.close()


@pytest.mark.egl
def test_envs_own_data_is_drawn_as_it_lies_only():
    """The batched drawing's state is drawn as the envs' steps left it (``physics.simulator.STATES_AS_STEPPED``,
    as ``drawn_positions="gymnasium"`` draws a simulator's): asked for the reached positions, the renderer refuses
    in one line naming the positions it draws."""
    from vlmrm_fast.physics.simulator import HOST_DATA
    from vlmrm_fast.rendering import RENDERERS

    for name in ("egl", "warp"):
        assert RENDERERS[name].state_for((HOST_DATA,), "gymnasium") == HOST_DATA
        assert RENDERERS[name].state_for((HOST_DATA,), "reached") is None
    drawn = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(_make("HalfCheetah-v5")())]), renderer="egl")
    drawn.reset()
    with pytest.raises(TypeError, match=r"^EGLRenderer draws .*offers host data.*, or positions='gymnasium'$"):
        drawn.frame_source.draw(drawn.env_data, positions="reached")
    drawn.close()


@pytest.mark.warp
def test_warp_draws_envs_own_data_in_parts_on_the_cpus_threads_bit_for_bit():
    """On Warp's CPU backend the batched drawing's envs are split into parts drawn at once on the CPU's threads,
    as its draws of positions are: the frames equal those drawn one env at a time."""
    make, n = _make("dm_control/walker-walk-v0", episode_length=None), 4
    drawn = DrawnVecEnv(DummyVecEnv([lambda: RecordDrawState(make())] * n), renderer="warp")
    drawn.seed(1)
    drawn.reset()
    drawn.step(np.full((n, *drawn.action_space.shape), 0.4, drawn.action_space.dtype))
    renderer = drawn.frame_source
    renderer._cpu_parts = 2  # (as on a machine of 2 CPUs or more)
    if renderer._workers is None:
        import concurrent.futures

        renderer._workers = concurrent.futures.ThreadPoolExecutor(2)
    for _ in range(2):  # the first draw loads the parts' modules one after another, the second runs them at once
        renderer.draw(drawn.env_data, positions="gymnasium")
    together = renderer.frames().copy()
    assert {key for key in renderer._slots if key[:2] in ((0, 2), (2, 4))} == {(0, 2, False), (2, 4, False)}
    for env in range(n):  # one env a draw: a part of its own
        renderer.draw(drawn.env_data, slice(env, env + 1), positions="gymnasium")
        np.testing.assert_array_equal(renderer.frames()[env], together[env])
    drawn.close()
