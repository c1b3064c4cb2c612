"""The README's tour runs as printed: its Python block, taken from README.md itself, on a CPU, offline."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from child_process import package_env

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARK = "<!-- python_tests/test_readme.py runs the next Python block as printed -->"


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    assert text.count(MARK) == 1, "the README marks the one block this test runs"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARK) :], re.S)
    assert match, "a Python block follows the mark"
    return match.group(1)


@pytest.mark.slow  # the tour's SAC run in a child process
def test_the_readme_snippet_runs_as_printed(tmp_path):
    snippet = readme_snippet()
    assert "vlmrm-tiny" in snippet  # nothing to download
    env = package_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-P", "-c", snippet],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    renderer, shape = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert renderer in ("egl", "warp") and shape == "torch.Size([4])", done.stdout
    assert "\r" not in done.stderr and "NVIDIA CUDA driver" not in done.stderr, done.stderr
    assert not list(tmp_path.iterdir()), "the tour writes nothing"


def test_the_readme_commands():
    """Three commands: one install (an apt line that works with and without sudo, PyTorch's CPU build, the
    package: ".[warp]", ".[dev]" for the tests, each one build), one test run (the quick subset named beside
    it), the main job; CI runs the same, less the CPU index it cannot reach."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Install, test, run\n.*?```bash\n(.*?)```", text, re.S)
    assert block
    commands = [line for line in block.group(1).splitlines() if line and not line.startswith("#")]
    setup, everything, job = commands
    update, apt, cpu_torch, install = setup.split(" && ")
    assert update == "$(command -v sudo) apt-get update" and apt.startswith("$(command -v sudo) apt-get install -y ")
    assert cpu_torch == "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
    assert install == 'pip install ".[warp]"' and '".[dev]"' in block.group(1)
    assert everything == "python3 -P -m pytest python_tests" and '-m "not slow"' in block.group(1)
    assert job == "vlmrm-fast train configs/quickstart.yaml"
    ci = (ROOT / ".ci" / "run").read_text()
    packages = apt.split("install -y ")[1].split()
    assert f"install -y -qq {' '.join(packages)}" in ci
    assert 'python3 -m pip install ".[dev]"\n' in ci and "pip install .\n" not in ci  # the core built once
    assert "download.pytorch.org" not in ci  # CI installs from PyPI alone (docs/install.md)
    assert ci.rstrip().endswith(everything)


def test_no_sentence_cites_an_issue_number():
    """The product speaks for itself: code, tests, benchmarks, tools and docs say what a sentence means instead
    of citing a tracker's issue number no reader can look up (an upstream project's issue, by its full
    owner/name#number, can be; the changelog keeps history as written)."""
    cited = re.compile(r"\bissues? #?\d+", re.I)
    places = [
        ROOT / "README.md",
        *(ROOT / d for d in ("vlmrm_fast", "python_tests", "bench", "docs", "tools", "examples", "configs")),
    ]
    files = [p for place in places for p in ([place] if place.is_file() else place.rglob("*")) if p.is_file()]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.suffix in {".py", ".md", ".yaml", ".sh", ".sbatch", ".toml", ".txt"}
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if cited.search(line) and path != pathlib.Path(__file__)
    ]
    assert not found, "\n".join(found)
