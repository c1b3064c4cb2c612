"""Checkpoints that survive a kill at any moment, and damage that is found, never loaded, never deleted.

A checkpoint at N steps is up to three files in ``checkpoints/``::

    model_N_steps.zip                  the SB3 model
    model_replay_buffer_N_steps.pkl    its replay buffer (off-policy algorithms)
    model_reward_state_N_steps.pt      what the reward model learned (a reward that learns as the envs step)
    model_N_steps.json                 the manifest, written last

(``model_interrupted_N_steps.*`` for the one saved on SIGINT/SIGTERM.) A save first
creates the manifest's temporary ``.model_N_steps.json.tmp`` (the mark that a save is
under way), then writes model and buffer, each under a hidden temporary name, flushed,
fsynced and renamed into place, and last writes the manifest into its temporary and
renames it into place: the mark becomes the manifest in one atomic rename. Each file is
hashed (sha256) as it is written, so the checksum costs no extra read; the manifest
records each file's name, size and sha256, and a sha256 of its own content.

:func:`scan` sorts a checkpoint folder, reading manifests and comparing sizes (cheap);
:func:`verify` compares a checkpoint's files with their checksums (reads them):

- *complete*: the manifest reads back and its files have the recorded sizes;
- *incomplete*: what a kill provably cut short, and only that: temporaries, and the files
  of a checkpoint whose manifest is still under its temporary name. ``--resume`` removes them;
- *damaged*: anything else that is not whole: a manifest that does not read back or fails
  its own checksum, a file missing or of another size or checksum than its manifest says,
  a model or buffer file that no manifest names and no save was under way for. Damage is
  moved aside into ``checkpoints/damaged/``, never deleted (:func:`set_aside`).

A save that fails (a full disk, any error) removes its own files at once; on a full disk
it raises :class:`CheckpointSpaceError`, which names the folder and the space needed (any other file of the
run, :class:`SpaceError`).
Replay buffers are large: only the newest ``keep_replay_buffers`` checkpoints keep theirs. A reward model's
learned state is part of its checkpoint as the model is: never pruned apart from it, and a checkpoint whose
state is missing or damaged is damaged.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO

from vlmrm_fast.training import records

MANIFEST_FORMAT = 2  # 2: sha256 of each file and of the manifest; 1 (sizes only) still reads
HASH = "sha256"
PREFIX = "model"
DAMAGED_DIR = "damaged"
_STEM = re.compile(rf"^{PREFIX}_(?P<tag>[a-z]+_)?(?P<steps>\d+)_steps$")
_BUFFER = re.compile(rf"^{PREFIX}_replay_buffer_(?P<tag>[a-z]+_)?(?P<steps>\d+)_steps\.pkl$")
_REWARD_STATE = re.compile(rf"^{PREFIX}_reward_state_(?P<tag>[a-z]+_)?(?P<steps>\d+)_steps\.pt$")
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.tmp$")  # a temporary of this program's is one of a checkpoint file


class SpaceError(OSError):
    """A file of the run did not fit on the disk (or the quota); its partial file was removed. The message
    names the folder, what the file needs and what is free."""


class CheckpointSpaceError(SpaceError):
    """A checkpoint did not fit on the disk; its partial files were removed."""


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


def publish_made(temporary: pathlib.Path, path: pathlib.Path, before_publish: Callable[[Written], None]) -> Written:
    """Publishes a file another library wrote at ``temporary`` (a whole file: it is fsynced and hashed here)
    under ``path``; ``before_publish`` as :func:`write_atomically`'s. Any error removes the temporary."""
    try:
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
            written = Written(path, os.fstat(f.fileno()).st_size, hashlib.file_digest(f, HASH).hexdigest())
        before_publish(written)
        _publish(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return written


def temporary_path(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(f".{path.name}.tmp")


class _HashingStream(io.RawIOBase):
    """Passes writes on to ``file`` and hashes them: the checksum of a file as it is written.

    Not seekable, so that what passes through is the file's content in order (zipfile then
    writes its sizes after each member instead of seeking back to patch its headers).
    Wrapped in an ``io.BufferedWriter``, the file type Stable-Baselines3's save functions take."""

    def __init__(self, file: BinaryIO):
        super().__init__()
        self._file = file
        self.hash = hashlib.new(HASH)
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._file.write(view)
        self.hash.update(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size


@dataclasses.dataclass(frozen=True)
class Written:
    path: pathlib.Path
    bytes: int
    sha256: str

    def entry(self) -> dict[str, Any]:
        return {"name": self.path.name, "bytes": self.bytes, HASH: self.sha256}


def write_atomically(
    path: pathlib.Path,
    write: Callable[[BinaryIO], None],
    *,
    before_publish: Callable[[Written], None] | None = None,
) -> Written:
    """``write(file)`` into a temporary beside ``path``, flush, fsync, rename; returns size and sha256.
    ``before_publish(written)`` is called once the file is whole, before the rename (a record of it).

    A kill at any moment leaves either the old ``path`` (or none) or the whole new one,
    plus at most a temporary file that :func:`scan` recognizes; any error removes the temporary.
    """
    path = pathlib.Path(path)
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as f:
            stream = _HashingStream(f)
            writer = io.BufferedWriter(stream)
            write(writer)
            writer.flush()
            f.flush()
            os.fsync(f.fileno())
        written = Written(path, stream.size, stream.hash.hexdigest())
        if before_publish is not None:
            before_publish(written)
        _publish(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return written


def write_text_atomically(path: pathlib.Path, text: str) -> Written:
    return write_atomically(path, lambda f: f.write(text.encode()))


def file_sha256(path: pathlib.Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, HASH).hexdigest()


# -------------------------------------------------------------------- checkpoints
@dataclasses.dataclass
class Checkpoint:
    """A complete checkpoint: its manifest reads back and its files have the recorded sizes
    (:func:`verify` compares their checksums too)."""

    steps: int
    manifest_path: pathlib.Path
    manifest: dict[str, Any]
    model: pathlib.Path
    replay_buffer: pathlib.Path | None  # None: saved without one, or pruned by a newer checkpoint
    buffer_problem: str | None = None  # the replay buffer file is there but not whole (see verify)
    reward_state: pathlib.Path | None = None  # None: the reward model learns nothing as the envs step

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def reason(self) -> str:
        return str(self.manifest.get("reason", ""))

    def files(self) -> list[pathlib.Path]:
        learned = [self.reward_state] if self.reward_state else []
        return [self.model] + ([self.replay_buffer] if self.replay_buffer else []) + learned + [self.manifest_path]


@dataclasses.dataclass
class Damaged:
    """Files of one checkpoint that are not whole (or not vouched for), and why."""

    files: list[pathlib.Path]
    why: str

    def describe(self) -> str:
        return f"{', '.join(p.name for p in self.files)} ({self.why})"


@dataclasses.dataclass
class CheckpointScan:
    complete: list[Checkpoint]  # oldest first
    incomplete: list[pathlib.Path]  # what a kill provably cut short: temporaries, files of a save under way
    damaged: list[Damaged]  # not whole, and not provably cut short: to be moved aside, never deleted

    def newest(self) -> Checkpoint | None:
        return self.complete[-1] if self.complete else None


def _manifest_checksum(data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _read_manifest(path: pathlib.Path) -> tuple[dict[str, Any] | None, str]:
    """(the manifest, "") or (None, why it does not read back)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"the manifest does not read back: {type(exc).__name__}"
    if not isinstance(data, dict) or data.get("format") not in (1, MANIFEST_FORMAT):
        return None, "the manifest is not one this version writes"
    if data["format"] >= 2 and data.get("manifest_sha256") != _manifest_checksum(data):
        return None, "the manifest's content differs from its checksum"
    if not isinstance(data.get("files"), dict) or not isinstance(data.get("steps"), int):
        return None, "the manifest lacks its file list"
    return data, ""


def _entry_problem(folder: pathlib.Path, entry: Any) -> str | None:
    """None when the file ``entry`` names exists with its recorded size, else what is wrong."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return "the manifest's file entry is unreadable"
    path = folder / entry["name"]
    try:
        size = path.stat().st_size
    except OSError:
        return f"{entry['name']} is missing"
    if size != entry.get("bytes"):
        return f"{entry['name']} has {size} bytes, its manifest says {entry.get('bytes')}"
    return None


def _stem_files(folder: pathlib.Path, stem: str) -> list[pathlib.Path]:
    """The model, buffer, reward state and manifest files of checkpoint ``stem`` present in ``folder``."""
    match = _STEM.match(stem)
    assert match
    tag, steps = match["tag"] or "", int(match["steps"])
    paths = (*checkpoint_paths(folder, steps, tag), reward_state_path(folder, steps, tag))
    return [p for p in paths if p.is_file()]


def _stem_of(name: str) -> str | None:
    """The checkpoint stem (``model_80_steps``) a model, buffer, reward state or manifest file name belongs to."""
    for pattern in (_BUFFER, _REWARD_STATE):
        match = pattern.match(name)
        if match:
            return f"{PREFIX}_{match['tag'] or ''}{match['steps']}_steps"
    stem, suffix = os.path.splitext(name)
    return stem if suffix in (".zip", ".json") and _STEM.match(stem) else None


def _temporary_of(name: str) -> str | None:
    """The checkpoint file (``model_80_steps.zip``) whose temporary ``name`` is (``.model_80_steps.zip.tmp``: the
    names :func:`temporary_path` gives, the only temporaries this program makes in a checkpoint folder); None
    for any other name (a hidden ``.notes.tmp`` of the user's is no temporary of a save)."""
    temporary = _TEMPORARY.match(name)
    return temporary["name"] if temporary and _stem_of(temporary["name"]) is not None else None


def scan(folder: pathlib.Path) -> CheckpointScan:
    """The complete checkpoints in ``folder`` (oldest first), what a kill cut short, and what is damaged.
    Reads the manifests and compares sizes; :func:`verify` compares checksums."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        return CheckpointScan([], [], [])
    complete, damaged, vouched = [], [], set()
    for manifest_path in sorted(folder.glob(f"{PREFIX}_*_steps.json")):
        if not _STEM.match(manifest_path.stem):
            continue
        files = _stem_files(folder, manifest_path.stem)
        vouched.update(files)
        checkpoint, why = read_checkpoint(manifest_path)
        if checkpoint is None or why:
            damaged.append(Damaged(files, why))
        else:
            complete.append(checkpoint)
    complete.sort(key=lambda c: (c.steps, c.manifest.get("saved_at", "")))
    # A manifest under its temporary name marks a save under way: its files are what a kill cut short.
    saving = set()
    for path in folder.iterdir():
        temporary = _temporary_of(path.name)
        if temporary is not None and temporary.endswith(".json"):
            saving.add(temporary[: -len(".json")])
    incomplete, orphans = [], {}
    for path in sorted(folder.iterdir()):
        if path in vouched or not path.is_file():
            continue
        stem = _stem_of(path.name)
        if _temporary_of(path.name) is not None or stem in saving:
            incomplete.append(path)  # a temporary, or a file of a save that never reached its manifest
        elif stem is not None:
            orphans.setdefault(stem, []).append(path)
    for files in orphans.values():
        damaged.append(Damaged(files, "no manifest names it, and no save of it was under way"))
    return CheckpointScan(complete, incomplete, damaged)


def read_checkpoint(manifest_path: pathlib.Path) -> tuple[Checkpoint | None, str]:
    """The checkpoint a manifest describes, and "" when its model file has the recorded size, else what is
    wrong with it; (None, why) when the manifest does not read back. A manifest that reads back but names a
    file other than its own checkpoint's, or a file of a kind no checkpoint has, is refused (a RecordError:
    :mod:`~vlmrm_fast.training.records`)."""
    folder = manifest_path.parent
    data, why = _read_manifest(manifest_path)
    if data is None:
        return None, why
    stem = _STEM.match(manifest_path.stem)
    assert stem, manifest_path
    own_model, own_buffer, _ = checkpoint_paths(folder, int(stem["steps"]), stem["tag"] or "")
    entries = data["files"]
    if not isinstance(entries.get("model"), dict):
        return None, "the manifest's file entry is unreadable"
    records.checkpoint_roles(manifest_path, entries)
    model = records.own_checkpoint_file(manifest_path, "model", entries["model"], own_model)
    why = _entry_problem(folder, entries["model"]) or ""
    entry = entries.get("replay_buffer")
    buffer = None
    if entry is not None:
        buffer = records.own_checkpoint_file(manifest_path, "replay_buffer", entry, own_buffer)
        if not buffer.exists():
            buffer = None  # pruned by a newer checkpoint, or lost (see resume)
    problem = _entry_problem(folder, entry) if buffer is not None else None
    entry = entries.get("reward_state")
    reward_state = None
    if entry is not None:  # part of the checkpoint as its model is: missing or of another size, it is damaged
        own_state = reward_state_path(folder, int(stem["steps"]), stem["tag"] or "")
        reward_state = records.own_checkpoint_file(manifest_path, "reward_state", entry, own_state)
        why = why or _entry_problem(folder, entry) or ""
    return Checkpoint(int(data["steps"]), manifest_path, data, model, buffer, problem, reward_state), why


def verify(checkpoint: Checkpoint) -> tuple[str | None, str | None]:
    """(what is wrong with the model or the reward model's learned state, what is wrong with the replay buffer),
    each None when the files match their manifest's checksums (manifests of format 1 have sizes only: those were
    compared)."""

    def check(role: str, path: pathlib.Path | None) -> str | None:
        if role == "replay_buffer" and checkpoint.buffer_problem:
            return checkpoint.buffer_problem
        expected = checkpoint.manifest["files"].get(role, {}).get(HASH)
        if path is None or expected is None:
            return None
        try:
            actual = file_sha256(path)
        except OSError as exc:
            return f"{path.name} does not read back ({exc.strerror})"
        return None if actual == expected else f"{path.name}: its {HASH} differs from the manifest's"

    model = check("model", checkpoint.model) or check("reward_state", checkpoint.reward_state)
    return model, check("replay_buffer", checkpoint.replay_buffer)


def _aside_path(folder: pathlib.Path, name: str) -> pathlib.Path:
    """A free name for ``name`` in ``folder``: the name itself, else ``name.2``, ``name.3``, ..."""
    target, n = folder / name, 1
    while target.exists():
        n += 1
        target = folder / f"{name}.{n}"
    return target


def set_aside(folder: pathlib.Path, files: list[pathlib.Path]) -> list[pathlib.Path]:
    """Moves ``files`` into ``folder/damaged/`` (renamed ``NAME.2``, ... where a name is taken there);
    returns their new paths. Nothing is deleted or overwritten."""
    aside = pathlib.Path(folder) / DAMAGED_DIR
    aside.mkdir(exist_ok=True)
    moved = []
    for path in files:
        if path.exists():
            target = _aside_path(aside, path.name)
            os.rename(path, target)
            moved.append(target)
    _fsync_dir(aside)
    _fsync_dir(pathlib.Path(folder))
    return moved


def checkpoint_paths(
    folder: pathlib.Path, steps: int, tag: str = ""
) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """(model, replay buffer, manifest) paths of the checkpoint at ``steps`` (``tag``: e.g. ``"interrupted_"``)."""
    stem = f"{PREFIX}_{tag}{steps}_steps"
    return folder / f"{stem}.zip", folder / f"{PREFIX}_replay_buffer_{tag}{steps}_steps.pkl", folder / f"{stem}.json"


def reward_state_path(folder: pathlib.Path, steps: int, tag: str = "") -> pathlib.Path:
    """The path of the reward model's learned state in the checkpoint at ``steps`` (``tag`` as :func:`checkpoint_paths`'s)."""
    return folder / f"{PREFIX}_reward_state_{tag}{steps}_steps.pt"


def _mib(n: float) -> str:
    """A size in the unit that shows it: KiB below a MiB, MiB below a GiB, else GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**10:,.1f} KiB"


def replay_buffer_bytes(model: Any) -> int:
    """About what the model's replay buffer takes on disk: the bytes of its arrays."""
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None:
        return 0
    arrays = [v for v in vars(buffer).values() if hasattr(v, "nbytes")]
    arrays += [v for d in vars(buffer).values() if isinstance(d, dict) for v in d.values() if hasattr(v, "nbytes")]
    return int(sum(a.nbytes for a in arrays))


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a full disk or quota (a library may wrap it)."""
    seen: BaseException | None = exc
    for _ in range(16):  # a chain of causes, not followed forever
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _CountingStream(io.RawIOBase):
    """Counts the bytes written to it and keeps none: the size of a file, without a disk."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.size += n
        return n

    def tell(self) -> int:
        return self.size


def _bytes_of(write: Callable[[BinaryIO], None]) -> int:
    """The bytes ``write(file)`` writes (0 when it fails): what a file of the save takes on the disk."""
    stream = _CountingStream()
    try:
        writer = io.BufferedWriter(stream)
        write(writer)
        writer.flush()
    except Exception:
        return 0
    return stream.size


_MANIFEST_BYTES = 2**16  # the manifest and the mark of a save under way, with room to spare


def _space_error(
    folder: pathlib.Path, steps: int, needs: dict[str, int], previous: Checkpoint | None
) -> CheckpointSpaceError:
    free = shutil.disk_usage(folder).free
    needed = sum(needs.values()) + _MANIFEST_BYTES
    kept = (
        f"the older checkpoints are whole (the newest: {previous.name})"
        if previous
        else "no checkpoint was saved before it"
    )
    parts = ", ".join(f"{what} {_mib(n)}" for what, n in needs.items())
    return CheckpointSpaceError(
        errno.ENOSPC,
        f"no space left on the disk of {folder} for the checkpoint at {steps} steps: it needs {_mib(needed)} "
        f"({parts}), {_mib(free)} are free. Its partial files were removed and {kept}; free at least "
        f"{_mib(max(needed - free, 0))} more there (or move the run to a larger disk)",
    )


def file_space_error(path: pathlib.Path, needed: int | None) -> SpaceError:
    """The :class:`SpaceError` of a file at ``path`` that did not fit (``needed``: its bytes, where known)."""
    free = shutil.disk_usage(path.parent).free
    needs = f": it needs {_mib(needed)}, {_mib(free)} are free" if needed is not None else f" ({_mib(free)} free)"
    more = f"free at least {_mib(max(needed - free, 0))} more there" if needed is not None else "free space there"
    return SpaceError(
        errno.ENOSPC,
        f"no space left on the disk of {path.parent} for {path.name}{needs}. Its partial file was removed; {more} "
        f"(or move the run to a larger disk)",
    )


def save_checkpoint(
    model: Any,
    folder: pathlib.Path,
    *,
    tag: str = "",
    reason: str,
    extra: dict[str, Any] | None = None,
    keep_replay_buffers: int = 1,
    keep_checkpoints: int | None = None,
    reward_state: Callable[[BinaryIO], None] | None = None,
) -> Checkpoint:
    """Writes model, replay buffer (if the algorithm has one), the reward model's learned state (``reward_state``,
    its writer, for a reward model that learns as the envs step) and manifest, each atomically, the manifest last;
    then deletes the replay buffers of all but the newest ``keep_replay_buffers`` complete checkpoints, and
    with ``keep_checkpoints`` the checkpoints that are neither among that many newest nor the best
    (:func:`prune_checkpoints`). A failure removes what this save wrote (a full disk raises
    :class:`CheckpointSpaceError`)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    steps = int(model.num_timesteps)
    model_path, buffer_path, manifest_path = checkpoint_paths(folder, steps, tag)
    state_path = reward_state_path(folder, steps, tag)
    taken = [p for p in (model_path, buffer_path, state_path, manifest_path) if p.exists()]
    if taken:
        raise FileExistsError(f"checkpoint files {', '.join(p.name for p in taken)} exist in {folder}; not overwritten")
    has_buffer = getattr(model, "replay_buffer", None) is not None
    marker = temporary_path(manifest_path)  # the mark of a save under way; becomes the manifest at the end
    written: list[pathlib.Path] = []
    try:
        with open(marker, "wb") as f:
            f.write(f"saving since {datetime.datetime.now(datetime.UTC).isoformat()}\n".encode())
            os.fsync(f.fileno())
        _fsync_dir(folder)
        files = {"model": write_atomically(model_path, model.save).entry()}
        written.append(model_path)
        if has_buffer:
            files["replay_buffer"] = write_atomically(buffer_path, model.save_replay_buffer).entry()
            written.append(buffer_path)
        if reward_state is not None:
            files["reward_state"] = write_atomically(state_path, reward_state).entry()
            written.append(state_path)
        manifest = {
            "format": MANIFEST_FORMAT,
            "steps": steps,
            "saved_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
            "reason": reason,
            "algorithm": type(model).__name__,
            "files": files,
            **(extra or {}),
        }
        manifest["manifest_sha256"] = _manifest_checksum(json.loads(json.dumps(manifest)))
        write_text_atomically(manifest_path, json.dumps(manifest, indent=1))
    except BaseException as exc:
        for path in [*written, *map(temporary_path, (model_path, buffer_path, state_path)), marker]:
            path.unlink(missing_ok=True)
        if disk_full(exc):  # this save's files are gone: the newest left is the previous checkpoint
            previous = scan(folder).newest()
            prior = previous.manifest["files"] if previous else {}
            needs = {"the model": _bytes_of(model.save) or int(prior.get("model", {}).get("bytes", 0))}
            if has_buffer:
                measured = _bytes_of(model.save_replay_buffer)
                needs["its replay buffer"] = measured or int(prior.get("replay_buffer", {}).get("bytes", 0))
                needs["its replay buffer"] = needs["its replay buffer"] or replay_buffer_bytes(model)
            if reward_state is not None:
                state_bytes = _bytes_of(reward_state) or int(prior.get("reward_state", {}).get("bytes", 0))
                needs["the reward model's learned state"] = state_bytes
            raise _space_error(folder, steps, needs, previous) from exc
        raise
    if has_buffer:
        _prune_replay_buffers(folder, keep_replay_buffers)
    saved = Checkpoint(
        steps,
        manifest_path,
        manifest,
        model_path,
        buffer_path if has_buffer else None,
        reward_state=state_path if reward_state is not None else None,
    )
    if keep_checkpoints is not None:
        prune_checkpoints(folder, keep_checkpoints)
    return saved


def mean_vlm_return(checkpoint: Checkpoint) -> float | None:
    """The mean VLM return of the training episodes in the window when the checkpoint was saved (None: no
    episode had finished, or a manifest from before episode statistics were saved)."""
    returns = (checkpoint.manifest.get("episode_stats") or {}).get("vlm") or []
    return sum(returns) / len(returns) if returns else None


def prune_checkpoints(folder: pathlib.Path, keep: int) -> list[Checkpoint]:
    """Deletes the complete checkpoints that are neither among the newest ``keep`` nor the best (the highest
    :func:`mean_vlm_return`; the newest of equals), once the newest reads back whole (its model's checksum):
    the newest intact checkpoint and the best are never deleted. Returns the deleted ones."""
    complete = scan(folder).complete
    if len(complete) <= keep:
        return []
    newest = complete[-1]
    if newest.manifest["files"]["model"].get(HASH) not in (None, file_sha256(newest.model)):
        return []  # the newest is not whole: keep everything older until a whole one is there
    scored = [(score, i) for i, c in enumerate(complete) if (score := mean_vlm_return(c)) is not None]
    best = complete[max(scored)[1]] if scored else None
    deleted = [c for c in complete[:-keep] if c is not best]
    for checkpoint in deleted:
        # The manifest first: a kill midway leaves files no manifest vouches for (set aside), never a manifest of none.
        for path in (checkpoint.manifest_path, checkpoint.model, checkpoint.replay_buffer, checkpoint.reward_state):
            if path is not None:
                path.unlink(missing_ok=True)
    if deleted:
        _fsync_dir(folder)
    return deleted


def _prune_replay_buffers(folder: pathlib.Path, keep: int) -> None:
    """Deletes the replay buffers of all but the newest ``keep`` complete checkpoints that have one."""
    with_buffer = [c for c in scan(folder).complete if c.replay_buffer is not None]
    for old in with_buffer[: max(len(with_buffer) - keep, 0)]:
        assert old.replay_buffer is not None
        old.replay_buffer.unlink(missing_ok=True)
