"""``vlmrm-fast`` command line: one subcommand per job.

    vlmrm-fast info                       what the build and the machine offer
    vlmrm-fast train CONFIG.yaml          train an agent with a VLM reward
    vlmrm-fast export MODEL --batch-size N   build a TensorRT engine for MODEL's image tower
                                          ahead of time (or --onnx-only OUT.onnx)
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence


def _info(args: argparse.Namespace) -> int:
    import vlmrm_fast

    info = vlmrm_fast.build_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    cuda = f"compiled ({info['cuda_version']})" if info["cuda_compiled"] else "not compiled"
    usable = info["cuda_device_name"] if info["cuda_available"] else f"no device ({info['cuda_error']})"
    egl = f"{info['egl_vendor']} EGL {info['egl_version']}" if info["egl_available"] else f"unavailable ({info['egl_error']})"
    print(f"vlmrm-fast {vlmrm_fast.__version__}")
    print(f"  MuJoCo   {info['mujoco_version']}")
    print(f"  CUDA     {cuda}; {usable}")
    print(f"  EGL      {egl}; devices: {info['egl_devices']}")
    return 0


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print what the native core was built with and what this machine offers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_info)


def _add_train(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.training.train import add_subcommand

    add_subcommand(sub)


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from vlmrm_fast.encoders.export import export_encoder

    try:
        path = export_encoder(
            args.model,
            args.pretrained,
            checkpoint=args.checkpoint,
            batch_size=args.batch_size,
            precision=args.precision,
            onnx_only=args.onnx_only,
            engine_cache_dir=args.cache_dir,
            device=args.device,
            workspace_gib=args.workspace_gib,
            rebuild=args.rebuild,
            seed=args.seed,
        )
    except (ValueError, RuntimeError, ImportError, OSError) as exc:
        print(f"vlmrm-fast export: error: {exc}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in (path, Path(f"{path}.data")) if p.exists())
    print(f"{'ONNX' if args.onnx_only else 'engine'}: {path} ({size / 2**20:.1f} MiB)")
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="build the TensorRT engine of a CLIP image tower into the engine cache (or write its ONNX file)",
        description="Builds the TensorRT engine the reward model would build on first use, so training starts at once. "
        "With --onnx-only, writes the ONNX export instead (works on the CPU).",
    )
    p.add_argument("model", help="open_clip model name, 'name/tag', 'hf-hub:org/repo' or 'vlmrm-tiny'")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--pretrained", metavar="TAG", help="open_clip pretrained tag (e.g. laion2b_s32b_b82k)")
    weights.add_argument("--checkpoint", metavar="FILE", help="local weights file")
    p.add_argument("--batch-size", type=int, metavar="N", help="the fixed batch the engine runs (required for engines)")
    p.add_argument("--precision", choices=("auto", "bf16", "fp16", "fp32"), default="auto",
                   help="engine precision (auto: bf16 where the GPU has it, else fp16; fp32 with --onnx-only)")
    p.add_argument("--onnx-only", metavar="OUT.onnx", help="write the ONNX export here and stop (no GPU needed)")
    p.add_argument(
        "--cache-dir", metavar="DIR", help="engine cache (default $VLMRM_FAST_ENGINE_CACHE or ~/.cache/vlmrm_fast/engines)"
    )
    p.add_argument("--device", default="auto", help="CUDA device to build for (default: auto)")
    p.add_argument("--workspace-gib", type=float, default=8.0, help="TensorRT builder workspace limit (GiB)")
    p.add_argument("--rebuild", action="store_true", help="build even when a valid engine is cached")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights (models without pretrained weights)")
    p.set_defaults(func=_export)


# Each entry adds one subcommand; the job's code lives in its own module.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_info, _add_train, _add_export]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlmrm-fast", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
