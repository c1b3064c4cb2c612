#!/usr/bin/env bash
# The GPU checks. `all` runs every check (build, the gpu/egl/warp tests with skips counted as
# failures, the EGL, physics, FP8, render, compile-time and end-to-end figures) laid out in loans of
# the GPU machine (15 minutes of device time each, start included): loan 1 holds the build, the
# tests and the headline figures in two calls; `plan` prints every loan's exact device calls. Each
# call prints the summary table (target, measured, pass/fail) and writes it to bench/RESULTS.md.
# The single steps below remain, one per device call (the machine stays warm only ~30 s between
# calls, so every step sets up and builds itself, reusing the build when the machine is still
# warm and the sources are unchanged).
#
# Once, on the development machine, from the checkout that the device tool sends:
#   bash ../shared/hooks/device/prepare.sh     # fills .device/ (ignored): Warp, torchao, pygame; two parts
# The payload comes in parts: first, in consecutive calls, carry [".device/parts/i"] with command
# `bash .device/parts/i/receive.sh` for each part but the last; then each device call: carry
# [".device/parts/K"] (K the last part), command  source .device/parts/K/setup.sh && tools/gpu_check.sh STEP
# (setup sources .device/setup.sh, which finds the unpacked payload while the machine is warm).
# `tools/gpu_check.sh plan` prints every call of every loan exactly.
#
#   all [--dry-run]       the next call of the loans: run the same call again until it says the loan is
#                         done (state in /tmp/gpu_check/state.json, or $GPU_CHECK_STATE; each call
#                         returns state.json, RESULTS.md and logs.tar.gz in $OUT). --dry-run (or
#                         DRY_RUN=1): every check of every loan on this machine's CPU at tiny sizes
#   plan                  the loans, their calls (as the device tool takes them), checks and estimates
#   report STATE.json..   the summary of fetched state files, written into bench/RESULTS.md
#
# Steps (results under $GPU_CHECK_OUT, else $OUT when set, else /tmp/gpu_check):
#   build                 install the package (pip, CUDA on, sm_90 unless CUDA_ARCHS=...), print what it sees
#   tests                 the gpu/egl-marked tests (FP8's and MuJoCo Warp's GPU tests among the gpu ones;
#                         not tensorrt, which is not carried; the warp-only ones run on Warp's CPU
#                         backend in CI), skips turned into failures                            (~3-4 min)
#   warp-first-call       the first WarpRenderer's cost in a fresh process (Warp's kernel
#                         cache as found), then in a second one (the cache warm)              (~1-4 min)
#   fp8-tests             the gpu-marked FP8 tests only (every scaling through torch and compile,
#                         the compiled-block probe and auto's pick), skips turned into failures (~1-2 min)
#   suite                 the whole test suite on the GPU machine                          (~5-8 min)
#   kernels               bench/bench_kernels.py, full grid                                (~1 min)
#   render                bench/bench_render.py --device cuda (EGL, EGL on THREADS threads (default
#                         2 4 8), Warp) at RENDER_ENVS envs (default 64 256 1024), the interop probe
#                         (pixel-buffer reads, before and after host reads) and the pictures  (~3-5 min)
#   encoders MODEL [B..]  bench/bench_encoders.py, torch and compile, batch B (default 64)  (~2-8 min)
#   fp8 MODEL [B..]       bench_encoders: torch and compile, bf16 against fp8, batch B (default 256)  (~3-8 min)
#                         (PRECISION default "bf16 fp8"; FP8_SCALINGS default dynamic-rowwise)
#   fp8-scalings MODEL [B..]  bench_encoders: torch and compile, bf16, fp8 and auto, each FP8 input
#                         scaling (dynamic-rowwise dynamic-tensorwise static-tensorwise), batch B
#                         (default 256): which scaling pays, and that auto is never slower than bf16 (~4-8 min)
#   compile-time MODEL B [MODE]  compile cold then warm, each in a fresh process (MODE default:
#                         default; max-autotune-no-cudagraphs to state its cost)          (~1-10 min)
#   profile [MODEL..]     bench/profile_encoders.py at batch BATCH (default 256), bf16 and fp8 in every
#                         scaling (FP8_SCALINGS), VARIANTS (default eager-fused compiled), with the
#                         linear layers alone (--kernels) and what auto measures (--block-probe)
#                         (default L14 bigG)                                                (~4-8 min)
#   precision MODEL [N]   vlmrm-fast check-precision on N rendered humanoid frames (default 256),
#                         random weights unless MODEL names a tag: every FP8 scaling, fp16, fp32 against
#                         bf16, through BACKEND (default compile, what auto runs)          (~2-5 min)
#   e2e MODEL [N..]       bench/run.py on TASK (default humanoid-kneeling; Ant-v5 for the MuJoCo suite's figure)
#                         at 224 px, N envs (default 64), RENDERERS (default egl warp),
#                         PHYSICS (default auto), CHUNKS (default "1 auto": one range and the pipelined
#                         step side by side), the paper-style pipeline at min(N, BASELINE_ENVS=64) envs
#                         (SKIP_PAPER=1: none; no DummyVecEnv reference); results e2e_TAG.json (TAG
#                         default: the model)                                                  (~1-4 min)
#   physics               bench/bench_physics.py: MuJoCo Warp physics alone at WORLDS (default 1024 4096
#                         16384) worlds beside CPU MuJoCo (batch)                           (~1-2 min)
#   distributed [MODEL] [N]  bench/bench_distributed.py: 2 torchrun ranks sharing GPU 0 against one
#                         process, N envs (default B32, 64) at 224 px: bytes per step, the gather's
#                         overhead, message round trips; then device=auto on 2 ranks and 1 GPU must
#                         be refused on both ranks before any env is built                    (~2-4 min)
# MODEL: B32, B16, L14, H14, bigG (or an open_clip name). Give one batch size / one N per call for
# ViT-L-14 and up. compile-time, fp8 and profile take PRECISION="bf16 fp8" (the default) from the environment.
# FP8 needs torchao on the machine: it is in the prepare.sh line above (an sm_89+ GPU: H100, H200).
#
# TensorRT is not checked on the device machine: its wheels exceed the 64 MiB that a call can
# carry, so the tests marked tensorrt skip there and backend="auto" picks "compile".
set -euo pipefail
cd "$(dirname "$0")/.."
step=${1:-}
[ $# -gt 0 ] && shift
out=${GPU_CHECK_OUT:-${OUT:-/tmp/gpu_check}}
mkdir -p "$out"
site=/tmp/vlmrm  # the built package; `python3 -P` keeps the source tree off sys.path

setup() {
  local script
  script=$(ls .device/setup.sh .device/parts/*/setup.sh 2>/dev/null | head -1)
  [ -n "$script" ] || { echo "no .device/: run prepare.sh here first and carry .device (see the header)"; exit 2; }
  set +u
  source "$script"
  set -u
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
}

build() {
  local stamp
  stamp=$(find CMakeLists.txt pyproject.toml csrc vlmrm_fast -type f ! -name '*.so' ! -path '*__pycache__*' -print0 \
          | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-16)
  if [ "$(cat $site/.stamp 2>/dev/null)" != "$stamp" ]; then
    echo "building (log: $out/build.log) ..."
    rm -rf "$site"
    local start=$SECONDS
    if ! python3 -m pip install -v --no-build-isolation --no-deps --target "$site" \
         --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" . >"$out/build.log" 2>&1; then
      tail -40 "$out/build.log"
      exit 1
    fi
    echo "$stamp" >"$site/.stamp"
    echo "built in $((SECONDS - start)) s"
  fi
  python3 -P - "$out/build_info.json" <<'EOF'
import json, sys, torch, vlmrm_fast
info = vlmrm_fast.build_info()
print("vlmrm_fast", vlmrm_fast.__file__, "| torch", torch.__version__, "| GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
print(json.dumps(info, indent=1))
json.dump({**info, "torch": torch.__version__}, open(sys.argv[1], "w"), indent=1)
if not (info["cuda_compiled"] and info["cuda_available"]):
    raise SystemExit("the native core has no usable CUDA device: every CUDA path would be skipped")
if not any(d["cuda_device"] >= 0 for d in info["egl_devices"]):
    print("WARNING: no EGL device reports a CUDA index: rendering runs on software EGL and the interop paths fail")
EOF
}

model_name() {
  case "$1" in
    B32) echo ViT-B-32 ;; B16) echo ViT-B-16 ;; L14) echo ViT-L-14 ;; H14) echo ViT-H-14 ;; bigG) echo ViT-bigG-14 ;;
    *) echo "$1" ;;
  esac
}

run_tests() {
  echo "note: TensorRT is not installed here (too large to carry): tests marked tensorrt skip"
  VLMRM_REQUIRE_GPU=1 VLMRM_REQUIRE_EGL=1 VLMRM_REQUIRE_WARP=1 python3 -P -m pytest python_tests -q -p no:cacheprovider \
    --junitxml="$out/$1.xml" "${@:2}" 2>&1 | tee "$out/$1.log"
}

# Whether the interop hand-off blocks the host, and whether kernels read the pixel buffer
# at device-memory speed (GL_STREAM_READ may place it in host memory).
probe() {
  python3 -P - "$out/interop_probe.json" <<'EOF'
import json, os, sys, time
import gymnasium, mujoco, numpy as np, torch
from vlmrm_fast import EGLRenderer, BatchSimulator
from vlmrm_fast.frames.preprocess import FramePreprocessor, PreprocessSpec

model = mujoco.MjModel.from_xml_path(os.path.join(os.path.dirname(gymnasium.__file__), "envs/mujoco/assets/humanoid.xml"))
n, px = 64, 224
qpos = np.tile(model.qpos0, (n, 1))
spec = PreprocessSpec(size=224, mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711))
renderer = EGLRenderer(model, n, px, px)
device = torch.device("cuda", renderer.cuda_device)
sim = BatchSimulator(model, n)
sim.reset(qpos=qpos)
pre = FramePreprocessor(spec, device, torch.bfloat16)

def gpu_ms(fn, reps=20):
    fn(); torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record(); end.synchronize()
    return start.elapsed_time(end) / reps

def host_ms(fn, reps=20):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) * 1e3 / reps

stream = torch.cuda.current_stream(device)

def preprocess_lent():
    with renderer.lend(stream=stream) as view:
        pre.run(view)

renderer.draw(sim)  # no host read yet: the pixel buffer as GL placed it
preprocess_lent()  # first call: device plan upload and interop registration
result = {"num_envs": n, "px": px, "host_reads_through_cuda": renderer.host_reads_through_cuda}
result["preprocess_from_pixel_buffer_gpu_ms"] = gpu_ms(preprocess_lent)
result["sleep_gpu_ms"] = gpu_ms(lambda: torch.cuda._sleep(100_000_000), reps=3)
torch.cuda.synchronize()
torch.cuda._sleep(100_000_000)
t = time.perf_counter()
preprocess_lent()
result["lend_preprocess_host_ms_behind_busy_stream"] = (time.perf_counter() - t) * 1e3
torch.cuda.synchronize()
result["lend_preprocess_host_ms_idle"] = host_ms(preprocess_lent)
result["render_host_ms"] = host_ms(lambda: renderer.render(qpos), reps=5)  # host reads
result["preprocess_from_pixel_buffer_after_host_read_gpu_ms"] = gpu_ms(preprocess_lent)
frames = renderer.frames(device)
result["preprocess_from_device_copy_gpu_ms"] = gpu_ms(lambda: pre(frames))
result["frames_to_device_gpu_ms"] = gpu_ms(lambda: renderer.frames(device))
blocking = result["lend_preprocess_host_ms_behind_busy_stream"] > 0.5 * result["sleep_gpu_ms"]
result["hand_off_blocks_host"] = blocking
ratio = result["preprocess_from_pixel_buffer_gpu_ms"] / result["preprocess_from_device_copy_gpu_ms"]
result["pixel_buffer_read_vs_device_memory"] = ratio
after = result["preprocess_from_pixel_buffer_after_host_read_gpu_ms"] / result["preprocess_from_pixel_buffer_gpu_ms"]
result["pixel_buffer_read_after_host_read_vs_before"] = after
print(json.dumps(result, indent=1))
print("hand-off:", "BLOCKS the host until the stream drains (map/unmap sync)" if blocking else "asynchronous")
print(f"pixel buffer (GL_DYNAMIC_COPY): kernels read it {ratio:.1f}x slower than device memory (was 7.8x with GL_STREAM_READ)")
print(f"after host reads ({'through CUDA' if renderer.host_reads_through_cuda else 'mapped'}): {after:.2f}x the read before them")
json.dump(result, open(sys.argv[1], "w"), indent=1)
renderer.close()
sim.close()
EOF
}

case "$step" in
  all|plan|report)
    args=("$step" "$@")
    dry=0
    for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
    [ "${DRY_RUN:-0}" = 1 ] && [ $dry = 0 ] && { args+=(--dry-run); dry=1; }
    export GPU_CHECK_STARTED=${GPU_CHECK_STARTED:-$(date +%s)}  # the call's 9 minutes count from here
    if [ "$step" = all ] && [ $dry = 0 ]; then setup; fi
    exec python3 -P tools/gpu_check_all.py "${args[@]}" ;;
  build) setup; build ;;
  tests) setup; build; run_tests tests -m "(gpu or egl) and not tensorrt" ;;
  warp-first-call)
    setup; build
    python3 -P bench/warp_first_call.py --device cuda --envs "${1:-256}" --size "${RES:-224}" \
      --out "$out/warp_first_call.json" 2>&1 | tee "$out/warp_first_call.log" ;;
  fp8-tests) setup; build; run_tests fp8_tests -m gpu -k fp8 ;;
  suite) setup; build; run_tests suite ;;
  kernels) setup; build; python3 -P bench/bench_kernels.py --device cuda --out "$out/kernels.json" 2>&1 | tee "$out/kernels.log" ;;
  render)
    setup; build; probe || echo "interop probe failed (see above); running the render bench anyway"
    # shellcheck disable=SC2086  # RENDER_ENVS and THREADS are lists
    python3 -P bench/bench_render.py --device cuda --min-time 2 --envs ${RENDER_ENVS:-64 256 1024} --sizes 224 \
      --threads ${THREADS-2 4 8} --out "$out/render.json" 2>&1 | tee "$out/render.log"
    python3 -P bench/compare_renderers.py --device cuda --out "$out/renderers.json" 2>&1 | tee "$out/renderers.log" ;;
  encoders)
    [ $# -ge 1 ] || { echo "usage: $0 encoders MODEL [BATCH ...]"; exit 2; }
    model=$(model_name "$1"); shift
    setup; build
    echo "note: TensorRT is not installed here (too large to carry): torch and compile only"
    python3 -P bench/bench_encoders.py --models "$model" --backends torch compile --batch-sizes "${@:-64}" \
      --out "$out/encoders_$model.json" 2>&1 | tee "$out/encoders_$model.log" ;;
  fp8)
    [ $# -ge 1 ] || { echo "usage: $0 fp8 MODEL [BATCH ...]"; exit 2; }
    model=$(model_name "$1"); shift
    setup; build
    # shellcheck disable=SC2086  # BACKENDS, PRECISION and FP8_SCALINGS are lists
    python3 -P bench/bench_encoders.py --models "$model" --backends ${BACKENDS:-torch compile} --precision ${PRECISION:-bf16 fp8} \
      --fp8-scaling ${FP8_SCALINGS:-dynamic-rowwise} --batch-sizes "${@:-256}" --out "$out/fp8_$model.json" 2>&1 \
      | tee "$out/fp8_$model.log" ;;
  fp8-scalings)
    [ $# -ge 1 ] || { echo "usage: $0 fp8-scalings MODEL [BATCH ...]"; exit 2; }
    model=$(model_name "$1"); shift
    setup; build
    # shellcheck disable=SC2086  # FP8_SCALINGS is a list
    python3 -P bench/bench_encoders.py --models "$model" --backends torch compile --precision bf16 fp8 auto \
      --fp8-scaling ${FP8_SCALINGS:-dynamic-rowwise dynamic-tensorwise static-tensorwise} --batch-sizes "${@:-256}" \
      --out "$out/fp8_scalings_$model.json" 2>&1 | tee "$out/fp8_scalings_$model.log" ;;
  compile-time)
    [ $# -ge 2 ] || { echo "usage: $0 compile-time MODEL BATCH [MODE]"; exit 2; }
    model=$(model_name "$1"); batch=$2; mode=${3:-default}
    setup; build
    python3 -P bench/bench_encoders.py --models "$model" --compile-timing --batch-sizes "$batch" --precision ${PRECISION:-bf16 fp8} \
      --compile-mode "$mode" --out "$out/compile_${model}_b${batch}_$mode.json" 2>&1 | tee "$out/compile_${model}_b${batch}_$mode.log" ;;
  profile)
    models=(); for m in "${@:-L14 bigG}"; do for w in $m; do models+=("$(model_name "$w")"); done; done
    setup; build
    # shellcheck disable=SC2086  # PRECISION, FP8_SCALINGS and VARIANTS are lists
    python3 -P bench/profile_encoders.py --models "${models[@]}" --batch-size "${BATCH:-256}" --precision ${PRECISION:-bf16 fp8} \
      --fp8-scaling ${FP8_SCALINGS:-dynamic-rowwise dynamic-tensorwise static-tensorwise} \
      --variants ${VARIANTS:-eager-fused compiled} --kernels --block-probe \
      --trace-dir "$out/traces" --out "$out/profile.json" 2>&1 | tee "$out/profile.log" ;;
  precision)
    [ $# -ge 1 ] || { echo "usage: $0 precision MODEL [NUM_FRAMES]"; exit 2; }
    model=$(model_name "$1")
    setup; build
    python3 -P -m vlmrm_fast.cli check-precision "$model" -n "${2:-256}" --render-size 224 \
      --backend "${BACKEND:-compile}" --batch-size 64 \
      --json "$out/precision_$model.json" 2>&1 | tee "$out/precision_$model.log" ;;
  e2e)
    [ $# -ge 1 ] || { echo "usage: $0 e2e MODEL [NUM_ENVS ...]"; exit 2; }
    model=$(model_name "$1"); shift
    tag=${TAG:-$model}
    setup; build
    # shellcheck disable=SC2086  # RENDERERS, PHYSICS and CHUNKS are lists
    python3 -P bench/run.py --task "${TASK:-humanoid-kneeling}" --models "$model" --num-envs "${@:-64}" --resolutions "${RES:-224}" \
      --renderers ${RENDERERS:-egl warp} --physics ${PHYSICS:-auto} --pipeline-chunks ${CHUNKS:-1 auto} \
      --skip-reference ${SKIP_PAPER:+--skip-paper} --baseline-max-envs "${BASELINE_ENVS:-64}" \
      --steps "${STEPS:-20}" --out "$out/e2e_$tag.json" 2>&1 | tee "$out/e2e_$tag.log" ;;
  physics)
    setup; build
    # shellcheck disable=SC2086  # WORLDS is a list
    python3 -P bench/bench_physics.py --device cuda --worlds ${WORLDS:-1024 4096 16384} \
      --out "$out/physics.json" 2>&1 | tee "$out/physics.log" ;;
  distributed)
    model=$(model_name "${1:-B32}")
    setup; build
    python3 -P -m torch.distributed.run --standalone --nproc-per-node 2 bench/bench_distributed.py --device cuda:0 \
      --model "$model" --num-envs "${2:-64}" --render-size "${RES:-224}" --out "$out/distributed_$model.json" 2>&1 \
      | tee "$out/distributed_$model.log"
    echo "--- device=auto, 2 ranks, $(nvidia-smi -L | wc -l) GPU(s): expect 'runs 2 ranks but shows 1 GPU(s)' on both ranks"
    { python3 -P -m torch.distributed.run --standalone --nproc-per-node 2 bench/bench_distributed.py --device auto \
      --model "$model" --num-envs 4 --steps 1 || true; } 2>&1 | grep -E "LayoutError|GPU\(s\)" | tee "$out/distributed_refusal.log" ;;
  *) sed -n '2,67p' "$0"; exit 2 ;;
esac
