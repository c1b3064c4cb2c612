"""Whether this install can run: each part a run loads, loaded for real, and a broken one named with its fix.

An install can exit 0 and still be broken: pip resolves ``torchvision`` from one index and ``torch`` from
another, and torchvision's compiled operators then fail to register (``operator torchvision::nms does not
exist``) the moment open_clip imports it. ``vlmrm-fast info`` lists every part; every other command that
fails on a broken install reports the broken part in one line instead of the traceback of whatever import
found it (``failures.run_command``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import os

#: How to put torch and torchvision back in step: both from one index, in one command.
REINSTALL_TORCH = (
    "reinstall both from one index: `pip install --force-reinstall torch torchvision` (PyPI), or both with "
    "`--index-url https://download.pytorch.org/whl/cpu` (PyTorch's CPU build; docs/install.md)"
)


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the install a run loads: loaded (``problem`` None, ``detail`` its version), or why not."""

    name: str
    detail: str
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def _torch_version() -> str:
    """torch's own version string, which names its build (``2.13.0+cpu``); its package's when it does not import."""
    try:
        import torch
    except Exception:
        return _version("torch")
    return str(torch.__version__)


def _torch() -> Part:
    try:
        import torch
    except Exception as exc:
        return Part("torch", _version("torch"), f"torch {_version('torch')} does not import ({exc}); reinstall it")
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    return Part("torch", f"{torch.__version__} ({build})")


def _torchvision() -> Part:
    pair = f"torchvision {_version('torchvision')} does not match torch {_torch_version()}"
    try:
        import torch
        import torchvision.ops

        # The compiled operators, called: an import alone can pass with a build whose operators never registered.
        torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Part("torchvision", _version("torchvision"), f"{pair} ({reason}): {REINSTALL_TORCH}")
    return Part("torchvision", f"{torchvision.__version__}, compiled operators run")


def _module(name: str, distribution: str) -> Part:
    try:
        importlib.import_module(name)
    except Exception as exc:
        return Part(
            name, _version(distribution), f"{name} does not import ({exc}); reinstall it: pip install {distribution}"
        )
    return Part(name, _version(distribution))


def _native_core() -> Part:
    try:
        importlib.import_module("vlmrm_fast.runtime.native")
    except Exception as exc:
        return Part("native core", "", str(exc))
    return Part("native core", "loaded")


def install_parts() -> list[Part]:
    """Every part a run loads, in load order (torch before what needs it), each loaded now."""
    torch = _torch()
    torchvision = _torchvision() if torch.ok else Part("torchvision", _version("torchvision"), "needs torch")
    parts = [torch, torchvision]
    if torchvision.ok:
        parts.append(_module("open_clip", "open_clip_torch"))
    parts.append(_native_core())
    return parts


@functools.cache
def broken_install() -> str | None:
    """The first broken part of the install, as the one line that names it and its fix; None when sound.
    Called once a command has failed unexpectedly, to tell a broken install from a bug."""
    try:
        return next((part.problem for part in install_parts() if not part.ok), None)
    except Exception:  # a diagnosis never replaces the failure it was asked about
        return None


def broken_install_line(command: str) -> str | None:
    """``vlmrm-fast COMMAND: broken install: <the part and its fix>`` when the install is broken (and no
    traceback was asked for); None otherwise, when a failure is the command's own."""
    if os.environ.get("VLMRM_TRACEBACK") == "1":
        return None
    broken = broken_install()
    return None if broken is None else f"vlmrm-fast {command}: broken install: {broken}"
