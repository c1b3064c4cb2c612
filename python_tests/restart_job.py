"""``vlmrm-fast train`` on every rank of a torchrun job, where rank 1 kills itself (SIGKILL) at its
K-th step in torchrun's first attempt (TORCHELASTIC_RESTART_COUNT=0), for the restart test:

    python -m vlmrm_fast.distributed.run --max-restarts 1 ... restart_job.py K train CONFIG --resume --start-if-new
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    kill_at = int(sys.argv[1])
    if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0" and os.environ.get("RANK") == "1":
        from vlmrm_fast.stack.vec_env import FastVLMRewardVecEnv

        step_wait, stepped = FastVLMRewardVecEnv.step_wait, [0]

        def dying(self):
            stepped[0] += 1
            if stepped[0] == kill_at:
                print(f"rank 1: killing itself at its step {kill_at}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return step_wait(self)

        FastVLMRewardVecEnv.step_wait = dying
    from vlmrm_fast.cli import main as cli

    return cli(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
