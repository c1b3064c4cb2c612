"""A run folder belongs to one run.

``train`` without ``--resume`` refuses a folder that holds a run's files (unless told to
overwrite them); ``--resume`` continues only from a checkpoint whose run identity (the
config fields that define the run, :func:`~vlmrm_fast.training.config.run_identity`)
matches the config given, and takes the newest intact one (checksums compared), never
starting from scratch and never writing over a checkpoint: damaged files and checkpoints
newer than the one resumed from are moved into ``checkpoints/damaged/``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
from typing import Any

from vlmrm_fast.failures import ExpectedFailure
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import identity_differences, upgraded_identity
from vlmrm_fast.training.curves import CURVES_CSV, CURVES_PNG

CONFIG_FILE = "config.yaml"
FINAL_MODEL = "final_model.zip"
ROLLOUTS = "rollouts"  # vlmrm-fast rollout's CSVs and videos
RANKING_FILE = "best_checkpoints.csv"  # vlmrm-fast best's ranking
# What a run writes (and what the commands that read it add); --overwrite deletes exactly these.
RUN_ENTRIES = (
    CONFIG_FILE,
    "checkpoints",
    "tensorboard",
    "videos",
    FINAL_MODEL,
    CURVES_CSV,
    CURVES_PNG,
    ROLLOUTS,
    RANKING_FILE,
)


class RunFolderError(ExpectedFailure):
    """The run folder cannot be used as asked (in use, another run's checkpoint, a missing replay buffer)."""


def plain(identity: dict[str, Any]) -> dict[str, Any]:
    """The identity as it reads back from JSON (lists, not tuples), so saved and current compare equal."""
    return json.loads(json.dumps(identity, sort_keys=True))


def _identity_of(checkpoint: checkpoints.Checkpoint) -> dict[str, Any]:
    """The run identity a checkpoint's manifest holds, in the current layout."""
    return upgraded_identity(checkpoint.manifest.get("identity") or {})


def identity_hash(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plain(identity), sort_keys=True).encode()).hexdigest()[:16]


@dataclasses.dataclass
class ResumePoint:
    """What ``--resume`` continues from, and what it does to the folder once the checkpoint has loaded."""

    folder: pathlib.Path  # the checkpoint folder
    checkpoint: checkpoints.Checkpoint  # the newest intact checkpoint (with its replay buffer, where one is needed)
    replay_buffer: bool  # load the checkpoint's replay buffer (off-policy; False: --allow-empty-replay-buffer)
    damaged: list[checkpoints.Damaged]  # moved into checkpoints/damaged/ by apply()
    incomplete: list[pathlib.Path]  # what a kill cut short: removed by apply()

    def apply(self) -> list[str]:
        """Removes what a kill cut short, moves damage aside; returns one line for each."""
        lines = []
        if self.incomplete:
            for path in self.incomplete:
                path.unlink(missing_ok=True)
            lines.append(
                f"--resume: removed {', '.join(p.name for p in self.incomplete)} from {self.folder}: files of a "
                f"checkpoint save that a kill cut short (temporary names, or a save whose manifest never came)"
            )
        for damage in self.damaged:
            moved = checkpoints.set_aside(self.folder, damage.files)
            lines.append(
                f"--resume: damaged checkpoint files ({damage.why}): moved {', '.join(p.name for p in moved)} "
                f"into {self.folder / checkpoints.DAMAGED_DIR} (kept, not loaded)"
            )
        return lines


def _buffer_lack(checkpoint: checkpoints.Checkpoint, bad_buffers: dict[str, checkpoints.Damaged]) -> str:
    """What is wrong with the replay buffer of an off-policy checkpoint that has none to load."""
    if checkpoint.name in bad_buffers:
        return f"its replay buffer is damaged ({bad_buffers[checkpoint.name].why})"
    entry = checkpoint.manifest["files"].get("replay_buffer")
    return (
        f"its replay buffer {entry['name']} is missing"
        if isinstance(entry, dict)
        else "it was saved without a replay buffer"
    )


class RunLock:
    """An exclusive lock on a run folder (``.lock``, an flock) for as long as a process trains in it.

    Two processes in one folder would interleave checkpoints, and a resume would delete
    the other's files in the making as incomplete. The kernel drops the lock when the
    holder dies, even by SIGKILL (the file then stays, and the next run takes it over).
    On release ``.lock`` is removed, while still locked: a process that opened the file
    before that finds, once it holds the lock, that the name no longer leads to the
    file it locked, and tries again. A folder created only to hold the lock of a start
    that is then refused is removed again on release.
    """

    def __init__(self, folder: pathlib.Path):
        self.folder = folder
        self.created = not folder.exists()
        self.path = folder / ".lock"
        self.fd: int | None = None
        for _ in range(100):  # another process removing the file between our open and flock: open again
            self._open()
            assert self.fd is not None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(self.fd)  # not ours: the holder's .lock stays
                self.fd = None
                raise RunFolderError(
                    f"{folder} is in use by another training process (pid {holder}); wait for it to end or stop it, "
                    f"or choose another folder (--output-dir)"
                ) from None
            if self._holds_the_name():
                break
            os.close(self.fd)
            self.fd = None
        else:  # pragma: no cover - a folder whose .lock is replaced a hundred times in a row
            raise RunFolderError(f"{folder}: could not take the lock {self.path}; try again")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def _open(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunFolderError(
                f"output_dir: cannot write in {self.folder} ({exc.strerror}); choose a writable folder "
                f"(output_dir in the config, or --output-dir)"
            ) from None

    def _holds_the_name(self) -> bool:
        """True when ``.lock`` is still the file this process opened (and locked)."""
        assert self.fd is not None
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if self._holds_the_name():
                self.path.unlink(missing_ok=True)  # while locked: see the class's docstring
        except OSError:
            pass  # a folder that turned read-only keeps its .lock; the next run takes it over
        os.close(self.fd)  # closing drops the flock
        self.fd = None
        if self.created and self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()


class RunFolder:
    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)

    def lock(self) -> RunLock:
        return RunLock(self.path)

    @property
    def checkpoint_dir(self) -> pathlib.Path:
        return self.path / "checkpoints"

    def check_writable(self) -> None:
        """A RunFolderError, before anything is loaded, when the checkpoint folder is there but cannot be
        written (read-only, another owner): every checkpoint, and ``--resume``'s setting aside, writes there."""
        folder = self.checkpoint_dir
        if not folder.is_dir():
            return  # made by the first save, in the run folder that the lock showed writable
        probe = folder / f".write_probe.{os.getpid()}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            probe.unlink()
        except OSError as exc:
            raise RunFolderError(
                f"{folder} cannot be written ({exc.strerror}): the run saves its checkpoints there; make it writable "
                f"(a read-only mount, or chmod u+w), or choose another folder (--output-dir)"
            ) from None

    def contents(self) -> list[str]:
        """The run files present, described (``["config.yaml", "3 checkpoints", ...]``)."""
        found = []
        for entry in RUN_ENTRIES:
            target = self.path / entry
            if not target.exists():
                continue
            if entry == "checkpoints":
                count = len(checkpoints.scan(target).complete)
                files = sum(1 for p in target.iterdir()) if target.is_dir() else 0
                if files:
                    found.append(f"{count} checkpoint{'s' if count != 1 else ''}" if count else "checkpoint files")
                if (target / checkpoints.DAMAGED_DIR).is_dir():
                    found.append(f"checkpoints/{checkpoints.DAMAGED_DIR}/ (files set aside by --resume)")
            elif target.is_dir():
                if any(target.iterdir()):
                    found.append(f"{entry}/")
            else:
                found.append(entry)
        return found

    def check_unused(self, *, overwrite: bool) -> list[str]:
        """For a fresh start: the run files that ``--overwrite`` will delete, or a RunFolderError."""
        found = self.contents()
        if found and not overwrite:
            raise RunFolderError(
                f"{self.path} already holds a run ({', '.join(found)}). Continue it with --resume, "
                f"start over with --overwrite (deletes those files), or choose another folder (--output-dir)"
            )
        return found

    def clear(self) -> None:
        for entry in RUN_ENTRIES:
            target = self.path / entry
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()

    def holds_checkpoints(self) -> bool:
        """Whether a checkpoint, whole or damaged, is in the folder (files a kill cut short do not count)."""
        scan = checkpoints.scan(self.checkpoint_dir)
        return bool(scan.complete or scan.damaged)

    def resume_point(
        self, identity: dict[str, Any], *, needs_replay_buffer: bool, allow_empty_replay_buffer: bool
    ) -> ResumePoint:
        """The newest intact checkpoint of this run (checksums compared), preferring, for an off-policy run,
        the newest whose replay buffer is intact too; or a RunFolderError, with nothing changed, when there is
        none, when it belongs to another config, or when the off-policy run would go on with an empty buffer
        without ``allow_empty_replay_buffer``. Changes nothing: :meth:`ResumePoint.apply` does."""
        identity = plain(identity)
        scan = checkpoints.scan(self.checkpoint_dir)
        damaged = list(scan.damaged)
        intact: checkpoints.Checkpoint | None = None  # the newest whole model
        with_buffer: checkpoints.Checkpoint | None = None  # the newest whole model with its whole replay buffer
        bad_buffers: dict[str, checkpoints.Damaged] = {}  # checkpoint name -> its damaged replay buffer
        for checkpoint in reversed(scan.complete):
            if intact is not None and (
                not needs_replay_buffer or checkpoint.replay_buffer is None or _identity_of(checkpoint) != identity
            ):
                continue  # older than an intact model, and no buffer of this run to offer: not read
            model_problem, buffer_problem = checkpoints.verify(checkpoint)
            if model_problem:
                damaged.append(checkpoints.Damaged(checkpoint.files(), model_problem))
                continue
            if buffer_problem and checkpoint.replay_buffer is not None:
                bad_buffers[checkpoint.name] = checkpoints.Damaged([checkpoint.replay_buffer], buffer_problem)
                checkpoint.replay_buffer = None
            intact = intact or checkpoint
            if not needs_replay_buffer or checkpoint.replay_buffer is not None:
                with_buffer = checkpoint
                break
        if intact is None:
            raise self._nothing_intact(scan, damaged)
        if _identity_of(intact) != identity:
            raise self._mismatch(f"checkpoint {intact.name}", _identity_of(intact), identity)
        chosen = with_buffer or intact
        if needs_replay_buffer and with_buffer is None and not allow_empty_replay_buffer:
            found = f" (damaged: {'; '.join(d.describe() for d in damaged)})" if damaged else ""
            raise RunFolderError(
                f"checkpoint {intact.name}, the newest intact one{found}: {_buffer_lack(intact, bad_buffers)}, and "
                f"no older checkpoint kept its replay buffer, so the off-policy run would go on with an empty one. "
                f"Nothing was changed. Pass --allow-empty-replay-buffer to accept that"
            )
        # Intact models newer than the chosen checkpoint lack their buffer: set aside whole, so that the resumed
        # run never writes over them; a damaged buffer of the chosen one is set aside alone.
        for checkpoint in scan.complete[scan.complete.index(chosen) :]:
            bad = bad_buffers.get(checkpoint.name)
            if checkpoint is chosen:
                damaged += [bad] if bad else []
            elif not any(checkpoint.model in d.files for d in damaged):
                files = (bad.files if bad else []) + checkpoint.files()
                why = f"checkpoint {checkpoint.name}: {_buffer_lack(checkpoint, bad_buffers)}"
                damaged.append(checkpoints.Damaged(files, why))
        return ResumePoint(
            self.checkpoint_dir,
            chosen,
            replay_buffer=needs_replay_buffer and chosen.replay_buffer is not None,
            damaged=damaged,
            incomplete=scan.incomplete,
        )

    def _nothing_intact(self, scan: checkpoints.CheckpointScan, damaged: list[checkpoints.Damaged]) -> RunFolderError:
        if not damaged:
            cut = (
                f" (only {', '.join(p.name for p in scan.incomplete)}, which a kill cut short)"
                if scan.incomplete
                else ""
            )
            return RunFolderError(
                f"--resume: {self.checkpoint_dir} holds no checkpoint to resume from{cut}; nothing was changed. "
                f"Start the run without --resume (with --overwrite where the folder holds its files)"
            )
        return RunFolderError(
            f"--resume: no intact checkpoint in {self.checkpoint_dir}: "
            f"{'; '.join(d.describe() for d in damaged)}. Nothing was changed. Copy intact files back, start over "
            f"with --overwrite (deletes them), or choose another folder (--output-dir)"
        )

    def _mismatch(self, what: str, saved: dict[str, Any], current: dict[str, Any]) -> RunFolderError:
        changes = identity_differences(saved, current) or ["the saved run identity is unreadable"]
        return RunFolderError(
            f"{what} belongs to a run with another config ({'; '.join(changes)}). Resume with the config the run "
            f"was started with ({self.path / CONFIG_FILE}), or start a new run elsewhere (--output-dir) or over it (--overwrite)"
        )
