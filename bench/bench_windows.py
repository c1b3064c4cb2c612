"""Rewards from windows of frames, side by side in one run (docs/video-rewards.md).

    python bench/bench_windows.py --device cpu --out bench/out/windows_cpu.json          # this CPU, tiny models
    python bench/bench_windows.py --device cuda --frame-model ViT-B-32 --video-model viclip-b16 \\
        --envs 1024 --size 224 --stack --out bench/out/windows_h100.json                 # a GPU (see RESULTS.md)

The scorer rows time the step's scorer (``stack.scorer.ChunkedScorer``, the reward's whole share of a step:
preprocess, encode, ring, reward head, the rewards to the host) on the same uint8 frames per step,
the rows stepped in turn (each sees the same load), each step timed; a row's rate is its median step's:

  frames         the frame reward of ``--frame-model`` (each env's frame scored)
  mean           a window of ``--frames`` frames, the mean of the same model's frame embeddings
  video          a window of ``--frames`` frames read by ``--video-model`` (every env's window each step,
                 and with ``--score-every`` n every n-th step)
  straightforward  the paper evaluator's way for the video model: each env's last K frames kept on the
                 host, preprocessed one frame at a time by the model's reference transform (PIL), one
                 window at a time through the model; its rewards are checked against ours

``--stack`` adds whole env steps (FastVLMRewardVecEnv, humanoid-kneeling, random actions) for the frame
reward, the mean and the video model at each ``--score-every``. The ring memory rows are computed for
``--ring-envs`` envs, K = ``--frames``, at ``--ring-size`` px, in bf16 (a GPU's) and fp32 (a CPU's).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

from vlmrm_fast import FastVLMRewardVecEnv, load_reward_model  # noqa: E402
from vlmrm_fast.envs import get_task  # noqa: E402
from vlmrm_fast.frames.views import HostFrames  # noqa: E402
from vlmrm_fast.reward.window import subsample_indices  # noqa: E402
from vlmrm_fast.reward.window_model import ring_item_shape  # noqa: E402
from vlmrm_fast.stack.scorer import ChunkedScorer  # noqa: E402

TASK = "humanoid-kneeling"


def prompts() -> dict[str, Any]:
    spec = get_task(TASK)
    return {"target_prompts": spec.target_prompts, "baseline_prompts": spec.baseline_prompts, "alpha": 0.5}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ScorerLoop:
    """The step's scorer of ``model`` over ``frames`` (steps, N, H, W, 3), one step at a time."""

    def __init__(self, model, frames: np.ndarray, device: torch.device):
        self.frames, self.device = frames, device
        n = frames.shape[1]
        self.rows = slice(0, n)
        self.scorer = ChunkedScorer(model, [self.rows])
        self.host = HostFrames()
        self.no_dones = np.zeros(n, dtype=bool)
        self.rewards = np.zeros(n)

    def step(self, t: int) -> float:
        """Scores step ``t``'s frames; returns the seconds it took (the device waited for)."""
        start = time.perf_counter()
        self.host.stack(list(self.frames[t % self.frames.shape[0]]))
        self.scorer.begin()
        with self.host.lend(self.rows) as view:
            self.scorer.submit(view, self.rows)
        self.rewards = self.scorer.finish(self.no_dones)
        sync(self.device)
        return time.perf_counter() - start


def side_by_side(loops: dict[str, ScorerLoop], steps: int, warmup: int) -> dict[str, float]:
    """Env steps per second of each loop, stepped in turn (so that each sees the same load; which goes
    first rotates, the first reading the step's frames from memory): the median step's time."""
    for t in range(warmup):
        for loop in loops.values():
            loop.step(t)
    times: dict[str, list[float]] = {name: [] for name in loops}
    names = list(loops)
    for t in range(steps):
        for name in names[t % len(names) :] + names[: t % len(names)]:  # each row first in turn (cold caches)
            times[name].append(loops[name].step(t))
    return {name: loops[name].rows.stop / float(np.median(times[name])) for name in loops}


def straightforward_rate(model, frames: np.ndarray, window: int) -> tuple[float, np.ndarray]:
    """The paper evaluator's way (see the module docstring), over the same frames, and its last rewards."""
    from PIL import Image

    spec = model.preprocessor.spec
    if spec.resize_mode == "paper":  # its reference is torchvision's on tensors, here given one frame at a time
        paper = spec.paper_transform()

        def transform(frame: np.ndarray) -> torch.Tensor:
            return paper(frame[None])[0]
    else:
        pil = spec.open_clip_transform()

        def transform(frame: np.ndarray) -> torch.Tensor:
            return pil(Image.fromarray(frame))

    reads = subsample_indices(window, model.video.info.num_frames)
    steps, n = frames.shape[:2]
    history = [collections.deque(maxlen=window) for _ in range(n)]
    rewards = np.zeros(n)
    times = []
    for t in range(steps):
        start = time.perf_counter()
        for env in range(n):
            kept = history[env]
            kept.append(frames[t, env].copy())  # gathered on the host
            frames_k = list(kept)
            frames_k = [frames_k[0]] * (window - len(frames_k)) + frames_k  # the episode's first frame before it
            pixels = torch.stack([transform(frames_k[i]) for i in reads])  # one frame at a time
            pixels = pixels.to(model.device, model.preprocessor.dtype)
            with torch.inference_mode():
                embedding = model.video.encode_video(pixels[None])  # one window at a time
                rewards[env] = float(model.rewards_of(model.head(embedding))[0])
        sync(model.device)
        times.append(time.perf_counter() - start)
    return n / float(np.median(times)), rewards


def stack_rate(fields: dict[str, Any], args: argparse.Namespace) -> float:
    """Env steps per second of the whole stack with the reward ``fields``."""
    env = FastVLMRewardVecEnv(
        TASK,
        args.envs,
        device=args.device,
        render_size=args.size,
        episode_length=args.episode_length,
        physics=args.physics,
        renderer=args.renderer,
        **fields,
    )
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    low, high = env.action_space.low, env.action_space.high
    actions = [rng.uniform(low, high, (args.envs, *low.shape)).astype(np.float32) for _ in range(8)]
    for t in range(args.warmup):
        env.step(actions[t % 8])
    start = time.perf_counter()
    for t in range(args.steps):
        env.step(actions[t % 8])
    rate = args.steps * args.envs / (time.perf_counter() - start)
    env.close()
    return rate


def ring_bytes(envs: int, frames: int, item: tuple[int, ...], dtype: torch.dtype) -> int:
    return envs * frames * int(np.prod(item)) * torch.empty((), dtype=dtype).element_size()


def measure(args: argparse.Namespace, stack: bool) -> dict[str, Any]:
    device = torch.device(args.device)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (args.steps, args.envs, args.size, args.size, 3), dtype=np.uint8)
    common_fields = dict(device=args.device, batch_size=args.envs, **prompts())
    frame_model = load_reward_model(args.frame_model, **common_fields)
    window = {"frames": args.frames}
    mean_model = load_reward_model(args.frame_model, window={**window, "embedding": "mean_of_frames"}, **common_fields)
    rows: list[dict[str, Any]] = []
    loops = {
        "frames": ScorerLoop(frame_model, frames, device),
        "mean": ScorerLoop(mean_model, frames, device),
    }
    videos = {}
    for every in args.score_every:
        video = load_reward_model(args.video_model, window=window, score_every=every, **common_fields)
        videos[every] = video
        loops[f"video {every}"] = ScorerLoop(video, frames, device)
    rates = side_by_side(loops, args.steps, args.warmup)
    frame_rate, mean_rate = rates["frames"], rates["mean"]
    rows.append({"row": "frames", "model": args.frame_model, "steps_per_s": frame_rate})
    rows.append(
        {"row": "mean", "model": args.frame_model, "steps_per_s": mean_rate, "time_vs_frames": frame_rate / mean_rate}
    )
    for every, video in videos.items():
        row = {"row": "video", "model": args.video_model, "score_every": every, "steps_per_s": rates[f"video {every}"]}
        if every == 1:
            base_frames = frames[: args.straightforward_steps]
            base_rate, base_rewards = straightforward_rate(video, base_frames, args.frames)
            same = ScorerLoop(video, base_frames, device)
            for t in range(base_frames.shape[0]):
                same.step(t)
            row["straightforward_steps_per_s"] = base_rate
            row["speedup"] = row["steps_per_s"] / base_rate
            row["max_reward_difference"] = float(np.abs(same.rewards - base_rewards).max())
        rows.append(row)
    if stack:
        stack_rows = [
            ("frames", {"model": args.frame_model}),
            ("mean", {"model": args.frame_model, "window": {**window, "embedding": "mean_of_frames"}}),
        ]
        stack_rows += [
            (f"video every {n}", {"model": args.video_model, "window": window, "score_every": n})
            for n in args.score_every
        ]
        for name, fields in stack_rows:
            rows.append(
                {
                    "row": f"stack {name}",
                    "model": fields["model"],
                    "steps_per_s": stack_rate({**prompts(), **fields}, args),
                }
            )
    from vlmrm_fast.models.video import video_model_info

    item = ring_item_shape(video_model_info(args.ring_video_model))  # what the ring keeps of a frame
    memory = {
        f"{args.ring_video_model} {dtype}": ring_bytes(args.ring_envs, args.frames, item, getattr(torch, dtype))
        for dtype in ("bfloat16", "float32")
    }
    memory[f"mean of frames, D={args.ring_embed_dim}"] = ring_bytes(
        args.ring_envs, args.frames, (args.ring_embed_dim,), torch.float32
    )
    return {
        "machine": common.machine(),
        "device": str(device),
        "envs": args.envs,
        "frames": args.frames,
        "size": args.size,
        "threads": torch.get_num_threads(),
        "rows": rows,
        "ring_bytes": {"envs": args.ring_envs, "frames": args.frames, **memory},
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"{m['cpu']} ({m['cores']} cores), {m['gpu'] or 'no GPU'}, torch {m['versions']['torch']}, device "
        f"{report['device']}, {report['envs']} envs, windows of {report['frames']} frames, frames "
        f"{report['size']} px, {report['threads']} torch threads, {report.get('repeats', 1)} run(s): `{m['command']}`",
        "",
        "| row | model | score every | env steps/s | against |",
        "|---|---|---|---|---|",
    ]

    def runs(r: dict[str, Any], key: str, form: str) -> str:
        values = r.get(f"{key}_runs")
        return f" (runs {', '.join(format(v, form) for v in values)})" if values else ""

    for r in report["rows"]:
        against = ""
        if "time_vs_frames" in r:
            against = f"{r['time_vs_frames']:.3f}x the frame reward's time{runs(r, 'time_vs_frames', '.3f')}"
        if "speedup" in r:
            against = (
                f"{r['speedup']:.1f}x the straightforward way{runs(r, 'speedup', '.1f')} "
                f"({r['straightforward_steps_per_s']:,.0f} steps/s; rewards within {r['max_reward_difference']:.1e})"
            )
        lines.append(
            f"| {r['row']} | {r['model']} | {r.get('score_every', '')} | {r['steps_per_s']:,.0f} | {against} |"
        )
    ring = report["ring_bytes"]
    lines.append("")
    lines.append(
        f"Ring memory at {ring['envs']:,} envs, K = {ring['frames']}: "
        + "; ".join(f"{k}: {v / 2**20:,.1f} MiB" for k, v in ring.items() if k not in ("envs", "frames"))
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--frame-model", default="vlmrm-tiny")
    p.add_argument("--video-model", default="viclip-tiny")
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--frames", type=int, default=8, help="K, frames per window")
    p.add_argument("--size", type=int, default=128, help="the rendered frames' height and width")
    p.add_argument("--steps", type=int, default=24, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--score-every", type=int, nargs="+", default=[1, 4])
    p.add_argument("--straightforward-steps", type=int, default=4, help="steps the straightforward way is timed on")
    p.add_argument("--stack", action="store_true", help="also time whole env steps")
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--physics", default="auto", help="the stack rows' physics (batch, warp, auto)")
    p.add_argument("--renderer", default="auto", help="the stack rows' renderer (egl, warp, auto)")
    p.add_argument("--ring-envs", type=int, default=1024)
    p.add_argument("--ring-video-model", default="viclip-b16")
    p.add_argument("--ring-embed-dim", type=int, default=512, help="the frame model's embedding size (ViT-B-32: 512)")
    p.add_argument("--threads", type=int, help="torch's threads (default: torch's own)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of the scorer rows (the stack rows run once); the median run's figures",
    )
    p.add_argument("--out", type=pathlib.Path)
    return p.parse_args(argv)


def merged(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several runs of the same rows: each figure the median run's, with every run's kept."""
    report = reports[0]
    for i, row in enumerate(report["rows"]):
        for key in ("steps_per_s", "time_vs_frames", "speedup", "straightforward_steps_per_s"):
            runs = [r["rows"][i][key] for r in reports if key in r["rows"][i]]
            if len(runs) > 1:
                row[key], row[f"{key}_runs"] = float(np.median(runs)), runs
    report["repeats"] = len(reports)
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = [measure(args, stack=args.stack and i == 0) for i in range(max(1, args.repeats))]
    report = merged(runs)
    text = markdown(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        args.out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
