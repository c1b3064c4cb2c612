"""bench/run.py --quick: the side-by-side measurement runs on a small CPU and writes its report."""

from __future__ import annotations

import json
import pathlib

import pytest
from child_process import run_python

# the benchmark scripts end to end: left out of the quick subset (-m "not slow")
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_quick_bench_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "quick.json"
    result = run_python([str(ROOT / "bench" / "run.py"), "--quick", "--out", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    for key in ("machine", "model", "num_envs", "resolution", "fast_fps", "reference_fps", "paper_fps", "stages_ms"):
        assert key in report, key
    assert report["model"] == "vlmrm-tiny" and report["fast_fps"] > 0 and report["reference_fps"] > 0
    assert {"physics", "render", "preprocess", "encode", "reward"} <= set(report["stages_ms"])
    assert report["machine"]["cores"] >= 1 and report["machine"]["versions"]["mujoco"] == "4.0.0"
    assert [r["renderer"] for r in report["results"]] == ["egl", "warp"]  # both renderers, side by side
    for r in report["results"]:
        assert r["ratio_paper"] == r["fast_fps"] / r["paper_fps"] and r["non_encoder_share"] < 1
        assert r["encoder_gflops_per_image"] > 0
    assert out.with_suffix(".md").read_text().count("| vlmrm-tiny |") == 2
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_paper_preprocess_bench_compares_both_transforms(tmp_path):
    """bench/paper_preprocess.py: the same frames scored after both resizes; identical inputs would
    give a zero difference, so a nonzero one shows that the two modes really differ."""
    out = tmp_path / "paper.json"
    command = [str(ROOT / "bench" / "paper_preprocess.py"), "--tasks", "cartpole", "--frames", "4", "--out", str(out)]
    result = run_python(command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert (row["model"], row["task"], row["open_clip_mode"], row["frames"]) == ("vlmrm-tiny", "cartpole", "squash", 4)
    assert 0 < row["mean_abs_difference"] <= row["max_abs_difference"] < 0.1
    assert abs(row["mean_difference"]) <= row["mean_abs_difference"] and row["reward_std"] > 0


def test_judge_bench_times_both_paths_on_the_same_rewards(tmp_path):
    """bench/bench_judge.py: ours and the anchor (the model's chat template through apply_chat_template on PIL
    images), side by side in both prompt orders, with the same rewards."""
    out = tmp_path / "judge.json"
    command = [str(ROOT / "bench" / "bench_judge.py"), "--frames", "8", "--batch-size", "4", "--min-seconds", "0"]
    result = run_python([*command, "--out", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(row["order"], row["path"]) for row in rows] == [
        (order, path)
        for order in ("image_first", "question_first")
        for path in ("anchor (torchvision)", "anchor (pil)", "ours")
    ]
    for torchvision, pil, ours in (rows[:3], rows[3:]):
        assert (torchvision["batch"], ours["batch"]) == (32, 4) and ours["fps"] > 0
        assert set(ours["ratio"]) == {"torchvision", "pil"}
        assert ours["max_diff"] < 1e-4 and pil["max_diff"] < 1e-4


def test_windows_bench_measures_every_row_side_by_side(tmp_path):
    """bench/bench_windows.py: the frame reward, the mean of frames and the video model on the same frames,
    the straightforward way giving the same rewards, and the rings' memory."""
    out = tmp_path / "windows.json"
    command = [str(ROOT / "bench" / "bench_windows.py"), "--envs", "4", "--steps", "2"]
    result = run_python([*command, "--straightforward-steps", "1", "--out", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(r["row"], r.get("score_every")): r for r in report["rows"]}
    assert set(rows) == {("frames", None), ("mean", None), ("video", 1), ("video", 4)}
    assert rows[("mean", None)]["time_vs_frames"] > 0 and rows[("video", 1)]["speedup"] > 0
    assert rows[("video", 1)]["max_reward_difference"] < 1e-5
    assert report["ring_bytes"]["viclip-b16 bfloat16"] == 1024 * 8 * 3 * 224 * 224 * 2


def test_suite_bench_measures_the_batch_and_generic_paths_side_by_side(tmp_path):
    """bench/bench_suite.py: a MuJoCo suite task's simulator env beside its gymnasium envs, drawn in one batch and
    each by its render() (and the reference task's simulator env), each with the stages of a step."""
    out = tmp_path / "suite.json"
    command = [str(ROOT / "bench" / "bench_suite.py"), "--tasks", "HalfCheetah-v5", "--envs", "2", "--size", "32"]
    command += ["--steps", "2", "--warmup", "1", "--rounds", "1", "--profile-steps", "2", "--out", str(out)]
    result = run_python(command, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["task"], r["path"]) for r in rows] == [
        ("HalfCheetah-v5", "batch"),
        ("HalfCheetah-v5", "drawn"),
        ("HalfCheetah-v5", "generic"),
        ("humanoid-kneeling", "batch"),
    ]
    assert [(r["physics"], r["renderer"]) for r in rows[1:3]] == [("gym", "egl"), ("gym", "each env's render()")]
    assert rows[0]["x_generic"] == rows[0]["env_steps_per_s"] / rows[2]["env_steps_per_s"]
    for row in rows:
        assert row["env_steps_per_s"] > 0 and {"physics", "draw", "preprocess", "encode"} <= set(row["stages_ms"])
        assert row["stages_ms"]["draw"] > 0


def test_stack_step_bench_measures_a_checkout_in_fresh_processes(tmp_path):
    """bench/bench_stack_step.py: one measurement of each kind in a fresh process, the stack's and the scorer's
    alone (what ``--alternate`` runs for each checkout)."""
    script = str(ROOT / "bench" / "bench_stack_step.py")
    out = tmp_path / "clip.json"
    result = run_python([script, "--variant", "clip", "--out", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(out.read_text())
    assert row["variant"] == "clip" and row["construction_s"] > 0 and row["step_ms"] > 0
    result = run_python([script, "--scorer", "4", "1"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["us_per_step"] > 0


def test_episode_judges_bench_measures_each_way_side_by_side(tmp_path):
    """bench/bench_episode_judges.py: the streamed prefix judge, its recompute and the template's forward per step,
    the window judge and its template's forward, on the same frames with the same rewards."""
    out = tmp_path / "episode_judges.json"
    command = [str(ROOT / "bench" / "bench_episode_judges.py"), "--envs", "2", "--steps", "5", "--max-frames", "4"]
    result = run_python([*command, "--window", "4", "--repeats", "2", "--out", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [row["row"].split(" (")[0] for row in rows] == [
        "prefix streamed",
        "prefix recompute, vision kept",
        "prefix anchor",
        "window K=4",
        "window K=4 anchor",
    ]
    assert all(row["max_reward_diff"] < 1e-4 for row in rows if "max_reward_diff" in row)
    assert rows[0]["episodes"] == 2 and rows[0]["env_steps_per_s"] > 0 and rows[3]["video"]
