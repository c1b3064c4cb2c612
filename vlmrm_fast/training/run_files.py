"""The run's record of the files it wrote in its folder (``run_files.json``): what it may delete or write over.

A run folder may hold a user's files beside the run's: notes, a hand-written config, a video of their
own, a model kept by hand in ``checkpoints/``. The run deletes and writes over only files it can prove
it wrote: a checkpoint's files by the checkpoint's manifest (:mod:`~vlmrm_fast.training.checkpoints`),
every other file by this record, which holds each one's path (relative to the run folder) and sha256.

A file is written under a temporary name and hashed as it is written; its new sha256 joins the record
(beside the one it replaces) before the rename, and the one it replaced leaves the record after: a kill
at any moment leaves a file whose sha256 is on the record. A file that another library appends to as it
goes (TensorBoard's event files) is recorded once it is created and again at each checkpoint and at the end
(``appended``: its size then and the sha256 of those bytes); it is the run's while it begins with them. A
file on the record whose content has changed since (a user edited ``config.yaml``) is no longer the run's.

The record is read back as data, never obeyed: each entry must name a file of this folder
(:mod:`~vlmrm_fast.training.records`) and hold what this program writes, else the record is refused
(:class:`~vlmrm_fast.training.records.RecordError`), before anything is touched. Its writers hold to the
same rule: a name the reader would refuse is never written, nor put on the record.

Writers in other processes (``vlmrm-fast rollout`` and ``best`` beside a training run) take turns on
the record with an ``flock`` on the run folder itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from vlmrm_fast.training import checkpoints, records

RECORD = "run_files.json"
# 2: an appended file's entry holds its size and sha256 as last recorded; 1 (its name alone) still reads, and
# such an entry vouches for nothing.
RECORD_FORMAT = 2
READS_FORMATS = (1, 2)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class RunFiles:
    """The record of the files a run wrote in ``folder``."""

    def __init__(self, folder: str | pathlib.Path):
        self.folder = pathlib.Path(folder)
        self.path = self.folder / RECORD

    def exists(self) -> bool:
        return self.path.is_file()

    def entries(self) -> dict[str, dict[str, Any]]:
        """``{relative path: entry}``, each checked (:func:`_checked_entry`); empty when there is no record. A
        record that does not read back, of a format this version does not read, or with an entry that names
        anything but a file of this folder or holds what this program never writes: a RecordError."""
        if not os.path.lexists(self.path):
            return {}
        if self.path.is_symlink() or not self.path.is_file():
            raise records.bad_record(
                self.path,
                f"is {'a link' if self.path.is_symlink() else 'not a file'}, where the run keeps its record of the "
                f"files it wrote",
                "Move it away, then run again",
            )
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise records.bad_record(
                self.path,
                f"does not read back ({type(exc).__name__}: {exc}), so no file in the folder can be shown to be the "
                f"run's",
                "Put a whole copy back, or move it away (a run folder without its record counts as one from before "
                "records: --resume records its files anew; --overwrite deletes only its checkpoints)",
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
            raise records.bad_record(self.path, "holds no mapping of files", "Move it away, then run again")
        if data.get("format") not in READS_FORMATS:
            raise records.bad_record(
                self.path,
                f"is of format {data.get('format')!r}, and this version of vlmrm-fast reads formats "
                f"{' and '.join(map(str, READS_FORMATS))}",
                "Use the version of vlmrm-fast that wrote it for this folder, or choose another folder (--output-dir)",
            )
        out = {}
        for relative, entry in data["files"].items():
            records.file_in_run(self.folder, relative, self.path)
            checked = _checked_entry(self.path, relative, entry, data["format"])
            if checked is not None:
                out[relative] = checked
        return out

    def vouches(self, relative: str, entry: dict[str, Any] | None = None) -> bool:
        """Whether the file at ``relative`` is on the record as it is now: its sha256 is one the run wrote (an
        appended file: it begins with the bytes last recorded)."""
        entry = entry if entry is not None else self.entries().get(relative)
        path = self.folder / relative
        if entry is None or not path.is_file() or path.is_symlink():
            return False
        try:
            if entry.get("appended"):
                return _prefix_sha256(path, entry["bytes"]) == entry[checkpoints.HASH]
            return checkpoints.file_sha256(path) in entry[checkpoints.HASH]
        except OSError:
            return False

    def owned(self) -> list[str]:
        """The recorded files that are there as the run wrote them (relative paths, sorted)."""
        return sorted(relative for relative, entry in self.entries().items() if self.vouches(relative, entry))

    def entry(self, relative: str) -> dict[str, Any] | None:
        return self.entries().get(relative)

    # ----------------------------------------------------------------- writing
    def write(
        self, relative: str, write: Callable[[BinaryIO], None], *, size: int | None = None, **info: Any
    ) -> checkpoints.Written:
        """``write(file)`` into the file at ``relative``, atomically (:func:`checkpoints.write_atomically`),
        its sha256 on the record before it takes the name; ``info`` is kept in its entry (e.g. ``steps``). A
        full disk raises :class:`checkpoints.SpaceError` (``size``: the file's bytes, where known, to name)."""
        path = records.file_to_record(self.folder, relative, self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _space_named(path, size):
            written = checkpoints.write_atomically(path, write, before_publish=self._vouch_before(relative, info))
            return self._vouched(relative, written, info)

    def write_made(self, relative: str, make: Callable[[pathlib.Path], None], **info: Any) -> checkpoints.Written:
        """As :meth:`write`, for a library that writes a file by its name (``make(path)``; imageio's mp4s):
        made under a hidden temporary name with the same suffix, then published."""
        path = records.file_to_record(self.folder, relative, self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.stem}.tmp{path.suffix}")
        with _space_named(path, None):
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
        data = text.encode()
        return self.write(relative, lambda f: f.write(data), size=len(data), **info)

    def copy(self, relative: str, source: pathlib.Path, **info: Any) -> checkpoints.Written:
        """A byte copy of ``source`` at ``relative``, on the record."""
        import shutil

        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return self.write(relative, lambda out: shutil.copyfileobj(f, out), size=size, **info)

    def record_appended(self, relative: str) -> None:
        """Records a file another library creates and appends to (a TensorBoard event file) as it is now: its size
        and the sha256 of those bytes. Called again as it grows (at each checkpoint, at the end)."""
        path = records.file_to_record(self.folder, relative, self.path, appended=True)
        size = path.stat().st_size
        digest = _prefix_sha256(path, size)
        with self._editing() as files:
            files[relative] = {"appended": True, "bytes": size, checkpoints.HASH: digest}

    def adopt(self, relatives: list[str]) -> None:
        """Records files that are there now as the run's (a run folder from before records, resumed)."""
        paths = {relative: records.file_to_record(self.folder, relative, self.path) for relative in relatives}
        with self._editing() as files:
            for relative, path in paths.items():
                files[relative] = {"sha256": [checkpoints.file_sha256(path)], "bytes": path.stat().st_size}

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


@contextlib.contextmanager
def _space_named(path: pathlib.Path, size: int | None) -> Iterator[None]:
    """A full disk (or quota) while writing the file at ``path`` (its temporary already removed) as a
    :class:`checkpoints.SpaceError` that names the folder and the space; any other error as it is."""
    try:
        yield
    except checkpoints.SpaceError:
        raise
    except Exception as exc:  # (a library may wrap the OSError: imageio's mp4 writer)
        if not checkpoints.disk_full(exc):
            raise
        raise checkpoints.file_space_error(path, size) from exc


def _checked_entry(record: pathlib.Path, relative: str, entry: Any, version: int) -> dict[str, Any] | None:
    """``entry`` as this program writes it: ``{"sha256": [DIGEST, ...], "bytes": N, ...}``, or for an appended
    TensorBoard event file ``{"appended": true, "bytes": N, "sha256": DIGEST}`` (format 1's, its name alone,
    vouches for nothing: None); a RecordError naming the entry otherwise."""
    if not isinstance(entry, dict):
        raise records.bad_entry(record, relative, f"is {entry!r}, not a mapping")
    digest = entry.get(checkpoints.HASH)
    size = entry.get("bytes")
    if "appended" in entry:
        if entry["appended"] is not True or not records.TENSORBOARD_EVENTS.match(relative):
            raise records.bad_entry(
                record,
                relative,
                "is marked appended, which only the run's TensorBoard event files are "
                "(tensorboard/NAME/events.out.tfevents.*)",
            )
        if version == 1 and digest is None:
            return None
        if not (isinstance(digest, str) and _SHA256.match(digest)) or not _count(size):
            raise records.bad_entry(
                record,
                relative,
                f"is marked appended without the size and sha256 it had (bytes {size!r}, sha256 {digest!r})",
            )
        return entry
    if checkpoints.HASH not in entry:
        raise records.bad_entry(
            record, relative, "has no sha256, and each file of the run's is recorded with its sha256"
        )
    if not isinstance(digest, list) or not digest or not all(isinstance(d, str) and _SHA256.match(d) for d in digest):
        raise records.bad_entry(record, relative, f"has sha256 {digest!r}, not a list of sha256 hex digests")
    if size is not None and not _count(size):
        raise records.bad_entry(record, relative, f"has bytes {size!r}, not a count of bytes")
    if "steps" in entry and not _count(entry["steps"]):
        raise records.bad_entry(record, relative, f"has steps {entry['steps']!r}, not a count of steps")
    if "identity" in entry and not isinstance(entry["identity"], dict):
        raise records.bad_entry(record, relative, f"has identity {entry['identity']!r}, not a mapping")
    return entry


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _prefix_sha256(path: pathlib.Path, size: int) -> str | None:
    """The sha256 of the first ``size`` bytes of the file at ``path``; None when it is shorter."""
    digest = hashlib.new(checkpoints.HASH)
    left = size
    with open(path, "rb") as f:
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                return None
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


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
    if files.exists() and relative is not None and records.names_a_file_in(run_dir, relative):
        files.write_made(relative, make)
    else:  # (outside the run folder, or through a link out of it: the record never names it)
        make(path)
