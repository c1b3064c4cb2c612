"""Evaluation: EPIC math on rewards with known answers, precision-recall against a brute-force reference,
state access and rendering, datasets and labels, landscapes, `vlmrm-fast evaluate` mechanics (tiny model)."""

from __future__ import annotations

import csv
import io
import warnings

import mujoco
import numpy as np
import pytest
import torch
from PIL import Image
from tolerances import assert_rewards_close

from vlmrm_fast import GoalBaselineCriterion, load_reward_model
from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.evaluation import (
    Coverage,
    StateDataset,
    canonicalize,
    epic_distance,
    evaluate_models,
    pearson_distance,
    precision_recall,
    read_labels,
    render_states,
    reward_landscape,
    sample_states,
    score_frames,
    state_access,
    state_epic_distance,
    sweep_range,
)
from vlmrm_fast.evaluation.states import initial_state, load_policy, make_task_env

TINY = "vlmrm-tiny"
GAMMA = 0.9


@pytest.fixture(scope="module")
def tiny():
    return load_reward_model(TINY, target_prompts="a pole standing upright", device="cpu")


# ------------------------------------------------------------------------- EPIC
def transitions(n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.normal(size=(n, 2)), rng.normal(size=(n, 3))


def base_reward(s, a, s2):
    return np.sin(s[:, 0] * 2 + a[:, 1]) + s2[:, 1] * a[:, 0] + 0.3 * s2[:, 2] ** 2


def potential(s):
    return np.cos(3 * s[:, 0]) + s[:, 1] * s[:, 2]


def plain_canonical(reward, c: Coverage, gamma: float) -> np.ndarray:
    """C^(R) with the coverage's draws, one transition and one draw at a time."""

    def r(s, a, s2):
        return float(reward(s[None], a[None], s2[None])[0])

    m = c.n_samples
    const = sum(r(c.const_states[j], c.const_actions[j], c.const_next[j]) for j in range(m)) / m
    out = []
    for s, a, s2 in zip(c.states, c.actions, c.next_states):
        mean = (
            sum(
                gamma * r(s2, c.mean_actions[j], c.mean_next[j]) - r(s, c.mean_actions[j], c.mean_next[j])
                for j in range(m)
            )
            / m
        )
        out.append(r(s, a, s2) + mean - gamma * const)
    return np.array(out)


def test_canonicalize_matches_the_formula_written_plainly():
    s, a, s2 = transitions(12)
    coverage = Coverage(s, a, s2, n_samples=7, seed=3)
    fast = canonicalize(base_reward, coverage, gamma=GAMMA, batch_size=20)  # several rows per call, partial chunks
    np.testing.assert_allclose(fast, plain_canonical(base_reward, coverage, GAMMA), rtol=0, atol=1e-12)


def test_positive_affine_maps_are_at_distance_zero():
    s, a, s2 = transitions()
    for scale, shift in ((3.0, 2.0), (0.01, -50.0)):
        d = epic_distance(
            base_reward,
            lambda s, a, s2, scale=scale, shift=shift: scale * base_reward(s, a, s2) + shift,
            s,
            a,
            s2,
            gamma=GAMMA,
            n_samples=32,
        )
        assert d == pytest.approx(0.0, abs=1e-6)


def test_potential_shaping_is_at_distance_zero_and_canonicalization_is_what_removes_it():
    s, a, s2 = transitions()

    def shaped(s, a, s2):
        return 0.5 * base_reward(s, a, s2) + 1.0 + GAMMA * potential(s2) - potential(s)

    assert epic_distance(base_reward, shaped, s, a, s2, gamma=GAMMA, n_samples=32, seed=1) == pytest.approx(
        0.0, abs=1e-6
    )
    # The raw rewards are far apart: the distance is zero because of the canonicalization.
    assert pearson_distance(base_reward(s, a, s2), shaped(s, a, s2)) > 0.2


def test_negated_reward_is_at_distance_one():
    s, a, s2 = transitions()
    d = epic_distance(base_reward, lambda s, a, s2: -2.0 * base_reward(s, a, s2), s, a, s2, gamma=GAMMA, n_samples=16)
    assert d == pytest.approx(1.0, abs=1e-6)


def test_independent_rewards_are_near_one_over_sqrt_two():
    rng = np.random.default_rng(0)
    n, n_states = 4000, 100_000
    s, s2 = rng.integers(0, n_states, n), rng.integers(0, n_states, n)
    actions = rng.integers(0, 3, n)  # discrete actions: a 1-D array
    table_a, table_b = rng.normal(size=n_states), rng.normal(size=n_states)
    d = epic_distance(lambda s, a, s2: table_a[s2], lambda s, a, s2: table_b[s2], s, actions, s2, n_samples=8)
    assert d == pytest.approx(np.sqrt(0.5), abs=0.03)


def test_epic_is_a_symmetric_pseudometric_and_accepts_torch_rewards():
    s, a, s2 = transitions(200)
    rewards = [
        base_reward,
        lambda s, a, s2: torch.as_tensor(np.tanh(s2[:, 0] - a[:, 0])),
        lambda s, a, s2: s[:, 2] * s2[:, 1],
    ]
    d = [[epic_distance(x, y, s, a, s2, n_samples=16) for y in rewards] for x in rewards]
    for i in range(3):
        assert d[i][i] == pytest.approx(0.0, abs=1e-7)
        for j in range(3):
            assert 0.0 <= d[i][j] <= 1.0 and d[i][j] == pytest.approx(d[j][i], abs=1e-12)
            for k in range(3):
                assert d[i][k] <= d[i][j] + d[j][k] + 1e-12


def test_epic_is_repeatable_with_a_seed():
    s, a, s2 = transitions(100)
    other = lambda s, a, s2: s2[:, 0] + a[:, 1]  # noqa: E731
    first = epic_distance(base_reward, other, s, a, s2, n_samples=8, seed=5)
    assert epic_distance(base_reward, other, s, a, s2, n_samples=8, seed=5) == first
    assert epic_distance(base_reward, other, s, a, s2, n_samples=8, seed=6) != first


def test_epic_rejects_bad_input():
    s, a, s2 = transitions(10)
    with pytest.raises(ValueError, match="same length"):
        epic_distance(base_reward, base_reward, s, a[:5], s2)
    with pytest.raises(ValueError, match="gamma"):
        epic_distance(base_reward, base_reward, s, a, s2, gamma=1.5)
    with pytest.raises(ValueError, match="n_samples"):
        epic_distance(base_reward, base_reward, s, a, s2, n_samples=0)
    with pytest.raises(ValueError, match="must return"):
        epic_distance(base_reward, lambda s, a, s2: np.zeros((len(s), 2)), s, a, s2)
    with pytest.raises(ValueError, match="NaN"):
        epic_distance(base_reward, lambda s, a, s2: np.full(len(s), np.nan), s, a, s2)
    with pytest.raises(ValueError, match="constant"):
        epic_distance(base_reward, lambda s, a, s2: np.full(len(s), 3.0), s, a, s2)


def test_state_epic_distance_against_labels():
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=50)
    labels = 2.0 * rewards + 1.0
    labels[::5] = np.nan  # unlabelled states are left out
    assert state_epic_distance(rewards, labels) == pytest.approx(0.0, abs=1e-7)
    assert state_epic_distance(-rewards, labels) == pytest.approx(1.0, abs=1e-7)
    several = np.stack([rewards, -rewards, rng.normal(size=50)], axis=1)
    out = state_epic_distance(torch.as_tensor(several), labels)
    keep = ~np.isnan(labels)
    assert out.shape == (3,)
    assert out[2] == pytest.approx(pearson_distance(several[keep, 2], labels[keep]), abs=1e-12)
    rho = np.corrcoef(several[keep, 2], labels[keep])[0, 1]
    assert out[2] == pytest.approx(np.sqrt((1 - rho) / 2), abs=1e-12)
    with pytest.raises(ValueError, match="at least 2 labelled"):
        state_epic_distance(rewards, np.where(np.arange(50) == 0, 1.0, np.nan))
    with pytest.raises(ValueError, match=r"\(N,\) or \(N, K\)"):
        state_epic_distance(rewards[:10], labels)


# ------------------------------------------------------------- precision-recall
def brute_force_curve(scores, labels):
    """For each distinct score t, from the highest down: precision and recall of `score >= t`."""
    out = []
    for t in sorted(set(scores.tolist()), reverse=True):
        predicted = scores >= t
        tp = np.sum(predicted & (labels == 1))
        out.append((t, tp / predicted.sum(), tp / (labels == 1).sum()))
    return np.array(out)


def test_precision_recall_known_example():
    curve = precision_recall([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    assert curve.average_precision == pytest.approx(0.5 * 1.0 + 0.5 * 2 / 3)
    np.testing.assert_allclose(curve.precision, [1.0, 0.5, 2 / 3, 0.5])
    np.testing.assert_allclose(curve.recall, [0.5, 0.5, 1.0, 1.0])
    assert precision_recall([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]).auc == pytest.approx(1.0)


def test_precision_recall_matches_brute_force_with_ties_and_unlabelled():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 12, 80) / 11.0  # many ties
    labels = (rng.random(80) < scores * 0.8).astype(float)
    labels[::9] = np.nan
    curve = precision_recall(scores, labels)
    keep = ~np.isnan(labels)
    ref = brute_force_curve(scores[keep], labels[keep])
    np.testing.assert_allclose(np.stack([curve.thresholds, curve.precision, curve.recall], 1), ref, rtol=0, atol=1e-12)
    recall = np.r_[0.0, ref[:, 2]]
    assert curve.average_precision == pytest.approx(np.sum((recall[1:] - recall[:-1]) * ref[:, 1]))
    assert curve.positive_rate == pytest.approx(np.mean(labels[keep]))
    for t in (0.0, 0.3, 0.5, 0.95, 1.0):
        op = curve.at_threshold(t)
        predicted = scores[keep] > t
        if predicted.sum() == 0:
            assert np.isnan(op["precision"]) and op["recall"] == 0.0
            continue
        tp = np.sum(predicted & (labels[keep] == 1))
        assert op["precision"] == pytest.approx(tp / predicted.sum())
        assert op["recall"] == pytest.approx(tp / np.sum(labels[keep] == 1))


def test_precision_recall_rejects_bad_labels():
    with pytest.raises(ValueError, match="boolean labels"):
        precision_recall([0.1, 0.2], [0.5, 1.0])
    with pytest.raises(ValueError, match="no positive"):
        precision_recall([0.1, 0.2], [0, 0])


# ---------------------------------------------------------- states and frames
def test_state_names_and_indices():
    cart, _ = initial_state("cartpole")
    assert cart.shape == (4,)
    access = initial_state("cartpole")[1]
    assert access.index("pole_angle") == 2 and access.index("state[1]") == 1
    with pytest.raises(ValueError, match="pole_angle"):
        access.index("pole_angel")
    assert initial_state("mountain-car-textured")[1].names == ("position", "velocity")
    state, humanoid = initial_state("humanoid-kneeling")
    assert len(humanoid.names) == state.size == 24 + 23
    assert humanoid.names[:3] == ("qpos:root:x", "qpos:root:y", "qpos:root:z")
    assert humanoid.index("qpos[7]") == 7 == humanoid.index(humanoid.names[7])
    assert humanoid.index("qvel:root:vx") == 24
    with pytest.raises(ValueError, match="out of range"):
        humanoid.index("qpos[24]")


@pytest.mark.parametrize("task", ["cartpole", "mountain-car", "mountain-car-textured"])
def test_rendering_a_state_reproduces_the_frame_the_env_drew(task):
    env, _ = make_task_env(task)
    env.reset(seed=0)
    env.action_space.seed(0)
    access = state_access(env)
    states, frames = [], []
    for _ in range(5):
        env.step(env.action_space.sample())
        states.append(access.get(env))
        frames.append(env.render())
    env.close()
    np.testing.assert_array_equal(render_states(task, np.stack(states)), np.stack(frames))


def test_render_size_and_state_effect():
    states = np.zeros((3, 4))
    states[1, 2] = 0.3
    frames = render_states("cartpole", states, size=(40, 60))
    assert frames.shape == (3, 40, 60, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(frames[0], frames[2])
    assert not np.array_equal(frames[0], frames[1])
    with pytest.raises(ValueError, match="3 entries; this task's state has 4"):
        render_states("cartpole", np.zeros((2, 3)))


@pytest.mark.egl
def test_humanoid_state_rendering():
    env, _ = make_task_env("humanoid-kneeling", size=(48, 48))
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    # mj_step leaves the kinematics one substep behind qpos; a state is drawn with its own kinematics.
    mujoco.mj_forward(env.unwrapped.model, env.unwrapped.data)
    access = state_access(env)
    state, frame = access.get(env), env.render()
    env.close()
    bent = state.copy()
    bent[access.index("qpos:right_knee")] = -1.5
    frames = render_states("humanoid-kneeling", np.stack([state, bent]), size=(48, 48))
    np.testing.assert_array_equal(frames[0], frame)
    assert not np.array_equal(frames[0], frames[1])


def test_sample_states_random_and_policy(tmp_path):
    states, names = sample_states("cartpole", 20, seed=1)
    assert states.shape == (20, 4) and names[2] == "pole_angle"
    np.testing.assert_array_equal(sample_states("cartpole", 20, seed=1)[0], states)
    assert not np.array_equal(sample_states("cartpole", 20, seed=2)[0], states)

    class PushLeft:
        def predict(self, obs, deterministic=False):
            return 0, None

    pushed, _ = sample_states("cartpole", 20, policy=PushLeft(), seed=1, thin=2)
    assert np.mean(pushed[:, 1]) < -0.3  # the cart always accelerates left

    from stable_baselines3 import PPO

    PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, seed=0, device="cpu").save(tmp_path / "final_model.zip")
    policy = load_policy(tmp_path / "final_model.zip")
    assert type(policy).__name__ == "PPO"
    from_file, _ = sample_states("cartpole", 5, policy=tmp_path / "final_model.zip", seed=0)
    assert from_file.shape == (5, 4)
    (tmp_path / "config.yaml").write_text("rl:\n  algorithm: DQN\n")
    with pytest.raises(ValueError, match="as DQN"):
        load_policy(tmp_path / "final_model.zip")  # the run's config is believed over the file
    assert type(load_policy(tmp_path / "final_model.zip", "ppo")).__name__ == "PPO"  # and the caller over both
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "missing.zip")


# ------------------------------------------------------------------- datasets
def test_dataset_round_trip_sheet_and_labels(tmp_path):
    ds = StateDataset.sample("cartpole", 12, seed=0, size=(32, 48))
    assert ds.frames.shape == (12, 32, 48, 3) and np.isnan(ds.labels).all()
    path = ds.save(tmp_path / "cp.data")  # any suffix: the name is kept
    assert path.name == "cp.data"
    back = StateDataset.load(path)
    np.testing.assert_array_equal(back.states, ds.states)
    np.testing.assert_array_equal(back.frames, ds.frames)
    assert back.task == "cartpole" and back.state_names == ds.state_names and back.source == "random"

    template = ds.write_label_template(tmp_path / "labels.csv")
    rows = list(csv.reader(open(template)))
    assert rows[0] == ["index", "label"] and len(rows) == 13
    (tmp_path / "labels.csv").write_text("Index,Label,comment\n0,1,upright\n3,0,\n5,yes,\n7,,skip\n11,0.25,\n")
    labels = read_labels(tmp_path / "labels.csv", len(ds))
    expected = np.full(12, np.nan)
    expected[[0, 3, 5, 11]] = [1.0, 0.0, 1.0, 0.25]
    np.testing.assert_array_equal(labels, expected)
    labelled = StateDataset.load(ds.with_labels(labels).save(path))
    np.testing.assert_array_equal(labelled.labels, expected)

    sheets = labelled.contact_sheet(tmp_path / "sheet.png", columns=5, thumb=48)
    assert len(sheets) == 1
    with Image.open(sheets[0]) as image:
        assert image.size == (5 * 52 + 4, 3 * 36 + 4)

    rerendered = labelled.rendered((16, 24))
    assert rerendered.frames.shape == (12, 16, 24, 3)
    np.testing.assert_array_equal(rerendered.labels, expected)


def test_contact_sheet_pages(tmp_path):
    frames = np.zeros((150, 8, 8, 3), np.uint8)
    ds = StateDataset("cartpole", np.zeros((150, 4)), frames, ("a", "b", "c", "d"))
    sheets = ds.contact_sheet(tmp_path / "many.png", thumb=8)
    assert [p.name for p in sheets] == ["many_01.png", "many_02.png"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("idx,label\n0,1\n", "header"),
        ("index,label\n12,1\n", "out of range"),
        ("index,label\n1,1\n1,0\n", "twice"),
        ("index,label\n1,maybe\n", "not a number"),
        ("index,label\nx,1\n", "not an integer"),
        ("index,label\n1,inf\n", "finite"),
    ],
)
def test_read_labels_errors(tmp_path, text, match):
    (tmp_path / "l.csv").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_labels(tmp_path / "l.csv", 12)


# ---------------------------------------------------------- scoring, landscapes
def test_score_frames_scores_every_task_from_one_pass(tiny):
    frames = np.random.default_rng(0).integers(0, 256, (5, 40, 40, 3), dtype=np.uint8)
    tasks = [GoalBaselineCriterion("a pole standing upright", "a pole", a) for a in (0.0, 0.5, 1.0)]
    before = tiny.criteria
    rewards = score_frames(tiny, frames, tasks)
    assert rewards.shape == (5, 3) and tiny.criteria == before and tiny(frames).shape == (5,)
    single = load_reward_model(
        TINY, target_prompts="a pole standing upright", baseline_prompts="a pole", alpha=0.5, device="cpu"
    )
    assert_rewards_close(rewards[:, 1], single(frames).double().numpy())


def test_sweep_ranges_and_goals():
    assert sweep_range("cartpole", "pole_angle") == ((-0.42, 0.42), 0.0)
    assert sweep_range("mountain-car", "position") == ((-1.2, 0.6), 0.45)
    (low, high), goal = sweep_range("humanoid-kneeling", "qpos:right_knee")
    assert low < high <= 0.0 and goal is None
    with pytest.raises(ValueError, match="no default range"):
        sweep_range("cartpole", "cart_velocity")


def test_cartpole_landscape(tiny, tmp_path):
    land = reward_landscape(tiny, "cartpole", "pole_angle", alphas=(0.0, 0.5, 1.0), n_points=7, size=(48, 72))
    assert land.values.shape == (7,) and land.rewards.shape == (7, 3) and land.goal == 0.0
    assert land.values[3] == 0.0 and np.isfinite(land.rewards).all()
    assert land.frames.shape == (7, 48, 72, 3)
    base, access = initial_state("cartpole")
    states = np.repeat(base[None], 7, 0)
    states[:, 2] = land.values
    np.testing.assert_array_equal(land.frames, render_states("cartpole", states, size=(48, 72)))
    norm = land.normalized()
    assert norm.min() == 0.0 and norm.max() == 1.0
    rows = list(csv.reader(open(land.save_csv(tmp_path / "l.csv"))))
    assert rows[0] == ["pole_angle", "reward_alpha=0", "reward_alpha=0.5", "reward_alpha=1"] and len(rows) == 8
    assert land.random_weights  # the tiny model: the plot says its rewards are noise
    np.testing.assert_allclose(land.spreads(), land.rewards.max(0) - land.rewards.min(0))
    for path, kwargs in ((tmp_path / "l.png", {}), (tmp_path / "norm.png", {"normalize": True, "thumbnails": 0})):
        land.plot(path, **kwargs)
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] > 500
    # What the plot draws: the true scale by default; scaled per alpha only when asked, and then labelled so
    import matplotlib.pyplot as plt

    captured = {}
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        captured["fig"] = fig
        return original(fig, *args, **kwargs)

    plt.Figure.savefig = keep
    try:
        for normalize in (False, True):
            land.plot(tmp_path / "check.png", normalize=normalize, thumbnails=0)
            ax = captured["fig"].axes[0]
            drawn = np.stack([line.get_ydata() for line in ax.get_lines()[: len(land.alphas)]], axis=1)
            np.testing.assert_allclose(drawn, land.normalized() if normalize else land.rewards)
            assert ("scaled to [0, 1]" in ax.get_ylabel()) == normalize
            assert any("random weights" in text.get_text() for text in ax.texts)
    finally:
        plt.Figure.savefig = original


def test_landscape_with_values_and_errors(tiny):
    land = reward_landscape(tiny, "mountain-car", "position", [-0.5, 0.0, 0.5], alphas=(0.0,), size=(20, 30))
    assert land.goal == 0.45 and land.rewards.shape == (3, 1)
    assert (
        reward_landscape(tiny, "mountain-car", "position", [-0.5, 0.5], alphas=(0.0,), goal=None, size=(20, 30)).goal
        is None
    )
    with pytest.raises(ValueError, match="this task's variables"):
        reward_landscape(tiny, "cartpole", "angle", alphas=(0.0,))
    with pytest.raises(ValueError, match="baseline"):
        reward_landscape(tiny, "cartpole", "pole_angle", alphas=(0.5,), baseline_prompts=(), n_points=3)


# ------------------------------------------------------------------- evaluate
@pytest.fixture(scope="module")
def labelled_cartpole():
    ds = StateDataset.sample("cartpole", 24, seed=0, size=(40, 60))
    labels = (np.abs(ds.states[:, 2]) < 0.05).astype(float)
    labels[-1] = np.nan
    return ds.with_labels(labels)


def test_evaluate_models(tiny, labelled_cartpole, tmp_path):
    alphas = (0.0, 0.5, 1.0)
    result = evaluate_models(labelled_cartpole, [tiny], alphas)
    (m,) = result.models
    assert m.model == TINY and m.parameters > 0 and result.n_labelled == 23
    assert m.epic.shape == (3,) and np.all((0 <= m.epic) & (m.epic <= 1))
    np.testing.assert_allclose(m.epic, state_epic_distance(m.rewards, labelled_cartpole.labels), rtol=0, atol=0)
    tasks = [
        GoalBaselineCriterion(("pole vertically upright on top of the cart",), ("pole and cart",), a) for a in alphas
    ]
    assert_rewards_close(m.rewards, score_frames(tiny, labelled_cartpole.frames, tasks))
    assert m.binary is not None and 0 < m.binary.average_precision <= 1

    rows = list(csv.DictReader(open(result.save_csv(tmp_path / "epic.csv"))))
    assert [float(r["alpha"]) for r in rows] == list(alphas) and rows[0]["n_labelled"] == "23"
    for path in (result.plot(tmp_path / "epic.png"), result.plot_precision_recall(tmp_path / "pr.png")):
        with Image.open(path) as image:
            assert image.format == "PNG"
    from rich.console import Console

    console = Console(file=io.StringIO(), width=120)
    console.print(result.table())
    assert "vlmrm-tiny" in console.file.getvalue() and "α=0.5" in console.file.getvalue()

    scores = labelled_cartpole.with_labels(np.linspace(0, 1, len(labelled_cartpole)))
    assert evaluate_models(scores, [tiny], (0.0,)).models[0].binary is None  # graded labels: no precision-recall
    with pytest.raises(ValueError, match="labelled states"):
        evaluate_models(labelled_cartpole.with_labels(np.full(24, np.nan)), [tiny], alphas)


def test_cli_dataset_evaluate_landscape(tmp_path, capsys):
    data = tmp_path / "cp.npz"
    assert cli_main(["dataset", "sample", "cartpole", "-n", "16", "-o", str(data), "--size", "32", "48"]) == 0
    assert (tmp_path / "cp_sheet.png").is_file()
    ds = StateDataset.load(data)
    lines = ["index,label"] + [f"{i},{int(abs(a) < 0.05)}" for i, a in enumerate(ds.states[:, 2])]
    (tmp_path / "cp_labels.csv").write_text("\n".join(lines) + "\n")
    assert cli_main(["dataset", "label", str(data), str(tmp_path / "cp_labels.csv")]) == 0
    assert StateDataset.load(data).labelled.all()
    out = tmp_path / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            cli_main(["evaluate", str(data), "--models", TINY, "--alphas", "0", "1", "--device", "cpu", "-o", str(out)])
            == 0
        )
        assert (
            cli_main(
                [
                    "landscape",
                    "mountain-car",
                    "--variable",
                    "position",
                    "--model",
                    TINY,
                    "--points",
                    "5",
                    "--alphas",
                    "0",
                    "0.5",
                    "--size",
                    "20",
                    "30",
                    "--device",
                    "cpu",
                    "-o",
                    str(out),
                ]
            )
            == 0
        )
    assert 0 < StateDataset.load(data).labels.sum() < 16  # both classes: precision-recall is written too
    assert sorted(p.name for p in out.iterdir()) == [
        "epic.csv",
        "epic.png",
        "landscape_mountain-car_position.csv",
        "landscape_mountain-car_position.png",
        "precision_recall.csv",
        "precision_recall.png",
    ]
    assert "EPIC distance" in capsys.readouterr().out
    assert (
        cli_main(["landscape", "cartpole", "--variable", "nope", "--model", TINY, "--device", "cpu", "-o", str(out)])
        == 2
    )
    assert "unknown state variable" in capsys.readouterr().err
