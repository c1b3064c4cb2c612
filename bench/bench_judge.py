"""A generative VLM judge scoring frames: this package's path against the way the reward libraries do it,
side by side in one run, with the same weights and the same rewards.

- ours: ``JudgeRewardModel`` on uint8 frames already on the device (as the renderer lends them): the
  image processor's steps on the device, one vision pass per frame, the language model over the prompt's
  frame-dependent part from the cached frame-independent start, logits at the answer position only; in
  both prompt orders (``image_first``, the models' own: the question runs per frame after the image;
  ``question_first``: the question is in the cached start);
- anchor: what a transformers user writes: the model's chat template through the processor's
  ``apply_chat_template(tokenize=True)`` on PIL images, a full forward of the whole prompt, a batch of 32
  (LeRobot's TOPReward, RLinf and Robometer score with full forwards), the model as transformers builds
  it; in the same two orders. Two processors: transformers 5's default (its torchvision backend) and its
  PIL backend, the numpy image processor that transformers 4 (which those libraries pin) gives by default.

Both read P(yes) / (P(yes) + P(no)) of the answer's first token; the run reports the largest difference
from the anchor of the same order.
The models have random weights (the compute of trained ones): ``--arch tiny`` is the package's tiny random
Qwen2-VL (``vlmrm-tiny-qwen2-vl``, for a CPU), ``--arch qwen2-vl-2b`` Qwen2-VL-2B-Instruct's published shapes
(vision tower 32 x 1280, language model 28 x 1536, 151,936 tokens) with the tiny tokenizer, built offline.

    flock -x /work/.calm.lock python bench/bench_judge.py                               # CPU, tiny, fp32
    python bench/bench_judge.py --arch qwen2-vl-2b --device cuda --precision bf16 --batch-size 64 128
    python bench/bench_judge.py --arch qwen2-vl-2b --device cuda --precision fp8 --batch-size 64 128 --no-anchor
"""

from __future__ import annotations

import argparse
import contextlib
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
import common  # noqa: E402

from vlmrm_fast.encoders.precision import resolve  # noqa: E402
from vlmrm_fast.models.judge import TINY_JUDGES, LoadedJudge, judge_family  # noqa: E402
from vlmrm_fast.models.judge.fp8 import convert_judge_to_fp8  # noqa: E402
from vlmrm_fast.models.judge.prompt import PROMPT_ORDERS, answer_token  # noqa: E402
from vlmrm_fast.reward import QuestionCriterion  # noqa: E402
from vlmrm_fast.reward.judge import JudgeRewardModel  # noqa: E402

QUESTION = "Is the pole standing upright on top of the cart? Answer yes or no."
ANCHOR_BATCH = 32
#: Qwen2-VL-2B-Instruct's config.json (the shapes; the weights are random).
QWEN2_VL_2B = {
    "text_config": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
        tie_word_embeddings=True,
    ),
    "vision_config": dict(depth=32, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4),
}


def build(arch: str, device: torch.device, dtype: torch.dtype, seed: int = 0, layers: int | None = None) -> LoadedJudge:
    """A Qwen2-VL judge of ``arch``'s shapes with random weights and the tiny judge's processor; ``layers``: that many
    layers in the language model and in the vision tower (Qwen2-VL-2B's widths at a depth a CPU runs: the cost of
    a layer's parts relative to each other as in the whole model)."""
    import transformers as tf

    from vlmrm_fast.models.random_init import _LocalGenerator

    config, processor = TINY_JUDGES["vlmrm-tiny-qwen2-vl"].build()
    if arch == "qwen2-vl-2b":
        tiny = config.text_config
        text = dict(QWEN2_VL_2B["text_config"], bos_token_id=None, eos_token_id=tiny.eos_token_id, pad_token_id=0)
        vision = dict(QWEN2_VL_2B["vision_config"])
        if layers is not None:
            text["num_hidden_layers"], vision["depth"] = layers, layers
        config = tf.Qwen2VLConfig(
            text_config=text,
            vision_config=vision,
            image_token_id=config.image_token_id,
            video_token_id=config.video_token_id,
            vision_start_token_id=config.vision_start_token_id,
            vision_end_token_id=config.vision_end_token_id,
        )
    random = (
        _LocalGenerator(torch.Generator(device=device).manual_seed(seed))
        if device.type != "meta"  # shapes only (a dry run of the build)
        else contextlib.nullcontext()
    )
    with random, torch.device(device):  # the weights drawn where they run: a 2B model's init in seconds on a GPU
        model = tf.Qwen2VLForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=dtype)
    model = model.to(device).eval().requires_grad_(False)
    return LoadedJudge(model, processor, judge_family(config, arch), arch, f"random init (seed {seed})")


def pil_processor(processor):
    """The same processor with transformers' PIL (numpy) image processor, transformers 4's default."""
    import transformers as tf

    image_processor = tf.Qwen2VLImageProcessorPil(**processor.image_processor.to_dict())
    return type(processor)(
        image_processor, processor.tokenizer, processor.video_processor, chat_template=processor.chat_template
    )


def anchor_scorer(model, processor, yes: int, no: int, order: str):
    """A transformers user's way: one conversation per frame through the processor's chat template
    (``apply_chat_template(tokenize=True)`` on PIL images), the whole prompt through the model."""
    from PIL import Image

    device = next(model.parameters()).device

    def conversation(frame: np.ndarray) -> list[dict]:
        image = {"type": "image", "image": Image.fromarray(frame)}
        text = {"type": "text", "text": QUESTION}
        return [{"role": "user", "content": [image, text] if order == "image_first" else [text, image]}]

    def score(frames: np.ndarray) -> torch.Tensor:
        out = []
        for start in range(0, len(frames), ANCHOR_BATCH):
            inputs = processor.apply_chat_template(
                [conversation(frame) for frame in frames[start : start + ANCHOR_BATCH]],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                return_tensors="pt",
            ).to(device)
            with torch.inference_mode():
                logits = model(**inputs).logits[:, -1].float()
            out.append(torch.softmax(logits[:, [yes, no]], dim=-1)[:, 0])
        return torch.cat(out)

    return score


def timed(fn, frames, sync, min_seconds: float) -> tuple[float, torch.Tensor]:
    """(frames per second, the last result) of back-to-back calls after one warm-up call."""
    result = fn(frames)
    sync()
    calls, start = 0, time.perf_counter()
    while calls < 2 or time.perf_counter() - start < min_seconds:
        result = fn(frames)
        calls += 1
    sync()
    return calls * len(frames) / (time.perf_counter() - start), result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=("tiny", "qwen2-vl-2b"), default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="auto", help="auto, fp32, bf16, fp16 or fp8 (FP8 linear layers, torchao)")
    p.add_argument("--batch-size", type=int, nargs="+", default=[32], help="frames per judge batch (ours)")
    p.add_argument("--frames", type=int, default=128, help="frames scored per call (224 x 224 px)")
    p.add_argument("--min-seconds", type=float, default=5.0)
    p.add_argument("--no-anchor", action="store_true", help="time ours only (e.g. FP8, whose anchor is bf16's)")
    p.add_argument(
        "--orders", nargs="+", choices=PROMPT_ORDERS, default=list(PROMPT_ORDERS), help="prompt orders (default both)"
    )
    p.add_argument(
        "--anchors",
        nargs="+",
        choices=("torchvision", "pil"),
        default=["torchvision", "pil"],
        help="the anchor's image processors (default both)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of every path in turn (each round times each path for --min-seconds); the rows give the "
        "median round's frames/s and the range",
    )
    p.add_argument("--out", type=pathlib.Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    device = torch.device(args.device)
    precision = resolve(args.precision, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    judge = build(args.arch, device, precision.dtype)
    plain = None if args.no_anchor else copy.deepcopy(judge.model)  # transformers' model as it comes
    if precision.fp8:
        convert_judge_to_fp8(judge.model)
    frames = np.random.default_rng(0).integers(0, 256, (args.frames, 224, 224, 3), dtype=np.uint8)
    on_device = torch.from_numpy(frames).to(device)
    task = QuestionCriterion(QUESTION)
    # Every path timed in turn, round after round: each sees the same load (this machine is shared).
    paths: list[tuple[dict, Any, Any]] = []  # (row, scorer, its input)
    for order in args.orders:
        if plain is not None:
            yes, no = (
                answer_token(judge.processor.tokenizer, word, judge.family.answer_lead, word) for word in ("Yes", "No")
            )
            processors = {"torchvision": judge.processor, "pil": pil_processor(judge.processor)}
            for name in args.anchors:
                scorer = anchor_scorer(plain, processors[name], yes, no, order)
                paths.append(
                    (dict(path=f"anchor ({name})", anchor=name, order=order, batch=ANCHOR_BATCH), scorer, frames)
                )
        for batch in args.batch_size:
            ours = JudgeRewardModel(
                judge, [task], device=device, batch_size=batch, precision=precision.name, prompt_order=order
            )
            paths.append((dict(path="ours", order=order, batch=batch), ours, on_device))
    runs: list[list[float]] = [[] for _ in paths]
    results: list[Any] = [None] * len(paths)
    loads = [os.getloadavg()[0], 0.0]
    for _ in range(max(1, args.repeats)):
        for i, (_, scorer, inputs) in enumerate(paths):
            fps, results[i] = timed(scorer, inputs, sync, args.min_seconds)
            runs[i].append(fps)
    loads[1] = os.getloadavg()[0]
    anchor_runs = {(row["order"], row["anchor"]): r for (row, _, _), r in zip(paths, runs) if "anchor" in row}
    # The first anchor's rewards of each order.
    references = {}
    for (row, _, _), rewards in zip(paths, results):
        if "anchor" in row:
            references.setdefault(row["order"], rewards)
    rows = []
    print(
        "| arch | device | precision | order | path | batch | frames/s (median round; range) | x anchor of the order "
        "(torchvision / PIL processor) | max reward diff | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (row, _, _), fps_runs, rewards in zip(paths, runs, results):
        fps = float(np.median(fps_runs))
        reference = references.get(row["order"])
        diff = None if reference is None else float((rewards.float() - reference.float()).abs().max())
        # Against each anchor of the order: the median over rounds of the round's ratio (both timed under that
        # round's load).
        ratio = {
            name: float(np.median(np.divide(fps_runs, a)))
            for (order, name), a in anchor_runs.items()
            if order == row["order"]
        }
        row = dict(row, fps=fps, fps_runs=fps_runs, ratio=ratio, max_diff=diff, load=tuple(loads))
        rows.append(row)
        ratios = " / ".join(f"{ratio[n]:.2f}" if n in ratio else "-" for n in ("torchvision", "pil"))
        label = (
            f"apply_chat_template ({row['anchor']} processor) on PIL + full forward"
            if "anchor" in row
            else "ours (device processor, cached start)"
        )
        spread = f" ({min(fps_runs):.1f}-{max(fps_runs):.1f})" if len(fps_runs) > 1 else ""
        print(
            f"| {args.arch} | {device} | {precision.name} | {row['order']} | {label} | {row['batch']} | {fps:.1f}{spread} | {ratios} | "
            f"{'' if diff is None else f'{diff:.1e}'} | {loads[0]:.1f}-{loads[1]:.1f} |",
            flush=True,
        )
    if args.out:
        common.write_json(args.out, {"machine": common.machine(), "command": sys.argv, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
