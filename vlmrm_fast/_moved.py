"""Modules and names that moved, importable from where they were for one release, with a
DeprecationWarning naming the new place. CHANGELOG.md lists them; the next release drops this file.

Modules: :data:`MOVED_MODULES` (``import vlmrm_fast.sim`` still works). Names of a module that became a
package of the same name: :func:`moved_attribute` (``from vlmrm_fast.rendering import BatchRenderer``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

#: old module -> the module that holds its contents now
MOVED_MODULES = {
    "vlmrm_fast.sim": "vlmrm_fast.physics.batch",
    "vlmrm_fast.render_base": "vlmrm_fast.rendering.base",
    "vlmrm_fast.warp_rendering": "vlmrm_fast.rendering.warp",
    "vlmrm_fast.envs.batch": "vlmrm_fast.engine",
    "vlmrm_fast.reward.math": "vlmrm_fast.reward.formulas",
}


def _warn(old: str, new: str) -> None:
    # Attributed to the importing code: past this module's frames (warnings itself skips importlib's).
    frame: types.FrameType | None = sys._getframe(0)
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen") or frame.f_globals is globals()):
        level += frame.f_globals is globals()
        frame = frame.f_back
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=level)


class _Alias(types.ModuleType):
    """The old module: every attribute read from the new one."""

    def __init__(self, old: str, new: str):
        super().__init__(old, f"moved to {new}")
        self.__target = new

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(self.__target), name)

    def __dir__(self) -> list[str]:
        return dir(importlib.import_module(self.__target))


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED_MODULES[spec.name]
        _warn(spec.name, new)
        return _Alias(spec.name, new)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> None:
    """Makes the old module names importable (once per process; ``vlmrm_fast/__init__`` calls it)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())


def moved_attribute(namespace: dict[str, Any], moved: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``moved``'s names (name -> the module holding it now) in the module
    of globals ``namespace``, with the warning the first time each is read."""
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        _warn(f"{module}.{name}", f"{moved[name]}.{name}")
        value = namespace[name] = getattr(importlib.import_module(moved[name]), name)
        return value

    return __getattr__
