#!/usr/bin/env python3
"""The GPU checks in one 15-minute loan of the GPU machine: ``tools/gpu_check.sh all|plan|report``.

    tools/gpu_check.sh plan             # the loans, their calls (the exact device calls) and estimates
    tools/gpu_check.sh all              # on the GPU machine: the next call's checks
    tools/gpu_check.sh all --dry-run    # here, on the CPU: every check at tiny sizes
    tools/gpu_check.sh report S.json..  # the summary of fetched state files, into bench/RESULTS.md

A loan of the GPU machine is 15 minutes of device time, its start and idle waits included. The
checks are laid out in loans: loan 1 holds the build, the GPU tests and the headline figures
(what the open issues owe) and fits in about 12 minutes; loan 2 holds the figures that did not fit,
for a later loan. A loan's calls come one right after the other (the machine keeps /tmp only ~30 s
between calls): the payload's first part, then ``all`` once per call of the loan, each call running
its own group of checks (the first also unpacks and builds). Each call reads its checks' figures as
soon as they end, keeps them in a state file (/tmp/gpu_check/state.json while the machine is warm;
``GPU_CHECK_STATE`` names another, e.g. the state.json carried back from the last loan), writes the
summary table (target, measured, pass/fail, command) into bench/RESULTS.md, and leaves state.json,
RESULTS.md and logs.tar.gz in $OUT. When a loan's checks are done, ``all`` says so and names the
checks owed to the next loan instead of starting them. A skipped test counts as a failure; so does
a check that timed out or a figure that is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
CALL_BUDGET_S = 480  # a device call may run 10 minutes; 8 leave room for the transfers and a rerun
LOAN_BUDGET_S = 720  # of a loan's 15 minutes of device time: 12, the rest for starts and idle waits
MACHINE_START_S = 30  # the machine's start, as the loan of 2026-11-26 saw it (742 s in all)
PART_ONE_S = 45  # the call that carries the payload's first part (42 s then)
CALL_GAP_S = 10  # between two calls of a loan
LOAN_MARKER = pathlib.Path("/tmp/gpu_check/loan")  # this machine's loan (gone with the machine)
BEGIN = "<!-- gpu_check:begin (written by tools/gpu_check.sh all; do not edit by hand) -->"
END = "<!-- gpu_check:end -->"

Row = dict[str, str]


@dataclasses.dataclass(frozen=True)
class Check:
    """One check: how it runs on the GPU machine and in the dry run, and the figures it gives."""

    name: str
    what: str
    estimate_s: int  # on an H100 machine, caches cold
    gpu: list[str]  # arguments of tools/gpu_check.sh
    dry: list[list[str]]  # commands of the dry run on the CPU ({work}: the results folder)
    figures: Callable[[pathlib.Path, bool], list[Row]]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    loan: int = 1  # 1: the headline loan; 2: the figures that did not fit, for a later loan
    call: int = 1  # the loan's call it runs in (call 1 comes with the payload's last part and builds)

    def command(self) -> str:
        env = " ".join(f"{k}={v!r}" if " " in v or not v else f"{k}={v}" for k, v in self.env.items())
        return f"{env + ' ' if env else ''}tools/gpu_check.sh {' '.join(self.gpu)}"


# --------------------------------------------------------------------------- reading the figures


def row(target: str, measured: str, ok: bool | None) -> Row:
    """ok None: a figure stated, not held to a bound."""
    return {"target": target, "measured": measured, "status": "stated" if ok is None else ("pass" if ok else "FAIL")}


def load(path: pathlib.Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def missing(target: str, path: pathlib.Path) -> Row:
    return row(target, f"no figure ({path.name} missing: see the check's log)", False)


def build_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    target = "native core built with CUDA; a CUDA device; an EGL device with a CUDA index"
    info = load(work / "build_info.json")
    if info is None:
        return [missing(target, work / "build_info.json")]
    egl = [d["cuda_device"] for d in info.get("egl_devices", []) if d.get("cuda_device", -1) >= 0]
    measured = (
        f"CUDA {info.get('cuda_version') or 'not compiled'}, device {info.get('cuda_device_name') or 'none'}, "
        f"EGL {info.get('egl_vendor') or 'none'} (CUDA indices {egl or 'none'}), torch {info.get('torch')}"
    )
    return [row(target, measured, bool(info.get("cuda_compiled") and info.get("cuda_available") and egl))]


def test_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    target = "gpu/egl/warp tests (FP8's included): all pass, none skipped"
    path = work / "tests.xml"
    if not path.exists():
        return [missing(target, path)]
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    measured = f"{passed} passed, {counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} skipped"
    return [row(target, measured, passed > 0 and passed == counts["tests"])]


def warp_first_call_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    target = "the first Warp renderer of a process (Warp's kernel cache as found, then warm): stated"
    result = load(work / "warp_first_call.json")
    if result is None:
        return [missing(target, work / "warp_first_call.json")]
    if "first_process" not in result:
        return [row(target, f"failed: {str(result.get('first_error'))[-200:]}", False)]
    first, second = result["first_process"], result.get("second_process", {})
    measured = (
        f"{result['num_envs']} envs, {result['size']} px on {result['device']}: first frame after "
        f"{first['construct_s'] + first['first_draw_s']:.1f} s (cache held {result['cache_files_before']} files), "
        f"{second.get('construct_s', 0) + second.get('first_draw_s', 0):.1f} s with the cache warm"
    )
    return [row(target, measured, None if "second_process" in result else False)]


def render_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    rows = []
    target = "Warp renderer in the env >= 80,000 frames/s at 256+ envs, with shadows (224 px)"
    render = load(work / "render.json")
    if render is None:
        rows.append(missing(target, work / "render.json"))
    else:
        measured_rows = [r for r in render["results"] if "warp" in r and (dry or r["num_envs"] >= 256)]
        cells = [
            f"{r['num_envs']} envs {r['warp']['fps']:,.0f}/s (no shadows {r['warp_noshadow']['fps']:,.0f})"
            for r in measured_rows
        ]
        ok = bool(measured_rows) and all(r["warp"]["fps"] >= 80_000 for r in measured_rows)
        rows.append(row(target, "; ".join(cells) or "no Warp rows", ok))
    target = "EGL pixel buffer: kernels read it as fast after host reads (<= 1.25x the read before)"
    probe = load(work / "interop_probe.json")
    if probe is None:
        reason = "not measured (needs a CUDA GPU's EGL device)" if dry else None
        rows.append(row(target, reason, False) if reason else missing(target, work / "interop_probe.json"))
    else:
        after = probe["pixel_buffer_read_after_host_read_vs_before"]
        measured = (
            f"{after:.2f}x ({'through CUDA' if probe['host_reads_through_cuda'] else 'mapped'}); the read vs device "
            f"memory {probe['pixel_buffer_read_vs_device_memory']:.2f}x (was 7.8x); hand-off "
            f"{'blocks' if probe['hand_off_blocks_host'] else 'asynchronous'}"
        )
        rows.append(row(target, measured, after <= 1.25))
    return rows


def best_rate(rows: list[dict], precision: str) -> tuple[float, str] | None:
    """The best img/s of ``precision`` and where it came from (backend, and the FP8 scaling if any)."""
    found = [
        (r["images_per_s"], r["backend"] + (f", {r['fp8_scaling']}" if r.get("fp8_scaling") else ""))
        for r in rows
        if r.get("precision") == precision and r.get("asked") != "auto" and "error" not in r
    ]
    return max(found) if found else None


def encoder_figures(model: str, targets: dict[str, int]) -> Callable[[pathlib.Path, bool], list[Row]]:
    """Best img/s per precision over the torch and compile backends, against ``targets`` (bf16, fp8)."""

    def figures(work: pathlib.Path, dry: bool) -> list[Row]:
        name = "vlmrm-tiny" if dry else model
        result = load(work / f"fp8_{name}.json")
        out = []
        for precision, bound in targets.items():
            target = f"{model}: {precision} >= {bound:,} img/s"
            if result is None:
                out.append(missing(target, work / f"fp8_{name}.json"))
                continue
            shown = "fp32" if dry and precision == "bf16" else precision  # the CPU has no bf16 encoder
            best = best_rate(result["results"], shown)
            if best is None:
                errors = [r["error"] for r in result["results"] if r.get("precision", shown) == shown and "error" in r]
                out.append(row(target, f"no rate: {(errors or ['no row'])[0][:160]}", False))
                continue
            rate, backend = best
            batch = result["results"][0]["batch_size"]
            out.append(row(target, f"{rate:,.0f} img/s ({shown}, {backend}, batch {batch})", rate >= bound))
        if result is not None and any(r.get("asked") == "auto" for r in result["results"]):
            out.append(auto_row(model, result["results"], "fp32" if dry else "bf16"))
        return out

    return figures


def auto_row(model: str, rows: list[dict], baseline: str) -> Row:
    """precision="auto" on each backend against that backend's bf16: never a slower path."""
    target = f"{model}: precision auto never slower than bf16 on its backend (eager included)"
    cells, ok = [], True
    for r in rows:
        if r.get("asked") != "auto" or "error" in r:
            continue
        asked = [b for b in rows if b.get("backend") == r["backend"] and b.get("asked") != "auto"]
        base = best_rate(asked, baseline)
        if base is None:
            continue
        ratio = r["images_per_s"] / base[0]
        ok &= ratio >= 0.97  # timing noise between two runs of the same path
        cells.append(f"{r['backend']}: auto took {r['precision']}, {ratio:.2f}x bf16")
    return row(target, "; ".join(cells) or "no auto row", ok and bool(cells))


def compile_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    targets = ("first compile of a model <= 60 s", "compile from the cache <= 10 s")
    files = sorted(work.glob("compile_*.json"))
    if not files:
        return [missing(t, work / "compile_*.json") for t in targets]
    out = []
    for r in load(files[-1])["compile_timing"]:
        label = f"{r['model']} b{r['batch_size']} {r['precision']}"
        if "cold_compile_s" not in r:
            out += [row(t, f"{label}: failed: {str(r.get('cold_error'))[-160:]}", False) for t in targets]
            continue
        out.append(row(targets[0], f"{label}: {r['cold_compile_s']:.1f} s", r["cold_compile_s"] <= 60))
        if "warm_compile_s" not in r:
            out.append(row(targets[1], f"{label}: failed: {str(r.get('warm_error'))[-160:]}", False))
            continue
        found = r.get("warm_cache_found")
        measured = f"{label}: {r['warm_compile_s']:.1f} s (cache {'found' if found else 'NOT found'})"
        out.append(row(targets[1], measured, bool(found) and r["warm_compile_s"] <= 10))
    return out


def e2e_figures(
    model: str, envs: int, min_fps: int | None, min_encoder_share: float | None, min_paper_ratio: float | None
) -> Callable[[pathlib.Path, bool], list[Row]]:
    """The pipelined step's figures (chunks "auto") against one range (chunks 1) of bench/run.py."""

    def figures(work: pathlib.Path, dry: bool) -> list[Row]:
        path = work / f"e2e_{'vlmrm-tiny' if dry else model}.json"
        result = load(path)
        targets = []
        if min_fps:
            targets.append(f"{model}, {envs:,} envs, renderer warp: >= {min_fps:,} scored steps/s")
        if min_paper_ratio:
            targets.append(f"{model}: >= {min_paper_ratio:g}x the paper-style pipeline")
        if min_encoder_share:
            targets.append(f"{model}, {envs} envs: end to end >= {min_encoder_share:.0%} of the encoder alone")
        targets.append(f"{model}, {envs} envs: the pipelined step faster than one range (by how much)")
        if result is None:
            return [missing(t, path) for t in targets]
        rows = [r for r in result["results"] if r.get("renderer") == "warp"] or result["results"]
        piped = next((r for r in rows if r["chunks"] > 1), None)
        single = next((r for r in rows if r["chunks"] == 1), None)
        main = piped or single
        out = []
        label = (
            f"{main['fast_fps']:,.0f} steps/s ({main['renderer']}, {main['chunks']} chunks, {main['num_envs']} envs)"
        )
        if min_fps:
            out.append(row(targets[0], label, main["fast_fps"] >= min_fps))
        if min_paper_ratio:
            target = targets[len(out)]
            if "ratio_paper" in main:
                measured = f"{main['ratio_paper']:.1f}x (paper-style {main['paper_fps']:,.0f} frames/s at {main['paper_envs']} envs)"
                out.append(row(target, measured, main["ratio_paper"] >= min_paper_ratio))
            else:
                out.append(row(target, "no paper-style figure", False))
        if min_encoder_share:
            share = main["fast_fps"] / main["encoder_only_fps"]
            measured = f"{share:.0%} ({label}; encoder alone {main['encoder_only_fps']:,.0f} img/s)"
            out.append(row(targets[len(out)], measured, share >= min_encoder_share))
        if piped and single:
            gain = piped["fast_fps"] / single["fast_fps"]
            measured = f"{gain:.2f}x ({piped['chunks']} chunks {piped['fast_fps']:,.0f} vs 1 range {single['fast_fps']:,.0f} steps/s)"
            out.append(row(targets[-1], measured, gain > 1.0))
        else:
            out.append(row(targets[-1], "one of the two runs is missing", False))
        return out

    return figures


def _e2e_rows(path: pathlib.Path) -> list[dict] | None:
    result = load(path)
    return None if result is None else [r for r in result["results"] if "fast_fps" in r]


def _steps(r: dict) -> str:
    return (
        f"{r['fast_fps']:,.0f} steps/s ({r.get('physics', 'batch')} physics, {r['renderer']}, {r['chunks']} range(s))"
    )


def egl_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    """EGL in the env (one range under "auto"), at a small and a large number of envs,
    beside Warp and beside EGL in 4 ranges (the collapse)."""
    targets = (
        "ViT-B-32, 256 envs, 224 px, renderer egl (pipeline_chunks auto): >= 2,500 scored steps/s",
        "ViT-B-32, 4,096 envs, renderer egl: no collapse (at least the 256-env figure)",
        "ViT-B-32, 256 envs: EGL in 4 ranges against one; Warp beside (stated)",
    )
    rows, split = _e2e_rows(work / "e2e_egl.json"), _e2e_rows(work / "e2e_egl4.json")
    if rows is None:
        return [missing(t, work / "e2e_egl.json") for t in targets]
    egl = sorted((r for r in rows if r["renderer"] == "egl"), key=lambda r: r["num_envs"])
    if not egl:
        return [row(t, "no EGL row (see the log)", False) for t in targets]
    small, large = egl[0], egl[-1]
    out = [
        row(targets[0], f"{_steps(small)} at {small['num_envs']} envs", small["fast_fps"] >= (0 if dry else 2_500)),
        row(
            targets[1], f"{_steps(large)} at {large['num_envs']:,} envs", large["fast_fps"] >= 0.95 * small["fast_fps"]
        ),
    ]
    beside = [f"egl in {r['chunks']} ranges {r['fast_fps']:,.0f}" for r in split or []]
    beside += [f"warp {r['fast_fps']:,.0f} at {r['num_envs']:,} envs" for r in rows if r["renderer"] == "warp"]
    out.append(row(targets[2], "; ".join(beside) or "no figure", None if beside else False))
    return out


def physics_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    """MuJoCo Warp physics alone against the CPU batch simulator (bench/bench_physics.py)."""
    targets = (
        "physics alone, 4,096 worlds (5 substeps each): >= 200,000 env steps/s",
        "16,384 worlds on one GPU: runs; peak device memory stated",
    )
    result = load(work / "physics.json")
    if result is None:
        return [missing(t, work / "physics.json") for t in targets]
    done = {r["worlds"]: r for r in result["results"] if "warp" in r}
    if not done:
        errors = [r.get("error", "")[-160:] for r in result["results"]]
        return [row(t, f"failed: {(errors or ['no row'])[0]}", False) for t in targets]
    cells = []
    for worlds, r in sorted(done.items()):
        warp = r["warp"]
        cell = f"{worlds:,}: {warp['host_outputs']['env_steps_per_s']:,.0f}/s"
        if "device_outputs" in warp:
            cell += f" ({warp['device_outputs']['env_steps_per_s']:,.0f} kept on the device)"
        if "batch" in r:
            cell += f", CPU simulator {r['batch']['env_steps_per_s']:,.0f}/s"
        cells.append(cell)
    middle = done.get(4096) or done[max(done)]
    rate = middle["warp"]["host_outputs"]["env_steps_per_s"]
    largest = done[max(done)]
    memory = largest["warp"].get("device_memory_held_mib")
    out = [row(targets[0], "; ".join(cells), rate >= (0 if dry else 200_000))]
    runs = dry or 16384 in done
    held = f"{memory:.0f} MiB of device memory" if memory else "memory not measured"
    out.append(row(targets[1], f"{max(done):,} worlds ran; {held}", runs))
    return out


def e2e_physics_figures(work: pathlib.Path, dry: bool) -> list[Row]:
    """ViT-B-32 end to end with MuJoCo Warp physics and renderer, beside the CPU simulator."""
    targets = (
        "ViT-B-32, 4,096 envs, physics warp + renderer warp: >= 30,000 scored steps/s",
        "the same: >= 90% of the encoder alone at that batch",
        "physics batch beside it (stated)",
    )
    rows = _e2e_rows(work / "e2e_physics.json")
    if rows is None:
        return [missing(t, work / "e2e_physics.json") for t in targets]
    warp = [r for r in rows if r.get("physics") == "warp"]
    batch = [r for r in rows if r.get("physics") == "batch"]
    if not warp:
        return [row(t, "no warp-physics row (see the log)", False) for t in targets]
    best = max(warp, key=lambda r: r["fast_fps"])
    share = best["fast_fps"] / best["encoder_only_fps"]
    return [
        row(targets[0], f"{_steps(best)} at {best['num_envs']:,} envs", best["fast_fps"] >= (0 if dry else 30_000)),
        row(
            targets[1],
            f"{share:.0%} (encoder alone {best['encoder_only_fps']:,.0f} img/s)",
            share >= (0 if dry else 0.9),
        ),
        row(targets[2], "; ".join(_steps(r) for r in batch) or "no figure", None if batch else False),
    ]


# --------------------------------------------------------------------------- the checks


def bench(script: str, *args: str) -> list[str]:
    return [sys.executable, "-P", f"bench/{script}", *args]


def e2e_check(
    short: str,
    model: str,
    envs: int,
    *,
    min_fps: int | None = None,
    min_encoder_share: float | None = None,
    min_paper_ratio: float | None = None,
    loan: int = 1,
    call: int = 1,
) -> Check:
    """bench/run.py end to end with Warp: one range against the pipelined step, and the paper-style
    pipeline at 64 envs exactly when a target is set against it (dry run and real run alike)."""
    paper = min_paper_ratio is not None
    return Check(
        f"e2e-{short}",
        f"{model} end to end, {envs:,} envs, Warp, one range and the pipelined step"
        + ("; paper-style at 64 envs" if paper else ""),
        90 if paper else 70,
        ["e2e", short, str(envs)],
        dry_e2e(4, paper=paper),
        e2e_figures(model, envs, min_fps, min_encoder_share, min_paper_ratio),
        env={"RENDERERS": "warp", **({} if paper else {"SKIP_PAPER": "1"})},
        loan=loan,
        call=call,
    )


def dry_e2e(envs: int, paper: bool) -> list[list[str]]:
    args = ["--models", "vlmrm-tiny", "--num-envs", str(envs), "--resolutions", "64", "--renderers", "warp"]
    args += ["--pipeline-chunks", "1", "2", "--skip-reference", "--steps", "3", "--warmup", "1"]  # "auto" is 1 on a CPU
    args += ["--profile-steps", "1", "--device", "cpu", "--out", "{work}/e2e_vlmrm-tiny.json"]
    args += ["--baseline-max-envs", "2"] if paper else ["--skip-paper"]
    return [bench("run.py", *args)]


def dry_encoders() -> list[list[str]]:
    args = ["--models", "vlmrm-tiny", "--backends", "torch", "compile", "--precision", "fp32", "fp8"]
    args += ["--batch-sizes", "4", "--device", "cpu", "--seconds", "0.3", "--warmup", "1", "--quiet"]
    return [bench("bench_encoders.py", *args, "--out", "{work}/fp8_vlmrm-tiny.json")]


BUILD_INFO = "import json, sys, torch, vlmrm_fast; json.dump({**vlmrm_fast.build_info(), 'torch': torch.__version__}, open(sys.argv[1], 'w'))"
# The GPU machine runs what needs it: GPU and EGL tests (warp-marked tests on Warp's CPU backend run in CI,
# and would only compile Warp's CPU kernels there from a cold cache).
TESTS = "(gpu or egl) and not tensorrt"
FP8_SCALINGS = "dynamic-rowwise dynamic-tensorwise static-tensorwise"


def build_check(name: str, loan: int) -> Check:
    """Each loan's machine starts bare: its first call unpacks the payload and builds the package."""
    return Check(
        name,
        "pip install of the package with CUDA for sm_90; what it sees"
        + ("" if loan == 1 else f" (loan {loan}'s machine)"),
        50,
        ["build"],
        [[sys.executable, "-P", "-c", BUILD_INFO, "{work}/build_info.json"]],
        build_figures,
        loan=loan,
    )


def stated(target: str, pattern: str) -> Callable[[pathlib.Path, bool], list[Row]]:
    """A check whose output is a table to read (files ``pattern`` in the results), not a figure held to a bound."""

    def figures(work: pathlib.Path, dry: bool) -> list[Row]:
        found = sorted(work.glob(pattern))
        if not found:
            return [missing(target, work / pattern)]
        return [row(target, f"{', '.join(p.name for p in found)} written (logs.tar.gz)", None)]

    return figures


def dry_run_py(*args: str) -> list[list[str]]:
    common = ["--models", "vlmrm-tiny", "--resolutions", "64", "--skip-reference", "--skip-paper", "--steps", "2"]
    common += ["--warmup", "1", "--profile-steps", "1", "--device", "cpu"]
    return [bench("run.py", *common, *args)]


CHECKS = [
    # ---------------------------------------------------------------- loan 1, call 1: build and the headline figures
    build_check("build", loan=1),
    Check(
        "e2e-egl",
        "ViT-B-32 at 256 and 4,096 envs, EGL (one range under auto) and Warp: the EGL targets",
        100,
        ["e2e", "B32", "256", "4096"],
        dry_run_py(
            "--num-envs",
            "2",
            "4",
            "--renderers",
            "egl",
            "warp",
            "--pipeline-chunks",
            "auto",
            "--out",
            "{work}/e2e_egl.json",
        ),
        egl_figures,
        env={"RENDERERS": "egl warp", "CHUNKS": "auto", "SKIP_PAPER": "1", "TAG": "egl"},
    ),
    Check(
        "e2e-physics",
        "ViT-B-32 at 4,096 envs, physics warp and batch side by side, Warp renderer: the end-to-end targets of Warp physics",
        70,
        ["e2e", "B32", "4096"],
        dry_run_py(
            "--num-envs",
            "4",
            "--physics",
            "warp",
            "batch",
            "--renderers",
            "warp",
            "--pipeline-chunks",
            "auto",
            "--out",
            "{work}/e2e_physics.json",
        ),
        e2e_physics_figures,
        env={"RENDERERS": "warp", "PHYSICS": "warp batch", "CHUNKS": "auto", "SKIP_PAPER": "1", "TAG": "physics"},
    ),
    Check(
        "physics",
        "MuJoCo Warp physics alone at 1,024 / 4,096 / 16,384 worlds beside the CPU simulator",
        70,
        ["physics"],
        [bench("bench_physics.py", "--device", "cpu", "--worlds", "4", "--steps", "3", "--out", "{work}/physics.json")],
        physics_figures,
    ),
    # ---------------------------------------------------------------- loan 1, call 2: the GPU tests
    Check(
        "tests",
        f"pytest -m '{TESTS}', skips counted as failures",
        210,
        ["tests"],
        [
            [sys.executable, "-P", "-m", "pytest", "python_tests/test_warp_render.py", "-q", "-p", "no:cacheprovider"]
            + ["-m", TESTS, "--junitxml", "{work}/tests.xml"]
        ],
        test_figures,
        call=2,
    ),
    # ---------------------------------------------------------------- loan 2: FP8, first calls
    build_check("build-2", loan=2),
    Check(
        "fp8-L14",
        "ViT-L-14 img/s at batch 256, compiled: bf16, FP8 in every scaling, and what precision auto picks",
        100,
        ["fp8", "L14", "256"],
        dry_encoders(),
        encoder_figures("ViT-L-14", {"bf16": 2_700, "fp8": 4_100}),
        env={"BACKENDS": "compile", "PRECISION": "bf16 fp8 auto", "FP8_SCALINGS": FP8_SCALINGS},
    ),
    Check(
        "e2e-egl4",
        "ViT-B-32, 256 envs, EGL in 4 ranges: the pipelined step that collapsed on the first H100 run (side by side)",
        30,
        ["e2e", "B32", "256"],
        dry_run_py("--num-envs", "4", "--renderers", "egl", "--pipeline-chunks", "2", "--out", "{work}/e2e_egl4.json"),
        stated("EGL in 4 ranges at 256 envs (the collapse of the first H100 run)", "e2e_egl4.json"),
        env={"RENDERERS": "egl", "CHUNKS": "4", "SKIP_PAPER": "1", "TAG": "egl4"},
        loan=2,
    ),
    Check(
        "profile",
        "where the FP8 tower's time goes: bench/profile_encoders.py, ViT-L-14 at batch 256, compiled, bf16 and every FP8 scaling",
        240,
        ["profile", "L14"],
        [
            bench("profile_encoders.py", "--models", "vlmrm-tiny", "--batch-size", "4", "--precision", "fp32")
            + ["--device", "cpu", "--out", "{work}/profile.json"]
        ],
        stated("the FP8 tower's time, kernel by kernel (profile.json)", "profile.json"),
        env={"BATCH": "256", "VARIANTS": "compiled"},
        loan=2,
    ),
    Check(
        "warp-first-call",
        "the first Warp renderer of a process, cache as found then warm",
        40,
        ["warp-first-call", "256"],
        [
            bench("warp_first_call.py", "--device", "cpu", "--envs", "4", "--size", "64")
            + ["--out", "{work}/warp_first_call.json"]
        ],
        warp_first_call_figures,
        loan=2,
    ),
    Check(
        "fp8-bigG",
        "ViT-bigG-14 img/s at batch 128, bf16 and FP8, torch and compile",
        100,
        ["fp8", "bigG", "128"],
        dry_encoders(),
        encoder_figures("ViT-bigG-14", {"bf16": 550, "fp8": 800}),
        loan=2,
        call=2,
    ),
    Check(
        "compile-time",
        "ViT-L-14 at batch 256 (bf16) compiled in a fresh process, cold, then from the cache",
        90,
        ["compile-time", "L14", "256"],
        [
            bench("bench_encoders.py", "--models", "vlmrm-tiny", "--compile-timing", "--batch-sizes", "2")
            + ["--precision", "fp32", "--device", "cpu", "--out", "{work}/compile_vlmrm-tiny.json"]
        ],
        compile_figures,
        env={"PRECISION": "bf16"},
        loan=3,
        call=2,
    ),
    e2e_check("B32", "ViT-B-32", 1024, min_fps=30_000, min_paper_ratio=10, loan=2, call=2),
    e2e_check("L14", "ViT-L-14", 256, min_encoder_share=0.95, min_paper_ratio=4, loan=3, call=2),
    Check(
        "precision",
        "the reward's agreement with bf16 on rendered frames, every FP8 scaling and fp16 (check-precision, ViT-L-14)",
        120,
        ["precision", "L14", "256"],
        [
            [sys.executable, "-P", "-m", "vlmrm_fast.cli", "check-precision", "vlmrm-tiny", "-n", "8"]
            + ["--render-size", "32", "--emulate-fp8", "--device", "cpu", "--json", "{work}/precision.json"]
        ],
        stated("the reward's agreement with bf16, per precision", "precision*.json"),
        loan=3,
        call=2,
    ),
    # ---------------------------------------------------------------- loan 3: the end-to-end figures measured before
    build_check("build-3", loan=3),
    e2e_check("bigG", "ViT-bigG-14", 64, min_encoder_share=0.95, loan=3),
    Check(
        "render",
        "bench_render (EGL on 1, 2, 4, 8 contexts; Warp) at 256 and 1,024 envs, 224 px; the interop probe; the pictures",
        150,
        ["render"],
        [
            bench("bench_render.py", "--device", "cpu", "--envs", "4", "--sizes", "64", "--min-time", "0.2")
            + ["--out", "{work}/render.json"],
            bench("compare_renderers.py", "--device", "cpu", "--sizes", "64", "--poses", "2")
            + ["--out", "{work}/renderers.json"],
        ],
        render_figures,
        env={"RENDER_ENVS": "256 1024", "THREADS": "2 4 8"},
        loan=3,
    ),
]


# --------------------------------------------------------------------------- state and the summary


def machine(dry: bool) -> dict[str, str]:
    info = {"host": platform.node(), "date": datetime.date.today().isoformat()}
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = "unknown (no git here)"
    if shutil.which("nvidia-smi") and not dry:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        info["gpu"] = smi.stdout.strip()
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        info["cpu"] = platform.processor()
    info["cores"] = str(len(os.sched_getaffinity(0)))
    return info


def summary(state: dict) -> str:
    m = state["machine"]
    done = sum(1 for c in CHECKS if c.name in state["checks"])
    where = m.get("gpu") or f"CPU only: {m['cpu']}"
    title = "Dry run on the CPU (tiny sizes: the targets are not expected to hold)" if state["dry"] else where
    lines = [
        f"### The GPU checks: {title}",
        "",
        f"{m['date']}, {m['cores']} host cores ({m['cpu']}), project at {m['commit']}; `tools/gpu_check.sh all"
        f"{' --dry-run' if state['dry'] else ''}`, {state['calls']} call(s), {done} of {len(CHECKS)} checks done.",
        "",
        "| target | measured | pass/fail | command (seconds) |",
        "|---|---|---|---|",
    ]
    for check in CHECKS:
        record = state["checks"].get(check.name)
        if record is None:
            lines.append(f"| {check.what} | not run yet | pending | `{check.command()}` |")
            continue
        command = f"`{record['command']}` ({record['seconds']:.0f} s{', TIMED OUT' if record['timed_out'] else ''})"
        rows = record["rows"] or [row(check.what, f"exit status {record['exit']}", False)]
        if record["exit"] != 0 and all(r["status"] != "FAIL" for r in rows):
            rows.append(row(check.what, f"the check exited with status {record['exit']}", False))
        for r in rows:
            lines.append(f"| {r['target']} | {r['measured']} | {r['status']} | {command} |")
    return "\n".join(lines) + "\n"


def write_results(text: str, path: pathlib.Path) -> None:
    """Puts ``text`` between the markers of ``path`` (a Markdown file), before its first section."""
    block = f"{BEGIN}\n{text}{END}\n"
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    if BEGIN in old:
        head, rest = old.split(BEGIN, 1)
        new = head + block + rest.split(END, 1)[1].lstrip("\n")
    else:
        at = old.find("\n## ")
        new = old + "\n" + block if at < 0 else old[: at + 1] + block + "\n" + old[at + 1 :]
    path.write_text(new)


def run_check(check: Check, work: pathlib.Path, dry: bool, timeout: float) -> dict:
    log = work / f"{check.name}.log"
    commands = (
        [[a.replace("{work}", str(work)) for a in c] for c in check.dry]
        if dry
        else [["tools/gpu_check.sh", *check.gpu]]
    )
    env = {**os.environ, **check.env, "GPU_CHECK_OUT": str(work), "PYTHONUNBUFFERED": "1"}
    start, status, timed_out = time.monotonic(), 0, False
    with open(log, "w") as out:
        for command in commands:
            out.write(f"$ {' '.join(command)}\n")
            out.flush()
            proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                status = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                status, timed_out = -9, True
            if status != 0:
                break
    seconds = time.monotonic() - start
    try:
        rows = check.figures(work, dry)
    except Exception as error:  # a figure that cannot be read is a failure of the check, not of the run
        rows = [row(check.what, f"figures unreadable: {type(error).__name__}: {error}"[:200], False)]
    shown = [["python3" if a == sys.executable else a for a in c] for c in commands]
    command = " && ".join(" ".join(c) for c in shown) if dry else check.command()
    return {"exit": status, "timed_out": timed_out, "seconds": round(seconds, 1), "command": command, "rows": rows}


def next_group(state: dict, this_loan: int | None) -> tuple[int, int, list[Check]]:
    """(loan, call, the checks of that call) of the first call with pending checks; its loan may be later
    than ``this_loan`` (the machine's), then those checks wait for another loan."""
    pending = [c for c in CHECKS if c.name not in state["checks"]]
    if not pending:
        return 0, 0, []
    loan = min(c.loan for c in pending)
    if this_loan is not None and loan != this_loan:
        return loan, 0, [c for c in pending if c.loan == loan]
    call = min(c.call for c in pending if c.loan == loan)
    return loan, call, [c for c in pending if (c.loan, c.call) == (loan, call)]


def run_all(dry: bool) -> int:
    default = "/tmp/gpu_check_dry" if dry else "/tmp/gpu_check"
    state_path = pathlib.Path(os.environ.get("GPU_CHECK_STATE", f"{default}/state.json"))
    work = pathlib.Path(default) / "work"
    if dry and state_path.exists():
        state_path.unlink()  # a dry run walks every check each time
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    state = load(state_path) or {"dry": dry, "calls": 0, "checks": {}}
    state["calls"] += 1
    state["machine"] = machine(dry)
    started = float(os.environ.get("GPU_CHECK_STARTED", time.time()))  # the shell's start, setup included
    # This machine's loan: set by its first call (the machine keeps /tmp while it is held).
    this_loan = None if dry else (int(LOAN_MARKER.read_text()) if LOAN_MARKER.exists() else None)
    loan, call, group = next_group(state, this_loan)
    if dry:
        group = [c for c in CHECKS if c.name not in state["checks"]]  # the dry run walks every loan
    elif group and call == 0:
        owed = ", ".join(c.name for c in group)
        print(f"loan {this_loan}'s checks are done: give the machine back. Owed to a later loan (loan {loan}): {owed}")
        group = []
    elif group:
        LOAN_MARKER.parent.mkdir(parents=True, exist_ok=True)
        LOAN_MARKER.write_text(str(loan))
        print(f"loan {loan}, call {call}: {', '.join(c.name for c in group)}", flush=True)
    budget = float("inf") if dry else CALL_BUDGET_S - (time.time() - started)
    begin = time.monotonic()
    for check in group:
        left = budget - (time.monotonic() - begin)
        print(f"[{check.name}] {check.what} ...", flush=True)
        record = run_check(check, work, dry, max(left, 1.0))
        state["checks"][check.name] = record
        verdicts = ", ".join(r["status"] for r in record["rows"]) or "no figure"
        print(f"[{check.name}] {record['seconds']:.0f} s, exit {record['exit']}: {verdicts}", flush=True)
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=1))
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(state, indent=1))
    text = summary(state)
    results = work / "RESULTS.md" if dry else RESULTS
    if dry:
        shutil.copy(RESULTS, results)
    write_results(text, results)
    out = os.environ.get("OUT")
    if out and not dry:
        shutil.copy(state_path, pathlib.Path(out) / "state.json")
        shutil.copy(results, pathlib.Path(out) / "RESULTS.md")
        with tarfile.open(pathlib.Path(out) / "logs.tar.gz", "w:gz") as tar:
            for path in sorted(work.iterdir()):
                if path.suffix in (".log", ".json", ".xml", ".md") and path.stat().st_size < 20_000_000:
                    tar.add(path, arcname=path.name)
    print("\n" + text)
    print(
        f"state: {state_path}; table written into {results}"
        + ("; $OUT: state.json, RESULTS.md, logs.tar.gz" if out and not dry else "")
    )
    after, after_call, rest = next_group(state, None if dry else loan)
    if not rest:
        print("all checks done")
    elif after_call == 0 or after != loan:
        print(f"loan {loan} done: give the machine back. Owed to a later loan: {', '.join(c.name for c in rest)}")
    else:
        print(f"next: the same call again (loan {loan}, call {after_call}: {', '.join(c.name for c in rest)})")
    return 0


def loans() -> dict[int, dict[int, list[Check]]]:
    """The checks by loan and call, in order."""
    out: dict[int, dict[int, list[Check]]] = {}
    for check in CHECKS:
        out.setdefault(check.loan, {}).setdefault(check.call, []).append(check)
    return {loan: dict(sorted(calls.items())) for loan, calls in sorted(out.items())}


def loan_seconds(calls: dict[int, list[Check]]) -> float:
    """A loan's device time by the estimates: the machine's start, the payload's first part, each call's
    checks (the first call's build check unpacks and builds) and the waits between calls."""
    work = sum(c.estimate_s for checks in calls.values() for c in checks)
    return MACHINE_START_S + PART_ONE_S + work + CALL_GAP_S * len(calls)


def plan(parts: int | None = None) -> int:
    """The loans, their calls as the device tool takes them, and their estimates."""
    parts = parts or len(list((ROOT / ".device" / "parts").glob("*"))) or 2
    last = f".device/parts/{parts}"
    print("tools/gpu_check.sh all: the checks in loans of the GPU machine (15 minutes of device time each).")
    print("Each loan starts a fresh machine; its calls come one right after the other, then give_back.\n")
    for loan, calls in loans().items():
        seconds = loan_seconds(calls)
        print(
            f"Loan {loan}: ~{seconds / 60:.1f} min of device time (budget {LOAN_BUDGET_S / 60:.0f}){'' if loan == 1 else ', a later session'}"
        )
        for i in range(1, parts):
            print(f'  carry [".device/parts/{i}"]  command: bash .device/parts/{i}/receive.sh   (~{PART_ONE_S} s)')
        state = "" if loan == 1 else "GPU_CHECK_STATE=.gpucheck/state.json "
        carry = f'"{last}"' + ("" if loan == 1 else ', ".gpucheck"')
        for checks in calls.values():
            call_s = sum(c.estimate_s for c in checks)
            print(
                f"  carry [{carry}]  command: source {last}/setup.sh && {state}tools/gpu_check.sh all   "
                f"(~{call_s / 60:.1f} min, timeout_s {min(600, CALL_BUDGET_S + 60)})"
            )
            for check in checks:
                print(f"      {check.name:<16} ~{check.estimate_s:>3} s  {check.command()}")
        print("  then give_back")
    print(
        "\nBetween loans: keep the last call's state.json (in $OUT) in .gpucheck/ (add /.gpucheck/ to\n"
        ".git/info/exclude); later loans carry it and set GPU_CHECK_STATE, so the done checks are not run again.\n"
        "`tools/gpu_check.sh report .gpucheck/state.json` writes the table into bench/RESULTS.md here."
    )
    return 0


def report(paths: list[str]) -> int:
    """The summary of state files fetched from the device (later files win), into bench/RESULTS.md."""
    state: dict = {"dry": False, "calls": 0, "checks": {}}
    for path in paths:
        part = json.loads(pathlib.Path(path).read_text())
        state["calls"] += part["calls"]
        state["checks"].update(part["checks"])
        state["machine"] = part["machine"]
        state["dry"] = part["dry"]
    if "machine" not in state:
        raise SystemExit("usage: tools/gpu_check.sh report STATE.json [STATE.json ...]")
    text = summary(state)
    write_results(text, RESULTS)
    print(text + f"written into {RESULTS}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["all", "plan", "report"])
    parser.add_argument("states", nargs="*", help="report: state.json files fetched from the device")
    parser.add_argument("--dry-run", action="store_true", help="every check on this machine's CPU at tiny sizes")
    args = parser.parse_args()
    if args.action == "plan":
        return plan()
    if args.action == "report":
        return report(args.states)
    return run_all(args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
