"""Checkpoints that survive a kill at any moment.

A checkpoint at N steps is up to three files in ``checkpoints/``::

    model_N_steps.zip                  the SB3 model
    model_replay_buffer_N_steps.pkl    its replay buffer (off-policy algorithms)
    model_N_steps.json                 the manifest, written last

(``model_interrupted_N_steps.*`` for the one saved on SIGINT/SIGTERM.) Every file is
written under a hidden temporary name, flushed, fsynced and renamed into place, so a
file under its final name is always whole. The manifest names the files with their
sizes and the run's identity; a checkpoint counts only when its manifest exists and
its files match it. Anything else (temporaries, files whose manifest never came) was
cut short by a kill: :func:`scan` finds it and :meth:`CheckpointScan.remove_incomplete`
deletes it. Replay buffers are large: only the newest checkpoint keeps one.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import re
from collections.abc import Callable
from typing import Any, BinaryIO

MANIFEST_FORMAT = 1
PREFIX = "model"
_STEM = re.compile(rf"^{PREFIX}_(?P<tag>[a-z]+_)?(?P<steps>\d+)_steps$")
_BUFFER = re.compile(rf"^{PREFIX}_replay_buffer_(?P<tag>[a-z]+_)?(?P<steps>\d+)_steps\.pkl$")
_TEMPORARY = re.compile(r"^\..+\.tmp$")


# ------------------------------------------------------------------ atomic files
def _fsync_dir(folder: pathlib.Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(temporary: pathlib.Path, path: pathlib.Path) -> None:
    """Renames a complete, fsynced temporary file to its final name (atomic on POSIX)."""
    os.replace(temporary, path)
    _fsync_dir(path.parent)


def temporary_path(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.tmp")


def write_atomically(path: pathlib.Path, write: Callable[[BinaryIO], None]) -> int:
    """``write(file)`` into a temporary beside ``path``, flush, fsync, rename; returns the size.

    A kill at any moment leaves either the old ``path`` (or none) or the whole new one,
    plus at most a temporary file that :func:`scan` recognizes.
    """
    path = pathlib.Path(path)
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _publish(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path.stat().st_size


def write_text_atomically(path: pathlib.Path, text: str) -> int:
    return write_atomically(path, lambda f: f.write(text.encode()))


# -------------------------------------------------------------------- checkpoints
@dataclasses.dataclass
class Checkpoint:
    """A complete checkpoint: its manifest was written and its files match it."""

    steps: int
    manifest_path: pathlib.Path
    manifest: dict[str, Any]
    model: pathlib.Path
    replay_buffer: pathlib.Path | None  # None: saved without one, or pruned by a newer checkpoint

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def saved_with_replay_buffer(self) -> bool:
        return "replay_buffer" in self.manifest["files"]

    @property
    def reason(self) -> str:
        return str(self.manifest.get("reason", ""))


@dataclasses.dataclass
class CheckpointScan:
    complete: list[Checkpoint]  # oldest first
    incomplete: list[pathlib.Path]  # temporaries and files no manifest vouches for

    def newest(self) -> Checkpoint | None:
        return self.complete[-1] if self.complete else None

    def remove_incomplete(self) -> list[pathlib.Path]:
        for path in self.incomplete:
            path.unlink(missing_ok=True)
        return self.incomplete


def _file_matches(folder: pathlib.Path, entry: Any) -> pathlib.Path | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    path = folder / entry["name"]
    try:
        return path if path.stat().st_size == entry.get("bytes") else None
    except OSError:
        return None


def _read_manifest(path: pathlib.Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("files"), dict):
        return None
    return data


def scan(folder: pathlib.Path) -> CheckpointScan:
    """The complete checkpoints in ``folder`` (oldest first) and the files that belong to none."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        return CheckpointScan([], [])
    complete, vouched, damaged = [], set(), []
    for manifest_path in folder.glob(f"{PREFIX}_*_steps.json"):
        match = _STEM.match(manifest_path.stem)
        data = _read_manifest(manifest_path) if match else None
        model = _file_matches(folder, data["files"].get("model")) if data else None
        if data is None or model is None:
            damaged.append(manifest_path)
            continue
        buffer = _file_matches(folder, data["files"].get("replay_buffer")) if "replay_buffer" in data["files"] else None
        complete.append(Checkpoint(int(data["steps"]), manifest_path, data, model, buffer))
        vouched.update({manifest_path, model} | ({buffer} if buffer else set()))
    complete.sort(key=lambda c: (c.steps, c.manifest.get("saved_at", "")))
    incomplete = list(damaged)
    for path in sorted(folder.iterdir()):
        if path in vouched or path in damaged or not path.is_file():
            continue
        name = path.name
        ours = (
            _TEMPORARY.match(name)
            or _BUFFER.match(name)
            or (path.suffix in (".zip", ".json") and _STEM.match(path.stem))
        )
        if ours:
            incomplete.append(path)
    return CheckpointScan(complete, incomplete)


def checkpoint_paths(
    folder: pathlib.Path, steps: int, tag: str = ""
) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(model, replay buffer, manifest) paths of the checkpoint at ``steps`` (``tag``: e.g. ``"interrupted_"``)."""
    stem = f"{PREFIX}_{tag}{steps}_steps"
    return folder / f"{stem}.zip", folder / f"{PREFIX}_replay_buffer_{tag}{steps}_steps.pkl", folder / f"{stem}.json"


def save_checkpoint(
    model: Any, folder: pathlib.Path, *, tag: str = "", reason: str, extra: dict[str, Any] | None = None
) -> Checkpoint:
    """Writes model, replay buffer (if the algorithm has one) and manifest, each atomically, the manifest last;
    then deletes older replay buffers (a newer complete pair now exists)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    steps = int(model.num_timesteps)
    model_path, buffer_path, manifest_path = checkpoint_paths(folder, steps, tag)
    files = {"model": {"name": model_path.name, "bytes": write_atomically(model_path, model.save)}}
    has_buffer = getattr(model, "replay_buffer", None) is not None
    if has_buffer:
        files["replay_buffer"] = {
            "name": buffer_path.name,
            "bytes": write_atomically(buffer_path, model.save_replay_buffer),
        }
    manifest = {
        "format": MANIFEST_FORMAT,
        "steps": steps,
        "saved_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
        "reason": reason,
        "algorithm": type(model).__name__,
        "files": files,
        **(extra or {}),
    }
    write_text_atomically(manifest_path, json.dumps(manifest, indent=1))
    if has_buffer:
        for old in folder.glob(f"{PREFIX}_replay_buffer_*.pkl"):
            if old != buffer_path:
                old.unlink(missing_ok=True)
    return Checkpoint(steps, manifest_path, manifest, model_path, buffer_path if has_buffer else None)
