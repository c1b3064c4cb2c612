"""The judges that watch the episode, against the straightforward ways, side by side in one run on the same
weights and frames, with the largest reward difference.

Episode-prefix judge (TOPReward's progress; ``PrefixJudge``), envs stepping ``--steps``-step episodes together:

- ours, streamed: each env's KV cache of its prompt so far; a step runs the new frame's block and the question;
  timed step by step, so that the cost of step t = 1 and of step t = steps show (the cache grows, the work not);
- recompute, vision kept: each frame through the vision tower once (its tokens kept), the language model over
  the whole prompt of the episode so far at every step (what the KV cache saves);
- anchor, a transformers user: at every step the prompt of the episode so far built by the model's chat template
  (``apply_chat_template(tokenize=True)`` on PIL images, a conversation per env) and a full forward of the model
  as transformers builds it (the vision tower over every frame of the prefix, the language model over all of it).

Window judge (``WindowJudge``, the last ``--window`` frames as the family takes them: a video for Qwen):

- ours: each frame's vision tokens once, kept in a ring; the language model over the window's prompt;
- anchor: at every step the window's prompt by the chat template and a full forward (the K frames through the
  vision tower each time).

The models have random weights: ``--arch tiny`` is the tiny random Qwen2-VL (``vlmrm-tiny-qwen2-vl``), for a CPU;
``--arch qwen2-vl-2b`` Qwen2-VL-2B-Instruct's shapes (``bench_judge.build``). ``--memory-only`` prints the prefix
cache's memory per env for an arch's config without running it.

    flock -x /work/.calm.lock python bench/bench_episode_judges.py --envs 16 --steps 64
    python bench/bench_episode_judges.py --arch qwen2-vl-2b --memory-only --max-frames 64
    python bench/bench_episode_judges.py --arch qwen2-vl-2b --device cuda --precision bf16 --envs 256 --steps 64 \\
        --anchor-envs 8 --repeats 2 --rows prefix
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import pathlib
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_judge  # noqa: E402
import common  # noqa: E402

from vlmrm_fast.encoders.precision import resolve  # noqa: E402
from vlmrm_fast.models.judge.adapter import stack_vision, unstack_vision  # noqa: E402
from vlmrm_fast.models.judge.prompt import answer_token  # noqa: E402
from vlmrm_fast.reward import QuestionCriterion  # noqa: E402
from vlmrm_fast.reward.formulas import answer_reward  # noqa: E402
from vlmrm_fast.reward.prefix_judge import PrefixJudge, prefix_frames  # noqa: E402
from vlmrm_fast.reward.window import streamed_window  # noqa: E402
from vlmrm_fast.reward.window_judge import WindowJudge  # noqa: E402

PROGRESS = QuestionCriterion(
    "The above video shows a robot manipulation trajectory that completes the following task: stand up. Decide "
    "whether the above statement is True or not. The answer is:",
    score="log_p_yes",
    yes="True",
    no="False",
)
DONE = QuestionCriterion("Is the robot done?")


def anchor(model, processor, task: QuestionCriterion, lead: str):
    """A transformers user's way: one conversation per env of ``frames`` (images, or one video), the processor's
    ``apply_chat_template(tokenize=True)``, a full forward, the task's score at the last position."""
    from PIL import Image

    device = next(model.parameters()).device
    yes, no = (answer_token(processor.tokenizer, w, lead, w) for w in (task.yes, task.no))

    def conversation(frames: list[np.ndarray], video: bool) -> list[dict]:
        if video:
            pictures = [{"type": "video", "video": frames}]
        else:
            pictures = [{"type": "image", "image": Image.fromarray(f)} for f in frames]
        return [{"role": "user", "content": [*pictures, {"type": "text", "text": task.question}]}]

    def score(prompts: list[list[np.ndarray]], video: bool = False) -> torch.Tensor:
        inputs = processor.apply_chat_template(
            [conversation(frames, video) for frames in prompts],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            processor_kwargs={"do_sample_frames": False} if video else {},
        ).to(device)
        with torch.inference_mode():
            logits = model(**inputs).logits[:, -1]
        return answer_reward(logits, yes, no, task.score)

    return score


def recompute_prefix(judge: PrefixJudge, frames: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The prefix judge's prompts without its KV cache: each frame's vision tokens once, the language model over
    the whole prompt of the episode so far at every step (envs in step, all episodes from step 0). Rewards
    (steps, envs) and seconds."""
    model, sequence = judge.frame_judge.model, judge.sequence
    yes, no = judge.answers[0]
    kept, rewards = [], []
    sync = torch.cuda.synchronize if judge.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    with torch.inference_mode():
        for t in range(frames.shape[0]):
            kept.append(stack_vision(judge._encode(judge._resized(frames[t]))))
            index = prefix_frames(t, judge.max_frames)
            n, envs = len(index), frames.shape[1]
            vision = torch.stack([kept[i] for i in index], dim=1).flatten(0, 1)  # (envs x n, levels, tokens, width)
            positions = sequence.positions(n).expand(-1, envs, -1)
            out = model(
                input_ids=sequence.ids(n).to(judge.device).expand(envs, -1),
                position_ids=judge._positions(positions),
                mm_encoder_outputs={"image": unstack_vision(vision, judge._like)},
                logits_to_keep=1,
            )
            rewards.append(answer_reward(out.logits[:, -1], yes, no, judge.criteria[0].score))
    sync()
    return torch.stack(rewards), time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=("tiny", "qwen2-vl-2b"), default="tiny")
    p.add_argument(
        "--layers", type=int, help="qwen2-vl-2b with this many layers in the language model and the vision tower"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="auto")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--steps", type=int, default=64, help="an episode's steps (every env resets together)")
    p.add_argument("--max-frames", type=int, default=64)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--batch-size", type=int, help="envs per forward of the judges (default: all of them)")
    p.add_argument("--rows", nargs="+", choices=("prefix", "window"), default=["prefix", "window"])
    p.add_argument(
        "--anchor-envs", type=int, help="run the recompute and the anchors on this many of the envs (default all)"
    )
    p.add_argument("--no-anchor", action="store_true", help="ours alone: neither the recompute nor the anchors")
    p.add_argument(
        "--repeats", type=int, default=3, help="episodes of the streamed prefix judge (each step's least and median)"
    )
    p.add_argument("--memory-only", action="store_true", help="the prefix cache's memory per env, without running")
    p.add_argument("--out", type=pathlib.Path)
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    if args.memory_only:
        return memory_only(args)
    device = torch.device(args.device)
    precision = resolve(args.precision, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    judge = bench_judge.build(args.arch, device, precision.dtype, layers=args.layers)
    plain = None if args.no_anchor else copy.deepcopy(judge.model)  # transformers' model as it comes
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (args.steps, args.envs, 224, 224, 3), dtype=np.uint8)
    on_device = torch.from_numpy(frames).to(device)
    anchor_envs = min(args.anchor_envs or args.envs, args.envs)
    lead = judge.family.answer_lead
    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]

    def report(row: dict[str, Any]) -> None:
        rows.append(row)
        print(" | ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)

    if "prefix" in args.rows:
        if device.type == "cuda":
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated(device)
        ours = PrefixJudge(
            judge,
            [PROGRESS],
            num_envs=args.envs,
            max_frames=args.max_frames,
            device=device,
            precision=precision.name,
            batch_size=args.batch_size or args.envs,
        )
        measured = torch.cuda.memory_allocated(device) - before if device.type == "cuda" else ours.nbytes
        for t in range(2):  # warm-up steps (first calls allocate and pick kernels), an episode of their own
            ours.step(on_device[t], starts=np.full(args.envs, t == 0))
        times = np.zeros((max(1, args.repeats), args.steps))
        for r in range(times.shape[0]):
            rewards = []
            for t in range(args.steps):
                sync()
                start = time.perf_counter()
                rewards.append(ours.step(on_device[t], starts=np.full(args.envs, t == 0)))
                sync()
                times[r, t] = time.perf_counter() - start
        streamed = torch.stack(rewards).float().cpu()
        # A step's cost: the least of its times over the episodes (other work on a shared machine only adds time),
        # and the median; an episode's: the median episode.
        least, median = times.min(axis=0), np.median(times, axis=0)
        episode = float(np.median(times.sum(axis=1)))
        edge = max(1, min(8, args.steps // 4))
        report(
            dict(
                row="prefix streamed (ours)",
                arch=args.arch + (f" ({args.layers} layers)" if args.layers else ""),
                envs=args.envs,
                steps=args.steps,
                episodes=times.shape[0],
                env_steps_per_s=args.envs * args.steps / episode,
                step_ms_t1=1e3 * least[0],
                step_ms_tlast=1e3 * least[-1],
                last_over_first=least[-1] / least[0],
                last_over_first_median=median[-1] / median[0],
                last_over_first_8=least[-edge:].mean() / least[:edge].mean(),
                cache_mib_per_env=ours.bytes_per_env / 2**20,
                measured_mib_all_envs=measured / 2**20,
            )
        )
        if not args.no_anchor:
            recomputed, seconds = recompute_prefix(ours, on_device[:, :anchor_envs])
            per_env_step = seconds / (anchor_envs * args.steps)
            report(
                dict(
                    row="prefix recompute, vision kept",
                    envs=anchor_envs,
                    env_steps_per_s=1 / per_env_step,
                    ours_x=per_env_step * args.envs * args.steps / episode,
                    max_reward_diff=float((recomputed.float().cpu() - streamed[:, :anchor_envs]).abs().max()),
                )
            )
        if plain is not None:
            score = anchor(plain, judge.processor, PROGRESS, lead)
            out, start = [], time.perf_counter()
            for t in range(args.steps):
                index = prefix_frames(t, args.max_frames)
                out.append(score([[frames[i, e] for i in index] for e in range(anchor_envs)]))
            sync()
            seconds = time.perf_counter() - start
            per_env_step = seconds / (anchor_envs * args.steps)
            report(
                dict(
                    row="prefix anchor (template + full forward per step)",
                    envs=anchor_envs,
                    env_steps_per_s=1 / per_env_step,
                    ours_x=per_env_step * args.envs * args.steps / episode,
                    max_reward_diff=float((torch.stack(out).float().cpu() - streamed[:, :anchor_envs]).abs().max()),
                )
            )

    if "window" in args.rows:
        ours_w = WindowJudge(
            judge,
            [DONE],
            num_envs=args.envs,
            window=args.window,
            device=device,
            precision=precision.name,
            batch_size=args.batch_size or args.envs,
        )
        for t in range(2):  # warm-up
            ours_w.step(on_device[t], starts=np.full(args.envs, t == 0))
        sync()
        start = time.perf_counter()
        rewards = [ours_w.step(on_device[t], starts=np.full(args.envs, t == 0)) for t in range(args.steps)]
        sync()
        seconds_ours = time.perf_counter() - start
        streamed = torch.stack(rewards).float().cpu()
        report(
            dict(
                row=f"window K={args.window} (ours)",
                envs=args.envs,
                video=ours_w.video,
                env_steps_per_s=args.envs * args.steps / seconds_ours,
                ring_mib=ours_w.ring.nbytes / 2**20,
            )
        )
        if plain is not None:
            score = anchor(plain, judge.processor, DONE, lead)
            out, start = [], time.perf_counter()
            for t in range(args.steps):
                index = streamed_window(t, args.window)[ours_w.reads]
                out.append(score([list(frames[index, e]) for e in range(anchor_envs)], video=ours_w.video))
            sync()
            seconds = time.perf_counter() - start
            per_env_step = seconds / (anchor_envs * args.steps)
            report(
                dict(
                    row=f"window K={args.window} anchor (template + full forward per step)",
                    envs=anchor_envs,
                    env_steps_per_s=1 / per_env_step,
                    ours_x=per_env_step * args.envs * args.steps / seconds_ours,
                    max_reward_diff=float((torch.stack(out).float().cpu() - streamed[:, :anchor_envs]).abs().max()),
                )
            )
    load.append(os.getloadavg()[0])
    print(f"load {load[0]:.1f}-{load[1]:.1f}, {common.cpu_model()}, {torch.get_num_threads()} threads")
    if args.out:
        common.write_json(args.out, {"machine": common.machine(), "command": sys.argv, "load": load, "rows": rows})
    return 0


def memory_only(args) -> int:
    """The prefix cache's memory per env of ``args.arch``'s config at ``args.max_frames`` frames (bf16 keys and
    values and vision tokens), with the tiny judge's template (a 224 px frame: 64 image tokens, 66 a block)."""
    from vlmrm_fast.models.judge.prompt import frame_sequence
    from vlmrm_fast.reward.episode_memory import kv_bytes_per_token

    judge = bench_judge.build(args.arch, torch.device("meta"), torch.bfloat16)
    text = judge.model.config.get_text_config()
    tiny = bench_judge.build("tiny", torch.device("cpu"), torch.float32)
    from vlmrm_fast.reward.judge import JudgeRewardModel

    adapter = JudgeRewardModel(tiny, [PROGRESS], device=torch.device("cpu")).adapter
    sequence = frame_sequence(tiny.processor, adapter, tiny.model.config.image_token_id, PROGRESS.question)
    capacity = len(sequence.head) + args.max_frames * len(sequence.block) + len(sequence.tail)
    kv = kv_bytes_per_token(text, 2)
    image_tokens = int((sequence.block == tiny.model.config.image_token_id).sum())
    vision = args.max_frames * image_tokens * text.hidden_size * 2
    print(
        f"{args.arch}: {text.num_hidden_layers} layers x {text.num_key_value_heads} KV heads x "
        f"{text.hidden_size // text.num_attention_heads} dims: {kv:,} B of keys and values per token (bf16); "
        f"{capacity:,} tokens at {args.max_frames} frames ({len(sequence.head)} head + {args.max_frames} x "
        f"{len(sequence.block)} + {len(sequence.tail)} question): {kv * capacity / 2**20:,.1f} MiB per env, and "
        f"{vision / 2**20:,.1f} MiB of kept vision tokens; {args.envs} envs: "
        f"{args.envs * (kv * capacity + vision) / 2**30:,.2f} GiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
