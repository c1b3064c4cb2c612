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
import sys
from collections.abc import Callable, Sequence

from vlmrm_fast.failures import (
    EXIT_REFUSED,
    EXIT_SIGTERM,
    ExpectedFailure,
    Terminated,
    closed_pipe,
    run_command,
)
from vlmrm_fast.runtime.health import broken_install_line


def _info(args: argparse.Namespace) -> int:
    from vlmrm_fast.runtime.health import install_parts

    parts = install_parts()
    broken = [part for part in parts if not part.ok]
    if broken:  # what follows needs the parts that failed: name them, and stop
        for part in parts:
            print(f"  {part.name:<12} {part.detail}" if part.ok else f"  {part.name:<12} BROKEN: {part.problem}")
        raise BrokenInstall(broken[0].problem or "")

    import vlmrm_fast
    from vlmrm_fast.runtime.device import describe_cuda_device

    info = vlmrm_fast.build_info()
    usable = describe_cuda_device(info)
    accelerators = {"warp": warp_renderer(), "fp8": fp8_support(), "tensorrt": tensorrt_support()}
    if args.json:
        installed = {part.name: part.detail for part in parts}
        print(json.dumps({**info, "installed": installed, "cuda_summary": usable, **accelerators}, indent=2))
        return 0
    cuda = f"compiled ({info['cuda_version']})" if info["cuda_compiled"] else "not compiled"
    egl = (
        f"{info['egl_vendor']} EGL {info['egl_version']}"
        if info["egl_available"]
        else f"unavailable ({info['egl_error']})"
    )
    print(f"vlmrm-fast {vlmrm_fast.__version__}")
    for part in parts:
        print(f"  {part.name:<12} {part.detail}")
    print(f"  MuJoCo       {info['mujoco_version']}")
    print(f"  CUDA         {cuda}; {usable}")
    print(f"  EGL          {egl}; devices: {info['egl_devices']}")
    print(f"  Warp         {accelerators['warp']}")
    print(f"  FP8          {accelerators['fp8']}")
    print(f"  TensorRT     {accelerators['tensorrt']}")
    return 0


class BrokenInstall(ExpectedFailure):
    """A part of the install that a run loads does not load (``vlmrm_fast.runtime.health``)."""

    label = "broken install"


def fp8_support() -> str:
    """Whether precision="fp8" can run on this machine's first GPU, in words."""
    import importlib.metadata

    import torch

    from vlmrm_fast.encoders.fp8 import fp8_unsupported_reason

    reason = fp8_unsupported_reason("cuda" if torch.cuda.is_available() else "cpu")
    return f"unavailable: {reason}" if reason else f"available (torchao {importlib.metadata.version('torchao')})"


def tensorrt_support() -> str:
    """Whether backend="tensorrt" can be used here (an optional extra), in words."""
    from vlmrm_fast.encoders.tensorrt_engine import tensorrt_available

    return "available" if tensorrt_available() else "not installed (optional: pip install '.[tensorrt]')"


def warp_renderer() -> str:
    """Whether renderer="warp" can be used here, in words."""
    from vlmrm_fast.runtime.warp import warp_available

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
    p.add_argument(
        "model",
        help="'name/tag' (e.g. ViT-L-14/laion2b_s32b_b82k), 'hf-hub:org/repo', or a generative VLM judge's hub "
        "repository (e.g. Qwen/Qwen2-VL-2B-Instruct)",
    )
    p.add_argument("--pretrained", metavar="TAG", help="the tag, if not given as name/tag")
    p.add_argument("--cache-dir", metavar="DIR", help="cache folder (default: the Hugging Face cache, HF_HUB_CACHE)")
    p.set_defaults(func=_download, setup=True)


def _models(args: argparse.Namespace) -> int:
    from vlmrm_fast.models.clip.listing import print_models

    return print_models(args.names, family=args.family, as_json=args.json)


def _add_models(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.models.clip.families import FAMILIES

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
    from vlmrm_fast.models.clip.export import add_subcommand

    add_subcommand(sub)


def _add_check_precision(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation.check_precision import add_subcommand

    add_subcommand(sub)


def _add_dataset(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation import commands

    commands.add_dataset(sub)


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation import commands

    commands.add_evaluate(sub)


def _add_landscape(sub: argparse._SubParsersAction) -> None:
    from vlmrm_fast.evaluation import commands

    commands.add_landscape(sub)


# Each entry adds one subcommand; the job's code lives in its own module, imported only when that
# subcommand is the one asked for.
SUBCOMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "info": _add_info,
    "models": _add_models,
    "download": _add_download,
    "train": _add_train,
    "rollout": _add_rollout,
    "best": _add_best,
    "export": _add_export,
    "check-precision": _add_check_precision,
    "dataset": _add_dataset,
    "evaluate": _add_evaluate,
    "landscape": _add_landscape,
}

# The one line `vlmrm-fast --help` shows per subcommand, so that it imports none of them (torch alone takes
# seconds); each is the subcommand's own help (python_tests/test_cli.py compares them). A subcommand
# missing here is built in full for --help.
SUMMARIES: dict[str, str] = {
    "info": "print what the native core was built with and what this machine offers",
    "models": "list the model families and their sizes: input size, embedding size, image-tower parameters and "
    "GFLOPs per image",
    "download": "fetch a model's pretrained weights, and its tokenizer where that lives on the hub, into the local "
    "cache (needs network)",
    "train": "train an SB3 agent with a VLM reward from a YAML config",
    "rollout": "play a saved policy: VLM and ground-truth returns, the paper's success, a video",
    "best": "rank a run's checkpoints by their rollouts' mean VLM return (the paper's choice of result)",
    "export": "build the TensorRT engine of a CLIP image tower into the engine cache (or write its ONNX file)",
    "check-precision": "embedding cosine and reward Spearman of FP8/fp16 against bf16 on task frames",
    "dataset": "labelled-state datasets: sample and render states, import labels",
    "evaluate": "EPIC distance of reward models to human labels, per model and alpha",
    "landscape": "plot the reward along one state variable for several alphas (PNG + CSV)",
}


DESCRIPTION = (
    "Vision-language models as zero-shot reward models for RL, fast: one command per job. "
    "`vlmrm-fast COMMAND --help` tells more of one; `vlmrm-fast info` checks the install; "
    "`vlmrm-fast train configs/quickstart.yaml` runs the quickstart."
)


class _CommandsHelp(argparse.HelpFormatter):
    """Lists the commands once, a line each, under their heading (argparse would first print a line for the
    group itself)."""

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action, argparse._SubParsersAction):
            return "".join(self._format_action(command) for command in action._get_subactions())
        return super()._format_action(action)


def build_parser(command: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The command line's parser. ``lazy``: only ``command``'s subparser is built in full (importing its
    module); the others are their one-line summaries, enough for ``vlmrm-fast --help``."""
    from vlmrm_fast import __version__

    parser = argparse.ArgumentParser(prog="vlmrm-fast", description=DESCRIPTION, formatter_class=_CommandsHelp)
    parser.add_argument("--version", action="version", version=f"vlmrm-fast {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    for name, add in SUBCOMMANDS.items():
        if lazy and name != command and name in SUMMARIES:
            sub.add_parser(name, help=SUMMARIES[name], add_help=False)
        else:
            add(sub)
    return parser


def _command_asked(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one subcommand under the package's failure policy (``vlmrm_fast.failures``): its parser's
    defaults give the job (``func``), whether a RuntimeError while it runs is the machine's answer
    (``setup``) and what a Ctrl-C means (``interrupted``). Output to a pipe closed early (``| head``)
    ends the command quietly: the reader had read enough."""
    try:
        code = _main(argv)
    except BrokenPipeError:  # --help into a closed pipe; a command's own output is run_command's
        return closed_pipe()
    try:  # output still buffered meets a closed pipe here, not in Python's flush at exit (exit code 120)
        sys.stdout.flush()
    except BrokenPipeError:
        closed_pipe()
    return code


def _main(argv: Sequence[str] | None) -> int:
    from vlmrm_fast.training.signals import sigterm_raises

    words = sys.argv[1:] if argv is None else list(argv)
    try:
        with sigterm_raises():  # importing a command's modules takes seconds: a SIGTERM then says so
            args = build_parser(_command_asked(words), lazy=True).parse_args(words)
    except Terminated:
        print("vlmrm-fast: stopped by SIGTERM while starting; nothing was done", file=sys.stderr)
        return EXIT_SIGTERM
    except Exception:  # a command's module that does not import: a broken install says so in one line
        broken = broken_install_line(_command_asked(words) or "")
        if broken is None:
            raise
        print(broken, file=sys.stderr)
        return EXIT_REFUSED
    name = " ".join(part for part in (args.command, getattr(args, "job", None)) if part)
    return run_command(
        name,
        lambda: args.func(args),
        setup=getattr(args, "setup", False),
        interrupted=getattr(args, "interrupted", "interrupted"),
        terminated=getattr(args, "terminated", "stopped by SIGTERM"),
        diagnose=broken_install_line,
    )


if __name__ == "__main__":
    sys.exit(main())
