"""One failure policy for every ``vlmrm-fast`` command.

A failure that comes from the input or the machine (a bad config or argument, a model that is not
downloaded, a missing file or package, no EGL or GPU, a run folder in use) ends a command with one
line on stderr, ``vlmrm-fast COMMAND: error: what went wrong and the fix``, and exit code 2. Anything
else is a bug, or a crash in the middle of the work: its traceback shows (exit code 1).
A failure that would show a traceback on a broken install (torch and torchvision from two builds, a
native core that does not load) names the broken part and its fix in one line instead
(``vlmrm_fast.runtime.health``, which the CLI hands to :func:`run_command`). ``VLMRM_TRACEBACK=1`` shows the traceback of every failure.

Exceptions say what they are by their class: :class:`ExpectedFailure` marks the package's own
refusals, ``label`` names the kind of failure in the line (``config error``), and an exception
raised once a job's real work has begun is marked with :func:`mark_crash`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

EXIT_DONE, EXIT_CRASHED, EXIT_REFUSED = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 130, 143


class Terminated(BaseException):
    """SIGTERM where there is nothing to save (a command starting), raised as SIGINT raises
    KeyboardInterrupt (see ``training.signals.sigterm_raises``): the command says so and exits with 143."""


class ExpectedFailure(Exception):
    """A refusal the user can act on (not a bug): reported in one line with exit code 2."""

    label = "error"


def mark_crash(exc: BaseException) -> BaseException:
    """Marks ``exc`` as raised in the middle of a job's work: a crash, shown with its traceback."""
    exc._vlmrm_crash = True  # type: ignore[attr-defined]
    return exc


def expected_failure(exc: BaseException, *, setup: bool = False) -> bool:
    """True for a failure that comes from the input or the machine (see the module docstring).
    ``setup``: raised while a job gets ready (loading models, opening devices), where a
    RuntimeError is the machine's answer (no EGL, no CUDA device) rather than a bug."""
    if os.environ.get("VLMRM_TRACEBACK") == "1" or getattr(exc, "_vlmrm_crash", False):
        return False
    kinds: tuple[type[BaseException], ...] = (ExpectedFailure, ValueError, TypeError, OSError, ImportError)
    return isinstance(exc, kinds + ((RuntimeError,) if setup else ()))


def one_line(command: str, exc: BaseException) -> str:
    """``vlmrm-fast COMMAND: <label>: <message>``, the label from the exception's class."""
    return f"vlmrm-fast {command}: {getattr(exc, 'label', 'error')}: {exc}"


def run_command(
    command: str,
    job: Callable[[], int],
    *,
    setup: bool = False,
    interrupted: str = "interrupted",
    terminated: str = "stopped by SIGTERM",
    diagnose: Callable[[str], str | None] | None = None,
) -> int:
    """Runs a subcommand's ``job`` under the policy; returns its exit code. Ctrl-C (unless marked a
    crash) ends it with exit code 130 and the line ``interrupted``; a SIGTERM raised as
    :class:`Terminated` with 143 and the line ``terminated``. A failure that is not expected is put to
    ``diagnose`` first (the CLI's: ``runtime.health.broken_install_line``, handed down so that this
    module, which every layer imports for :class:`ExpectedFailure`, imports none of them): a line it
    returns replaces the traceback."""
    try:
        return int(job() or EXIT_DONE)
    except BrokenPipeError:
        return closed_pipe()
    except (KeyboardInterrupt, Terminated) as exc:
        if getattr(exc, "_vlmrm_crash", False):
            raise
        sigterm = isinstance(exc, Terminated)
        print(f"\nvlmrm-fast {command}: {terminated if sigterm else interrupted}", file=sys.stderr)
        return EXIT_SIGTERM if sigterm else EXIT_SIGINT
    except Exception as exc:
        if not expected_failure(exc, setup=setup):
            broken = diagnose(command) if diagnose is not None else None
            if broken is None:
                raise
            print(broken, file=sys.stderr)
            return EXIT_REFUSED
        print(one_line(command, exc), file=sys.stderr)
        return EXIT_REFUSED


def closed_pipe() -> int:
    """Output to a pipe its reader closed early (``vlmrm-fast models | head``) is not a failure: the reader
    had read enough. Exit code 0, and stdout pointed at nothing, so that Python's flush at exit stays quiet."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_DONE
