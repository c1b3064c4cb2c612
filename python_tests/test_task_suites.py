"""The optional task suites (dm_control through shimmy, gymnasium-robotics) as tasks: their fits to MuJoCo
4.0.0, their rows, the plan's choice of path for them, their configs trained shrunk, and the one-line
refusals (an extra not installed, a camera the model lacks, a frame larger than the model's buffer)."""

from __future__ import annotations

import builtins
import pathlib

import numpy as np
import pytest
import yaml

from vlmrm_fast import RewardModelSpec
from vlmrm_fast.envs import TASKS, get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.stack.plan import plan_stack

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = RewardModelSpec(model="vlmrm-tiny", device="cpu")


def test_dm_control_needs_its_field_table_fitted_to_this_mujoco():
    """dm_control 1.0.50's table of mjModel/mjData fields lists fields MuJoCo 4.0.0 removed: a Physics
    fails on them until fit_to_mujoco drops them (and only them)."""
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import sizes

    from vlmrm_fast.envs import dm_control

    model = mujoco.MjModel.from_xml_string("<mujoco/>")
    dropped = dm_control.fit_to_mujoco()
    for entry in dropped:
        struct, field = entry.split(".")
        assert not hasattr(model if struct == "mjmodel" else mujoco.MjData(model), field)
    assert dm_control.fit_to_mujoco() == []  # once is enough
    assert all(hasattr(model, name) for name in sizes.array_sizes["mjmodel"])


def test_gymnasium_robotics_joint_helpers_read_this_mujocos_joint_types():
    """gymnasium-robotics 1.4.2 checks `joint_type in (mjJNT_HINGE, mjJNT_SLIDE)`, which MuJoCo 4's enums
    answer False for numpy integers: without the fit its Fetch env fails to build."""
    import mujoco
    from gymnasium_robotics.utils import mujoco_utils

    from vlmrm_fast.envs import robotics

    hinge = np.int32(int(mujoco.mjtJoint.mjJNT_HINGE))
    assert hinge not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)  # why the fit is needed
    robotics.fit_to_mujoco()
    xml = "<mujoco><worldbody><body><joint name='j' type='hinge'/><joint name='b' type='ball'/><geom size='1'/></body></worldbody></mujoco>"
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco_utils.set_joint_qpos(model, data, "j", 0.5)
    mujoco_utils.set_joint_qpos(model, data, "b", [0.0, 1.0, 0.0, 0.0])
    assert mujoco_utils.get_joint_qpos(model, data, "j").tolist() == [0.5]
    assert mujoco_utils.get_joint_qpos(model, data, "b").tolist() == [0.0, 1.0, 0.0, 0.0]
    mujoco_utils.set_joint_qvel(model, data, "b", [1.0, 2.0, 3.0])
    assert mujoco_utils.get_joint_qvel(model, data, "b").tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="joint 'b' takes 4 values"):
        mujoco_utils.set_joint_qpos(model, data, "b", [1.0, 0.0])


@pytest.mark.parametrize("task", ["FrankaKitchen-v1", "FetchReach-v4", "AdroitHandPen-v1", "HandReach-v3"])
def test_the_robotics_rows_make_their_envs_with_prompts_and_a_flat_observation(task):
    spec = get_task(task)
    assert spec.drawing == "gymnasium" and spec.target_prompts and spec.baseline_prompts
    env = spec.make(render_size=(32, 40))
    obs, _ = env.reset(seed=0)
    assert obs.ndim == 1 and env.observation_space.contains(obs)
    assert env.render().shape == (32, 40, 3)
    env.close()


def test_every_dm_control_row_loads_steps_and_draws_its_camera():
    for name, row in __import__("vlmrm_fast.envs.dm_control", fromlist=["SUITE"]).SUITE.items():
        spec = TASKS[name]
        assert spec.drawing == "dm_control" and spec.target_prompts == (row.target,)
        env = spec.make(render_size=(16, 16))
        obs, _ = env.reset(seed=0)
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs.ndim == 1 and np.isfinite(reward) and not (terminated or truncated)
        env.close()


def test_a_frame_larger_than_the_models_offscreen_buffer_is_given_one():
    """dm_control refuses a frame larger than the buffer its XML declares (<global offwidth=.../>): the rows
    set the buffer to the frame's size, so the env's own render() draws it too."""
    env = get_task("dm_control/cartpole-swingup-v0").make(render_size=(700, 900))
    env.reset(seed=0)
    assert env.render().shape == (700, 900, 3)
    env.close()


def test_the_plan_draws_mujoco_envs_in_one_batch_and_lets_others_draw_themselves():
    for task in ("kitchen-microwave", "dm_control/walker-walk-v0", "HalfCheetah-v4", "AdroitHandDoor-v1"):
        plan = plan_stack(EnvSpec(task, 2, render_size=32), TINY.replace(target_prompts=("a robot",)))
        assert (plan.physics, plan.renderer, plan.path) == ("gym", "egl", "batched drawing"), task
    for task in ("HalfCheetah-v5", "humanoid-kneeling"):  # a vector task: its gymnasium envs when asked for
        assert plan_stack(EnvSpec(task, 2, render_size=32), TINY).path == "simulator env"
        plan = plan_stack(EnvSpec(task, 2, render_size=32, physics="gym"), TINY)
        assert (plan.renderer, plan.path) == ("egl", "batched drawing"), task
    plan = plan_stack(EnvSpec("CartPole-v1", 2), TINY.replace(target_prompts=("a pole",)))
    assert (plan.renderer, plan.path) == (None, "generic")
    own = plan_stack(EnvSpec("kitchen-microwave", 2, renderer=None), TINY)
    assert own.path == "generic"
    assert "the gymnasium envs' data drawn by renderer egl" in plan_stack(EnvSpec("kitchen-kettle", 2), TINY).describe()


def test_batched_drawing_asked_of_an_env_that_is_not_mujoco_is_refused_in_one_line():
    with pytest.raises(ValueError) as refused:
        plan_stack(EnvSpec("CartPole-v1", 2, physics="gym", renderer="egl"), TINY.replace(target_prompts=("x",)))
    assert str(refused.value) == (
        "renderer='egl' draws MuJoCo envs from their data, and task 'CartPole-v1' runs envs that are not MuJoCo envs "
        "the batch renderers can draw (gymnasium's MujocoEnv, gymnasium-robotics, dm_control through shimmy): leave "
        "the renderer out, and they draw their own frames"
    )
    warp = plan_stack(EnvSpec("kitchen-microwave", 2, renderer="warp"), TINY)  # a ray tracer's picture, asked for
    assert (warp.renderer, warp.path) == ("warp", "batched drawing")


def test_a_missing_extra_names_its_pip_command_in_one_line(monkeypatch):
    real_import = builtins.__import__

    def without_dm_control(name, *args, **kwargs):
        if name.split(".")[0] in ("dm_control", "shimmy"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_dm_control)
    monkeypatch.delitem(__import__("sys").modules, "dm_control", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "shimmy", raising=False)
    with pytest.raises(ImportError) as missing:
        plan_stack(EnvSpec("dm_control/walker-walk-v0", 2), TINY)
    message = str(missing.value)
    assert message.startswith(
        "task 'dm_control/walker-walk-v0' needs dm_control's suite through shimmy, which is not installed: "
        'pip install "vlmrm-fast[dm_control]"'
    )
    assert "\n" not in message


def test_a_camera_the_model_lacks_is_refused_naming_its_cameras():
    with pytest.raises(ValueError) as refused:
        get_task("dm_control/walker-walk-v0@overhead")
    assert str(refused.value) == (
        "task 'dm_control/walker-walk-v0@overhead': walker's model has no camera 'overhead'; its cameras are "
        "'side', 'back' (or their numbers 0 to 1)"
    )
    side = get_task("dm_control/walker-walk-v0@back")
    env = side.make(render_size=(16, 16))
    assert env.unwrapped.render_kwargs["camera_id"] == "back"
    env.close()


def _shrunk(name: str, tmp_path: pathlib.Path, **reward) -> pathlib.Path:
    config = yaml.safe_load((ROOT / "configs" / name).read_text())
    config["output_dir"] = str(tmp_path / "run")
    config["reward"].update(device="cpu", **reward)
    config["env"].update(n_envs=2, episode_length=8, render_size=32)
    config["rl"].update(total_timesteps=32, device="cpu")
    config["logging"].update(checkpoint_every=32, video_every=32)
    return config


def _train(config: dict, tmp_path: pathlib.Path) -> None:
    from vlmrm_fast.cli import main as cli_main

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["train", str(path)]) == 0
    assert (tmp_path / "run" / "final_model.zip").is_file()
    assert list((tmp_path / "run" / "videos").glob("*.mp4"))


@pytest.mark.egl
def test_the_roboclip_kitchen_config_trains_shrunk_on_the_cpu(tmp_path):
    """configs/kitchen-roboclip.yaml with the tiny S3D-G (8 frames), two envs and short episodes. Its frames are
    in [0, 1] as RoboCLIP's kitchen wrapper fed them (it divides uint8 frames by 255); the raw 0-255 values were
    its Meta-World runs' input."""
    config = _shrunk("kitchen-roboclip.yaml", tmp_path, model="s3d-tiny")
    del config["reward"]["checkpoint"]
    assert "pixel_values" not in config["reward"]["window"]
    config["reward"]["window"]["frames"] = 8
    config["rl"]["kwargs"].update(n_steps=8, batch_size=8, n_epochs=1)
    _train(config, tmp_path)


@pytest.mark.egl
def test_the_dm_control_config_trains_shrunk_on_the_cpu(tmp_path):
    config = _shrunk("dm-control-walker-walk.yaml", tmp_path, model="vlmrm-tiny")
    config["rl"]["kwargs"].update(learning_starts=16, batch_size=8, buffer_size=32, train_freq=2, gradient_steps=1)
    _train(config, tmp_path)


def test_a_meta_world_task_says_why_it_does_not_run_here():
    with pytest.raises(ValueError) as refused:
        get_task("Meta-World/MT1")
    assert "Meta-World does not run beside this project's MuJoCo 4.0.0" in str(refused.value)
    assert "docs/environments.md" in str(refused.value)


def test_gymnasium_make_vec_of_a_suite_task_draws_each_sub_envs_render():
    import gymnasium

    vector = gymnasium.make_vec(
        "vlmrm_fast/dm_control-cartpole-swingup-v0", 2, model="vlmrm-tiny", device="cpu", render_size=16
    )
    vector.reset(seed=0)
    _, rewards, _, _, _ = vector.step(np.zeros((2, 1), np.float32))
    assert rewards.shape == (2,) and np.isfinite(rewards).all()
    vector.close()


@pytest.mark.egl
@pytest.mark.slow  # a fresh interpreter's imports (torch, dm_control): a minute and more on two cores
def test_a_dm_control_stack_builds_in_a_fresh_process():
    """dm_control sets up its GL backend when imported (Mesa's LLVM on a CPU); the native core's Triton LLVM,
    loaded after it, crashed the process (a segmentation fault) before the suite's import loaded it first."""
    from child_process import run_python

    script = (
        "import numpy as np\n"
        "from vlmrm_fast import FastVLMRewardVecEnv\n"
        "venv = FastVLMRewardVecEnv('dm_control/walker-walk-v0', 2, model='vlmrm-tiny', device='cpu', render_size=16)\n"
        "venv.reset()\n"
        "print(venv.plan.path, np.isfinite(venv.step(np.zeros((2, 6), np.float32))[1]).all())\n"
    )
    result = run_python(["-c", script], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("batched drawing True")
