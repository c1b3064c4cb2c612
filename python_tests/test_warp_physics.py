"""WarpSimulator (MuJoCo Warp physics; here on Warp's CPU backend) against BatchSimulator (CPU MuJoCo),
both running the humanoid tasks' model with the Newton solver.

One MuJoCo Warp simulator serves the module (Warp compiles a model's kernels once per machine into its
kernel cache: about 65 s for the first simulator on 2 cores with an empty cache); each test resets
the worlds it uses.

Tolerance of the comparisons with CPU MuJoCo: ``|warp - cpu| <= RTOL * max(1, max |cpu field|)``,
field by field. MuJoCo Warp computes in float32 (unit roundoff 6e-8) and stops its Newton solver at
tolerance 1e-6 where CPU MuJoCo works in float64 to 1e-8; through the contact solve, over 8 steps
(40 substeps) from 3 seeds, the differences measured stay below 3e-5 of a field's scale (cfrc_ext; qpos 2e-6), so
RTOL = 1e-3 holds them with a margin of 30 while a field read from the wrong place (O(1)) fails.
The states start with the feet on the floor (sphere contacts): where a steep capsule (a shin) meets
the floor the two simulators orient the friction pyramid differently, a modelling difference that
docs/physics.md measures, not rounding.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import mujoco
import numpy as np
import pytest
import torch
from child_process import run_python

from vlmrm_fast.envs import humanoid
from vlmrm_fast.physics.batch import BatchSimulator
from vlmrm_fast.physics.simulator import SimulationWarning
from vlmrm_fast.physics.solver import with_solver

pytestmark = pytest.mark.warp

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = 3
STEPS = 6
RTOL = 1e-3
OUTPUTS = humanoid.HumanoidVectorTask.outputs
FEET_ON_FLOOR_Z = 1.0  # root height where the humanoid's feet (spheres) touch the floor at qpos0's pose

PLUGIN_ACTUATOR = """
<mujoco>
  <extension><plugin plugin="mujoco.pid"/></extension>
  <worldbody><body><joint name="hinge" type="hinge"/><geom size="0.1"/></body></worldbody>
  <actuator><plugin plugin="mujoco.pid" joint="hinge"/></actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return with_solver(humanoid.humanoid_model(humanoid.DEFAULT_SCENE, 64), "newton")


@pytest.fixture(scope="module")
def sim(model):
    from vlmrm_fast.physics.warp import WarpSimulator

    with WarpSimulator(model, N, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True, device="cpu") as simulator:
        yield simulator


def cpu_twin(model: mujoco.MjModel, sim) -> BatchSimulator:
    """A CPU simulator in the Warp simulator's exact state (its float32 values)."""
    cpu = BatchSimulator(model, N, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True, nthread=1)
    cpu.reset(qpos=sim.qpos, qvel=sim.qvel)
    return cpu


def feet_on_floor(model: mujoco.MjModel) -> np.ndarray:
    qpos = np.tile(model.qpos0, (N, 1))
    qpos[:, 2] = FEET_ON_FLOOR_Z
    return qpos


def actions(model: mujoco.MjModel, steps: int, seed: int = 0) -> np.ndarray:
    low, high = model.actuator_ctrlrange.T
    return np.random.default_rng(seed).uniform(low, high, (steps, N, model.nu))


def assert_close(warp_fields: dict, cpu_fields: dict, what: str) -> None:
    for name, expected in cpu_fields.items():
        scale = max(1.0, float(np.abs(expected).max()))
        error = float(np.abs(warp_fields[name] - expected).max())
        assert error <= RTOL * scale, f"{what}: {name} differs by {error:.3g} (scale {scale:.3g})"


def snapshot(sim) -> dict[str, np.ndarray]:
    return {"qpos": sim.qpos.copy(), "qvel": sim.qvel.copy(), **{k: v.copy() for k, v in sim.outputs.items()}}


def test_steps_match_cpu_mujoco_newton(model, sim):
    sim.reset(seed=1, noise_scale=humanoid.RESET_NOISE_SCALE, qpos=feet_on_floor(model))
    cpu = cpu_twin(model, sim)
    assert_close(sim.outputs, cpu.outputs, "after the reset")
    contact_force = 0.0
    for step, ctrl in enumerate(actions(model, STEPS)):
        sim.step(ctrl)
        cpu.step(ctrl)
        assert_close({"qpos": sim.qpos, "qvel": sim.qvel}, {"qpos": cpu.qpos, "qvel": cpu.qvel}, f"step {step}")
        assert_close(sim.outputs, cpu.outputs, f"step {step}")
        contact_force = max(contact_force, float(np.abs(cpu.outputs["cfrc_ext"]).max()))
    assert contact_force > 10.0  # the feet pushed on the floor: cfrc_ext was compared where it matters


def test_reset_draws_the_cpu_simulators_noise_rounded_to_float32(model, sim):
    cpu = BatchSimulator(model, N, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True, nthread=1)
    sim.reset(seed=11, noise_scale=humanoid.RESET_NOISE_SCALE)
    cpu.reset(seed=11, noise_scale=humanoid.RESET_NOISE_SCALE)
    np.testing.assert_array_equal(sim.qpos, cpu.qpos.astype(np.float32))
    np.testing.assert_array_equal(sim.qvel, cpu.qvel.astype(np.float32))
    assert not (sim.qvel == 0).any()  # the noise is there
    np.testing.assert_array_equal(sim.outputs["cfrc_ext"], 0.0)  # as mj_resetData + mj_forward leave it
    assert_close(sim.outputs, cpu.outputs, "after the reset")


def test_same_seed_twice_gives_the_same_bits(model, sim):
    sim.reset(seed=5, noise_scale=humanoid.RESET_NOISE_SCALE)
    first = snapshot(sim)
    sim.step(actions(model, 1)[0])
    stepped = snapshot(sim)
    sim.reset(seed=5, noise_scale=humanoid.RESET_NOISE_SCALE)
    for name, values in snapshot(sim).items():
        np.testing.assert_array_equal(values, first[name], err_msg=name)
    sim.step(actions(model, 1)[0])
    for name, values in snapshot(sim).items():
        np.testing.assert_array_equal(values, stepped[name], err_msg=name)
    sim.reset(seed=6, noise_scale=humanoid.RESET_NOISE_SCALE)
    assert not np.array_equal(sim.qpos, first["qpos"])


def test_reset_of_some_worlds_leaves_the_others_untouched(model, sim):
    ctrl = actions(model, 2, seed=3)

    def run(reset_between: bool) -> dict[str, np.ndarray]:
        sim.reset(seed=2, noise_scale=humanoid.RESET_NOISE_SCALE, qpos=feet_on_floor(model))
        sim.step(ctrl[0])
        if reset_between:
            before = snapshot(sim)
            sim.reset([1], seed=[9], noise_scale=humanoid.RESET_NOISE_SCALE)
            after = snapshot(sim)
            for name in before:
                np.testing.assert_array_equal(after[name][[0, 2]], before[name][[0, 2]], err_msg=name)
            assert not np.array_equal(after["qpos"][1], before["qpos"][1])
        sim.step(ctrl[1])
        return snapshot(sim)

    plain, with_reset = run(False), run(True)
    for name in plain:  # the reset's forward pass over every world changed nothing the others' next step uses
        np.testing.assert_array_equal(with_reset[name][[0, 2]], plain[name][[0, 2]], err_msg=name)


def test_torch_outputs_are_the_outputs_on_the_device(model, sim):
    sim.reset(seed=4, noise_scale=humanoid.RESET_NOISE_SCALE)
    sim.host_outputs = False
    try:
        sim.step(actions(model, 1)[0])
        on_device = {k: v.clone() for k, v in sim.torch_outputs.items()}
        assert all(t.device == sim.device and t.dtype == torch.float64 for t in on_device.values())
        for name, values in sim.outputs.items():  # the host copy, made on first read
            np.testing.assert_array_equal(values, on_device[name].numpy(), err_msg=name)
        np.testing.assert_array_equal(sim.qpos, sim.outputs["qpos"])
    finally:
        sim.host_outputs = True


def test_bad_state_is_reset_with_a_warning(model, sim):
    qvel = np.zeros((N, model.nv))
    qvel[1] = 1e30  # finite in float32, beyond mjMAXVAL: mj_step's checks reset such a simulation
    sim.reset(qvel=qvel)
    assert not sim.last_warnings.any()  # a reset checks no state, as mj_forward
    with pytest.warns(SimulationWarning, match=r"in 1 simulation\(s\) \(1\).*mjWARN_BADQVEL"):
        sim.step(np.zeros((N, model.nu)))
    assert sim.last_warnings[1] & (1 << int(mujoco.mjtWarning.mjWARN_BADQVEL))
    assert not sim.last_warnings[[0, 2]].any()
    np.testing.assert_array_equal(sim.qpos[1], model.qpos0.astype(np.float32))
    np.testing.assert_array_equal(sim.qvel[1], 0.0)


def test_bad_input_is_refused_and_steps_nothing(model, sim):
    sim.reset(seed=0)
    before = snapshot(sim)
    with pytest.raises(ValueError, match=rf"ctrl must have shape \({N}, {model.nu}\), got \({N}, 3\)"):
        sim.step(np.zeros((N, 3)))
    bad = np.zeros((N, model.nu))
    bad[2, 4] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        sim.step(bad)
    with pytest.raises(ValueError, match=rf"steps all {N} worlds at once.*one range"):
        sim.step(np.zeros((N, model.nu)), rows=slice(0, 2))
    for name, values in snapshot(sim).items():
        np.testing.assert_array_equal(values, before[name], err_msg=name)
    sim.step(np.zeros((N, model.nu)), rows=slice(0, N))  # all rows is the one range there is


def test_models_warp_cannot_run_are_refused_in_one_line(model):
    from vlmrm_fast.physics.warp import UnsupportedModelError, WarpSimulator

    pgs = with_solver(model, "pgs")
    with pytest.raises(
        UnsupportedModelError, match=r'no PGS solver.*with_solver\(model, "newton"\).*physics="batch"'
    ) as info:
        WarpSimulator(pgs, 2, device="cpu")
    assert "\n" not in str(info.value)
    plugin = mujoco.MjModel.from_xml_string(PLUGIN_ACTUATOR)
    with pytest.raises(
        UnsupportedModelError, match=r'cannot run this model \(Actuator plugins.*physics="batch"'
    ) as info:
        WarpSimulator(plugin, 2, device="cpu")
    assert "\n" not in str(info.value)


def test_outputs_are_checked_against_mjdata(model):
    from vlmrm_fast.physics.warp import WarpSimulator

    with pytest.raises(ValueError, match="'nonsense' is not an mjData field"):
        WarpSimulator(model, 1, outputs=["nonsense"], device="cpu")
    with pytest.raises(ValueError, match="'qpos' is requested twice"):
        WarpSimulator(model, 1, outputs=["qpos", ("qpos", 2)], device="cpu")
    with pytest.raises(ValueError, match=r"slice \[20, 30\) is outside the field's 24 values"):
        WarpSimulator(model, 1, outputs=[("qpos", 20, 10)], device="cpu")


def test_closed_simulator_refuses_calls(model):
    from vlmrm_fast.physics.warp import WarpSimulator

    simulator = WarpSimulator(model, 1, outputs=[("qpos", 2, 1)], device="cpu")
    assert simulator.output_slots == [("qpos", 0, 1, 2, model.nq)]
    height = simulator.outputs["qpos"]
    simulator.close()
    simulator.close()
    assert simulator.closed
    assert height[0, 0] == pytest.approx(model.qpos0[2])  # views still referenced stay readable
    with pytest.raises(RuntimeError, match="closed"):
        simulator.step(np.zeros((1, model.nu)))


@pytest.mark.slow
def test_physics_bench_dry_run_measures_both_simulators(tmp_path):
    """bench/bench_physics.py on Warp's CPU backend at a tiny size: each simulator's rate, side by side."""
    out = tmp_path / "physics.json"
    command = [str(ROOT / "bench" / "bench_physics.py"), "--device", "cpu", "--worlds", "2", "--steps", "2"]
    command += ["--warmup", "1", "--batch-steps", "1", "--out", str(out)]
    result = run_python(command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    (row,) = report["results"]
    assert row["worlds"] == 2 and row["frame_skip"] == humanoid.FRAME_SKIP
    assert row["warp"]["host_outputs"]["env_steps_per_s"] > 0 and row["warp"]["device_outputs"]["env_steps_per_s"] > 0
    assert row["batch"]["env_steps_per_s"] > 0 and row["batch"]["solver"] == "pgs"
    assert row["warp_over_batch"] == row["warp"]["host_outputs"]["env_steps_per_s"] / row["batch"]["env_steps_per_s"]


# ---------------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_cuda_graph_steps_match_cpu_mujoco(model):
    from vlmrm_fast.physics.warp import WarpSimulator

    n = 64
    qpos = np.tile(model.qpos0, (n, 1))
    qpos[:, 2] = FEET_ON_FLOOR_Z
    ctrl = np.random.default_rng(0).uniform(*model.actuator_ctrlrange.T, (STEPS, n, model.nu))
    with WarpSimulator(model, n, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True, device="cuda") as gpu:
        assert gpu.cuda_graph
        gpu.reset(seed=1, noise_scale=humanoid.RESET_NOISE_SCALE, qpos=qpos)
        cpu = BatchSimulator(model, n, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True)
        cpu.reset(qpos=gpu.qpos, qvel=gpu.qvel)
        for step in range(STEPS):
            gpu.step(ctrl[step])
            cpu.step(ctrl[step])
            assert_close(gpu.outputs, cpu.outputs, f"step {step}")
        assert set(gpu._graphs) == {"step", "reset"}  # later calls replayed the captured graphs
        for name, values in gpu.torch_outputs.items():
            assert values.is_cuda
            np.testing.assert_array_equal(values.cpu().numpy(), gpu.outputs[name], err_msg=name)


@pytest.mark.gpu
def test_cuda_resets_same_seed_same_bits_and_device_outputs(model):
    from vlmrm_fast.physics.warp import WarpSimulator

    n = 256
    ctrl = np.zeros((n, model.nu))
    with WarpSimulator(model, n, humanoid.FRAME_SKIP, OUTPUTS, rne_post_constraint=True, device="cuda") as gpu:
        gpu.reset(seed=3, noise_scale=humanoid.RESET_NOISE_SCALE)
        first = snapshot(gpu)
        gpu.step(ctrl)
        gpu.reset(seed=3, noise_scale=humanoid.RESET_NOISE_SCALE)
        for name, values in snapshot(gpu).items():
            np.testing.assert_array_equal(values, first[name], err_msg=name)
        gpu.host_outputs = False
        with warnings.catch_warnings():
            warnings.simplefilter("error", SimulationWarning)
            for _ in range(3):
                gpu.step(ctrl)
        device_qpos = gpu.torch_outputs["qpos"].clone()
        np.testing.assert_array_equal(gpu.qpos, device_qpos.cpu().numpy())
