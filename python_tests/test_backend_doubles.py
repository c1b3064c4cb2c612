"""What docs/architecture.md's "Where to add things" promises, shown with test doubles: a physics backend
is one module and a row (``double_physics.py``), a renderer one module and a row (``double_renderer.py``),
a reward formula its task, its formula and a row, a task one row; each registered for the test only,
and taken by the plan, the batch env, the renderers and the reward head as they are. The VecEnv contract
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
from double_physics import ROW as KINEMATIC
from double_physics import KinematicSimulator
from double_renderer import ROW as FLAT
from double_renderer import colour
from tolerances import assert_rewards_close

from vlmrm_fast import FastVLMRewardVecEnv, RewardModelSpec
from vlmrm_fast.envs import TASKS, TaskSpec
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.physics import PHYSICS
from vlmrm_fast.physics.simulator import DEVICE_WORLDS
from vlmrm_fast.rendering import RENDERERS
from vlmrm_fast.reward import formulas, load_reward_model
from vlmrm_fast.reward.head import RewardHead
from vlmrm_fast.reward.kinds import TASK_KINDS, TaskKind
from vlmrm_fast.stack.plan import plan_stack

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
    """The plan takes the row, the batch env steps its simulator with the actions, and EGL draws its host
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
                reference.update_scene(data, env.venv.batch.camera)
                np.testing.assert_array_equal(env.venv.last_frames()[i], reference.render())
    finally:
        env.close()


def test_a_renderer_is_one_module_and_a_row(doubles):
    """The flat renderer draws the batch env's and the physics double's host positions; its frames are
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
    monkeypatch.setitem(TASK_KINDS, "cosine", TaskKind(CosineTask, f"{__name__}:Cosine"))
    text = dict(zip(("a", "b"), formulas.normalize(torch.randn(2, 16, generator=torch.Generator().manual_seed(0)))))
    head = RewardHead([CosineTask("a"), CosineTask("b", name="other")], text.__getitem__, 100.0, torch.device("cpu"))
    embeddings = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    x = formulas.normalize(embeddings)
    torch.testing.assert_close(head(embeddings), torch.stack([x @ text["a"], x @ text["b"]], dim=1))

    spec = RewardModelSpec(model="vlmrm-tiny", device="cpu", tasks=[{"kind": "cosine", "prompt": "a humanoid robot"}])
    model = load_reward_model(spec)
    frames = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    image = formulas.normalize(model.embed_images(frames))
    prompt = formulas.normalize(model.embed_text(["a humanoid robot"]))[0]
    torch.testing.assert_close(
        model(frames), (image @ prompt)[:, None], rtol=1e-5, atol=1e-6
    )  # (tasks=: one column each)


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
        assert env.plan.physics == "gym" and env.reward_model.tasks[0].target_prompts == task.target_prompts
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
