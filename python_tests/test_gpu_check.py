"""tools/gpu_check_all.py lays the GPU checks out in loans of the GPU machine (15 minutes of device time,
its start included): loan 1 holds the build, the tests and the headline figures in about 12 minutes,
every call well under the 10 minutes a device call may run, and a loan never starts the next one's."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "gpu_check_all.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_all", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_every_loan_fits_and_loan_one_holds_the_build_and_the_tests(gpu_check):
    loans = gpu_check.loans()
    assert list(loans) == sorted(loans) and min(loans) == 1
    for calls in loans.values():
        assert gpu_check.loan_seconds(calls) <= gpu_check.LOAN_BUDGET_S
        assert next(iter(calls.values()))[0].name.startswith("build")  # each loan's machine builds first
        for checks in calls.values():
            assert sum(c.estimate_s for c in checks) <= gpu_check.CALL_BUDGET_S < 540
    first = {c.name for checks in loans[1].values() for c in checks}
    assert {"build", "tests", "e2e-egl", "e2e-physics", "physics", "fp8-L14"} <= first
    names = [c.name for c in gpu_check.CHECKS]
    assert len(names) == len(set(names))


def test_calls_run_in_order_and_a_loan_stops_at_its_end(gpu_check):
    state: dict = {"checks": {}}
    loan, call, group = gpu_check.next_group(state, None)
    assert (loan, call) == (1, 1) and group[0].name == "build"
    for check in group:
        state["checks"][check.name] = {}
    loan, call, group = gpu_check.next_group(state, 1)
    assert (loan, call) == (1, 2) and [c.name for c in group] == ["tests"]
    state["checks"]["tests"] = {}
    loan, call, group = gpu_check.next_group(state, 1)  # the same machine: loan 2 waits for a later loan
    assert loan == 2 and call == 0 and group
    loan, call, group = gpu_check.next_group(state, None)  # a fresh machine carrying the state
    assert (loan, call) == (2, 1) and group[0].name == "build-2"


def test_the_plan_prints_the_device_calls(gpu_check, capsys):
    assert gpu_check.plan(parts=2) == 0
    out = capsys.readouterr().out
    assert 'carry [".device/parts/1"]  command: bash .device/parts/1/receive.sh' in out
    assert 'carry [".device/parts/2"]  command: source .device/parts/2/setup.sh && tools/gpu_check.sh all' in out
    assert "GPU_CHECK_STATE=.gpucheck/state.json" in out and out.count("  then give_back\n") == len(gpu_check.loans())
