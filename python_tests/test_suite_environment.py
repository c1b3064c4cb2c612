"""The suite holds in any caller's environment: settings a user may have exported (the Hugging Face
hub's offline switch and cache, this package's traceback switch, a SLURM allocation or a torchrun
job around the run, another MuJoCo GL backend) are cleared by conftest.py before any test reads them."""

from __future__ import annotations

import pathlib

import pytest
from child_process import run_python

# a child pytest run under hostile settings: left out of the quick subset (-m "not slow")
pytestmark = pytest.mark.slow

HOSTILE = {
    "HF_HUB_OFFLINE": "1",  # turned "unreachable" into "not in the local cache" (seen on a GPU machine)
    "HF_HOME": "/nonexistent/hf-home",
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "TRANSFORMERS_OFFLINE": "1",
    "VLMRM_TRACEBACK": "1",  # every failure would print its traceback instead of one line
    "VLMRM_FAST_COMPILE_CACHE": "/nonexistent/compile-cache",
    "SLURM_STEP_NUM_TASKS": "4",  # srun -n 4: the launcher check would refuse to train
    "SLURM_PROCID": "3",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "MUJOCO_GL": "glfw",
    "WANDB_MODE": "online",
}

TESTS = [
    "test_reward_model.py::test_download_command_finds_cached_weights_and_fails_fast_offline",  # HF_*
    "test_failures.py",  # VLMRM_TRACEBACK
    "test_messages.py::test_bad_yaml_is_one_line_with_file_and_line",
    "test_plan.py::test_the_plan_logs_its_line",  # MUJOCO_GL, the launcher's variables
]


def test_the_callers_settings_do_not_reach_the_tests():
    here = pathlib.Path(__file__).parent
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(here / t) for t in TESTS)]
    result = run_python(args, env=HOSTILE, cwd=str(here), timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
