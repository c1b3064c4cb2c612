"""Running Python in a child process against the vlmrm_fast under test."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import signal
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


# What training_child.py imports before its first step: a fresh process spends seconds on it.
_TRAINING_STACK = ["vlmrm_fast.training.train", "vlmrm_fast.cli", "training_child"]


class PreloadedChild:
    """``subprocess.Popen([python, -P, training_child.py, *argv], env=env, stdout=PIPE, stderr=PIPE)`` (or
    ``stderr=STDOUT``; the output in files in ``folder``), forked
    from a server process (multiprocessing's forkserver) that has imported the training stack once: the
    same main(), arguments, environment, signals and exit status, without the seconds of imports."""

    def __init__(self, argv: list[str], env: dict[str, str], folder: pathlib.Path, *, stderr_to_stdout: bool = False):
        import training_child

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_TRAINING_STACK)  # before the server starts; later calls change nothing
        folder.mkdir(parents=True, exist_ok=True)
        self.stdout_path = folder / "stdout.txt"
        self.stderr_path = self.stdout_path if stderr_to_stdout else folder / "stderr.txt"
        target, args = training_child.run_preloaded, (argv, env, str(self.stdout_path), str(self.stderr_path))
        self._process = context.Process(target=target, args=args)
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # as Popen: never a signal to a pid that may have been reused
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        self.returncode = self._process.exitcode
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(["training_child.py"], timeout or 0)
        return (
            self.stdout_path.read_text(),
            "" if self.stderr_path == self.stdout_path else self.stderr_path.read_text(),
        )
