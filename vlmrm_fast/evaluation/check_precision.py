"""``vlmrm-fast check-precision MODEL``: how much FP8 (and fp16, fp32) move a model's embeddings and
rewards away from bf16's, on rendered task frames.

For every precision the image tower runs on the same frames (the task's, rendered from random
rollouts, or ``--frames DIR``), preprocessed as the reward model does. FP8 runs once per input
scaling of ``--fp8-scalings`` (all of them by default: dynamic-rowwise, dynamic-tensorwise,
static-tensorwise; :mod:`vlmrm_fast.encoders.fp8`); static scales are calibrated on frames of
other rollouts (another seed) than those scored, or on ``--calibration-frames``, or, with
``--frames`` alone, on the scored frames themselves (the report says which). Against the bf16 embeddings
it reports the cosine similarity per frame (mean and minimum) and, for goal-baseline rewards with
the task's prompts at each ``--alphas`` value, the Spearman rank correlation of the rewards over
the frames (what an RL agent sees is the ordering of states), the largest reward difference, and
that difference's RMS over the spread (std) of the bf16 rewards across the frames.

On a GPU each precision runs through the encoder backend of ``--backend``. On a CPU bf16 and fp16
run through eager torch (slow; the numbers are the same arithmetic) and FP8, which needs an sm_89+
GPU, is reported as not run unless ``--emulate-fp8`` asks for its numerics through torch's CPU
kernel for FP8 matrix products (see :mod:`vlmrm_fast.encoders.fp8`).

Run it on the model's real weights: random weights (``vlmrm-tiny``, an architecture without a
tag) only show that the check runs: their embeddings of different frames are nearly equal, the
rewards' spread across frames is tiny, and even fp32 against bf16 ranks the frames differently
(the noise-to-spread column says so).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import pathlib
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vlmrm_fast.encoders.fp8 import DEFAULT_FP8_SCALING, FP8_SCALINGS, STATIC_SCALING
from vlmrm_fast.encoders.fp8_calibration import load_frames

REFERENCE = "bf16"
CANDIDATES = ("fp8", "fp16", "fp32")
#: Frames rendered for static FP8 scales' calibration when the task's frames are rendered.
CALIBRATION_FRAMES = 64


@dataclasses.dataclass
class PrecisionResult:
    precision: str
    ran: bool
    how: str = ""  # backend, or why it did not run
    fp8_scaling: str | None = None  # FP8's input scaling (encoders/fp8.py); None for the others
    cosine_mean: float | None = None
    cosine_min: float | None = None
    spearman: dict[str, float] = dataclasses.field(default_factory=dict)  # alpha -> rho
    max_reward_diff: float | None = None
    #: RMS reward difference over the reference rewards' spread across frames (std), worst alpha:
    #: near or above 1, the precision's error is as large as what tells frames apart, and the
    #: Spearman correlation is noise (random weights give frames nearly equal rewards).
    noise_to_spread: float | None = None

    @property
    def label(self) -> str:
        return f"{self.precision} {self.fp8_scaling}" if self.fp8_scaling else self.precision


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties get their average rank)."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.zeros(len(counts))
    np.add.at(sums, inverse, ranks)
    return (sums / counts)[inverse]


# ----------------------------------------------------------------------------- frames


def render_task_frames(
    task: str, n: int, *, seed: int = 0, size: int | None = None, progress: bool = True
) -> np.ndarray:
    """``n`` frames of ``task``'s states visited by random rollouts."""
    from vlmrm_fast.evaluation.states import render_states, sample_states

    states, _ = sample_states(task, n, seed=seed, progress=progress)
    return render_states(task, states, size=(size, size) if size else None, progress=progress)


# ----------------------------------------------------------------------------- embeddings


def _tower_only(clip: Any) -> Any:
    """A LoadedClip whose image tower is a private copy (encoders cast and convert towers in place)."""
    twin = copy.copy(clip)
    twin.model = types.SimpleNamespace(visual=copy.deepcopy(clip.model.visual))
    return twin


@torch.inference_mode()
def embed(
    clip: Any,
    frames: np.ndarray,
    precision: str,
    *,
    device: torch.device,
    backend: str,
    batch_size: int,
    emulate_fp8: bool = False,
    fp8_scaling: str | None = None,
    calibration_frames: np.ndarray | None = None,
) -> tuple[torch.Tensor, str]:
    """Raw embeddings (N, D) float32 of ``frames`` through ``clip``'s tower in ``precision``; and how it
    ran. FP8 scales its inputs by ``fp8_scaling``; static scales are calibrated on ``calibration_frames``."""
    from vlmrm_fast.encoders import make_image_encoder
    from vlmrm_fast.encoders.precision import named_precision
    from vlmrm_fast.encoders.torch_eager import TorchImageEncoder
    from vlmrm_fast.encoders.tower import prepare_clip_tower
    from vlmrm_fast.frames.preprocess import FramePreprocessor

    twin = _tower_only(clip)
    resolved = named_precision(precision)
    fp8_options: dict[str, Any] = {}
    if resolved.fp8:
        fp8_options = dict(fp8_scaling=fp8_scaling or DEFAULT_FP8_SCALING)
        if fp8_options["fp8_scaling"] == STATIC_SCALING:
            fp8_options["fp8_calibration"] = calibration_frames
    if device.type == "cuda":
        options = dict(batch_size=batch_size, progress=False) if backend == "compile" else {}
        encoder = make_image_encoder(twin, backend, device=device, precision=precision, **options, **fp8_options)
        how = encoder.describe()
    else:  # the encoder factory keeps the CPU at fp32; run the same arithmetic eagerly
        visual = prepare_clip_tower(
            twin, device=device, precision=resolved, attention="open_clip", emulate_fp8=emulate_fp8, **fp8_options
        )
        encoder = TorchImageEncoder(
            visual,
            device=device,
            dtype=resolved.dtype,
            precision=precision,
            image_size=clip.preprocess.size,
            embed_dim=clip.embed_dim,
        )
        how = "torch eager on the CPU" + (" (FP8 emulated)" if resolved.fp8 else "")
    preprocessor = FramePreprocessor(clip.preprocess, device, resolved.dtype)
    out = []
    try:
        for start in range(0, len(frames), batch_size):
            chunk = torch.from_numpy(np.ascontiguousarray(frames[start : start + batch_size]))
            out.append(encoder.encode_rows(preprocessor(chunk.to(device))).float().cpu())
    finally:
        encoder.close()
    return torch.cat(out), how


def rewards(embeddings: torch.Tensor, target: torch.Tensor, baseline: torch.Tensor, alpha: float) -> np.ndarray:
    from vlmrm_fast.reward.formulas import goal_and_direction, goal_baseline_reward, normalize

    g, u = goal_and_direction(target, baseline)
    return goal_baseline_reward(normalize(embeddings), g, u, alpha).double().numpy()


# ----------------------------------------------------------------------------- the check


def check_precision(
    model: str,
    frames: np.ndarray,
    *,
    pretrained: str | None = None,
    checkpoint: str | None = None,
    target_prompts: Sequence[str],
    baseline_prompts: Sequence[str],
    alphas: Sequence[float] = (0.0, 0.5, 1.0),
    device: str | torch.device = "auto",
    backend: str = "torch",
    batch_size: int = 32,
    emulate_fp8: bool = False,
    precisions: Sequence[str] = CANDIDATES,
    fp8_scalings: Sequence[str] = FP8_SCALINGS,
    calibration_frames: np.ndarray | None = None,
    calibration_source: str | None = None,
    log=print,
) -> list[PrecisionResult]:
    """The figures above, one :class:`PrecisionResult` per precision and FP8 scaling (bf16 first, the
    reference). Static FP8 scales are calibrated on ``calibration_frames`` (described by
    ``calibration_source``), or on ``frames`` when None."""
    from vlmrm_fast.encoders.fp8 import fp8_unsupported_reason
    from vlmrm_fast.models.clip import load_clip
    from vlmrm_fast.reward.formulas import normalize
    from vlmrm_fast.runtime.device import resolve_device

    if backend not in ("torch", "compile"):
        raise ValueError(f"--backend {backend!r}: use 'torch' or 'compile' (TensorRT builds no FP8 engines)")
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) < 3:
        raise ValueError(f"frames must be uint8 (N >= 3, H, W, 3), got {frames.dtype} {frames.shape}")
    resolved = resolve_device(device)
    clip = load_clip(model, pretrained, checkpoint=checkpoint, device=torch.device("cpu"))
    with torch.inference_mode():
        tokens = clip.tokenizer(list(target_prompts) + list(baseline_prompts))
        text = normalize(clip.model.encode_text(tokens).float())
    target, baseline = text[: len(target_prompts)], text[len(target_prompts) :]

    results = []
    reference, how = embed(clip, frames, REFERENCE, device=resolved, backend=backend, batch_size=batch_size)
    reference_rewards = {a: rewards(reference, target, baseline, a) for a in alphas}
    results.append(
        PrecisionResult(
            REFERENCE,
            True,
            how,
            cosine_mean=1.0,
            cosine_min=1.0,
            spearman={f"{a:g}": 1.0 for a in alphas},
            max_reward_diff=0.0,
            noise_to_spread=0.0,
        )
    )
    log(f"  {REFERENCE}: reference ({how})")
    if calibration_frames is None:
        calibration_frames, calibration_source = frames, "the scored frames"
    fp8_blocked = None
    if "fp8" in precisions:
        reason = fp8_unsupported_reason(resolved)
        if reason and not (emulate_fp8 and resolved.type == "cpu" and "torchao" not in reason):
            hint = " (--emulate-fp8 computes FP8's numerics on the CPU)" if resolved.type == "cpu" else ""
            fp8_blocked = reason + hint
    runs = [(p, scaling) for p in precisions for scaling in (fp8_scalings if p == "fp8" else [None])]
    for precision, scaling in runs:
        label = f"{precision} {scaling}" if scaling else precision
        if precision == "fp8" and fp8_blocked:
            if scaling == fp8_scalings[0]:  # one row: no scaling of FP8 runs here
                results.append(PrecisionResult("fp8", False, fp8_blocked))
                log(f"  fp8: not run: {fp8_blocked}")
            continue
        try:
            emb, how = embed(
                clip,
                frames,
                precision,
                device=resolved,
                backend=backend,
                batch_size=batch_size,
                emulate_fp8=emulate_fp8,
                fp8_scaling=scaling,
                calibration_frames=calibration_frames,
            )
        except (RuntimeError, ValueError, TypeError) as exc:  # e.g. fp16 kernels missing on some CPU builds
            results.append(PrecisionResult(precision, False, f"{type(exc).__name__}: {exc}", fp8_scaling=scaling))
            log(f"  {label}: failed: {exc}")
            continue
        if scaling == STATIC_SCALING:
            how += f", scales calibrated on {calibration_source or f'{len(calibration_frames)} frames'}"
        cos = torch.nn.functional.cosine_similarity(emb, reference, dim=1)
        result = PrecisionResult(precision, True, how, scaling, float(cos.mean()), float(cos.min()))
        diffs, noise = [], []
        for a in alphas:
            r, ref = rewards(emb, target, baseline, a), reference_rewards[a]
            result.spearman[f"{a:g}"] = spearman(r, ref)
            diffs.append(float(np.abs(r - ref).max()))
            noise.append(float(np.sqrt(np.mean((r - ref) ** 2)) / max(ref.std(), 1e-12)))
        result.max_reward_diff = max(diffs)
        result.noise_to_spread = max(noise)
        results.append(result)
        log(f"  {label}: done ({how})")
    return results


def format_table(results: list[PrecisionResult]) -> str:
    alphas = list(results[0].spearman)
    head = (
        f"{'precision':<24}{'cos mean':>10}{'cos min':>10}"
        + "".join(f"{'rho a=' + a:>11}" for a in alphas)
        + f"{'max |dr|':>11}{'noise/spread':>14}  how"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        if not r.ran:
            lines.append(f"{r.label:<24}{'not run: ' + r.how}")
            continue
        rho = "".join(f"{r.spearman[a]:>11.4f}" for a in alphas)
        lines.append(
            f"{r.label:<24}{r.cosine_mean:>10.5f}{r.cosine_min:>10.5f}{rho}{r.max_reward_diff:>11.2e}{r.noise_to_spread:>14.3f}  {r.how}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line


def add_subcommand(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-precision",
        help="embedding cosine and reward Spearman of FP8/fp16 against bf16 on task frames",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model", help="open_clip name, 'name/tag' (e.g. ViT-L-14/laion2b_s32b_b82k), 'hf-hub:org/repo' or vlmrm-tiny"
    )
    p.add_argument("--pretrained", metavar="TAG")
    p.add_argument("--checkpoint", metavar="FILE", help="local weights file")
    p.add_argument(
        "--frames", metavar="DIR", help="a folder of images (one size) or a dataset .npz; default: render the task"
    )
    p.add_argument(
        "--task", default="humanoid-kneeling", help="task whose frames are rendered and whose prompts score them"
    )
    p.add_argument("-n", "--num-frames", type=int, default=256, help="frames to render (default 256)")
    p.add_argument(
        "--render-size", type=int, help="render frames at this many pixels square (default: the task's size)"
    )
    p.add_argument(
        "--alphas", type=float, nargs="+", default=[0.0, 0.5, 1.0], help="goal-baseline strengths (default 0 0.5 1)"
    )
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--backend", default="torch", choices=["torch", "compile"], help="encoder backend on a GPU (default torch)"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--precisions",
        nargs="+",
        default=list(CANDIDATES),
        choices=list(CANDIDATES),
        help="compared against bf16 (default: fp8 fp16 fp32)",
    )
    p.add_argument(
        "--fp8-scalings",
        nargs="+",
        default=list(FP8_SCALINGS),
        choices=list(FP8_SCALINGS),
        help="FP8's input scalings, each compared (default: all)",
    )
    p.add_argument(
        "--calibration-frames",
        metavar="DIR",
        help="frames (a folder of images or a .npz) to calibrate static FP8 scales on; default: "
        f"{CALIBRATION_FRAMES} frames rendered with seed + 1, or with --frames the scored frames",
    )
    p.add_argument(
        "--emulate-fp8", action="store_true", help="on a CPU: compute FP8's numerics with torch's CPU kernels"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.set_defaults(func=_main, setup=True)


def _main(args: argparse.Namespace) -> int:
    from vlmrm_fast.envs import get_task
    from vlmrm_fast.runtime.device import check_device_option

    check_device_option(args.device)  # before the frames are rendered
    if args.num_frames < 3 or args.batch_size < 1:
        raise ValueError("--num-frames must be at least 3 and --batch-size at least 1")
    spec = get_task(args.task)
    if not spec.target_prompts:
        raise ValueError(f"task {args.task!r} has no prompts to score frames with; pick a task with prompts")
    if args.frames:
        frames = load_frames(args.frames)
        source = f"{len(frames)} frames from {args.frames}"
    else:
        frames = render_task_frames(args.task, args.num_frames, seed=args.seed, size=args.render_size)
        source = f"{len(frames)} rendered {args.task} frames ({frames.shape[2]}x{frames.shape[1]}, random actions, seed {args.seed})"
    print(
        f"check-precision {args.model}: {source}; prompts {list(spec.target_prompts)} vs {list(spec.baseline_prompts)}"
    )
    calibration, calibration_source = None, None
    if STATIC_SCALING in args.fp8_scalings and "fp8" in args.precisions:
        if args.calibration_frames:
            calibration = load_frames(args.calibration_frames)
            calibration_source = f"{len(calibration)} frames from {args.calibration_frames}"
        elif not args.frames:
            n = min(CALIBRATION_FRAMES, args.num_frames)
            calibration = render_task_frames(args.task, n, seed=args.seed + 1, size=args.render_size)
            calibration_source = f"{n} other rendered frames (seed {args.seed + 1})"
    results = check_precision(
        args.model,
        frames,
        pretrained=args.pretrained,
        checkpoint=args.checkpoint,
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alphas=args.alphas,
        device=args.device,
        backend=args.backend,
        batch_size=args.batch_size,
        emulate_fp8=args.emulate_fp8,
        precisions=args.precisions,
        fp8_scalings=args.fp8_scalings,
        calibration_frames=calibration,
        calibration_source=calibration_source,
    )
    print()
    print(format_table(results))
    if args.json:
        out = pathlib.Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {"model": args.model, "frames": source, "results": [dataclasses.asdict(r) for r in results]}, indent=2
            )
        )
        print(f"\nwrote {out}")
    return 0
