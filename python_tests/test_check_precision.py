"""``vlmrm-fast check-precision`` on random weights (the tiny CLIP, CPU): it renders task frames,
reports cosine and Spearman against bf16 for fp16/fp32 (and FP8 emulated on the CPU), says
plainly that FP8 needs an sm_89+ GPU, and reads frames from a folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from vlmrm_fast.cli import main
from vlmrm_fast.encoders.fp8_calibration import load_frames
from vlmrm_fast.evaluation.check_precision import check_precision, spearman

PROMPTS = dict(target_prompts=["a humanoid robot kneeling"], baseline_prompts=["a humanoid robot"])


def test_spearman_with_ties():
    a, b = np.array([1.0, 2.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0, 40.0])
    ranks_a, ranks_b = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3, 4])
    assert spearman(a, b) == pytest.approx(np.corrcoef(ranks_a, ranks_b)[0, 1])
    assert spearman(b, -b) == pytest.approx(-1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's message")
def test_fp8_is_reported_as_needing_an_sm89_gpu_and_the_rest_still_runs():
    frames = np.random.default_rng(0).integers(0, 256, size=(5, 64, 64, 3), dtype=np.uint8)
    log = []
    results = {
        r.precision: r
        for r in check_precision("vlmrm-tiny", frames, device="cpu", batch_size=4, log=log.append, **PROMPTS)
    }
    assert (
        not results["fp8"].ran
        and "compute capability 8.9" in results["fp8"].how
        and "--emulate-fp8" in results["fp8"].how
    )
    assert any("fp8: not run" in line for line in log)
    for name in ("bf16", "fp16", "fp32"):
        assert results[name].ran, results[name].how
    assert results["fp16"].cosine_min >= 0.999 and set(results["fp16"].spearman) == {"0", "0.5", "1"}
    assert -1.0 <= results["fp32"].spearman["0.5"] <= 1.0 and results["fp32"].noise_to_spread >= 0


@pytest.mark.slow  # renders task frames and emulates FP8
def test_cli_renders_task_frames_and_emulates_fp8(tmp_path, capsys):
    pytest.importorskip("torchao")
    out = tmp_path / "precision.json"
    assert (
        main(
            [
                "check-precision",
                "vlmrm-tiny",
                "-n",
                "6",
                "--render-size",
                "64",
                "--batch-size",
                "4",
                "--emulate-fp8",
                "--device",
                "cpu",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "6 rendered humanoid-kneeling frames (64x64" in printed and "noise/spread" in printed
    report = json.loads(out.read_text())
    results = {r["precision"]: r for r in report["results"]}
    assert list(results) == ["bf16", "fp8", "fp16", "fp32"] and all(r["ran"] for r in results.values())
    assert "emulated" in results["fp8"]["how"]
    assert results["fp8"]["cosine_min"] >= 0.99 and results["fp16"]["cosine_min"] >= 0.999
    for r in results.values():
        assert set(r["spearman"]) == {"0", "0.5", "1"}


def test_frames_from_a_folder(tmp_path, capsys):
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)).save(tmp_path / f"{i:02d}.png")
    assert load_frames(tmp_path).shape == (4, 48, 64, 3)
    assert (
        main(["check-precision", "vlmrm-tiny", "--frames", str(tmp_path), "--precisions", "fp32", "--device", "cpu"])
        == 0
    )
    assert f"4 frames from {tmp_path}" in capsys.readouterr().out
    Image.fromarray(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)).save(tmp_path / "odd.png")
    assert main(["check-precision", "vlmrm-tiny", "--frames", str(tmp_path), "--device", "cpu"]) == 2
    assert "differ in size" in capsys.readouterr().err
    assert main(["check-precision", "vlmrm-tiny", "--frames", str(tmp_path / "missing"), "--device", "cpu"]) == 2
    assert "neither a folder of images nor a .npz" in capsys.readouterr().err


def test_every_fp8_scaling_is_reported_and_static_scales_are_calibrated_on_other_frames(tmp_path, capsys):
    pytest.importorskip("torchao")
    out = tmp_path / "precision.json"
    args = ["check-precision", "vlmrm-tiny", "-n", "6", "--render-size", "64", "--batch-size", "4"]
    assert main([*args, "--precisions", "fp8", "--emulate-fp8", "--device", "cpu", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())["results"]
    assert [(r["precision"], r["fp8_scaling"]) for r in report] == [
        ("bf16", None),
        ("fp8", "dynamic-rowwise"),
        ("fp8", "dynamic-tensorwise"),
        ("fp8", "static-tensorwise"),
    ]
    for r in report[1:]:
        assert r["ran"] and r["cosine_min"] >= 0.99 and f"fp8 {r['fp8_scaling']}" in printed
    assert report[3]["how"].endswith("scales calibrated on 6 other rendered frames (seed 1)")
    # Given frames alone, static scales are calibrated on them, and the report says so.
    frames = np.random.default_rng(2).integers(0, 256, size=(4, 64, 64, 3), dtype=np.uint8)
    (result,) = [
        r
        for r in check_precision(
            "vlmrm-tiny",
            frames,
            device="cpu",
            batch_size=4,
            emulate_fp8=True,
            precisions=["fp8"],
            fp8_scalings=["static-tensorwise"],
            log=lambda line: None,
            **PROMPTS,
        )
        if r.precision == "fp8"
    ]
    assert result.ran and result.label == "fp8 static-tensorwise" and result.how.endswith("the scored frames")
