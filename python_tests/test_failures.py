"""One failure policy for every command (vlmrm_fast/failures.py): an expected failure is one line
naming the command, with exit code 2; a bug keeps its traceback; VLMRM_TRACEBACK=1 shows every one."""

from __future__ import annotations

import argparse

import pytest

from vlmrm_fast import cli
from vlmrm_fast.failures import EXIT_REFUSED, EXIT_SIGINT, ExpectedFailure, mark_crash, run_command


@pytest.mark.parametrize(
    "argv, line",
    [
        (["train", "missing.yaml"], "vlmrm-fast train: config error: config file 'missing.yaml' does not exist"),
        (["download", "ViT-B-32"], "vlmrm-fast download: error: "),
        (["evaluate", "missing.npz", "--models", "vlmrm-tiny"], "vlmrm-fast evaluate: error: "),
        (["dataset", "label", "missing.npz", "labels.csv"], "vlmrm-fast dataset label: error: "),
        (["check-precision", "vlmrm-tiny", "--frames", "missing"], "vlmrm-fast check-precision: error: "),
        (["export", "vlmrm-tiny"], "vlmrm-fast export: error: "),
        (["landscape", "cartpole", "--variable", "nothing", "--model", "vlmrm-tiny"], "vlmrm-fast landscape: error: "),
    ],
)
def test_every_command_reports_an_expected_failure_in_one_line(tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VLMRM_TRACEBACK", raising=False)
    assert cli.main(argv) == EXIT_REFUSED
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and len(err.splitlines()) == 1, err


def test_a_bug_keeps_its_traceback_and_vlmrm_traceback_shows_every_failure(monkeypatch, capsys):
    monkeypatch.delenv("VLMRM_TRACEBACK", raising=False)

    def bug() -> int:
        return {}["missing"]

    with pytest.raises(KeyError):
        run_command("job", bug)
    assert run_command("job", _refuse) == EXIT_REFUSED
    assert capsys.readouterr().err.strip() == "vlmrm-fast job: error: the folder is in use"
    monkeypatch.setenv("VLMRM_TRACEBACK", "1")
    with pytest.raises(ExpectedFailure, match="in use"):
        run_command("job", _refuse)


def _refuse() -> int:
    raise ExpectedFailure("the folder is in use")


def test_setup_failures_crashes_and_interrupts(monkeypatch, capsys):
    monkeypatch.delenv("VLMRM_TRACEBACK", raising=False)

    def no_gpu() -> int:
        raise RuntimeError("torch sees no CUDA device")

    with pytest.raises(RuntimeError):
        run_command("evaluate", no_gpu)  # while working, a RuntimeError may be a bug
    assert run_command("train", no_gpu, setup=True) == EXIT_REFUSED  # getting ready: the machine's answer

    def crash() -> int:
        raise mark_crash(ValueError("NaN in the observations"))

    with pytest.raises(ValueError, match="NaN"):
        run_command("train", crash, setup=True)  # in the middle of the work: a crash, with its traceback

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_command("train", interrupted, interrupted="stopped before training; nothing written") == EXIT_SIGINT
    assert capsys.readouterr().err.strip().endswith("vlmrm-fast train: stopped before training; nothing written")


def test_each_subcommand_states_its_policy():
    """Every parser gives a job; the commands that load models or open devices mark setup."""
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = list(nested[0].choices.values()) if nested else [sub]
        for p in parsers:
            assert callable(p.get_default("func")), name
            if name in ("train", "download", "export", "check-precision"):
                assert p.get_default("setup") is True, name
