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
