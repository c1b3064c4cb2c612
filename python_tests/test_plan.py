"""One plan per stack (vlmrm_fast.stack.plan): a construction resolves the device, the renderer, the physics and
the pipeline's ranges once each, and hands the plan down; the backends are rows of their tables."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch

from vlmrm_fast import FastVLMRewardVecEnv, RewardModelSpec, rendering
from vlmrm_fast.envs.spec import EnvSpec
from vlmrm_fast.physics import AUTO_ORDER, PHYSICS
from vlmrm_fast.rendering import RENDERERS
from vlmrm_fast.runtime import device as device_module
from vlmrm_fast.stack import plan as plan_module
from vlmrm_fast.stack import scorer
from vlmrm_fast.stack.plan import StackPlan, plan_stack

TINY = {"model": "vlmrm-tiny", "alpha": 0.5, "device": "cpu"}


def _counted(monkeypatch, counts: collections.Counter, module, name: str, label: str, decides=lambda *a, **k: True):
    original = getattr(module, name)

    def counting(*args, **kwargs):
        if decides(*args, **kwargs):
            counts[label] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)


def _unresolved(device, *args, **kwargs) -> bool:
    """A device still to decide ("auto", "cuda", None), not one already resolved to a torch.device."""
    return not (isinstance(device, torch.device) and (device.type == "cpu" or device.index is not None))


@pytest.mark.parametrize("task", ["humanoid-kneeling", "cartpole"])
def test_a_construction_makes_each_choice_once(monkeypatch, task):
    counts: collections.Counter = collections.Counter()
    for module in (plan_module, device_module):
        _counted(monkeypatch, counts, module, "resolve_device", "device", _unresolved)
    for module in (plan_module, rendering):
        _counted(monkeypatch, counts, module, "choose_renderer", "renderer")
    _counted(monkeypatch, counts, plan_module, "_choose_physics", "physics")
    for module in (plan_module, scorer):
        _counted(monkeypatch, counts, module, "plan_chunks", "ranges")
    env = FastVLMRewardVecEnv(task, 3, render_size=32, episode_length=4, **TINY)
    try:
        assert counts == {"device": 1, "renderer": 1, "physics": 1, "ranges": 1}
        plan = env.plan
        assert isinstance(plan, StackPlan) and plan.device == torch.device("cpu")
        assert plan.ranges == (slice(0, 3),) and plan.encoder_batch == 3 == env.reward_model.chunk_size
        assert (plan.physics, plan.renderer) == (env.physics, env.renderer)
        # one value per setting: the plan's env spec holds each choice as it runs, never "auto"
        assert "auto" not in dataclasses.astuple(plan.env)
        assert (plan.env.physics, plan.env.renderer) == (plan.physics, plan.renderer)
        assert plan.env.pipeline_chunks == len(plan.ranges) and plan.env.solver == plan.solver
        assert plan.describe().startswith(f"{task}, 3 envs scored on cpu: physics {plan.physics}")
        if task == "cartpole":
            assert plan.physics == "gym" and plan.renderer is None
        else:
            assert plan.physics == "batch" and env.venv.frame_source is not None
            assert env.renderer in RENDERERS and plan.env.frame_shape == (32, 32)
    finally:
        env.close()


def test_one_device_goes_down_to_the_simulator_and_the_renderer(monkeypatch):
    """The plan's torch.device is what the simulator env's simulator and renderer are made for (no index in between)."""
    from vlmrm_fast.physics import Physics
    from vlmrm_fast.rendering import Renderer

    seen = []
    for cls, name in ((Physics, "make_simulator"), (Renderer, "make")):
        original = getattr(cls, name)

        def recording(self, *args, _original=original):
            seen.append(args[-1])
            return _original(self, *args)

        monkeypatch.setattr(cls, name, recording)
    env = FastVLMRewardVecEnv("humanoid-kneeling", 2, render_size=32, episode_length=4, **TINY)
    try:
        assert seen == [env.plan.device, env.plan.device] and all(type(d) is torch.device for d in seen)
    finally:
        env.close()


def test_the_plan_logs_its_line(caplog):
    with caplog.at_level("INFO", logger="vlmrm_fast.stack.plan"):
        plan = plan_stack(EnvSpec("cartpole", 2), RewardModelSpec(**TINY))
    assert caplog.messages == [f"stack: {plan.describe()}"]


def test_pipeline_ranges_on_a_gpu_follow_the_renderer():
    """On a GPU, "auto" splits a step into ranges only where drawing can overlap the encoder: not for EGL,
    whose GL context time-slices the GPU against CUDA's work (measured on an H100: 1,000 frames/s in the pipelined step)."""
    gpu = torch.device("cuda", 0)
    assert RENDERERS["warp"].overlaps_encoder and not RENDERERS["egl"].overlaps_encoder
    assert len(scorer.plan_chunks(256, "auto", gpu, overlaps=True)) == 4
    assert scorer.plan_chunks(256, "auto", gpu, overlaps=False) == [slice(0, 256)]
    assert len(scorer.plan_chunks(256, 2, gpu, overlaps=False)) == 2  # asked for: kept
    assert scorer.plan_chunks(256, "auto", torch.device("cpu")) == [slice(0, 256)]


def test_physics_and_renderers_are_rows_of_one_table_each():
    assert set(PHYSICS) >= {"batch", "gym"} and set(RENDERERS) >= {"egl", "warp"}
    assert EnvSpec.__dataclass_fields__["physics"].default == "auto"
    for row in PHYSICS.values():
        assert row.description and row.needs and ":" in row.bytes_per_env and row.dynamics
        assert not row.device_observations or row.in_simulator_env  # (outputs on a device: a simulator's)
    # "auto" picks by the machine, never by the dynamics: every row it tries steps the same (a run's identity)
    assert len({PHYSICS[name].dynamics for name in AUTO_ORDER}) == 1
    for row in RENDERERS.values():
        assert row.description and row.needs and ":" in row.implementation
    with pytest.raises(ValueError, match="renderer: 'vulkan' is not one of"):
        rendering.choose_renderer("vulkan", torch.device("cpu"))


def test_a_task_without_a_simulator_env_version_names_the_physics_that_runs_it():
    with pytest.raises(ValueError, match=r"no simulator-env version; use physics='gym' \(or 'auto'\)"):
        plan_stack(EnvSpec("cartpole", 1, physics="batch"), RewardModelSpec(**TINY))


def test_rewards_do_not_depend_on_the_plan_taking_the_specs_whole():
    """from_specs (the specs whole) and the keyword front build the same stack."""
    env = EnvSpec("humanoid-kneeling", 2, render_size=32, episode_length=3)
    keywords = FastVLMRewardVecEnv("humanoid-kneeling", 2, render_size=32, episode_length=3, seed=1, **TINY)
    whole = FastVLMRewardVecEnv.from_specs(env, RewardModelSpec(**TINY), seed=1)
    try:
        assert keywords.plan == whole.plan
        actions = np.zeros((2, 17), dtype=np.float32)
        for _ in range(4):
            a, b = keywords.step(actions), whole.step(actions)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    finally:
        keywords.close()
        whole.close()
