"""The command line's start-up and a clone's first import: fast help, a version, one line that names the fix."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import vlmrm_fast
from vlmrm_fast import cli

PACKAGE = pathlib.Path(vlmrm_fast.__file__).parent
HEAVY = ("torch", "open_clip", "stable_baselines3", "mujoco", "warp", "vlmrm_fast._core")


def _modules_after(argv: list[str]) -> tuple[int, str, list[str]]:
    """Runs the CLI's main with ``argv`` in a fresh interpreter; its exit code, stdout, and which heavy
    modules it imported."""
    code = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from vlmrm_fast import cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                rc = cli.main({argv!r})
            except SystemExit as exc:
                rc = exc.code
        heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
        print(json.dumps([rc, out.getvalue(), heavy]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120, env=_env(), check=False
    )
    assert done.returncode == 0, done.stderr
    rc, out, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    return rc, out, heavy


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(PACKAGE.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_help_and_version_import_no_heavy_module():
    rc, out, heavy = _modules_after(["--help"])
    assert rc == 0 and "train" in out and "landscape" in out
    assert heavy == [], f"vlmrm-fast --help imported {heavy}"
    rc, out, heavy = _modules_after(["--version"])
    assert rc == 0 and out.strip() == f"vlmrm-fast {vlmrm_fast.__version__}"
    assert heavy == [], f"vlmrm-fast --version imported {heavy}"


def test_import_loads_nothing_heavy():
    code = f"import sys, vlmrm_fast; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=_env(), check=True)
    assert done.stdout.strip() == "[]"


def test_summaries_are_the_subcommands_own_help():
    """`vlmrm-fast --help` shows each subcommand's one line without building it: the same line as its parser."""
    full = cli.build_parser()
    subparsers = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    assert set(helps) == set(cli.SUBCOMMANDS)
    assert helps == cli.SUMMARIES


def test_a_subcommand_is_parsed_in_full_when_asked():
    parser = cli.build_parser("info", lazy=True)
    args = parser.parse_args(["info", "--json"])
    assert args.json and args.func is not None


def _source_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A clone's layout: the package's Python files and the core's .pyi stubs, no compiled core."""
    tree = tmp_path / "clone"
    shutil.copytree(
        PACKAGE,
        tree / "vlmrm_fast",
        ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"),
    )
    assert list((tree / "vlmrm_fast" / "_core").glob("*.pyi")), "the clone's _core/ holds the stubs"
    return tree


MESSAGE = "is a source tree without its compiled native core"


def _clone_env() -> dict[str, str]:
    """An environment in which Python started in the clone finds the clone's package first, with
    site-packages on PYTHONPATH for pytest and the libraries, and (with -S) without the .pth hooks
    an editable install of this package puts ahead of sys.path."""
    import pytest

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pathlib.Path(pytest.__file__).resolve().parents[1])
    return env


def test_import_from_a_source_tree_without_core_names_the_fix(tmp_path):
    tree = _source_tree(tmp_path)
    done = subprocess.run(
        [sys.executable, "-S", "-c", "import vlmrm_fast"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=_clone_env(),
        check=False,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: vlmrm_fast: ") and MESSAGE in last, done.stderr
    assert "`pip install -e .`" in last and "python3 -P" in last


def test_pytest_from_a_source_tree_without_core_stops_with_that_line(tmp_path):
    """`python3 -m pytest` in a clone (the source tree first on sys.path, no -P) stops at once with the
    import's line, not one collection error per test file."""
    tree = _source_tree(tmp_path)
    tests = tree / "python_tests"
    tests.mkdir()
    shutil.copy(pathlib.Path(__file__).parent / "conftest.py", tests / "conftest.py")
    for name in ("test_a.py", "test_b.py"):
        (tests / name).write_text("from vlmrm_fast import load_reward_model\n\ndef test_x():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-S", "-m", "pytest", "python_tests", "-p", "no:cacheprovider"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=_clone_env(),
        check=False,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 4, output  # pytest's usage error: nothing collected
    assert output.count(MESSAGE) == 1, output
    assert "ERROR: vlmrm_fast: " in output and "during collection" not in output, output


def test_help_lists_each_command_once_in_plain_words():
    """`vlmrm-fast --help` reads as plain text (no reST markup) and names each command on one line of its own."""
    rc, out, _ = _modules_after(["--help"])
    assert rc == 0 and "``" not in out, out
    for name in cli.SUBCOMMANDS:
        starts = [line for line in out.splitlines() if line.split()[:1] == [name]]
        assert len(starts) == 1, f"{name!r} starts {len(starts)} lines of --help:\n{out}"
    assert "{" not in out, out  # argparse's {info,models,...} list of choices, a second list of the commands


def test_output_into_a_pipe_closed_early_is_no_error():
    """`vlmrm-fast models | head -1`: the reader closing the pipe ends the command with exit code 0, silently."""
    child = subprocess.Popen(
        [sys.executable, "-P", "-m", "vlmrm_fast.cli", "models"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert child.stdout is not None and child.stdout.readline()
    child.stdout.close()
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 0 and stderr == b"", stderr.decode()


def test_output_still_buffered_when_the_pipe_closed_is_no_error():
    """The other order of `vlmrm-fast models | head -1`: the reader has closed the pipe before the command's
    buffered output is flushed, so the closed pipe is met only at the end. Exit code 0, silently, not
    Python's "Exception ignored ... BrokenPipeError" and exit code 120 at its flush on exit."""
    script = textwrap.dedent(
        """
        import io, os, sys
        from vlmrm_fast import cli
        read_end, write_end = os.pipe()
        os.close(read_end)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(write_end, "w"), buffer_size=1 << 20))
        sys.exit(cli.main(["models"]))
        """
    )
    done = subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, env=_env(), timeout=120)
    assert done.returncode == 0 and done.stderr == b"", (done.returncode, done.stderr.decode())


def _broken_torchvision(tmp_path: pathlib.Path) -> dict[str, str]:
    """An environment whose torchvision is a release built for another torch: its import fails the way a
    CUDA torchvision fails beside a CPU-only torch (the operators it registers are not found)."""
    fake = tmp_path / "site"
    (fake / "torchvision").mkdir(parents=True)
    (fake / "torchvision" / "__init__.py").write_text(
        'raise RuntimeError("operator torchvision::nms does not exist")\n'
    )
    info = fake / "torchvision-0.28.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(fake), env["PYTHONPATH"]])
    env.pop("VLMRM_TRACEBACK", None)
    return env


def _broken_line(stderr: str, command: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    import torch

    line = lines[0]
    assert line.startswith(f"vlmrm-fast {command}: broken install: torchvision 0.28.0 does not match torch "), line
    assert torch.__version__ in line and "(operator torchvision::nms does not exist)" in line, line
    assert "reinstall both from one index" in line and "pip install --force-reinstall torch torchvision" in line
    return line


def test_info_names_a_torchvision_that_does_not_match_torch(tmp_path):
    """`vlmrm-fast info` loads what a run loads: a torchvision built for another torch is named, with the fix,
    and the command fails (exit code 2) instead of calling the install healthy."""
    done = subprocess.run(
        [sys.executable, "-P", "-m", "vlmrm_fast.cli", "info"],
        capture_output=True,
        text=True,
        env=_broken_torchvision(tmp_path),
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    _broken_line(done.stderr, "info")
    assert "  torch " in done.stdout and "  torchvision  BROKEN: torchvision 0.28.0" in done.stdout, done.stdout


@pytest.mark.slow  # starts a training run's imports in a child
def test_every_command_on_a_broken_install_says_so_in_one_line(tmp_path):
    """A run that reaches the broken part (open_clip imports torchvision) fails in one line naming it."""
    config = pathlib.Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
    landscape = ["landscape", "cartpole", "--variable", "pole_angle", "--model", "vlmrm-tiny", "--points", "3"]
    env = _broken_torchvision(tmp_path)
    for command in (["train", str(config)], landscape):
        done = subprocess.run(
            [sys.executable, "-P", "-m", "vlmrm_fast.cli", *command],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
            check=False,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        _broken_line(done.stderr, command[0])
