"""The run's record of the files it wrote in its folder (``run_files.json``): what it may delete or write over.

A run folder may hold a user's files beside the run's: notes, a hand-written config, a video of their
own, a model kept by hand in ``checkpoints/``. The run deletes and writes over only files it can prove
it wrote: a checkpoint's files by the checkpoint's manifest (:mod:`~vlmrm_fast.training.checkpoints`),
every other file by this record, which holds each one's path (relative to the run folder) and sha256.

A file is written under a temporary name and hashed as it is written; its new sha256 joins the record
(beside the one it replaces) before the rename, and the one it replaced leaves the record after: a kill
at any moment leaves a file whose sha256 is on the record. A file that another library appends to as it
goes (TensorBoard's event files) is recorded by its name once it is created (``appended``). A file on
the record whose content has changed since (a user edited ``config.yaml``) is no longer the run's.

Writers in other processes (``vlmrm-fast rollout`` and ``best`` beside a training run) take turns on
the record with an ``flock`` on the run folder itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from vlmrm_fast.training import checkpoints

RECORD = "run_files.json"
RECORD_FORMAT = 1


class RunFiles:
    """The record of the files a run wrote in ``folder``."""

    def __init__(self, folder: str | pathlib.Path):
        self.folder = pathlib.Path(folder)
        self.path = self.folder / RECORD

    def exists(self) -> bool:
        return self.path.is_file()

    def entries(self) -> dict[str, dict[str, Any]]:
        """``{relative path: entry}``; empty when there is no record, or one that does not read back (then
        nothing is vouched for: the safe side)."""
        try:
            data = json.loads(self.path.read_text())
            files = data["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        return {str(k): v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}

    def vouches(self, relative: str, entry: dict[str, Any] | None = None) -> bool:
        """Whether the file at ``relative`` is on the record as it is now: its sha256 is one the run wrote
        (or, for an appended file, it is there)."""
        entry = entry if entry is not None else self.entries().get(relative)
        path = self.folder / relative
        if entry is None or not path.is_file() or path.is_symlink():
            return False
        if entry.get("appended"):
            return True
        try:
            return checkpoints.file_sha256(path) in entry.get("sha256", [])
        except OSError:
            return False

    def owned(self) -> list[str]:
        """The recorded files that are there as the run wrote them (relative paths, sorted)."""
        return sorted(relative for relative, entry in self.entries().items() if self.vouches(relative, entry))

    def entry(self, relative: str) -> dict[str, Any] | None:
        return self.entries().get(relative)

    # ----------------------------------------------------------------- writing
    def write(self, relative: str, write: Callable[[BinaryIO], None], **info: Any) -> checkpoints.Written:
        """``write(file)`` into the file at ``relative``, atomically (:func:`checkpoints.write_atomically`),
        its sha256 on the record before it takes the name; ``info`` is kept in its entry (e.g. ``steps``)."""
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        written = checkpoints.write_atomically(path, write, before_publish=self._vouch_before(relative, info))
        return self._vouched(relative, written, info)

    def write_made(self, relative: str, make: Callable[[pathlib.Path], None], **info: Any) -> checkpoints.Written:
        """As :meth:`write`, for a library that writes a file by its name (``make(path)``; imageio's mp4s):
        made under a hidden temporary name with the same suffix, then published."""
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.stem}.tmp{path.suffix}")
        try:
            make(temporary)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        written = checkpoints.publish_made(temporary, path, self._vouch_before(relative, info))
        return self._vouched(relative, written, info)

    def _vouch_before(self, relative: str, info: dict[str, Any]) -> Callable[[checkpoints.Written], None]:
        """Puts a whole new file's sha256 on the record beside the one of the file it replaces."""

        def vouch(written: checkpoints.Written) -> None:
            with self._editing() as files:
                before = files.get(relative, {}).get("sha256", []) if (self.folder / relative).is_file() else []
                files[relative] = {"sha256": [written.sha256, *before[:1]], "bytes": written.bytes, **info}

        return vouch

    def _vouched(self, relative: str, written: checkpoints.Written, info: dict[str, Any]) -> checkpoints.Written:
        """The record once the new file has its name: its sha256 alone."""
        with self._editing() as files:
            files[relative] = {"sha256": [written.sha256], "bytes": written.bytes, **info}
        return written

    def write_text(self, relative: str, text: str, **info: Any) -> checkpoints.Written:
        return self.write(relative, lambda f: f.write(text.encode()), **info)

    def copy(self, relative: str, source: pathlib.Path, **info: Any) -> checkpoints.Written:
        """A byte copy of ``source`` at ``relative``, on the record."""
        import shutil

        with open(source, "rb") as f:
            return self.write(relative, lambda out: shutil.copyfileobj(f, out), **info)

    def add_appended(self, relative: str) -> None:
        """Records a file another library creates and appends to (a TensorBoard event file)."""
        with self._editing() as files:
            files[relative] = {"appended": True}

    def adopt(self, relatives: list[str]) -> None:
        """Records files that are there now as the run's (a run folder from before records, resumed)."""
        with self._editing() as files:
            for relative in relatives:
                path = self.folder / relative
                files[relative] = {"sha256": [checkpoints.file_sha256(path)], "bytes": path.stat().st_size}

    def forget(self, relatives: list[str]) -> None:
        with self._editing() as files:
            for relative in relatives:
                files.pop(relative, None)

    @contextlib.contextmanager
    def _editing(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The record's files, to change in place; written back atomically, under the folder's flock."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            files = self.entries()
            yield files
            text = json.dumps({"format": RECORD_FORMAT, "files": dict(sorted(files.items()))}, indent=1)
            checkpoints.write_text_atomically(self.path, text + "\n")
        finally:
            os.close(fd)  # drops the flock


def relative_to(folder: pathlib.Path, path: pathlib.Path) -> str | None:
    """``path`` relative to ``folder`` (a POSIX string), or None when it lies outside it."""
    try:
        return pathlib.Path(os.path.abspath(path)).relative_to(os.path.abspath(folder)).as_posix()
    except ValueError:
        return None


def write_in_run(run_dir: pathlib.Path, path: pathlib.Path, make: Callable[[pathlib.Path], None]) -> None:
    """``make(path)``, on the record of the run folder ``run_dir`` where ``path`` lies in a run folder that keeps
    one (what ``rollout`` and ``best`` add to a run); elsewhere, plainly."""
    files = RunFiles(run_dir)
    relative = relative_to(run_dir, path)
    if files.exists() and relative is not None and not relative.startswith(".."):
        files.write_made(relative, make)
    else:
        make(path)
