"""``vlmrm-fast train ...`` in a child process, with kills injected for test_reliability.

    python -P training_child.py train CONFIG [--resume]

Environment:
    VLMRM_TEST_PROGRESS=FILE   append the step count after every env step (what a kill loses)
    VLMRM_TEST_KILL=WHAT:N     SIGKILL this process at the N-th (1-based) publication of a
                               WHAT file in this process, WHAT one of
        model-mid-write        the model zip, half written (its temporary cut to half its size)
        buffer-before-rename   the replay buffer, whole but not yet renamed (model already in place)
    VLMRM_TEST_SLOW_SETUP=1    write "making the envs" to stderr when the envs are about to be made,
                               then take 60 s over it (a start that a signal can land in)
"""

from __future__ import annotations

import os
import signal
import sys


def _install_progress(path: str) -> None:
    from vlmrm_fast.training import callbacks

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    original = callbacks.TrainingControl._on_step

    def on_step(self) -> bool:
        go_on = original(self)
        if go_on:
            os.write(fd, f"{self.model.num_timesteps}\n".encode())
        return go_on

    callbacks.TrainingControl._on_step = on_step


def _install_kill(spec: str) -> None:
    from vlmrm_fast.training import checkpoints

    what, _, nth = spec.partition(":")
    target, count = int(nth), {"n": 0}
    kinds = {
        "model-mid-write": lambda name: name.endswith(".zip") and name.startswith("model_") and "final" not in name,
        "buffer-before-rename": lambda name: name.startswith("model_replay_buffer_"),
    }
    matches = kinds[what]
    original = checkpoints._publish

    def publish(temporary, path):
        if matches(path.name):
            count["n"] += 1
            if count["n"] == target:
                if what == "model-mid-write":
                    os.truncate(temporary, temporary.stat().st_size // 2)
                os.kill(os.getpid(), signal.SIGKILL)
        return original(temporary, path)

    checkpoints._publish = publish


def _install_slow_setup() -> None:
    import time

    from vlmrm_fast.training import train

    original = train.make_env

    def make_env(cfg, plan=None):
        os.write(2, b"making the envs\n")
        time.sleep(60)
        return original(cfg, plan)

    train.make_env = make_env


def main() -> int:
    if os.environ.get("VLMRM_TEST_SLOW_SETUP"):
        _install_slow_setup()
    if os.environ.get("VLMRM_TEST_PROGRESS"):
        _install_progress(os.environ["VLMRM_TEST_PROGRESS"])
    if os.environ.get("VLMRM_TEST_KILL"):
        _install_kill(os.environ["VLMRM_TEST_KILL"])
    from vlmrm_fast.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
