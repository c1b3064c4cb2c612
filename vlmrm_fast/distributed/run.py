"""torchrun with what its restarts need for a gloo job:

    python -m vlmrm_fast.distributed.run [torchrun's arguments] -m vlmrm_fast.cli train CONFIG --resume --start-if-new

The same as ``python -m torch.distributed.run``, with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
unless set otherwise: torchrun (since torch 2.5) lets the ranks share its rendezvous store, and
after ``--max-restarts`` restarts the ranks, their new gloo groups read the addresses of the ranks
that died from it and cannot connect (pytorch/pytorch#135712 on GitHub). With the variable, each round of the
rendezvous gets a store of its own, hosted by that round's rank 0.
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    from torch.distributed.run import main as torchrun

    torchrun()


if __name__ == "__main__":
    main()
