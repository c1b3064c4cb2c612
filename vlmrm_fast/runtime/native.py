"""The native core, loaded in one place: libmujoco first (the core links to it), then ``vlmrm_fast._core``.

Every module that calls the core imports this module before it; a core that is there but does not
load (a broken install, a missing system library) is named in one line with its fix.
"""

import importlib.util

import mujoco  # noqa: F401  (loads libmujoco before the native core links to it)

# Triton (torch.compile's GPU code generator, loaded by torch._dynamo) carries its own LLVM: loaded after
# Mesa's EGL driver has loaded Mesa's LLVM (the core's EGL probe, the first EGL renderer), it crashes the
# process. Loaded first, both work.
if importlib.util.find_spec("triton") is not None:
    import triton._C.libtriton  # noqa: F401

try:
    import vlmrm_fast._core  # noqa: F401
except ImportError as _exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"vlmrm_fast's native core could not be imported ({_exc}). Reinstall with `pip install .` "
        "(or `pip install -e .` in a clone)."
    ) from _exc
