"""BatchSimulator against plain mujoco.mj_step loops and gymnasium's Humanoid-v5, bit for bit."""

from __future__ import annotations

import warnings

import gymnasium
import mujoco
import numpy as np
import pytest

from vlmrm_fast import BatchSimulator
from vlmrm_fast.physics.batch import SimulationError
from vlmrm_fast.physics.simulator import SimulationWarning

# Humanoid-v5's observation, field by field (gymnasium's humanoid_v5._get_obs).
HUMANOID_OBS = [("qpos", 2), "qvel", ("cinert", 10), ("cvel", 6), ("qfrc_actuator", 6), ("cfrc_ext", 6)]

# Contacts, a hinge, a slide, a ball joint, a tendon, position sensors and an actuator with
# activation: more of mj_step than the humanoid touches.
SCENE_XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="3 3 .1"/>
    <body name="ball" pos="0 0 .6"><freejoint/><geom type="sphere" size=".1" mass=".5"/></body>
    <body name="arm" pos=".5 0 .5">
      <joint name="hinge" type="hinge" axis="0 1 0" damping=".1"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".04"/>
      <site name="tip" pos=".3 0 0"/>
      <body pos=".3 0 0">
        <joint name="slide" type="slide" axis="1 0 0" range="-.1 .1" limited="true"/>
        <geom type="box" size=".05 .05 .05"/>
        <body pos=".1 0 0"><joint type="ball"/><geom type="sphere" size=".04"/></body>
      </body>
    </body>
    <site name="anchor" pos="-.5 0 1"/>
  </worldbody>
  <tendon><spatial name="rope" limited="true" range="0 2"><site site="anchor"/><site site="tip"/></spatial></tendon>
  <actuator>
    <motor joint="hinge" gear="5" ctrlrange="-1 1" ctrllimited="true"/>
    <general joint="slide" dyntype="filter" dynprm=".05" gainprm="20"/>
  </actuator>
  <sensor><framepos objtype="site" objname="tip"/><jointpos joint="hinge"/><tendonpos tendon="rope"/></sensor>
</mujoco>
"""


@pytest.fixture(scope="module")
def scene() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(SCENE_XML)


def _reference_datas(model, qpos, qvel):
    datas = []
    for q, v in zip(qpos, qvel):
        d = mujoco.MjData(model)
        d.qpos[:] = q
        d.qvel[:] = v
        mujoco.mj_forward(model, d)
        datas.append(d)
    return datas


def _field(d: mujoco.MjData, spec) -> np.ndarray:
    name, start = (spec, 0) if isinstance(spec, str) else spec[:2]
    return np.asarray(getattr(d, name)).ravel()[start:]


@pytest.mark.parametrize("persistent", [True, False])
def test_humanoid_steps_bit_identical_to_mj_step_loop(humanoid, persistent):
    n, frame_skip = 4, 5
    outputs = [*HUMANOID_OBS, "xipos", "subtree_com", "qacc"]
    rng = np.random.default_rng(1)
    with BatchSimulator(
        humanoid, n, frame_skip, outputs, rne_post_constraint=True, nthread=2, persistent=persistent
    ) as sim:
        qpos = humanoid.qpos0 + rng.uniform(-0.01, 0.01, (n, humanoid.nq))
        qvel = rng.uniform(-0.01, 0.01, (n, humanoid.nv))
        sim.reset(qpos=qpos, qvel=qvel)
        datas = _reference_datas(humanoid, qpos, qvel)
        for _ in range(8):
            ctrl = rng.uniform(-0.4, 0.4, (n, humanoid.nu)).astype(np.float32)  # as a policy's
            sim.step(ctrl)
            for i, d in enumerate(datas):
                d.ctrl[:] = ctrl[i]
                mujoco.mj_step(humanoid, d, nstep=frame_skip)
                mujoco.mj_rnePostConstraint(humanoid, d)
            for i, d in enumerate(datas):
                for spec in outputs:
                    name = spec if isinstance(spec, str) else spec[0]
                    np.testing.assert_array_equal(sim.outputs[name][i], _field(d, spec), err_msg=name)
                np.testing.assert_array_equal(sim.qpos[i], d.qpos)
                np.testing.assert_array_equal(sim.qvel[i], d.qvel)
                np.testing.assert_array_equal(sim.ctrl[i], d.ctrl)
                assert sim.time[i] == d.time
        assert not sim.last_warnings.any()


def test_scene_steps_bit_identical_without_rne(scene):
    n, frame_skip = 3, 3
    outputs = ["sensordata", "qpos", "act", "ten_length", ("site_xpos", 3, 3)]
    rng = np.random.default_rng(2)
    sim = BatchSimulator(scene, n, frame_skip, outputs, nthread=3)
    qpos = np.tile(scene.qpos0, (n, 1))
    qpos[:, 0] += np.arange(n) * 0.3  # the ball starts at different places
    qvel = rng.normal(0, 0.5, (n, scene.nv))
    sim.reset(qpos=qpos, qvel=qvel)
    datas = _reference_datas(scene, qpos, qvel)
    for _ in range(20):
        ctrl = rng.uniform(-2, 2, (n, scene.nu))  # beyond ctrlrange: MuJoCo clamps in both
        sim.step(ctrl)
        for i, d in enumerate(datas):
            d.ctrl[:] = ctrl[i]
            mujoco.mj_step(scene, d, nstep=frame_skip)
            for spec in outputs:
                name = spec if isinstance(spec, str) else spec[0]
                expected = _field(d, spec)[: sim.outputs[name].shape[1]]
                np.testing.assert_array_equal(sim.outputs[name][i], expected, err_msg=name)
            np.testing.assert_array_equal(sim.act[i], d.act)
    assert sim.output_array.shape == (n, scene.nsensordata + scene.nq + scene.na + scene.ntendon + 3)
    sim.close()


def test_matches_gymnasium_humanoid_v5():
    env = gymnasium.make("Humanoid-v5")
    model = env.unwrapped.model
    frame_skip = env.unwrapped.frame_skip
    seeds = [11, 12]
    sim = BatchSimulator(model, len(seeds), frame_skip, HUMANOID_OBS, rne_post_constraint=True)
    sim.reset(seed=seeds, noise_scale=env.unwrapped._reset_noise_scale)
    rng = np.random.default_rng(3)
    actions = rng.uniform(-0.4, 0.4, (6, len(seeds), model.nu)).astype(np.float32)
    for i, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(sim.output_array[i], obs)
    # env i replays its own actions after the batch has stepped all of them
    batch_obs = []
    for a in actions:
        sim.step(a)
        batch_obs.append(sim.output_array.copy())
    for i, seed in enumerate(seeds):
        env.reset(seed=seed)
        for t, a in enumerate(actions):
            obs, *_ = env.step(a[i])
            np.testing.assert_array_equal(batch_obs[t][i], obs)
    env.close()


def test_reset_subset_leaves_others_untouched(humanoid):
    n = 5
    sim = BatchSimulator(humanoid, n, 2, ["qpos", "cvel"], rne_post_constraint=True, nthread=2)
    sim.reset(seed=0, noise_scale=0.1)
    rng = np.random.default_rng(4)
    for _ in range(3):
        sim.step(rng.uniform(-0.4, 0.4, (n, humanoid.nu)))
    before = {name: getattr(sim, name).copy() for name in ("qpos", "qvel", "time", "output_array")}
    ids = [3, 1]
    sim.reset(ids, seed=[7, 8], noise_scale=0.05)
    kept = [0, 2, 4]
    for name, values in before.items():
        np.testing.assert_array_equal(getattr(sim, name)[kept], values[kept], err_msg=name)
    for env, seed in zip(ids, [7, 8]):
        g = np.random.default_rng(seed)
        qpos = humanoid.qpos0 + g.uniform(-0.05, 0.05, humanoid.nq)
        qvel = g.uniform(-0.05, 0.05, humanoid.nv)
        (d,) = _reference_datas(humanoid, [qpos], [qvel])
        np.testing.assert_array_equal(sim.qpos[env], qpos)
        np.testing.assert_array_equal(sim.outputs["cvel"][env], d.cvel.ravel())
        assert sim.time[env] == 0


def test_stepping_in_ranges_equals_one_step(humanoid):
    """Envs stepped range by range (the pipelined VecEnv step) reach the states of one whole step;
    a range reads its own rows of the controls and leaves the other envs alone."""
    n = 5
    whole = BatchSimulator(humanoid, n, frame_skip=2, outputs=["qpos", "cfrc_ext"], rne_post_constraint=True)
    parts = BatchSimulator(humanoid, n, frame_skip=2, outputs=["qpos", "cfrc_ext"], rne_post_constraint=True)
    for sim in (whole, parts):
        sim.reset(seed=1, noise_scale=0.05)
    ctrl = np.random.default_rng(2).uniform(-0.4, 0.4, (n, humanoid.nu))
    whole.step(ctrl)
    before = parts.qpos[2:].copy()
    parts.step(ctrl, slice(0, 2))
    np.testing.assert_array_equal(parts.qpos[2:], before)
    parts.step(ctrl, slice(2, 5))
    np.testing.assert_array_equal(parts.qpos, whole.qpos)
    np.testing.assert_array_equal(parts.output_array, whole.output_array)
    bad = ctrl.copy()
    bad[0, 0] = np.nan
    parts.step(bad, slice(1, 5))  # the NaN row is not stepped, so it is not checked
    with pytest.raises(ValueError, match="non-finite"):
        parts.step(bad, slice(0, 1))
    with pytest.raises(ValueError, match="not a range"):
        parts._live().step(ctrl, 4, 3)


def test_int_seed_seeds_env_i_with_seed_plus_i(humanoid):
    a = BatchSimulator(humanoid, 3)
    a.reset(seed=5, noise_scale=0.1)
    b = BatchSimulator(humanoid, 3)
    b.reset([2], seed=[7], noise_scale=0.1)
    np.testing.assert_array_equal(a.qpos[2], b.qpos[2])
    # an env's generator continues across resets, as gymnasium's np_random
    a.reset([1], noise_scale=0.1)
    g = np.random.default_rng(6)
    g.uniform(size=humanoid.nq + humanoid.nv)
    np.testing.assert_array_equal(a.qpos[1], humanoid.qpos0 + g.uniform(-0.1, 0.1, humanoid.nq))


def test_thread_count_and_persistence_do_not_change_results(humanoid):
    n = 6
    rng = np.random.default_rng(5)
    ctrls = rng.uniform(-0.4, 0.4, (5, n, humanoid.nu))
    results = []
    for nthread, persistent in [(1, True), (2, True), (3, False)]:
        sim = BatchSimulator(
            humanoid, n, 3, HUMANOID_OBS, rne_post_constraint=True, nthread=nthread, persistent=persistent
        )
        assert sim.nthread == nthread
        sim.reset(seed=1, noise_scale=0.01)
        for ctrl in ctrls:
            sim.step(ctrl)
        results.append((sim.qpos.copy(), sim.output_array.copy()))
    for qpos, out in results[1:]:
        np.testing.assert_array_equal(qpos, results[0][0])
        np.testing.assert_array_equal(out, results[0][1])


def test_views_are_live_and_outputs_read_only(scene):
    sim = BatchSimulator(scene, 2, outputs=["qpos"])
    sim.qpos[1, 2] = 1.5  # lift the ball of simulation 1: its next call starts there
    sim.step(np.zeros((2, scene.nu)))
    assert sim.outputs["qpos"][1, 2] < 1.5 and sim.outputs["qpos"][1, 2] > 1.4
    assert sim.outputs["qpos"][0, 2] < 0.6
    with pytest.raises(ValueError):
        sim.output_array[0, 0] = 1.0
    qpos = sim.qpos
    sim.close()
    assert qpos[1, 2] > 1.4  # a view outlives close
    with pytest.raises(RuntimeError, match="closed"):
        sim.step(np.zeros((2, scene.nu)))
    with pytest.raises(RuntimeError, match="closed"):
        _ = sim.qpos


def test_bad_inputs_raise_before_touching_state(scene):
    sim = BatchSimulator(scene, 2, outputs=["qpos"])
    qpos = sim.qpos.copy()
    bad = np.zeros((2, scene.nu))
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        sim.step(bad)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        sim.step(np.zeros((3, scene.nu)))
    np.testing.assert_array_equal(sim.qpos, qpos)
    assert (sim.time == 0).all()
    with pytest.raises(ValueError, match=r"ids must be in \[0, 2\)"):
        sim.reset([2])
    with pytest.raises(ValueError, match="distinct"):
        sim.reset([0, 0])
    with pytest.raises(ValueError, match="qpos must have shape"):
        sim.reset([0], qpos=np.zeros((2, scene.nq)))
    with pytest.raises(ValueError, match="non-finite"):
        sim.reset([0], qvel=np.full(scene.nv, np.inf))


def test_bad_configuration_is_a_clear_error(scene):
    with pytest.raises(ValueError, match="not an mjData field of type mjtNum; choose from: .*cfrc_ext"):
        BatchSimulator(scene, 1, outputs=["cfrc_exp"])
    with pytest.raises(ValueError, match="outside the field"):
        BatchSimulator(scene, 1, outputs=[("qpos", 5, 20)])
    with pytest.raises(ValueError, match="twice"):
        BatchSimulator(scene, 1, outputs=["qpos", ("qpos", 2)])
    with pytest.raises(ValueError, match="frame_skip"):
        BatchSimulator(scene, 1, frame_skip=0)
    with pytest.raises(TypeError, match="MjModel"):
        BatchSimulator(SCENE_XML, 1)


def test_instability_warns_and_matches_mj_step(scene, tmp_path, monkeypatch):
    """A huge control makes MuJoCo reset that simulation (mjWARN_BADQACC), in both."""
    monkeypatch.chdir(tmp_path)  # MuJoCo's default log handler writes MUJOCO_LOG.TXT here
    sim = BatchSimulator(scene, 2, frame_skip=2, outputs=["qpos"])
    ctrl = np.zeros((2, scene.nu))
    ctrl[1, 1] = 9e9  # the unlimited filtered actuator: its force blows up at substep 2
    with pytest.warns(SimulationWarning, match=r"in 1 simulation\(s\) \(1\).*mjWARN_BADQACC"):
        sim.step(ctrl)
    assert sim.last_warnings[0] == 0
    assert sim.last_warnings[1] & (1 << int(mujoco.mjtWarning.mjWARN_BADQACC))
    d = mujoco.MjData(scene)
    mujoco.mj_forward(scene, d)
    d.ctrl[:] = ctrl[1]
    mujoco.mj_step(scene, d, nstep=2)
    np.testing.assert_array_equal(sim.qpos[1], d.qpos)
    np.testing.assert_array_equal(sim.act[1], d.act)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.step(np.zeros((2, scene.nu)))  # no new warnings: nothing raised


def test_mujoco_error_in_one_simulation_is_reported(tmp_path, monkeypatch):
    """A contact overflows a tiny arena: MuJoCo raises in that simulation only."""
    monkeypatch.chdir(tmp_path)  # MuJoCo's default log handler writes MUJOCO_LOG.TXT here
    model = mujoco.MjModel.from_xml_string(
        '<mujoco><size memory="8K"/><worldbody><geom type="plane" size="5 5 .1"/>'
        '<body pos="0 0 5"><freejoint/><geom type="box" size=".1 .1 .1"/></body></worldbody></mujoco>'
    )
    sim = BatchSimulator(model, 3, outputs=["qpos"])
    sim.qpos[1, 2] = 0.05  # on the floor
    with pytest.raises(SimulationError, match=r"1 simulation\(s\) \(1\); simulation 1: .*stack") as info:
        sim.step(np.zeros((3, 0)))
    assert "kept the state" in str(info.value)
    assert sim.qpos[1, 2] == 0.05 and sim.time[1] == 0  # kept its state
    assert sim.time[0] > 0 and sim.time[2] > 0  # the others stepped
