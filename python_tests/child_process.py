"""Running Python in a child process against the vlmrm_fast under test."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import vlmrm_fast


def package_env(**extra: str) -> dict[str, str]:
    """This process's environment with the tested vlmrm_fast (installed, or built in place) first on
    PYTHONPATH: a child started with ``-P`` imports it, never the clone's sources without a core."""
    package_root = str(pathlib.Path(vlmrm_fast.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_python(
    args: list[str], *, env: dict | None = None, timeout: float = 300, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """``python -P ARGS``: the child imports the vlmrm_fast this process tested (installed or
    built in place), never a source tree that happens to be the working directory."""
    return subprocess.run(
        [sys.executable, "-P", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**package_env(), **(env or {})},
    )
