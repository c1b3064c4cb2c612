"""What a run leaves to look at rather than read: the learning curves as a CSV and a PNG in the run folder
(at each checkpoint and at the end, a resume continuing them), the policy video in TensorBoard, and a
checkpoint retention that keeps the newest intact checkpoint and the best."""

from __future__ import annotations

import copy
import csv
import io
import json
import pathlib

import numpy as np
import pytest
import yaml
from PIL import Image

from vlmrm_fast.cli import main as cli_main
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import ConfigError, load_config
from vlmrm_fast.training.curves import COLUMNS, CURVES_CSV, CURVES_PNG, LearningCurves
from vlmrm_fast.training.run_files import RunFiles

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

CONFIG = {
    "reward": {"model": "vlmrm-tiny", "device": "cpu"},
    "env": {"task": "humanoid-kneeling", "n_envs": 2, "episode_length": 10, "render_size": 32},
    "rl": {
        "algorithm": "SAC",
        "total_timesteps": 80,
        "device": "cpu",
        "kwargs": {"learning_starts": 4, "batch_size": 4, "buffer_size": 100, "policy_kwargs": {"net_arch": [8]}},
    },
    "logging": {"checkpoint_every": 40, "video_every": 40},
}


def _config(tmp_path: pathlib.Path, **logging) -> pathlib.Path:
    cfg = copy.deepcopy(CONFIG)
    cfg["output_dir"] = str(tmp_path / "run")
    cfg["logging"].update(logging)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rows(run: pathlib.Path) -> list[dict[str, str]]:
    with open(run / CURVES_CSV, newline="") as f:
        return list(csv.DictReader(f))


def _tensorboard(run: pathlib.Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard" / "SAC_1"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    return events


def test_the_curves_and_the_video_are_written_where_a_user_looks(tmp_path):
    run = tmp_path / "run"
    config = _config(tmp_path)
    assert cli_main(["train", str(config), "--total-timesteps", "40"]) == 0
    rows = _rows(run)
    assert list(rows[0]) == list(COLUMNS)
    assert [int(row["step"]) for row in rows] == [40]  # SB3 writes at every 4th episode: 2 envs, 10 steps each
    events = _tensorboard(run)
    for key in ("rollout/ep_vlm_reward_mean", "rollout/ep_gt_reward_mean", "rollout/ep_rew_mean"):
        logged = {e.step: e.value for e in events.Scalars(key)}
        assert {int(row["step"]): float(row[key]) for row in rows} == pytest.approx(logged, rel=1e-6), key
    assert (run / CURVES_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (video,) = events.Images("video/policy_gif")  # the policy video, played by TensorBoard's Images tab
    assert video.step == 40 and video.encoded_image_string[:6] == b"GIF89a"
    gif = Image.open(io.BytesIO(video.encoded_image_string))
    assert (gif.width, gif.height, gif.n_frames) == (32, 32, 10)  # the episode: 10 frames at 32 px

    # a resumed run drops the rows past its checkpoint (written by a process killed before its next checkpoint),
    # as TensorBoard's purge_step does, and goes on
    stale = rows + [{**rows[-1], "step": "60"}]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(stale)
    RunFiles(run).write_text(CURVES_CSV, text.getvalue())  # as the run writes it: on its record
    assert cli_main(["train", str(config), "--resume"]) == 0
    resumed = _rows(run)
    assert [int(row["step"]) for row in resumed] == [40, 80]  # the stale row at 60 is gone
    assert resumed[0] == rows[0]


def test_the_curves_are_written_at_each_checkpoint_without_tensorboard(tmp_path, monkeypatch):
    written = []
    real_save = LearningCurves.save

    def save(self):
        written.append([int(row["step"]) for row in self.rows])
        return real_save(self)

    monkeypatch.setattr(LearningCurves, "save", save)
    config = _config(tmp_path, tensorboard=False, video_every=0)
    assert cli_main(["train", str(config)]) == 0
    assert written[0] == [40] and written[-1] == [40, 80], written  # the checkpoint at 40 has the curve so far
    assert [int(row["step"]) for row in _rows(tmp_path / "run")] == [40, 80]


class _Killed(BaseException):
    """A kill: nothing after it runs in the process (no handler catches a BaseException of this kind)."""


def test_a_kill_between_a_checkpoint_and_the_curves_loses_no_curve_row(tmp_path, monkeypatch):
    """Killed the moment the checkpoint at 40 steps is complete (its manifest in place), before anything else
    runs: the resumed run's curves have every row of an uninterrupted run, and no file is lost or changed but
    those the resume rewrites."""
    config = _config(tmp_path, tensorboard=False, video_every=0, keep_replay_buffers=2)  # no buffer pruned
    run = tmp_path / "run"
    real_save = checkpoints.save_checkpoint

    def killed_after_the_first(*args, **kwargs):
        saved = real_save(*args, **kwargs)
        if saved.steps == 40:
            raise _Killed
        return saved

    with monkeypatch.context() as m:
        m.setattr(checkpoints, "save_checkpoint", killed_after_the_first)
        with pytest.raises(_Killed):
            cli_main(["train", str(config)])
    assert (run / "checkpoints" / "model_40_steps.json").is_file()
    before = _sha256s(run)
    rows_before = [int(row["step"]) for row in _rows(run)] if (run / CURVES_CSV).exists() else []
    assert cli_main(["train", str(config), "--resume"]) == 0
    rows = [int(row["step"]) for row in _rows(run)]
    assert rows == [40, 80] and rows[: len(rows_before)] == rows_before, (rows_before, rows)
    rewritten = {"config.yaml", CURVES_CSV, CURVES_PNG, "run_files.json"}
    after = _sha256s(run)
    assert not {name for name, digest in before.items() if name not in rewritten and after.get(name) != digest}


def _sha256s(folder: pathlib.Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_success_panel_shows_a_tasks_success_rates():
    from vlmrm_fast.training.curves import plot

    rows = [
        {"step": 10.0, "rollout/ep_rew_mean": 1.0, "rollout/success_every_step_rate": 0.25},
        {"step": 20.0, "rollout/ep_rew_mean": 2.0, "rollout/success_every_step_rate": 0.5},
    ]
    axes = plot(rows).axes
    (line,) = axes[3].get_lines()
    assert line.get_label() == "success_every_step_rate" and list(line.get_ydata()) == [0.25, 0.5]
    assert [t.get_text() for t in axes[1].texts] == ["no episode finished yet"]
    assert [t.get_text() for t in plot([{"step": 1.0}]).axes[3].texts] == ["this task defines no success"]


class _Model:
    """What save_checkpoint asks of an SB3 model."""

    replay_buffer = None

    def __init__(self, steps: int):
        self.num_timesteps = steps

    def save(self, f):
        f.write(b"model %d" % self.num_timesteps)


def _save(folder: pathlib.Path, steps: int, mean_vlm: float | None, keep: int | None) -> checkpoints.Checkpoint:
    stats = {"vlm": [] if mean_vlm is None else [mean_vlm - 1, mean_vlm + 1]}
    return checkpoints.save_checkpoint(
        _Model(steps), folder, reason="periodic", extra={"episode_stats": stats}, keep_checkpoints=keep
    )


def _kept(folder: pathlib.Path) -> list[int]:
    return [c.steps for c in checkpoints.scan(folder).complete]


def test_retention_keeps_the_newest_and_the_best(tmp_path):
    for steps, mean in [(10, None), (20, 5.0), (30, 9.0), (40, 1.0), (50, 2.0)]:
        _save(tmp_path, steps, mean, keep=2)
    assert _kept(tmp_path) == [30, 40, 50]  # the best (30) and the newest two
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"model_{s}_steps.{ext}" for s in (30, 40, 50) for ext in ("zip", "json")
    )
    _save(tmp_path, 60, 9.0, keep=1)  # as good as the best: the newer of equals is the best now
    assert _kept(tmp_path) == [60]
    scan = checkpoints.scan(tmp_path)
    assert not scan.damaged and not scan.incomplete


def test_retention_deletes_nothing_while_the_newest_is_not_whole(tmp_path):
    _save(tmp_path, 10, 0.0, keep=None)
    newest = _save(tmp_path, 20, 1.0, keep=None)
    newest.model.write_bytes(b"model 21")  # same size, other bytes: the checksum differs
    assert checkpoints.prune_checkpoints(tmp_path, 1) == []
    assert _kept(tmp_path) == [10, 20]
    newest.model.write_bytes(b"model 20")
    assert [c.steps for c in checkpoints.prune_checkpoints(tmp_path, 1)] == [10]


def test_keep_checkpoints_is_checked_and_left_out_keeps_all(tmp_path):
    base = {"env": {"task": "humanoid-kneeling"}}
    assert load_config(base).logging.keep_checkpoints is None
    assert load_config({**base, "logging": {"keep_checkpoints": 3}}).logging.keep_checkpoints == 3
    with pytest.raises(ConfigError, match=r"^logging.keep_checkpoints: must be a positive integer or null, got 0$"):
        load_config({**base, "logging": {"keep_checkpoints": 0}})


def test_a_run_with_retention_keeps_the_final_and_the_best_checkpoint(tmp_path):
    run = tmp_path / "run"
    config = _config(tmp_path, keep_checkpoints=1, checkpoint_every=20, video_every=0, tensorboard=False)
    assert cli_main(["train", str(config)]) == 0
    complete = checkpoints.scan(run / "checkpoints").complete
    means = {c.steps: checkpoints.mean_vlm_return(c) for c in complete}
    assert complete[-1].steps == 80 and len(complete) <= 2, means
    manifests = [json.loads(p.read_text()) for p in (run / "checkpoints").glob("*.json")]
    assert all(m["reason"] in ("periodic", "final") for m in manifests)
    assert np.isfinite([m for m in means.values() if m is not None]).all()
