"""What the launcher tells each process, how the envs split over the ranks, and the group they talk on.

torchrun (``python -m torch.distributed.run``) starts one process per rank and sets
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node) and the
rendezvous address; ``init_process_group`` reads the address from there. Launches that
cannot work are refused here, with the fix (:func:`check_launcher`): SLURM tasks started
without torchrun, and torchrun restarts on a store that the restarted ranks cannot use.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from vlmrm_fast.distributed import config

#: how long rank 0 waits for one rank's answer to one call (torch's own default for a wait)
DEFAULT_TIMEOUT = datetime.timedelta(seconds=config.DEFAULT_TIMEOUT)


def as_timeout(timeout: datetime.timedelta | float) -> datetime.timedelta:
    """Seconds or a timedelta -> a positive timedelta."""
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if not seconds > 0:
        raise ValueError(f"timeout must be positive (seconds or a timedelta), got {timeout!r}")
    return datetime.timedelta(seconds=seconds)


class LayoutError(ValueError):
    """The job cannot be laid out (more ranks than envs, fewer GPUs than ranks on a node); raised
    on every rank before any env is built."""

    label = "the job cannot run"


@dataclasses.dataclass(frozen=True)
class Launch:
    """This process's place in the job, and the GPUs its node shows it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node: int = 0
    host: str = dataclasses.field(default_factory=socket.gethostname)
    gpus: int = 0
    #: CUDA_VISIBLE_DEVICES as the launcher or scheduler set it for this process (None: not set)
    visible_devices: str | None = None

    @classmethod
    def detect(cls) -> Launch:
        """From torchrun's variables (or an already initialized default group); one process without them."""
        env = os.environ
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        else:
            rank, world_size = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
        return cls(
            rank=rank,
            world_size=world_size,
            local_rank=int(env.get("LOCAL_RANK", rank)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world_size)),
            node=int(env.get("GROUP_RANK", 0)),
            gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
            visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        )

    def own_gpus(self, node: Sequence[Launch]) -> bool:
        """True when a scheduler gave this rank GPUs of its own through CUDA_VISIBLE_DEVICES: it
        sees some, and no other rank of ``node`` (the launches of the ranks on this rank's node)
        names any of them. The GPUs are compared as the variables name them (indices or UUIDs)."""
        mine = _named_gpus(self.visible_devices)
        if self.gpus == 0 or not mine:
            return False
        return all(
            not (mine & _named_gpus(peer.visible_devices)) and peer.visible_devices is not None
            for peer in node
            if peer.rank != self.rank
        )


def _named_gpus(visible_devices: str | None) -> frozenset[str]:
    return frozenset(name.strip() for name in (visible_devices or "").split(",") if name.strip())


def launched() -> bool:
    """True in a job of several ranks (torchrun with WORLD_SIZE > 1, or an initialized group of several)."""
    return Launch.detect().world_size > 1


def plan_shards(num_envs: int, world_size: int, learner_envs: int | None = None) -> list[range]:
    """The envs of each rank, in ``world_size`` contiguous ranges of ``num_envs``.

    Rank 0 also runs the learner, so it never holds more than another rank: ``learner_envs``
    (None: ``num_envs // world_size``; 0: none, rank 0 only learns), and the other ranks split the
    rest evenly, the first ones one larger. One process holds every env whatever ``learner_envs``.
    """
    if world_size == 1:
        return [range(num_envs)]
    if learner_envs is None and world_size > num_envs:
        raise LayoutError(
            f"the job has {world_size} ranks but n_envs={num_envs}: every rank steps at least one env; "
            f"launch at most {num_envs} rank{'s' if num_envs > 1 else ''} (torchrun --nproc-per-node/--nnodes) or raise n_envs"
        )
    own = num_envs // world_size if learner_envs is None else learner_envs
    serving = world_size - 1
    if num_envs - own < serving:
        raise LayoutError(
            f"distributed.learner_envs={learner_envs} leaves {max(num_envs - own, 0)} of n_envs={num_envs} envs for "
            f"{serving} serving rank{'s' if serving > 1 else ''}: every serving rank steps at least one env; "
            f"set learner_envs to at most {num_envs - serving}, or launch fewer ranks"
            if num_envs >= serving
            else f"the job has {serving} serving ranks but n_envs={num_envs}: every serving rank steps at least one "
            f"env; launch at most {num_envs + 1} ranks (torchrun --nproc-per-node/--nnodes) or raise n_envs"
        )
    base, extra = divmod(num_envs - own, serving)
    bounds = np.cumsum([0, own] + [base + (r < extra) for r in range(serving)])
    return [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def shard_device(device: str, launch: Launch, node: Sequence[Launch] = ()) -> str:
    """The device of rank ``launch.rank``'s envs for the VecEnv's ``device`` argument.

    "auto" and "cuda": the rank's own GPU, else the CPU when the node has none. A rank's own GPU
    is ``cuda:0`` when a scheduler gave each rank of the node GPUs of its own through
    CUDA_VISIBLE_DEVICES (``node``: the launches of the ranks on this rank's node, see
    :meth:`Launch.own_gpus`); else ``cuda:LOCAL_RANK`` when the node shows a GPU per rank; fewer
    is a :class:`LayoutError`. An explicit "cuda:K" or "cpu" is taken as given, so that several
    ranks may share one GPU on purpose.
    """
    device = str(device)
    if device not in ("auto", "cuda"):
        return device
    if launch.gpus == 0:
        if device == "cuda":
            raise LayoutError(
                f"rank {launch.rank} on {launch.host}: device='cuda' but torch sees no GPU there; use device='auto' or 'cpu'"
            )
        return "cpu"
    if launch.own_gpus(node):
        return "cuda:0"
    if launch.local_world_size > launch.gpus:
        raise LayoutError(
            f"node {launch.host} runs {launch.local_world_size} ranks but shows {launch.gpus} GPU(s): one GPU per rank; "
            f"launch with --nproc-per-node {launch.gpus}, give each rank GPUs of its own through CUDA_VISIBLE_DEVICES, "
            "or pass device='cuda:0' to share one GPU on purpose (or 'cpu')"
        )
    return f"cuda:{launch.local_rank}"


def shard_devices(device: str, launches: Sequence[Launch]) -> list[str]:
    """Every rank's device (:func:`shard_device`), each rank judged with the ranks of its node."""
    return [
        shard_device(
            device, launch, [peer for peer in launches if (peer.host, peer.node) == (launch.host, launch.node)]
        )
        for launch in launches
    ]


def use_device(device: str | torch.device) -> None:
    """Makes a rank's CUDA device torch's current one, so that what names "cuda" without an index
    (``resolve_device``, ``torch.cuda.is_bf16_supported``, Warp's "cuda") lands on it, not on GPU 0."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)


#: the tag of :meth:`Membership.abandon`'s receive, which no message uses
ABANDON_TAG = 0x7ABA


@dataclasses.dataclass
class Membership:
    """The gloo group one sharded env's messages travel on: its own, so that closing one env never
    touches another's group or the user's."""

    group: dist.ProcessGroup | None

    def leave(self) -> None:
        """Destroys the group (gloo's teardown is local: no other rank is waited for)."""
        if self.group is not None and dist.is_initialized():
            dist.destroy_process_group(self.group)
        self.group = None

    def abandon(self, peer: int) -> None:
        """Ends every wait on the group at once, here and on the other ranks (their connections to
        this rank close): gloo closes all pairs of a group when one of its waits runs out, so this
        waits a millisecond for a message from ``peer`` on a tag that nothing else uses. Any thread
        may call it; the group is then unusable (each Link raises its failure)."""
        if self.group is None:
            return
        try:
            dist.irecv(torch.empty(1, dtype=torch.uint8), peer, self.group, tag=ABANDON_TAG).wait(
                datetime.timedelta(milliseconds=1)
            )
        except RuntimeError:
            pass  # the expected timeout (or the pair was closed already)


def _destroy_default_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def join(timeout: datetime.timedelta) -> Membership:
    """A new gloo group of all ranks; every rank must call this in the same order relative to its
    other group creations. Torch's default group is initialized from torchrun's variables when
    nobody has, and then kept until the process exits (a default group cannot be made twice from
    the same rendezvous); a group the user made (NCCL, say) only serves to make the gloo one."""
    if not dist.is_available():
        raise RuntimeError("this torch build has no torch.distributed")
    check_launcher()
    if not dist.is_initialized():
        missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise RuntimeError(
                f"no process group and no {', '.join(missing)} in the environment: launch with torchrun "
                "(python -m torch.distributed.run --nproc-per-node N ...)"
            )
        dist.init_process_group("gloo", timeout=timeout)
        atexit.register(_destroy_default_group)
    return Membership(dist.new_group(backend="gloo", timeout=timeout))


def check_launcher(environ: Mapping[str, str] | None = None) -> None:
    """Refuses launches that cannot work, with the fix (a :class:`LayoutError` on every rank):

    - SLURM tasks (``srun -n N``) without torchrun: each would run alone, N separate runs.
    - ``torchrun --max-restarts N`` sharing its rendezvous store with the ranks (torch's default since
      2.5): a restarted gloo group reads the addresses of the ranks that died and cannot connect
      (pytorch/pytorch#135712 on GitHub). ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in torchrun's environment gives
      each restart a store of its own; ``python -m vlmrm_fast.distributed.run`` is torchrun with it set.
    """
    env = os.environ if environ is None else environ
    host = socket.gethostname()
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if tasks > 1 and "RANK" not in env and "WORLD_SIZE" not in env:
        raise LayoutError(
            f"SLURM started this process on {host} as task {env.get('SLURM_PROCID', '?')} of {tasks} (srun), but "
            "torchrun's variables (RANK, WORLD_SIZE) are not set: each task would run alone, as a separate run. "
            "Start one torchrun per node under srun instead: srun --ntasks-per-node=1 torchrun --nnodes=$SLURM_JOB_NUM_NODES "
            "--nproc-per-node=GPUS_PER_NODE --rdzv-backend=c10d --rdzv-endpoint=FIRST_NODE:29500 --rdzv-id=$SLURM_JOB_ID "
            "-m vlmrm_fast.cli train CONFIG (see examples/slurm/train.sbatch)"
        )
    restarts = int(env.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    if restarts > 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(env.get("WORLD_SIZE", "1")) > 1:
        raise LayoutError(
            f"rank {env.get('RANK', '?')} on {host}: torchrun --max-restarts {restarts} shares its rendezvous store "
            "with the ranks, and a restarted gloo group then reads the addresses of the ranks that died and cannot "
            "connect (pytorch/pytorch#135712 on GitHub). Set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment "
            "(each restart then gets a store of its own), or launch with python -m vlmrm_fast.distributed.run, "
            "which is torchrun with it set"
        )


def check_reward_splits(needs: Any) -> None:
    """Refuses, on every rank, a reward model that cannot be split over ranks (its ``needs.one_process``, a
    ``reward.protocol.Need``: a state learned from every env's frames), naming the field and the fix."""
    from vlmrm_fast.checks import FieldError

    need = needs.one_process
    if need is not None:
        instead = f": {need.instead}" if need.instead else ""
        raise FieldError(
            f"reward.{need.field}", f"torchrun splits the envs over ranks, and {need.why}; not split{instead}"
        )
