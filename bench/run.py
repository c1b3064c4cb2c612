"""The throughput case: the same VLM-reward work done three ways, side by side, in one run.

(a) reference: what a user would write from the paper's code in one process —
    gymnasium MuJoCo envs in a DummyVecEnv, ``render()`` to numpy every step,
    open_clip's PIL preprocess per frame, the image tower under fp16 autocast
    (GPU), the goal-baseline reward in torch;
(b) paper-style: the paper's own pattern — the same, but SB3's SubprocVecEnv with
    one process per env rendering to numpy (frames cross process pipes);
(c) fast: ``FastVLMRewardVecEnv`` end to end, per renderer (``--renderers egl warp``) and physics
    (``--physics batch warp``: the CPU simulator beside MuJoCo Warp, side by side in one run).

Same task, model (random weights: the compute is the same), number of envs,
resolution and steps. Reports frames scored per second for each and the fast
path's ratios to (a) and (b), per-stage milliseconds of (c), the encoder alone at
the same batch, the non-encoder share of a step (1 - fast / encoder-alone), FLOP
utilisation on a GPU (one FLOP count per model, ``common.model_gflops``), and the
machine. Writes JSON (``--out``), a markdown table and a PNG plot.

    python bench/run.py --quick --out bench/out/quick.json     # 2-core CPU, tiny model, minutes
    python bench/run.py --models ViT-B-32 ViT-L-14 ViT-bigG-14 --num-envs 64 256 --resolutions 224 --renderers egl warp
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402
from stable_baselines3.common.vec_env import SubprocVecEnv  # noqa: E402

import vlmrm_fast  # noqa: E402
from vlmrm_fast.envs import get_task  # noqa: E402
from vlmrm_fast.models import RandomWeightsWarning
from vlmrm_fast.models.clip import load_clip  # noqa: E402
from vlmrm_fast.physics import PHYSICS  # noqa: E402
from vlmrm_fast.rendering import RENDERERS  # noqa: E402
from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv  # noqa: E402

warnings.filterwarnings("ignore", category=RandomWeightsWarning)
ALPHA = 0.5


class ReferencePipeline:
    """The straightforward pipeline, written as the paper's code does it (``vec_env_cls``:
    DummyVecEnv in one process, or SubprocVecEnv with one process per env as the paper runs)."""

    def __init__(
        self,
        task: str,
        num_envs: int,
        model: str,
        resolution: int,
        episode_length: int,
        device: torch.device,
        vec_env_cls=None,
    ):
        import gymnasium
        from PIL import Image
        from stable_baselines3.common.vec_env import DummyVecEnv

        spec = get_task(task)
        kwargs = {"width": resolution, "height": resolution} if spec.vector_task is not None else {}

        def make():
            return gymnasium.wrappers.TimeLimit(spec.make_env(render_mode="rgb_array", **kwargs), episode_length)

        self.venv = (vec_env_cls or DummyVecEnv)([make] * num_envs)
        self.device = device
        clip = load_clip(model, device=device)
        self.model = clip.model
        self.transform = clip.preprocess.open_clip_transform()
        self.to_pil = Image.fromarray
        with torch.inference_mode():
            text = F.normalize(
                self.model.encode_text(
                    clip.tokenizer(list(spec.target_prompts + spec.baseline_prompts)).to(device)
                ).float(),
                dim=-1,
            )
        self.g = text[: len(spec.target_prompts)].mean(0)
        d = self.g - text[len(spec.target_prompts) :].mean(0)
        u = d / d.norm()
        eye = torch.eye(u.shape[0], device=device)
        self.projection = ALPHA * torch.outer(u, u) + (1 - ALPHA) * eye

    def reset(self, seed: int) -> None:
        self.venv.seed(seed)
        self.venv.reset()

    @torch.inference_mode()
    def step(self, actions: np.ndarray) -> np.ndarray:
        self.venv.step(actions)
        frames = self.venv.get_images()
        pixels = torch.stack([self.transform(self.to_pil(f)) for f in frames]).to(self.device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.device.type == "cuda"):
            x = self.model.encode_image(pixels)
        x = F.normalize(x.float(), dim=-1)
        rewards = 1 - 0.5 * ((x - self.g) @ self.projection.T).norm(dim=-1) ** 2
        return rewards.cpu().numpy()

    def close(self) -> None:
        self.venv.close()


def run_steps(step, action_space, num_envs: int, steps: int, rng: np.random.Generator, sync) -> float:
    """Seconds per step over ``steps`` steps."""
    actions = [np.stack([action_space.sample() for _ in range(num_envs)]) for _ in range(steps)]
    sync()
    start = time.perf_counter()
    for a in actions:
        step(a)
    sync()
    return (time.perf_counter() - start) / steps


def measure(
    args: argparse.Namespace,
    model: str,
    resolution: int,
    num_envs: int,
    renderer: str,
    chunks: str,
    physics: str,
    device: torch.device,
    baselines: dict,
) -> dict[str, Any]:
    """The fast path with ``renderer`` and ``physics``; the baselines (reference, paper-style) once per configuration, cached in ``baselines``."""
    rng = np.random.default_rng(0)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    result: dict[str, Any] = {
        "model": model,
        "num_envs": num_envs,
        "resolution": resolution,
        "task": args.task,
        "steps": args.steps,
    }

    fast = FastVLMRewardVecEnv(
        args.task,
        num_envs,
        model=model,
        alpha=ALPHA,
        render_size=resolution,
        episode_length=args.episode_length,
        device=str(device),
        backend=args.backend,
        physics=physics,
        renderer=renderer,
        seed=0,
        pipeline_chunks=chunks if chunks == "auto" else int(chunks),
    )
    result["physics"] = fast.physics
    result["renderer"] = fast.renderer or "gym"
    result["chunks"] = len(fast.plan.ranges)
    result["encoder"] = fast.reward_model.encoder.describe()
    space = fast.action_space
    fast.reset()
    run_steps(fast.step, space, num_envs, args.warmup, rng, sync)
    seconds = run_steps(fast.step, space, num_envs, args.steps, rng, sync)
    result["fast_fps"] = num_envs / seconds
    timer = fast.profile(True)
    run_steps(fast.step, space, num_envs, args.profile_steps, rng, sync)
    result["stages_ms"] = {k: round(v, 3) for k, v in timer.mean_ms(per=args.profile_steps).items()}
    fast.profile(False)

    rm = fast.reward_model
    pixels = rm.preprocessor(np.zeros((num_envs, resolution, resolution, 3), np.uint8))

    def encode_alone() -> None:  # the encoder in the batches a step runs it in, nothing else
        for start in range(0, num_envs, rm.chunk_size):
            rm.encoder.encode_rows(pixels[start : start + rm.chunk_size])

    encode_alone()
    reps = max(3, args.steps // 2)
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        encode_alone()
    sync()
    result["encoder_only_fps"] = num_envs * reps / (time.perf_counter() - start)
    result["non_encoder_share"] = 1.0 - result["fast_fps"] / result["encoder_only_fps"]
    flops = common.model_gflops(model)[0] * 1e9
    result["encoder_gflops_per_image"] = round(flops / 1e9, 3)
    if args.ceiling_tflops:
        result["encoder_flop_utilisation"] = flops * result["fast_fps"] / (args.ceiling_tflops * 1e12)
        result["encoder_only_flop_utilisation"] = flops * result["encoder_only_fps"] / (args.ceiling_tflops * 1e12)
    fast.close()

    # The baselines run one env per process (paper-style) or per renderer: at most
    # --baseline-max-envs of them, whose frames/s stand for the baseline's at num_envs.
    baseline_envs = min(num_envs, args.baseline_max_envs) if args.baseline_max_envs else num_envs
    key = (model, resolution, baseline_envs)
    if key not in baselines:
        baselines[key] = {}
        pipelines = {"reference": None, "paper": SubprocVecEnv}
        for name, vec_env_cls in pipelines.items():
            if getattr(args, f"skip_{name}"):
                continue
            ref = ReferencePipeline(
                args.task, baseline_envs, model, resolution, args.episode_length, device, vec_env_cls
            )
            ref.reset(0)
            run_steps(ref.step, space, baseline_envs, args.warmup, rng, sync)
            seconds = run_steps(ref.step, space, baseline_envs, args.steps, rng, sync)
            baselines[key][f"{name}_fps"] = baseline_envs / seconds
            ref.close()
    for name in ("reference", "paper"):
        if f"{name}_fps" in baselines[key]:
            result[f"{name}_fps"] = baselines[key][f"{name}_fps"]
            result[f"{name}_envs"] = baseline_envs
            result[f"ratio_{name}"] = result["fast_fps"] / result[f"{name}_fps"]
    return result


def markdown(results: list[dict[str, Any]], mach: dict[str, Any]) -> str:
    where = f"{mach['date']}, {mach['gpu'] or mach['cpu']} ({mach['cores']} cores), torch {mach['versions']['torch']}"
    lines = [
        f"Machine: {where}. Command: `{mach['command']}`",
        "",
        "| model | envs | px | physics | renderer | chunks | fast frames/s | reference | paper-style | fast / reference | fast / paper-style "
        "| encoder-only img/s | non-encoder share | stages ms/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict, key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "-"

    for r in results:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages_ms"].items())
        lines.append(
            f"| {r['model']} | {r['num_envs']} | {r['resolution']} | {r['physics']} | {r['renderer']} | {r['chunks']} "
            f"| {r['fast_fps']:.1f} "
            f"| {cell(r, 'reference_fps', '.1f')} | {cell(r, 'paper_fps', '.1f')} | {cell(r, 'ratio_reference', '.2f')}x "
            f"| {cell(r, 'ratio_paper', '.2f')}x | {r['encoder_only_fps']:.1f} | {r['non_encoder_share']:.0%} | {stages} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: pathlib.Path) -> None:
    """Throughput against num_envs (fast solid, reference dashed) beside the fast path's stage times."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter, ScalarFormatter

    fig, (ax, bars) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    keys = sorted({(r["model"], r["resolution"]) for r in results})

    def variant(r: dict) -> str:
        return f"{r['physics']} physics, {r['renderer']}, {r['chunks']} chunk{'s' if r['chunks'] > 1 else ''}"

    variants = sorted({variant(r) for r in results})
    for i, (model, res) in enumerate(keys):
        group = [r for r in results if (r["model"], r["resolution"]) == (model, res)]
        for j, name in enumerate(variants):
            rows = sorted((r for r in group if variant(r) == name), key=lambda r: r["num_envs"])
            if rows:
                ax.plot(
                    [r["num_envs"] for r in rows],
                    [r["fast_fps"] for r in rows],
                    "o^vD"[j % 4] + "-",
                    color=f"C{i}",
                    label=f"{model} {res}px: fast ({name})",
                )
        rows = sorted({r["num_envs"]: r for r in group}.values(), key=lambda r: r["num_envs"])
        n = [r["num_envs"] for r in rows]
        for key, style, name in (("reference_fps", "s--", "reference"), ("paper_fps", "d:", "paper-style")):
            if all(key in r for r in rows):
                ax.plot(n, [r[key] for r in rows], style, color=f"C{i}", alpha=0.6, label=f"{model} {res}px: {name}")
    values = [r[k] for r in results for k in ("fast_fps", "reference_fps", "paper_fps") if k in r]
    ax.set_xscale("log", base=2)
    if max(values) / min(values) > 20:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(values) * 1.08)  # from zero: a small gap should look small
    ax.set_xticks(sorted({r["num_envs"] for r in results}))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("number of envs")
    ax.set_ylabel("frames scored per second")
    ax.set_title("throughput, side by side", fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)

    stages = list(dict.fromkeys(k for r in results for k in r["stages_ms"]))
    labels = [f"{r['model']}\n{r['resolution']}px x{r['num_envs']}\n{variant(r)}" for r in results]
    bottom = np.zeros(len(results))
    for j, stage in enumerate(stages):
        ms = np.array([r["stages_ms"].get(stage, 0.0) for r in results])
        bars.bar(labels, ms, bottom=bottom, label=stage, color=f"C{j}")
        bottom += ms
    bars.set_ylabel("ms per step (profiled run)")
    bars.set_title("fast path, stage by stage", fontsize=11)
    bars.tick_params(axis="x", labelsize=7)
    bars.legend(fontsize=7)
    fig.suptitle(
        "VLM-reward step: FastVLMRewardVecEnv vs the straightforward and the paper-style pipelines", fontsize=12
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny model, 4 envs, 64 px, few steps: minutes on a 2-core CPU")
    p.add_argument("--task", default="humanoid-kneeling")
    p.add_argument("--models", nargs="+", default=["ViT-B-32", "ViT-L-14", "ViT-bigG-14"])
    p.add_argument("--num-envs", nargs="+", type=int, default=[1, 8, 64, 256])
    p.add_argument("--resolutions", nargs="+", type=int, default=[224, 480])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--episode-length", type=int, default=100)
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", default="auto")
    p.add_argument(
        "--physics",
        nargs="+",
        default=["auto"],
        choices=["auto", *PHYSICS],
        help="the physics to run, side by side (warp: MuJoCo Warp on the GPU, drawn by renderer warp)",
    )
    p.add_argument(
        "--renderers", nargs="+", default=["egl"], choices=list(RENDERERS), help="the simulator env's renderers to run"
    )
    p.add_argument(
        "--pipeline-chunks",
        nargs="+",
        default=["auto"],
        help="ranges a step is split into (integers or auto); several values measure the pipelining's gain",
    )
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--skip-paper", action="store_true", help="skip the paper-style SubprocVecEnv pipeline")
    p.add_argument(
        "--baseline-max-envs",
        type=int,
        help="run the reference and paper-style pipelines with at most this many envs (their frames/s "
        "hardly move past the host's cores; 1,024 processes would not start)",
    )
    p.add_argument("--out", default="bench/out/run.json")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.num_envs, args.resolutions = ["vlmrm-tiny"], [4], [64]
        args.renderers = ["egl", "warp"]
        args.steps, args.warmup, args.profile_steps = 8, 5, 3
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = vlmrm_fast.runtime.device.resolve_device(args.device)
    mach = common.machine()
    args.ceiling_tflops = common.matmul_ceiling_tflops(device)
    mach["bf16_matmul_tflops"] = args.ceiling_tflops
    configs = [
        (m, r, n, k, c, physics)
        for m in args.models
        for r in args.resolutions
        for n in args.num_envs
        for k in args.renderers
        for c in args.pipeline_chunks
        for physics in args.physics
        if physics == "auto" or not PHYSICS[physics].in_simulator_env or RENDERERS[k].state_for(PHYSICS[physics].offers)
    ]
    results, baselines = [], {}
    # The table as it grows: its header with the first result, then one row per result (printed once).
    print(f"bench: {len(configs)} configurations", flush=True)
    for model, res, n, renderer, chunks, physics in configs:
        results.append(measure(args, model, res, n, renderer, chunks, physics, device, baselines))
        rows = markdown(results[-1:], mach).splitlines()
        print("\n".join(rows if len(results) == 1 else rows[-1:]), flush=True)
    out = pathlib.Path(args.out)
    summary = dict(results[0])
    summary.update(machine=mach, results=results)
    common.write_json(out, summary)
    table = markdown(results, mach)
    out.with_suffix(".md").write_text(table)
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
