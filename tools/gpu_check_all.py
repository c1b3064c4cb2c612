#!/usr/bin/env python3
"""Issue 21's GPU checks in as few device calls as they fit: ``tools/gpu_check.sh all|plan|report``.

    tools/gpu_check.sh all              # on the GPU machine: the next checks that fit in this call
    tools/gpu_check.sh all --dry-run    # here, on the CPU: every check at tiny sizes
    tools/gpu_check.sh plan             # the checks, their commands and estimates, the calls they need
    tools/gpu_check.sh report S.json..  # the summary of fetched state files, into bench/RESULTS.md

A call of ``all`` runs the pending checks in order, each that fits in what is left of the call's
9 minutes (by its estimate; a check is stopped at the call's end), reads each check's figures
from its output as soon as it ends, and keeps them in a state file that the next call goes on
from (/tmp/gpu_check/state.json, kept while the machine stays warm; ``GPU_CHECK_STATE``
names another, e.g. a state.json carried back after the machine went back). Every call ends
with the summary table (target, measured, pass/fail, and the command of each figure), writes
it into bench/RESULTS.md, and leaves state.json, RESULTS.md and logs.tar.gz in $OUT. A skipped
test counts as a failure; so does a check that timed out or a figure that is missing.
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
CALL_BUDGET_S = 540  # a device call may run 10 minutes; 9 leave room for the transfers
SETUP_ESTIMATE_S = 60  # unpacking the payload and installing its wheels on a fresh machine
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
    found = [(r["images_per_s"], r["backend"]) for r in rows if r.get("precision") == precision and "error" not in r]
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
        return out

    return figures


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
        name = "vlmrm-tiny" if dry else model
        path = work / f"e2e_{name}.json"
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
) -> Check:
    """bench/run.py end to end with Warp: one range against the pipelined step, and the paper-style
    pipeline at 64 envs exactly when a target is set against it (dry run and real run alike)."""
    paper = min_paper_ratio is not None
    return Check(
        f"e2e-{short}",
        f"{model} end to end, {envs:,} envs, Warp, one range and the pipelined step"
        + ("; paper-style at 64 envs" if paper else ""),
        240,
        ["e2e", short, str(envs)],
        dry_e2e(4, paper=paper),
        e2e_figures(model, envs, min_fps, min_encoder_share, min_paper_ratio),
        env={"RENDERERS": "warp", **({} if paper else {"SKIP_PAPER": "1"})},
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
TESTS = "(gpu or egl or warp) and not tensorrt"

CHECKS = [
    Check(
        "build",
        "pip install of the package with CUDA for sm_90; what it sees",
        150,
        ["build"],
        [[sys.executable, "-P", "-c", BUILD_INFO, "{work}/build_info.json"]],
        build_figures,
    ),
    Check(
        "warp-first-call",
        "the first Warp renderer of a process, cache as found then warm (before anything else uses Warp)",
        150,
        ["warp-first-call", "256"],
        [
            bench(
                "warp_first_call.py",
                "--device",
                "cpu",
                "--envs",
                "4",
                "--size",
                "64",
                "--out",
                "{work}/warp_first_call.json",
            )
        ],
        warp_first_call_figures,
    ),
    Check(
        "tests",
        f"pytest -m '{TESTS}', skips counted as failures",
        300,
        ["tests"],
        [
            [sys.executable, "-P", "-m", "pytest", "python_tests/test_warp_render.py", "-q", "-p", "no:cacheprovider"]
            + ["-m", TESTS, "--junitxml", "{work}/tests.xml"]
        ],
        test_figures,
    ),
    Check(
        "render",
        "bench_render (EGL, Warp) at 256 and 1,024 envs, 224 px; the interop probe; the pictures compared",
        180,
        ["render"],
        [
            bench("bench_render.py", "--device", "cpu", "--envs", "4", "--sizes", "64", "--min-time", "0.2")
            + ["--out", "{work}/render.json"],
            bench("compare_renderers.py", "--device", "cpu", "--sizes", "64", "--poses", "2")
            + ["--out", "{work}/renderers.json"],
        ],
        render_figures,
        env={"RENDER_ENVS": "256 1024", "THREADS": ""},
    ),
    e2e_check("B32", "ViT-B-32", 1024, min_fps=30_000, min_paper_ratio=10),
    Check(
        "fp8-L14",
        "ViT-L-14 img/s at batch 256, bf16 and FP8, torch and compile",
        180,
        ["fp8", "L14", "256"],
        dry_encoders(),
        encoder_figures("ViT-L-14", {"bf16": 3_150, "fp8": 3_800}),
    ),
    Check(
        "compile-time",
        "ViT-L-14 at batch 256 (bf16) compiled in a fresh process, cold, then from the cache",
        150,
        ["compile-time", "L14", "256"],
        [
            bench("bench_encoders.py", "--models", "vlmrm-tiny", "--compile-timing", "--batch-sizes", "2")
            + ["--precision", "fp32", "--device", "cpu", "--out", "{work}/compile_vlmrm-tiny.json"]
        ],
        compile_figures,
        env={"PRECISION": "bf16"},
    ),
    e2e_check("L14", "ViT-L-14", 256, min_encoder_share=0.95, min_paper_ratio=4),
    Check(
        "fp8-bigG",
        "ViT-bigG-14 img/s at batch 128, bf16 and FP8, torch and compile",
        300,
        ["fp8", "bigG", "128"],
        dry_encoders(),
        encoder_figures("ViT-bigG-14", {"bf16": 550, "fp8": 800}),
    ),
    e2e_check("bigG", "ViT-bigG-14", 64, min_encoder_share=0.95),
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
        f"### Issue 21's checks: {title}",
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
    budget = float("inf") if dry else CALL_BUDGET_S - (time.time() - started)
    begin, ran = time.monotonic(), 0
    for check in CHECKS:
        if check.name in state["checks"]:
            continue
        left = budget - (time.monotonic() - begin)
        if ran and check.estimate_s > left:
            print(f"[{check.name}] left for the next call (~{check.estimate_s} s, {left:.0f} s left in this one)")
            continue
        print(f"[{check.name}] {check.what} ...", flush=True)
        record = run_check(check, work, dry, left)
        state["checks"][check.name] = record
        ran += 1
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
    pending = [c.name for c in CHECKS if c.name not in state["checks"]]
    print("\n" + text)
    print(
        f"state: {state_path}; table written into {results}"
        + ("; $OUT: state.json, RESULTS.md, logs.tar.gz" if out and not dry else "")
    )
    if pending:
        print(f"{len(pending)} check(s) pending ({', '.join(pending)}): run the same call again")
    else:
        print("all checks done")
    return 0


def plan() -> int:
    """The checks of `all` with their commands, and the calls they need by the estimates."""
    print("tools/gpu_check.sh all: each call runs the pending checks that fit in 9 minutes, in this order.\n")
    calls: list[list[Check]] = [[]]
    used = SETUP_ESTIMATE_S
    for check in CHECKS:
        print(f"  {check.name:<16} ~{check.estimate_s / 60:.1f} min  {check.command()}")
        print(f"  {'':<16}            {check.what}")
    pending = list(CHECKS)
    while pending:
        fitted = [c for c in pending if used + c.estimate_s <= CALL_BUDGET_S] or ([pending[0]] if not calls[-1] else [])
        if not fitted:
            calls.append([])
            used = 10  # a warm machine: setup and build are found done
            continue
        check = fitted[0]
        calls[-1].append(check)
        used += check.estimate_s
        pending.remove(check)
    total = SETUP_ESTIMATE_S + sum(c.estimate_s for c in CHECKS) + 10 * (len(calls) - 1)
    print(
        f"\nBy the estimates (an H100 machine, caches cold): {len(calls)} calls of at most 9 minutes, ~{total / 60:.0f} min of device time:"
    )
    for i, call in enumerate(calls, 1):
        print(f"  call {i}: {', '.join(c.name for c in call)} (~{sum(c.estimate_s for c in call) / 60:.1f} min)")
    print(
        "\nEach call, after the payload's parts (see the header of tools/gpu_check.sh):\n"
        '  carry [".device/parts/K"]  command: source .device/parts/K/setup.sh && tools/gpu_check.sh all\n'
        "The machine keeps /tmp (the state, the build, Warp's and torch's caches) only ~30 s between calls; after it\n"
        "went back, send the parts again, put the last call's state.json in a folder .git/info/exclude ignores,\n"
        "carry that folder too, and set GPU_CHECK_STATE=<folder>/state.json: the done checks are not run again."
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
