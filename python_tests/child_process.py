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


# What the test's children (training_child.py, sharded_job.py) import before their first step: a fresh
# process spends seconds on it, a child forked from the server that imported it once none.
_PRELOAD = ["vlmrm_fast.training.train", "vlmrm_fast.cli", "vlmrm_fast.distributed", "training_child", "sharded_job"]


def run_preloaded(script: str, argv: list[str], env: dict[str, str], stdout: str, stderr: str) -> None:
    """``script``'s main() as ``python -P SCRIPT.py ARGV`` would run it, with ``env`` as its environment and
    its output in the files ``stdout`` and ``stderr`` (one file given twice: both in it); exits as that
    process would (its atexit handlers run)."""
    import atexit
    import importlib

    import torch

    for fd, path in ((1, stdout), (2, stderr)):
        if fd == 2 and stderr == stdout:  # 2>&1
            os.dup2(1, 2)
            continue
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    if env.get("OMP_NUM_THREADS"):  # read by a fresh process's torch at its start
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    module = importlib.import_module(script)
    sys.argv = [module.__file__, *argv]
    try:
        code = module.main()
    finally:
        atexit._run_exitfuncs()
    sys.exit(code)


class PreloadedChild:
    """``subprocess.Popen([python, -P, SCRIPT.py, *argv], env=env, stdout=PIPE, stderr=PIPE)`` (or
    ``stderr=STDOUT``; the output in files in ``folder``) for a script of python_tests with a main(),
    forked from a server process (multiprocessing's forkserver) that has imported the package's stack
    once: the same main(), arguments, environment, signals and exit status, without the seconds of imports."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        folder: pathlib.Path,
        *,
        script: str = "training_child",
        stderr_to_stdout: bool = False,
    ):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)  # before the server starts; later calls change nothing
        folder.mkdir(parents=True, exist_ok=True)
        self.stdout_path = folder / "stdout.txt"
        self.stderr_path = self.stdout_path if stderr_to_stdout else folder / "stderr.txt"
        args = (script, argv, env, str(self.stdout_path), str(self.stderr_path))
        self._process = context.Process(target=run_preloaded, args=args)
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
            raise subprocess.TimeoutExpired([self.stdout_path.parent.name], timeout or 0)
        return (
            self.stdout_path.read_text(),
            "" if self.stderr_path == self.stdout_path else self.stderr_path.read_text(),
        )
