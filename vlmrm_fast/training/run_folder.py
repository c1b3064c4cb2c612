"""A run folder belongs to one run.

``train`` without ``--resume`` refuses a folder that holds a run's files (unless told to
overwrite them); ``--resume`` continues only from a checkpoint whose run identity (the
config fields that define the run, :func:`~vlmrm_fast.training.config.run_identity`)
matches the config given, and takes the newest complete one.
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

import yaml

from vlmrm_fast.failures import ExpectedFailure
from vlmrm_fast.training import checkpoints
from vlmrm_fast.training.config import ConfigError, identity_differences, upgraded_identity

CONFIG_FILE = "config.yaml"
FINAL_MODEL = "final_model.zip"
ROLLOUTS = "rollouts"  # vlmrm-fast rollout's CSVs and videos
RANKING_FILE = "best_checkpoints.csv"  # vlmrm-fast best's ranking
# What a run writes (and what the commands that read it add); --overwrite deletes exactly these.
RUN_ENTRIES = (CONFIG_FILE, "checkpoints", "tensorboard", "videos", FINAL_MODEL, ROLLOUTS, RANKING_FILE)


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
    candidates: list[checkpoints.Checkpoint]  # newest first; train loads the first that loads
    removed: list[pathlib.Path]  # incomplete checkpoint files deleted


class RunLock:
    """An exclusive lock on a run folder (``.lock``, an flock) for as long as a process trains in it.

    Two processes in one folder would interleave checkpoints, and a resume would delete
    the other's files in the making as incomplete. The kernel drops the lock when the
    holder dies, even by SIGKILL. A folder created only to hold the lock of a start that
    is then refused is removed again on release.
    """

    def __init__(self, folder: pathlib.Path):
        self.folder = folder
        self.created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / ".lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "unknown"
            self.release()
            raise RunFolderError(
                f"{folder} is in use by another training process (pid {holder}); wait for it to end or stop it, "
                f"or choose another folder (--output-dir)"
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is None:
            return
        os.close(self.fd)  # closing drops the flock
        self.fd = None
        if self.created and self.folder.is_dir() and {p.name for p in self.folder.iterdir()} <= {".lock"}:
            self.path.unlink(missing_ok=True)
            self.folder.rmdir()


class RunFolder:
    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)

    def lock(self) -> RunLock:
        return RunLock(self.path)

    @property
    def checkpoint_dir(self) -> pathlib.Path:
        return self.path / "checkpoints"

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

    def saved_identity(self) -> dict[str, Any] | None:
        """The run identity in the folder's config.yaml, if there is one."""
        from vlmrm_fast.training.config import load_config, resolved, run_identity

        path = self.path / CONFIG_FILE
        if not path.is_file():
            return None
        try:
            return plain(run_identity(resolved(load_config(path))))
        except (ConfigError, OSError, yaml.YAMLError):
            return None

    def resume_point(
        self, identity: dict[str, Any], *, needs_replay_buffer: bool, allow_empty_replay_buffer: bool
    ) -> ResumePoint:
        """This run's complete checkpoints to resume from, newest first (incomplete files removed), or a
        RunFolderError when the newest belongs to another config or lacks the replay buffer it needs."""
        identity = plain(identity)
        scan = checkpoints.scan(self.checkpoint_dir)
        removed = scan.remove_incomplete()
        if not scan.complete:
            saved = self.saved_identity()
            if saved is not None and saved != identity:
                raise self._mismatch(str(self.path / CONFIG_FILE), saved, identity)
            return ResumePoint([], removed)
        newest = scan.complete[-1]
        if _identity_of(newest) != identity:
            raise self._mismatch(f"checkpoint {newest.name}", _identity_of(newest), identity)
        if needs_replay_buffer and newest.replay_buffer is None and not allow_empty_replay_buffer:
            entry = newest.manifest["files"].get("replay_buffer")
            missing = (
                f"its replay buffer {entry['name']} is missing"
                if isinstance(entry, dict)
                else "it was saved without a replay buffer"
            )
            raise RunFolderError(
                f"checkpoint {newest.name}: {missing}, so the off-policy run would go on with an empty one. "
                f"Pass --allow-empty-replay-buffer to accept that"
            )
        usable = [
            c
            for c in reversed(scan.complete)
            if _identity_of(c) == identity
            and (c.replay_buffer is not None or not needs_replay_buffer or allow_empty_replay_buffer)
        ]
        return ResumePoint(usable, removed)

    def _mismatch(self, what: str, saved: dict[str, Any], current: dict[str, Any]) -> RunFolderError:
        changes = identity_differences(saved, current) or ["the saved run identity is unreadable"]
        return RunFolderError(
            f"{what} belongs to a run with another config ({'; '.join(changes)}). Resume with the config the run "
            f"was started with ({self.path / CONFIG_FILE}), or start a new run elsewhere (--output-dir) or over it (--overwrite)"
        )
