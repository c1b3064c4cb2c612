"""Markers that skip by probing the capability; VLMRM_REQUIRE_GPU=1 / VLMRM_REQUIRE_EGL=1
turn those skips into failures on machines that must have them."""

from __future__ import annotations

import functools
import os

import pytest


def _is_user_setting(name: str) -> bool:
    """Whether environment variable ``name`` is a setting of the caller's that the suite must not
    depend on: the Hugging Face hub's (HF_HUB_OFFLINE turns "unreachable" into "not in the local
    cache", HF_HOME moves the cache), Weights & Biases', this package's own (but the switches the
    suite is told to run with), its caches', and a launcher's (a suite started inside a SLURM
    allocation or a torchrun job would otherwise look like one of its ranks)."""
    if name.startswith(("VLMRM_REQUIRE_", "VLMRM_TEST_")):
        return False
    prefixes = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "WANDB_", "VLMRM_", "SLURM_", "TORCHELASTIC_")
    launcher = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"}
    return name.startswith(prefixes) or name in launcher or name == "TORCHINDUCTOR_CACHE_DIR"


# Before anything reads them (huggingface_hub reads HF_HUB_OFFLINE once, at import), and for the
# child processes the tests start, which inherit this environment.
for _name in [n for n in os.environ if _is_user_setting(n)]:
    del os.environ[_name]

# Before any test module imports mujoco's renderers: headless GL everywhere, whatever the caller chose.
os.environ["MUJOCO_GL"] = "egl"
os.environ["PYOPENGL_PLATFORM"] = "egl"


def pytest_configure(config: pytest.Config) -> None:
    """A package that cannot be imported (a clone's source tree without its compiled core, first on
    sys.path under `python3 -m pytest` without -P; a broken install) stops the run with its one line,
    instead of one collection error per test file."""
    try:
        import vlmrm_fast.runtime.native  # noqa: F401  (the native core, loaded)
    except ImportError as exc:
        raise pytest.UsageError(str(exc)) from None


@functools.cache
def _build_info() -> dict:
    from vlmrm_fast import build_info

    return build_info()


def _gpu_missing() -> str | None:
    """Why the GPU tests cannot run here, in the words of `vlmrm-fast info` (vlmrm_fast.runtime.device)."""
    import torch

    info = _build_info()
    if info["cuda_compiled"] and info["cuda_available"] and torch.cuda.is_available():
        return None
    from vlmrm_fast.runtime.device import no_gpu_reason

    return no_gpu_reason()


def _egl_missing() -> str | None:
    info = _build_info()
    return None if info["egl_available"] else f"no headless EGL ({info['egl_error']})"


def _tensorrt_missing() -> str | None:
    reason = _gpu_missing()
    if reason:
        return reason
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return "tensorrt is not installed (pip install .[tensorrt])"
    return None


def _warp_missing() -> str | None:
    from vlmrm_fast.runtime.warp import warp_available

    return warp_available()


_PROBES = {
    "gpu": (_gpu_missing, "VLMRM_REQUIRE_GPU"),
    "egl": (_egl_missing, "VLMRM_REQUIRE_EGL"),
    "tensorrt": (_tensorrt_missing, "VLMRM_REQUIRE_TENSORRT"),
    "warp": (_warp_missing, "VLMRM_REQUIRE_WARP"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker, (probe, env) in _PROBES.items():
        if item.get_closest_marker(marker) is None:
            continue
        reason = probe()
        if reason is None:
            continue
        if os.environ.get(env) == "1":
            pytest.fail(f"{env}=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def humanoid():
    """gymnasium's humanoid model, unedited."""
    import mujoco

    from vlmrm_fast.envs.humanoid import gymnasium_humanoid_xml

    return mujoco.MjModel.from_xml_path(gymnasium_humanoid_xml())


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for the tiny model's training runs: it gains nothing from more, and loses
    much to a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def humanoid_tiny_rm():
    """The tiny CLIP with the humanoid tasks' prompts, alpha 0.5, on the CPU."""
    from vlmrm_fast import load_reward_model
    from vlmrm_fast.envs import get_task

    spec = get_task("humanoid-kneeling")
    return load_reward_model(
        "vlmrm-tiny",
        target_prompts=spec.target_prompts,
        baseline_prompts=spec.baseline_prompts,
        alpha=0.5,
        device="cpu",
    )


@pytest.fixture
def rows_rounded_by_batch_size():
    """A CPU whose BLAS rounds a product's rows by how many there are (tolerances.rows_rounded_by_batch_size): a
    comparison across batch layouts shows that its tolerance holds there too."""
    from tolerances import rows_rounded_by_batch_size as rounded

    with rounded():
        yield


@pytest.fixture(autouse=os.environ.get("VLMRM_TEST_OTHER_CPU") == "1")
def _every_test_on_another_cpu(request):
    """VLMRM_TEST_OTHER_CPU=1: every test under :func:`rows_rounded_by_batch_size` (the suite as such a CPU runs it)."""
    if os.environ.get("VLMRM_TEST_OTHER_CPU") == "1":
        request.getfixturevalue("rows_rounded_by_batch_size")
    yield
