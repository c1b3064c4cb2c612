"""``vlmrm-fast`` command line: one subcommand per job.

vlmrm-fast info                         what the build and the machine offer
vlmrm-fast models [NAME ...]            the model families and sizes: input size, FLOPs per image
vlmrm-fast download MODEL               fetch pretrained weights (and a hub tokenizer) into the local cache
vlmrm-fast train CONFIG.yaml            train an agent with a VLM reward
vlmrm-fast rollout CHECKPOINT.zip       play a saved policy: VLM and ground-truth returns, success, a video
vlmrm-fast best RUN_DIR                 rank a run's checkpoints by their rollouts' VLM return
vlmrm-fast export MODEL --batch-size N  build a TensorRT engine of MODEL's image tower ahead of time
vlmrm-fast check-precision MODEL        embedding cosine and reward Spearman of FP8/fp16 against bf16
vlmrm-fast dataset sample|label|render  labelled-state datasets
vlmrm-fast evaluate DATASET.npz         EPIC distance of reward models to labels
vlmrm-fast landscape TASK               reward along one state variable
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

from vlmrm_fast.failures import EXIT_SIGTERM, Terminated, run_command


def nvidia_driver_present() -> bool:
    """True when this machine has an NVIDIA driver (its kernel module or its user-space library)."""
    if os.path.exists("/proc/driver/nvidia/version"):
        return True
    import ctypes

    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def describe_cuda_device(info: dict) -> str:
    """The CUDA device, or why there is none, in words a user can act on."""
    if info["cuda_available"]:
        return info["cuda_device_name"]
    if not nvidia_driver_present():
        return "no GPU: this machine has no NVIDIA driver (CPU paths are used)"
    error = info.get("cuda_error") or "unknown error"
    if "insufficient" in error.lower():
        return f"no usable GPU: the NVIDIA driver is older than CUDA {info['cuda_version']} needs ({error}); update the driver"
    if info.get("cuda_device_count", 0) == 0:
        return f"no GPU: the NVIDIA driver sees no device ({error})"
    return f"no usable GPU ({error})"


def _info(args: argparse.Namespace) -> int:
    import vlmrm_fast

    info = vlmrm_fast.build_info()
    if info["cuda_compiled"]:
        usable = describe_cuda_device(info)
    else:
        usable = (
            "a GPU driver is present: rebuild with nvcc on the PATH to use it" if nvidia_driver_present() else "no GPU"
        )
    if args.json:
        print(json.dumps({**info, "cuda_summary": usable, "warp": warp_renderer()}, indent=2))
        return 0
    cuda = f"compiled ({info['cuda_version']})" if info["cuda_compiled"] else "not compiled"
    egl = (
        f"{info['egl_vendor']} EGL {info['egl_version']}"
        if info["egl_available"]
        else f"unavailable ({info['egl_error']})"
    )
    print(f"vlmrm-fast {vlmrm_fast.__version__}")
    print(f"  MuJoCo   {info['mujoco_version']}")
    print(f"  CUDA     {cuda}; {usable}")
    print(f"  EGL      {egl}; devices: {info['egl_devices']}")
    print(f"  Warp     {warp_renderer()}")
    return 0


def warp_renderer() -> str:
    """Whether renderer="warp" can be used here, in words."""
    from vlmrm_fast.warp_rendering import warp_available

    missing = warp_available()
    if missing is not None:
        return f"unavailable: {missing}"
    import warp

    return f"MuJoCo Warp renderer available (warp {warp.__version__})"


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print what the native core was built with and what this machine offers")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_info)


def _download(args: argparse.Namespace) -> int:
    from vlmrm_fast.models import download_model

    found = download_model(args.model, args.pretrained, cache_dir=args.cache_dir)
    for what, path in found.items():
        print(f"{what}: {path}")
    return 0


def _add_download(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "download",
        help="fetch a model's pretrained weights, and its tokenizer where that lives on the hub, into the local cache "
        "(needs network)",
    )
    p.add_argument("model", help="'name/tag' (e.g. ViT-L-14/laion2b_s32b_b82k) or 'hf-hub:org/repo'")
    p.add_argument("--pretrained", metavar="TAG", help="the tag, if not given as name/tag")
    p.add_argument("--cache-dir", metavar="DIR", help="cache folder (default: the Hugging Face cache, HF_HUB_CACHE)")
    p.set_defaults(func=_download, setup=True)


def _models(args: argparse.Namespace) -> int:
    from vlmrm_fast.models.listing import print_models

    return print_models(args.names, family=args.family, as_json=args.json)


def _add_models(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.models.families import FAMILIES

    p = sub.add_parser(
        "models",
        help="list the model families and their sizes: input size, embedding size, image-tower parameters and "
        "GFLOPs per image",
        description="Without names: every open_clip architecture, by family, from the table shipped with the "
        "package. With names: those architectures, measured now (on the meta device: no weights, no memory).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="architectures to measure now (e.g. one you registered)")
    p.add_argument("--family", choices=[f.key for f in FAMILIES], help="only this family")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_models)


def _add_train(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.training.train import add_subcommand

    add_subcommand(sub)


def _add_rollout(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.training.policy_rollouts import add_subcommand

    add_subcommand(sub)


def _add_best(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.training.best_checkpoint import add_subcommand

    add_subcommand(sub)


def _add_export(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.encoders.export import add_subcommand

    add_subcommand(sub)


def _add_check_precision(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation.check_precision import add_subcommand

    add_subcommand(sub)


def _add_evaluation(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation import cli

    cli.add_dataset(sub)
    cli.add_evaluate(sub)
    cli.add_landscape(sub)


# Each entry adds one subcommand (or a family); the job's code lives in its own module.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_info,
    _add_models,
    _add_download,
    _add_train,
    _add_rollout,
    _add_best,
    _add_export,
    _add_check_precision,
    _add_evaluation,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vlmrm-fast", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one subcommand under the package's failure policy (``vlmrm_fast.failures``): its parser's
    defaults give the job (``func``), whether a RuntimeError while it runs is the machine's answer
    (``setup``) and what a Ctrl-C means (``interrupted``)."""
    from vlmrm_fast.training.signals import sigterm_raises

    try:
        with sigterm_raises():  # importing a command's modules takes seconds: a SIGTERM then says so
            args = build_parser().parse_args(argv)
    except Terminated:
        print("vlmrm-fast: stopped by SIGTERM while starting; nothing was done", file=sys.stderr)
        return EXIT_SIGTERM
    name = " ".join(part for part in (args.command, getattr(args, "job", None)) if part)
    return run_command(
        name,
        lambda: args.func(args),
        setup=getattr(args, "setup", False),
        interrupted=getattr(args, "interrupted", "interrupted"),
        terminated=getattr(args, "terminated", "stopped by SIGTERM"),
    )


if __name__ == "__main__":
    sys.exit(main())
