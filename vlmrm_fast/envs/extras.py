"""The optional task suites (dm_control, gymnasium-robotics): each one's packages, the pip command that
installs them, and their import, which names that command in one line when they are missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

#: extra -> (what it brings, the modules it installs)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dm_control": ("dm_control's suite through shimmy", ("dm_control", "shimmy")),
    "robotics": ("gymnasium-robotics (Franka Kitchen, Fetch, Adroit and Shadow hands)", ("gymnasium_robotics",)),
}


class ExtraMissing(ImportError):
    """An optional suite that is not installed, with the pip command that installs it."""


def install_command(extra: str) -> str:
    return f'pip install "vlmrm-fast[{extra}]"'


def require(extra: str, who: str) -> list[ModuleType]:
    """The modules of ``extra``, imported; :class:`ExtraMissing` naming ``who`` needs them and the pip
    command, in one line."""
    what, modules = EXTRAS[extra]
    # dm_control sets up its GL backend when imported, which loads Mesa's LLVM on a CPU: Triton's LLVM, which
    # the native core loads (runtime/native.py), must be in the process first, or loading it later crashes.
    if importlib.util.find_spec("triton") is not None:
        importlib.import_module("triton._C.libtriton")
    try:
        return [importlib.import_module(name) for name in modules]
    except ImportError as exc:
        raise ExtraMissing(f"{who} needs {what}, which is not installed: {install_command(extra)} ({exc})") from None
