"""What docs/architecture.md's "Where to add things" promises, shown with test doubles: a physics backend
is one module and a row (``double_physics.py``), a renderer one module and a row (``double_renderer.py``),
a reward family one module and a row (``double_reward.py``), a reward formula its task, its formula and a
row, a task one row; each registered for the test only, and taken by the plan, the simulator env, the renderers,
the reward wrappers, evaluation and the reward head as they are. The VecEnv contract
tests run over the physics double too (``test_vec_env.py``, the ``venv`` fixture). Its "Modules" table names
every module of the package."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import gymnasium
import mujoco
import numpy as np
import pytest
import torch
from double_device_physics import ROW as DEVICE_KINEMATIC
from double_physics import ROW as KINEMATIC
from double_physics import KinematicSimulator
from double_renderer import ROW as FLAT
from double_renderer import colour
from double_reward import NAME as PREFIX_NAME
from double_reward import ROW as PREFIX
from double_reward import brightness, reference_rewards
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv, RewardModelSpec
from vlmrm_fast.checks import FieldError
from vlmrm_fast.envs import TASKS, TaskSpec, get_task
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.evaluation import StateDataset, evaluate_models, state_epic_distance
from vlmrm_fast.lazy import named
from vlmrm_fast.physics import PHYSICS
from vlmrm_fast.physics.simulator import DEVICE_WORLDS
from vlmrm_fast.rendering import RENDERERS
from vlmrm_fast.reward import formulas, load_reward_model
from vlmrm_fast.reward.families import REWARD_FAMILIES
from vlmrm_fast.reward.head import RewardHead
from vlmrm_fast.reward.kinds import CRITERION_KINDS, CriterionKind
from vlmrm_fast.runtime import memory
from vlmrm_fast.stack.gym_vector import VLMRewardVectorEnv
from vlmrm_fast.stack.plan import plan_stack
from vlmrm_fast.training.config import identity_differences

TINY = {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu"}
TASK = "humanoid-kneeling"
SMALL = {"render_size": 32, "episode_length": 4}


@pytest.fixture
def doubles(monkeypatch):
    """The physics and the renderer doubles, each one row of its table, for this test only."""
    monkeypatch.setitem(PHYSICS, KINEMATIC.name, KINEMATIC)
    monkeypatch.setitem(RENDERERS, FLAT.name, FLAT)


def _reached_qpos(env: FastVLMRewardVecEnv) -> np.ndarray:
    return np.stack(env.get_attr("qpos"))


@pytest.mark.egl
def test_a_physics_backend_is_one_module_and_a_row(doubles):
    """The plan takes the row, the simulator env steps its simulator with the actions, and EGL draws its host
    positions: mujoco.Renderer's own pixels for the state the double reached."""
    plan = plan_stack(EnvSpec(TASK, 2, physics="kinematic", renderer="egl", **SMALL), RewardModelSpec(**TINY))
    assert (plan.physics, plan.renderer, plan.ranges) == ("kinematic", "egl", (slice(0, 2),))
    env = FastVLMRewardVecEnv(TASK, 2, physics="kinematic", renderer="egl", seed=0, **SMALL, **TINY)
    try:
        assert isinstance(env.venv.sim, KinematicSimulator)
        before = _reached_qpos(env)
        actions = np.full((2, env.action_space.shape[0]), 0.25, dtype=np.float32)
        _, rewards, _, _ = env.step(actions)
        after = _reached_qpos(env)
        model = env.venv.model
        hinges = model.jnt_qposadr[model.actuator_trnid[:, 0]]
        np.testing.assert_allclose(after[:, hinges] - before[:, hinges], 0.25 * env.venv.sim.dt, rtol=1e-6)
        assert np.isfinite(rewards).all()
        with mujoco.Renderer(model, 32, 32) as reference:
            data = mujoco.MjData(model)
            for i, qpos in enumerate(after):
                data.qpos[:] = qpos
                mujoco.mj_forward(model, data)
                reference.update_scene(data, env.venv.vector_task.camera)
                np.testing.assert_array_equal(env.venv.last_frames()[i], reference.render())
    finally:
        env.close()


def test_a_renderer_is_one_module_and_a_row(doubles):
    """The flat renderer draws the simulator env's and the physics double's host positions; its frames are
    scored as any renderer's."""
    for physics in ("batch", "kinematic"):
        env = FastVLMRewardVecEnv(TASK, 3, physics=physics, renderer="flat", seed=1, **SMALL, **TINY)
        try:
            assert env.plan.renderer == "flat"
            _, rewards, _, _ = env.step(np.zeros((3, env.action_space.shape[0]), dtype=np.float32))
            frames = env.venv.last_frames()
            np.testing.assert_array_equal(
                frames, np.broadcast_to(colour(_reached_qpos(env))[:, None, None], frames.shape)
            )
            assert_rewards_close(rewards, env.reward_model(frames).numpy())
        finally:
            env.close()


def test_a_physics_backend_with_its_state_on_a_device_is_one_module_and_a_row(doubles, monkeypatch):
    """A backend whose state lives on a device (torch tensors) declares, in its row, the memory one env needs and
    where, its dynamics and its device observations; the plan, the simulator env, a renderer and the training
    config's run identity read the row, and nothing else is added. Stepped through FastVLMRewardVecEnv it moves its
    envs as the kinematic double moves them on the host (the same scheme: the same observations, rewards and
    frames, bit for bit); through gymnasium's vector API with torch outputs, its observations are computed from its
    fields where they lie, with no copy to the host."""
    before = dict(PHYSICS)
    monkeypatch.setitem(PHYSICS, DEVICE_KINEMATIC.name, DEVICE_KINEMATIC)
    assert set(PHYSICS) - set(before) == {DEVICE_KINEMATIC.name}
    assert Path(named(DEVICE_KINEMATIC.simulator).__module__ + ".py").name == "double_device_physics.py"
    task, n, steps = "HalfCheetah-v5", 3, 5
    settings = {"render_size": 24, "episode_length": 4, "renderer": "flat", "seed": 2, **TINY}

    plan = plan_stack(EnvSpec(task, n, physics=DEVICE_KINEMATIC.name, renderer="flat"), RewardModelSpec(**TINY))
    assert (plan.physics, plan.path) == (DEVICE_KINEMATIC.name, "simulator env")

    # The memory check reads the row: its bytes per env, on its device.
    asked = []

    def available(device):
        asked.append(device)
        return 2 * DEVICE_KINEMATIC.env_bytes(get_task(task).vector_task.build_model(24), (24, 24), device).count + 1

    with monkeypatch.context() as patch:
        patch.setattr(memory, "device_available_bytes", available)
        with pytest.raises(
            memory.EnvsDoNotFitError,
            match=r"^n_envs=3: .* each: the device double's qpos and qvel\), .*; use at most 2 envs here$",
        ):
            FastVLMRewardVecEnv(task, n, physics=DEVICE_KINEMATIC.name, **settings)
    assert asked == [plan.device]

    rng = np.random.default_rng(0)
    runs = {}
    for physics in (KINEMATIC.name, DEVICE_KINEMATIC.name):
        env = FastVLMRewardVecEnv(task, n, physics=physics, **settings)
        try:
            observations = [env.reset()]
            rewards, frames = [], []
            for actions in rng.uniform(-1, 1, (steps, n, env.action_space.shape[0])).astype(np.float32):
                obs, reward, _, _ = env.step(actions)
                observations.append(obs)
                rewards.append(reward)
                frames.append(np.array(env.venv.last_frames()))
            runs[physics] = (np.stack(observations), np.stack(rewards), np.stack(frames))
        finally:
            env.close()
        rng = np.random.default_rng(0)  # the same actions for both
    for host, device in zip(runs[KINEMATIC.name], runs[DEVICE_KINEMATIC.name]):
        np.testing.assert_array_equal(device, host)
    assert np.ptp(runs[DEVICE_KINEMATIC.name][0], axis=0).max() > 0  # (the joints moved)

    vector = VLMRewardVectorEnv(task, n, physics=DEVICE_KINEMATIC.name, torch_outputs=True, **settings)
    try:
        sim = vector.simulator_env.sim
        assert isinstance(sim.torch_outputs["qpos"], torch.Tensor) and sim.torch_outputs["qpos"].device == plan.device
        vector.reset(seed=2)
        zero = torch.zeros((n, vector.single_action_space.shape[0]))
        vector.step(zero)
        reads = sim.host_reads
        observation = vector.simulator_env.device_observation(plan.device)
        assert sim.host_reads == reads  # computed from the device fields, nothing copied to the host
        host = vector.simulator_env.vector_task.observation(sim.outputs)
        np.testing.assert_array_equal(observation.numpy(), host)
    finally:
        vector.close()

    # A run's identity compares the dynamics the rows declare: the two doubles run the same run, "batch" another.
    saved = {"env": {"physics": KINEMATIC.name}}
    assert identity_differences(saved, {"env": {"physics": DEVICE_KINEMATIC.name}}) == []
    assert identity_differences(saved, {"env": {"physics": "batch"}}) == ["env.physics: 'kinematic' then, 'batch' now"]


class WorldsOnly(KinematicSimulator):
    """A simulator that offers a renderer its worlds on a device only."""

    offers = (DEVICE_WORLDS,)


def test_the_plan_refuses_a_pair_that_cannot_meet(doubles, monkeypatch):
    row = dataclasses.replace(KINEMATIC, name="worlds-only", simulator=f"{__name__}:WorldsOnly")
    monkeypatch.setitem(PHYSICS, row.name, row)
    with pytest.raises(
        ValueError,
        match=r"^renderer='flat' cannot draw physics='worlds-only': its simulator offers device worlds, the "
        r"renderer draws host positions; use (renderer='warp' with physics='worlds-only', or )?"
        r"physics='batch' or 'kinematic' with renderer='flat'$",
    ):
        plan_stack(EnvSpec(TASK, 2, physics="worlds-only", renderer="flat"), RewardModelSpec(**TINY))
    renderer = FLAT.make(mujoco.MjModel.from_xml_string("<mujoco/>"), 1, (8, 8), -1, None)
    sim = WorldsOnly(mujoco.MjModel.from_xml_string("<mujoco/>"), 1)
    with pytest.raises(TypeError, match="^FlatRenderer draws a simulator's host positions; a WorldsOnly offers device"):
        renderer.draw(sim)


def _rollout(env, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's frames (copied), rewards and dones under zero actions."""
    actions = np.zeros((env.num_envs, *env.action_space.shape), dtype=env.action_space.dtype)
    frames, rewards, dones = [], [], []
    for _ in range(steps):
        _, r, d, _ = env.step(actions)
        frames.append(env.last_frames().clone().numpy())
        rewards.append(r)
        dones.append(d)
    return np.stack(frames), np.stack(rewards), np.stack(dones)


def test_a_reward_family_is_one_module_and_a_row(monkeypatch):
    """A reward family of its own per-step scorer (a running mean over an episode's frames, as a streamed judge
    keeps a state per env): the spec takes its name and refuses a field its row does not take, naming the family;
    the plan checks its needs; the SB3 stack over the simulator env and over gymnasium envs, and gymnasium's vector
    API (next-step autoreset), score each step through it; evaluation scores a dataset of episodes through it.
    Nothing else is added: its module, and its row in the families' table."""
    before = dict(REWARD_FAMILIES)
    monkeypatch.setitem(REWARD_FAMILIES, PREFIX.name, PREFIX)
    assert set(REWARD_FAMILIES) - set(before) == {PREFIX.name} and all(
        REWARD_FAMILIES[n] is r for n, r in before.items()
    )
    assert Path(named(PREFIX.implementation).__module__.replace(".", "/") + ".py").name == "double_reward.py"

    spec = RewardModelSpec(model=PREFIX_NAME, device="cpu")
    assert spec.family is PREFIX
    with pytest.raises(
        FieldError,
        match=r"^image_size: sets a generative VLM judge's input size, a field of the preference, window_judge, "
        r"prefix_judge and judge families; "
        r"'prefix-brightness' is a test double: the mean brightness of an episode so far \(the prefix-brightness "
        r"family\), which does not take it: leave it out$",
    ):
        RewardModelSpec(model=PREFIX_NAME, image_size=64)
    with pytest.raises(
        FieldError,
        match=r"^score_terminal_on: reset_frame reproduces the paper's one-frame rewards, and an episode's prefix "
        r"would then end on the next episode's first frame; use score_terminal_on: terminal_state$",
    ):
        plan_stack(EnvSpec(TASK, 2, score_terminal_on="reset_frame", **SMALL), spec)
    with pytest.raises(ValueError, match=r"; its reward at a step reads every frame of the episode so far: leave"):
        plan_stack(EnvSpec(TASK, 2, **SMALL), spec, defer_rewards=True)

    steps = {}
    for task, settings in ((TASK, SMALL), ("cartpole", {"episode_length": 4, "render_size": (24, 32)})):
        env = FastVLMRewardVecEnv(task, 2, model=PREFIX_NAME, device="cpu", seed=1, **settings)
        try:
            assert env.plan.physics == ("batch" if task == TASK else "gym")
            frames, rewards, dones = _rollout(env, 7)
            assert dones[3].all() and not dones[:3].any()  # an episode of 4 steps, then the next one's
            assert_rewards_close(rewards, reference_rewards(frames, dones))
            steps[task] = rewards
        finally:
            env.close()
    gym_env = gymnasium.make_vec(
        f"vlmrm_fast/{TASK}",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        model=PREFIX_NAME,
        device="cpu",
        max_episode_steps=4,
        **{k: v for k, v in SMALL.items() if k != "episode_length"},
    )
    try:
        gym_env.reset(seed=1)
        zero = np.zeros((2, gym_env.single_action_space.shape[0]), np.float32)
        gym_rewards = np.stack([gym_env.step(zero)[1] for _ in range(8)])  # 4 steps, a reset step, 3 steps
        assert (gym_rewards[4] == 0).all()
        assert_rewards_close(np.concatenate([gym_rewards[:4], gym_rewards[5:]]), steps[TASK])
    finally:
        gym_env.close()

    rng = np.random.default_rng(0)
    lengths = (5, 7)
    dataset = StateDataset(
        "cartpole",
        rng.normal(size=(12, 4)),
        rng.integers(0, 256, (12, 24, 32, 3), dtype=np.uint8),
        ("cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"),
        labels=rng.random(12),
        episodes=np.repeat(np.arange(len(lengths)), lengths),
    )
    result = evaluate_models(dataset, [PREFIX_NAME], alphas=(0.0, 1.0))
    values = brightness(dataset.frames)
    expected = np.concatenate([np.cumsum(v) / np.arange(1, len(v) + 1) for v in np.split(values, [5])])
    (evaluated,) = result.models
    assert evaluated.model == PREFIX_NAME and evaluated.alphas == (0.0, 1.0) and evaluated.parameters == 0
    assert_rewards_close(evaluated.rewards, np.stack([expected, expected], axis=1))
    np.testing.assert_allclose(evaluated.epic, state_epic_distance(evaluated.rewards, dataset.labels))


def test_nothing_above_the_reward_models_names_a_family():
    """The stack, evaluation, training and torchrun reach a reward model through its protocol alone: no module of
    theirs names a family's class (nor tests a model's class with isinstance)."""
    package = Path(__file__).resolve().parents[1] / "vlmrm_fast"
    classes = {named(row.implementation).__name__ for row in REWARD_FAMILIES.values()}
    classes |= {"WindowRewardModel", "FrameRewardModel"}  # the families' shared bases
    named_in = [
        f"{path.relative_to(package)}: {name}"
        for folder in ("stack", "evaluation", "training", "distributed")
        for path in sorted((package / folder).rglob("*.py"))
        for name in sorted(classes)
        if re.search(rf"\b{name}\b", path.read_text())
    ]
    assert not named_in, named_in


def test_nothing_above_the_backends_names_a_physics_backend_or_a_renderer():
    """The stack, evaluation, training and torchrun reach a physics backend and a renderer through their rows alone:
    no module of theirs names a backend's class (nor tests an object's class against one with isinstance) or
    imports a backend's module (its simulator, its bytes per env, its renderer); what a backend is, its memory per
    env, its dynamics and its device observations, they read from its row. (Read from the rows' names: no
    backend is imported.)"""
    package = Path(__file__).resolve().parents[1] / "vlmrm_fast"
    classes = {row.simulator.split(":")[1] for row in PHYSICS.values() if row.simulator}
    classes |= {row.implementation.split(":")[1] for row in RENDERERS.values()}
    classes |= {"RendererBase", "SimulatorBase"}  # the backends' shared bases
    modules = {row.simulator.split(":")[0] for row in PHYSICS.values() if row.simulator}
    modules |= {row.bytes_per_env.split(":")[0] for row in PHYSICS.values()}
    modules |= {row.implementation.split(":")[0] for row in RENDERERS.values()}
    modules -= {"vlmrm_fast.physics"}  # the table itself
    assert {"vlmrm_fast.physics.warp", "vlmrm_fast.rendering.egl"} <= modules and "WarpSimulator" in classes
    named_in = [
        f"{path.relative_to(package)}: {name}"
        for folder in ("stack", "evaluation", "training", "distributed")
        for path in sorted((package / folder).rglob("*.py"))
        for name in sorted(classes | modules)
        if re.search(rf"\b{re.escape(name)}\b", path.read_text())
    ]
    assert not named_in, named_in


@dataclasses.dataclass(frozen=True)
class CosineTask:
    """A reward task double: the cosine similarity to one prompt."""

    prompt: str
    name: str = "cosine"

    @property
    def prompts(self) -> tuple[str, ...]:
        return (self.prompt,)


class Cosine:
    def __init__(self, task: CosineTask, text_embedding, logit_scale: float):
        self.text = text_embedding(task.prompt)

    def reward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.text.to(x.device)

    def kernel_entry(self, first_row: int):
        return None  # no fused kernel: the formula runs in torch


def test_a_reward_formula_is_its_task_a_formula_and_a_row(monkeypatch):
    """A task of a new kind, its formula and one row of the task kinds: the head scores it (the torch path: no
    kernel entry), and a reward spec and a loaded model take it by its kind's name, as a config names it."""
    monkeypatch.setitem(CRITERION_KINDS, "cosine", CriterionKind(CosineTask, f"{__name__}:Cosine"))
    text = dict(zip(("a", "b"), formulas.normalize(torch.randn(2, 16, generator=torch.Generator().manual_seed(0)))))
    head = RewardHead([CosineTask("a"), CosineTask("b", name="other")], text.__getitem__, 100.0, torch.device("cpu"))
    embeddings = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    x = formulas.normalize(embeddings)
    torch.testing.assert_close(head(embeddings), torch.stack([x @ text["a"], x @ text["b"]], dim=1))

    spec = RewardModelSpec(
        model="vlmrm-tiny", device="cpu", criteria=[{"kind": "cosine", "prompt": "a humanoid robot"}]
    )
    model = load_reward_model(spec)
    frames = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    image = formulas.normalize(model.embed_images(frames))
    prompt = formulas.normalize(model.embed_text(["a humanoid robot"]))[0]
    torch.testing.assert_close(
        model(frames), (image @ prompt)[:, None], rtol=1e-5, atol=1e-6
    )  # (criteria=: one column each)


def test_a_task_is_one_row(monkeypatch):
    """A gymnasium env with prompts, one row of the task registry: the stack runs it on the task's envs."""
    task = TaskSpec(
        "pendulum-upright",
        "a test double: gymnasium's pendulum, to be swung up",
        lambda render_mode="rgb_array", **kwargs: gymnasium.make("Pendulum-v1", render_mode=render_mode, **kwargs),
        target_prompts=("a pendulum pointing up",),
        baseline_prompts=("a pendulum",),
        episode_length=5,
    )
    monkeypatch.setitem(TASKS, task.name, task)
    env = FastVLMRewardVecEnv(task.name, 2, seed=0, **TINY)
    try:
        assert env.plan.physics == "gym" and env.reward_model.criteria[0].target_prompts == task.target_prompts
        _, rewards, _, _ = env.step(np.zeros((2, 1), dtype=np.float32))
        assert rewards.shape == (2,) and np.isfinite(rewards).all()
    finally:
        env.close()


def _modules_table() -> list[tuple[str, str]]:
    """docs/architecture.md's "Modules" table: (first cell, whole row) of each row."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [(row.split(" | ", 1)[0], row) for row in rows]


def _mentions(module: str, table: list[tuple[str, str]]) -> bool:
    """Whether the table names ``module`` (a path under vlmrm_fast/): its whole path in backticks, a folder's
    ``__init__.py`` by its folder in a first cell, or its file name in the row of its folder (``reward/window*.py``
    standing for the files it matches)."""
    folder, _, name = module.rpartition("/")
    for first, row in table:
        named = re.findall(r"`([^`]+)`", first)
        if f"`{module}`" in row or (not folder and name in named):
            return True
        folders = {n.rstrip("/") for n in named if n.endswith("/")}
        patterns = [n for n in named if "*" in n]
        if folder and (folder in folders or any(Path(module).match(p) for p in patterns)):
            if name == "__init__.py" or f"`{name}`" in row or any(Path(module).match(p) for p in patterns):
                return True
    return False


def test_the_modules_table_names_every_module():
    package = Path(__file__).resolve().parents[1] / "vlmrm_fast"
    table = _modules_table()
    modules = sorted(str(path.relative_to(package)) for path in package.rglob("*.py"))
    assert len(modules) > 100
    missing = [module for module in modules if not _mentions(module, table)]
    assert not missing, f"docs/architecture.md's Modules table does not name {', '.join(missing)}"
