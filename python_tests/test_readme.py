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


def readme_commands() -> list[str]:
    """The commands of the README's "Install, test, run" block, in order (comments and blank lines left out)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Install, test, run\n.*?```bash\n(.*?)```", text, re.S)
    assert block, "the README has an Install, test, run section with a bash block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_commands():
    """A user pastes them in order into a fresh shell: system packages (with and without sudo), a venv made and
    entered, the package with the test extras in one build (PyPI alone: no other index to wait for), the whole
    suite (the quick subset named beside it), the main job."""
    apt, install, tests, job = readme_commands()
    update, packages = apt.split(" && ")
    assert update == "$(command -v sudo) apt-get update" and packages.startswith(
        "$(command -v sudo) apt-get install -y "
    )
    assert "python3-venv" in packages.split()  # Debian's python3 makes no venv without it
    assert install == 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[dev]"'
    assert "--index-url" not in install and "--extra-index-url" not in install
    assert tests == "python3 -P -m pytest python_tests"
    assert job == "vlmrm-fast train configs/quickstart.yaml"
    text = (ROOT / "README.md").read_text()
    assert '-m "not slow"' in text[text.index("## Install, test, run") : text.index("## A tour")]


def test_ci_runs_the_readme_commands_verbatim_in_order():
    """.ci/run is the README's commands themselves, each on a line of its own, in the README's order (with the
    code checks between them), not a variant of them."""
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    at = [ci.index(command) if command in ci else -1 for command in readme_commands()]
    assert -1 not in at, f"not in .ci/run verbatim: {[c for c, i in zip(readme_commands(), at) if i == -1]}"
    assert at == sorted(at), "the README's order"
    install = ci.index('python3 -m venv .venv && . .venv/bin/activate && pip install ".[dev]"')
    assert not [line for line in ci[:install] if "pip install" in line], "one install, one build of the core"


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
